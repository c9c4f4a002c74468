"""BenchmarkEvaluator: parallel batches, failures, retries, checkpoints, timings, Ctrl-C.

Every fake store here answers from brute force over its own docs (the
oracle), then breaks in one controlled way. Each query carries its row
index in its last column, so a store knows which batch it is answering.
"""

from __future__ import annotations

import _thread
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from imsearch_align import Qrels, Run, SearchResult, evaluate
from imsearch_align.framework.evaluator import (
    BenchmarkEvaluator,
    EvaluationAborted,
    NaNScoreError,
    remove_checkpoints,
)
from imsearch_align.framework.interfaces import StoreUnavailableError


class BruteForceStore:
    """Tiny exact store (independent of the package's stores) with injectable faults.

    Faults are keyed by the first row of a batch. ``fail_batches`` raise
    ``error`` their first ``fail_times`` calls; ``short_batches`` answer
    with only 3 hits their first ``short_times`` calls; ``unavailable_at``
    raises StoreUnavailableError from that batch on.
    """

    supports_sparse = False

    def __init__(
        self,
        docs: np.ndarray,
        ids: np.ndarray,
        *,
        fail_batches=(),
        fail_times=1,
        error=ConnectionError,
        nan_rows=(),
        extra=False,
        delay_s=0.0,
        short_batches=(),
        short_times=10**9,
        unavailable_at=None,
        unsorted_rows=(),
        foreign_rows=(),
        dup_rows=(),
    ):
        self.docs, self.ids = docs, ids
        self.fail_first = {int(b) for b in fail_batches}
        self.fail_times = fail_times
        self.error = error
        self.calls: dict[int, int] = {}
        self.nan_rows = set(nan_rows)
        self.extra = extra
        self.delay_s = delay_s
        self.short = {int(b) for b in short_batches}
        self.short_times = short_times
        self.unavailable_at = unavailable_at
        self.unsorted_rows = set(unsorted_rows)
        self.foreign_rows = set(foreign_rows)
        self.dup_rows = set(dup_rows)
        self.lock = threading.Lock()
        self.threads: set[int] = set()
        self.active = 0
        self.max_active = 0

    def search(self, name, queries, k):
        first = round(float(queries[0, -1]))
        with self.lock:
            self.threads.add(threading.get_ident())
            n = self.calls.get(first, 0)
            self.calls[first] = n + 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        try:
            if self.delay_s:
                time.sleep(self.delay_s)
            if self.unavailable_at is not None and first >= self.unavailable_at:
                raise StoreUnavailableError("server at 127.0.0.1:1 refused the connection")
            if first in self.fail_first and n < self.fail_times:
                raise self.error(f"batch starting at row {first} is down")
            return self._answer(queries, k, short=first in self.short and n < self.short_times)
        finally:
            with self.lock:
                self.active -= 1

    def _answer(self, queries, k, short=False):
        s = queries[:, :-1] @ self.docs.T
        order = np.lexsort((np.broadcast_to(self.ids, s.shape), -s), axis=1)[:, :k]
        ids = self.ids[order]
        sc = np.take_along_axis(s, order, 1).astype(np.float32)
        rows = np.round(queries[:, -1]).astype(int)
        for i, r in enumerate(rows):
            if r in self.nan_rows:
                sc[i, 0] = np.nan
            if r in self.unsorted_rows:
                ids[i, [0, 1]] = ids[i, [1, 0]]
                sc[i, [0, 1]] = sc[i, [1, 0]]
            if r in self.foreign_rows:
                ids[i, 2] = 10**9 + 7
            if r in self.dup_rows:
                ids[i, 1] = ids[i, 0]
        if short:
            ids[:, 3:] = -1
            sc[:, 3:] = -np.inf
        extra = {"rerank": -sc.copy()} if self.extra else {}
        return SearchResult(ids, sc, extra)


class CatalogStore(BruteForceStore):
    """The same store, able to say how big its collection is (CollectionCatalog)."""

    def has_collection(self, name):
        return name == "c"

    def list_collections(self):
        return ["c"]

    def count(self, name):
        return len(self.ids)


def _data(nq=200, nd=300, d=8, seed=0):
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((nd, d)).astype(np.float32)
    doc_ids = rng.choice(10**6, size=nd, replace=False).astype(np.int64)
    target = rng.integers(0, nd, nq)
    q = docs[target] + 0.8 * rng.standard_normal((nq, d)).astype(np.float32)
    q = np.hstack([q, np.arange(nq, dtype=np.float32)[:, None]])  # row tag for the fake store
    qrels = Qrels.from_pairs(np.arange(nq), doc_ids[target])
    return docs, doc_ids, q, qrels


def _direct(docs, doc_ids, q, qrels, measures, k=10, rows=None):
    """The oracle: exact top-k by brute force, scored by ``evaluate``."""
    s = q[:, :-1] @ docs.T
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    run = Run.from_arrays(np.arange(len(q)), doc_ids[order], np.take_along_axis(s, order, 1))
    res = evaluate(run, qrels, measures)
    return res.mean() if rows is None else res.per_query.set_index("query_id")


MEASURES = ["P@1", "R@5", "nDCG@10", "RR@10", "AP@10", "HitRate@5", "Accuracy"]


def _ev(store, **kw):
    kw.setdefault("k", 10)
    kw.setdefault("measures", MEASURES)
    kw.setdefault("batch_size", 16)
    kw.setdefault("progress", False)
    kw.setdefault("retry_backoff_s", 0)
    return BenchmarkEvaluator(store, "c", **kw)


def _failed(res) -> list:
    return sorted(res.failed_queries.tolist())


def test_matches_direct_computation_and_uses_parallel_workers():
    docs, ids, q, qrels = _data()
    # each search sleeps a little, so a loaded machine cannot let one worker
    # take every batch before the others start
    store = BruteForceStore(docs, ids, delay_s=0.01)
    res = _ev(store, workers=3).evaluate(q, qrels)
    want = _direct(docs, ids, q, qrels, MEASURES)
    for m in MEASURES:
        assert res.mean()[m] == pytest.approx(want[m], abs=1e-12)
    assert 0 < res.mean()["Accuracy"] < 1
    t = res.timings
    assert t["n_batches"] == 13 and t["n_batches_searched"] == 13 and t["n_batches_resumed"] == 0
    assert t["n_queries_searched"] == 200
    assert t["queries_per_s"] == pytest.approx(200 / t["search_s"])
    assert t["batch_p99_ms"] >= t["batch_p50_ms"] > 0
    assert len(store.threads) >= 2
    assert res.degraded_reasons() == [] and res.n_failed == 0 and not res.degraded


@pytest.mark.parametrize("nq, bar", [(16, False), (40, True)])
def test_search_progress_bar_only_when_there_is_more_than_one_batch(capsys, nq, bar):
    """One bar per search of several batches; a one-batch search writes none."""
    docs, ids, q, qrels = _data(nq=nq)
    res = _ev(BruteForceStore(docs, ids), progress=True).evaluate(q, qrels)
    assert res.timings["n_batches"] == (1 if nq == 16 else 3)
    err = capsys.readouterr().err
    assert ("search c" in err) is bar


# --------------------------------------------------------------------------- failures and retries


def test_failed_batch_is_retried_then_succeeds():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, fail_batches=[32], fail_times=2)
    res = _ev(store, retries=2).evaluate(q, qrels)
    assert res.n_failed == 0 and store.calls[32] == 3
    assert res.timings["n_retries"] == 2
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES))


def test_batch_failing_after_retries_scores_zero_counts_and_makes_the_result_degraded():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, fail_batches=[32], fail_times=99)
    res = _ev(store, retries=1).evaluate(q, qrels)
    assert _failed(res) == list(range(32, 48)) and res.n_failed == 16
    assert store.calls[32] == 2
    pq = res.per_query.set_index("query_id")
    assert (pq.loc[32:47, MEASURES] == 0).all().all()
    assert (
        pq.loc[32:47, "failed"].all() and "batch starting at row 32 is down" in pq.loc[40, "error"]
    )
    # The mean counts the failed queries as zeros over all 200 queries.
    ok = pq.drop(index=range(32, 48))
    assert res.mean()["P@1"] == pytest.approx(ok["P@1"].sum() / 200)
    assert res.to_dict()["n_failed"] == 16 and res.degraded
    assert res.degraded_reasons() == [
        "16 of 200 queries failed: ConnectionError: batch starting at row 32 is down"
    ]
    assert res.timings["n_batches_failed"] == 1 and res.timings["n_batches_searched"] == 12


def test_one_retry_budget_for_the_whole_call():
    docs, ids, q, qrels = _data()
    bad = [0, 16, 32, 48, 64, 80, 96, 112]  # 8 batches that never answer
    store = BruteForceStore(docs, ids, fail_batches=bad, fail_times=10**9)
    res = _ev(store, retries=3, retry_budget=5, max_consecutive_failures=100, workers=1).evaluate(
        q, qrels
    )
    # Each bad batch tried once, plus 5 retries in all (not 8 x 3).
    assert sum(store.calls[b] for b in bad) == 8 + 5
    assert res.timings["n_retries"] == 5
    assert res.n_failed == 8 * 16


@pytest.mark.parametrize(
    "error",
    [
        LookupError,  # a collection that no longer exists (adapters' CollectionNotFoundError)
        KeyError,
        TypeError,
        ValueError,
    ],
)
def test_errors_that_cannot_heal_are_not_retried(error):
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, fail_batches=[16, 48], fail_times=99, error=error)
    res = _ev(store, retries=3).evaluate(q, qrels)
    assert store.calls[16] == 1 and store.calls[48] == 1
    assert res.n_failed == 32 and res.timings["n_retries"] == 0


def test_store_unavailable_cancels_the_rest_keeps_finished_batches_and_raises_once(
    tmp_path, caplog
):
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, unavailable_at=96)
    ev = _ev(store, workers=1, retries=3, checkpoint_dir=tmp_path, checkpoint_key="docs-v1")
    with caplog.at_level(logging.WARNING), pytest.raises(EvaluationAborted) as ei:
        ev.evaluate(q, qrels)
    err = ei.value
    assert isinstance(err, StoreUnavailableError)
    assert "store unavailable while searching collection 'c'" in str(err)
    assert "6 of 13 batches finished (checkpointed)" in str(err)
    assert err.n_batches_done == 6 and err.n_batches_cancelled == 6
    # Batch 96 was tried once (never retried) and nothing after it was searched.
    assert store.calls[96] == 1 and max(store.calls) == 96
    part = err.partial
    assert _failed(part) == list(range(96, 200))
    want = _direct(docs, ids, q, qrels, MEASURES, rows=True)
    got = part.per_query.set_index("query_id")
    pd.testing.assert_frame_equal(got.loc[0:95, MEASURES], want.loc[0:95, MEASURES])
    assert "not searched: the store became unavailable" in part.errors[150]
    # One warning line for the one distinct error, no traceback.
    lines = [r for r in caplog.records if "refused the connection" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is None
    assert not any(r.exc_info for r in caplog.records)
    # The same run against a healthy store resumes: only the missing batches are searched.
    s2 = BruteForceStore(docs, ids)
    res = _ev(s2, checkpoint_dir=tmp_path, checkpoint_key="docs-v1").evaluate(q, qrels)
    assert sorted(s2.calls) == list(range(96, 200, 16))
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)


def test_a_dead_store_that_only_raises_connection_errors_is_declared_unavailable(caplog):
    docs, ids, q, qrels = _data(nq=800)
    store = BruteForceStore(docs, ids, fail_batches=range(0, 800, 16), fail_times=10**9)
    ev = _ev(store, workers=2, retries=2, max_consecutive_failures=6)
    t = time.perf_counter()
    with caplog.at_level(logging.WARNING), pytest.raises(EvaluationAborted) as ei:
        ev.evaluate(q, qrels)
    assert time.perf_counter() - t < 5
    assert "6 searches failed in a row" in str(ei.value)
    # Far fewer calls than 50 batches x 3 attempts.
    assert sum(store.calls.values()) <= 6 + 2
    assert ei.value.partial.n_failed == 800
    distinct = {r.getMessage() for r in caplog.records if "is down" in r.getMessage()}
    assert len([r for r in caplog.records if "is down" in r.getMessage()]) == len(distinct)


# --------------------------------------------------------------------------- wrong answers


def test_short_answers_from_a_dense_collection_fail_their_queries_and_are_not_checkpointed(
    tmp_path,
):
    docs, ids, q, qrels = _data()
    store = CatalogStore(docs, ids, short_batches=[48])
    ev = _ev(store, retries=1, checkpoint_dir=tmp_path, checkpoint_key="x")
    res = ev.evaluate(q, qrels)
    assert _failed(res) == list(range(48, 64))
    assert store.calls[48] == 2  # asked again once: a rebuilt collection may heal
    assert "fewer than min(k=10, collection size 300) = 10 hits" in res.errors[50]
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (folder / "batch_000003.npz").exists() and (folder / "batch_000002.npz").exists()
    # A resume searches the short batch again and, healthy now, equals the oracle.
    s2 = CatalogStore(docs, ids)
    res2 = _ev(s2, checkpoint_dir=tmp_path, checkpoint_key="x").evaluate(q, qrels)
    assert set(s2.calls) == {48}
    assert res2.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)


def test_short_answers_that_heal_on_retry_are_not_failures():
    docs, ids, q, qrels = _data()
    store = CatalogStore(docs, ids, short_batches=[48], short_times=1)
    res = _ev(store, retries=2).evaluate(q, qrels)
    assert res.n_failed == 0 and store.calls[48] == 2
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)


def test_short_answers_without_a_catalog_fail_against_the_longest_answer(tmp_path):
    docs, ids, q, qrels = _data()
    # The whole batch 48 is short: only the other batches show how long an answer must be.
    store = BruteForceStore(docs, ids, short_batches=[48])
    ev = _ev(store, retries=0, checkpoint_dir=tmp_path, checkpoint_key="x")
    res = ev.evaluate(q, qrels)
    assert _failed(res) == list(range(48, 64))
    assert "fewer hits than its other answers (collection size unknown)" in res.errors[50]
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (folder / "batch_000003.npz").exists()  # discarded: a resume searches it again
    s3 = BruteForceStore(docs, ids)
    res3 = _ev(s3, checkpoint_dir=tmp_path, checkpoint_key="x").evaluate(q, qrels)
    assert set(s3.calls) == {48} and res3.n_failed == 0
    # A single short row fails within its batch.
    s2 = BruteForceStore(docs, ids)
    orig = s2._answer

    def answer(queries, k, short=False):
        r = orig(queries, k)
        hit = np.flatnonzero(np.round(queries[:, -1]).astype(int) == 50)
        ids_, sc = r.ids.copy(), r.scores.copy()
        ids_[hit, 5:], sc[hit, 5:] = -1, -np.inf
        return SearchResult(ids_, sc)

    s2._answer = answer
    res2 = _ev(s2, retries=0).evaluate(q, qrels)
    assert _failed(res2) == [50]


def test_sparse_collections_may_pad_with_no_hits():
    rng = np.random.default_rng(3)
    docs = sp.random(60, 40, density=0.05, random_state=4, format="csr", dtype=np.float32)
    queries = sp.random(30, 40, density=0.1, random_state=5, format="csr", dtype=np.float32)
    doc_ids = np.arange(60, dtype=np.int64) * 3

    class SparseStore:
        supports_sparse = True

        def has_collection(self, name):
            return True

        def list_collections(self):
            return ["c"]

        def count(self, name):
            return 60

        def search(self, name, qs, k):
            s = (qs @ docs.T).toarray()
            order = np.lexsort((np.broadcast_to(doc_ids, s.shape), -s), axis=1)[:, :k]
            sc = np.take_along_axis(s, order, 1)
            ids = np.where(sc > 0, doc_ids[order], -1)
            return SearchResult(ids, np.where(sc > 0, sc, -np.inf))

    qrels = Qrels.from_pairs(np.arange(30), doc_ids[rng.integers(0, 60, 30)])
    res = BenchmarkEvaluator(
        SparseStore(), "c", k=10, measures=["P@10"], batch_size=8, progress=False
    ).evaluate(queries, qrels)
    assert res.n_failed == 0 and (res.run.empty).any()  # padded rows are fine


def test_rows_not_sorted_by_score_are_reported_and_scored_after_sorting():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, unsorted_rows=[3, 77, 150])
    res = _ev(store).evaluate(q, qrels)
    assert res.n_failed == 0
    assert res.degraded_reasons() == [
        "3 of 200 rankings were not sorted by score (scored after re-sorting them by the "
        "store's scores)"
    ]
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)


def test_re_sorted_rows_keep_their_extra_scores_and_tie_order_is_not_a_fault():
    docs, ids, q, qrels = _data()
    clean = _ev(BruteForceStore(docs, ids, extra=True)).evaluate(q, qrels)
    swapped = _ev(BruteForceStore(docs, ids, extra=True, unsorted_rows=range(0, 200, 3))).evaluate(
        q, qrels
    )
    # The extra column travels with its ids: ranking by it gives the same nDCG.
    np.testing.assert_array_equal(
        swapped.evaluation.values["nDCG@10[rerank]"], clean.evaluation.values["nDCG@10[rerank]"]
    )
    np.testing.assert_array_equal(swapped.run.doc_ids, clean.run.doc_ids)

    # Ties given in descending id order are the store's tie rule: re-sorted, not reported.
    class TieStore:
        supports_sparse = False

        def search(self, name, queries, k):
            n = len(queries)
            return SearchResult(np.tile([30, 20, 10], (n, 1)), np.full((n, 3), 0.5))

    tq = Qrels.from_pairs([0, 1], [10, 30])
    res = BenchmarkEvaluator(TieStore(), "c", k=3, measures=["P@1", "RR@3"], progress=False)
    out = res.evaluate(np.zeros((2, 4), np.float32), tq)
    assert out.degraded_reasons() == []
    assert out.run.doc_ids.tolist() == [[10, 20, 30]] * 2
    assert out.mean() == {"P@1": 0.5, "RR@3": pytest.approx((1 + 1 / 3) / 2)}


def test_ids_not_in_the_collection_fail_their_queries_when_the_ids_are_known():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, foreign_rows=[5, 120])
    res = _ev(store, retries=0).evaluate(q, qrels, collection_ids=ids)
    assert _failed(res) == [5, 120]
    assert res.errors[5] == "the store returned an id that is not in the collection"
    # Object (string-like) collection ids take the hash path and agree.
    res2 = _ev(BruteForceStore(docs, ids, foreign_rows=[5, 120]), retries=0).evaluate(
        q, qrels, collection_ids=ids.astype(object)
    )
    assert _failed(res2) == [5, 120]


def test_relevant_docs_missing_from_the_collection_are_counted(caplog):
    docs, ids, q, qrels = _data(nq=40)
    extra = Qrels(
        np.r_[qrels.query_ids, [0, 1]], np.r_[qrels.doc_ids, [-5, 10**8]], np.ones(len(qrels) + 2)
    )
    with caplog.at_level(logging.WARNING):
        res = _ev(BruteForceStore(docs, ids)).evaluate(q, extra, collection_ids=ids)
    msg = "2 of 42 relevant judgements name a doc that is not in the collection"
    assert any(msg in r for r in res.degraded_reasons())
    assert any(msg in r.getMessage() for r in caplog.records)


def test_a_relevant_doc_twice_in_a_ranking_fails_that_query_and_keeps_the_rest():
    docs, ids, q, qrels = _data()
    # Rows whose top hit is their relevant doc: the duplicate then counts twice.
    want = _direct(docs, ids, q, qrels, MEASURES, rows=True)
    dup = [int(r) for r in np.flatnonzero(want["P@1"].to_numpy() == 1)[:3]]
    store = BruteForceStore(docs, ids, dup_rows=dup)
    res = _ev(store).evaluate(q, qrels)
    assert _failed(res) == dup
    assert res.errors[dup[0]] == "the ranking holds a relevant doc twice"
    got = res.per_query.set_index("query_id")
    assert (got.loc[dup, MEASURES] == 0).all().all()
    rest = [i for i in range(200) if i not in dup]
    pd.testing.assert_frame_equal(got.loc[rest, MEASURES], want.loc[rest, MEASURES])


def test_nan_score_raises_naming_query_and_keeps_other_results(tmp_path):
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, nan_rows=[57])
    ev = _ev(store, checkpoint_dir=tmp_path, checkpoint_key="k")
    with pytest.raises(NaNScoreError, match="NaN score for query 57") as ei:
        ev.evaluate(q, qrels)
    partial = ei.value.partial
    assert partial is not None and partial.failed_queries.tolist() == [57]
    assert partial.errors[57] == "NaN score"
    assert len(partial.per_query) == 200
    full = _ev(BruteForceStore(docs, ids)).evaluate(q, qrels)
    a = partial.per_query.set_index("query_id").drop(index=57)[MEASURES]
    b = full.per_query.set_index("query_id").drop(index=57)[MEASURES]
    pd.testing.assert_frame_equal(a, b)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert not (folder / "batch_000003.npz").exists()  # rows 48-63 hold the NaN


# --------------------------------------------------------------------------- checkpoints, timings


def test_checkpoint_resume_skips_finished_batches_and_equals_uninterrupted(tmp_path):
    docs, ids, q, qrels = _data()
    s1 = BruteForceStore(docs, ids, fail_batches=[64], fail_times=99)
    r1 = _ev(s1, retries=0, checkpoint_dir=tmp_path, checkpoint_key="docs-a").evaluate(q, qrels)
    assert r1.n_failed == 16
    s2 = BruteForceStore(docs, ids)
    r2 = _ev(s2, checkpoint_dir=tmp_path, checkpoint_key="docs-a").evaluate(q, qrels)
    assert set(s2.calls) == {64}  # only the missing batch was searched again
    assert r2.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)
    t = r2.timings
    assert t["n_batches_searched"] == 1 and t["n_batches_resumed"] == 12
    assert t["n_queries_searched"] == 16
    assert t["queries_per_s"] == pytest.approx(16 / t["search_s"])
    assert r2.n_batches_searched == 1 and r2.n_batches_resumed == 12


def test_speed_is_not_invented_when_everything_was_resumed(tmp_path):
    docs, ids, q, qrels = _data()
    _ev(BruteForceStore(docs, ids), checkpoint_dir=tmp_path, checkpoint_key="v").evaluate(q, qrels)
    s2 = BruteForceStore(docs, ids)
    res = _ev(s2, checkpoint_dir=tmp_path, checkpoint_key="v").evaluate(q, qrels)
    assert s2.calls == {}
    t = res.timings
    assert t["n_batches_searched"] == 0 and t["n_batches_resumed"] == 13
    for key in ("queries_per_s", "batch_p50_ms", "batch_p95_ms", "batch_p99_ms"):
        assert np.isnan(t[key]), key
    assert t["search_s"] == 0.0
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)


def test_a_checkpoint_under_another_key_is_never_read(tmp_path):
    docs, ids, q, qrels = _data()
    _ev(BruteForceStore(docs, ids), checkpoint_dir=tmp_path, checkpoint_key="docs-v1").evaluate(
        q, qrels
    )
    # The documents changed (here: other vectors under the same ids): a new key.
    docs2 = np.random.default_rng(9).standard_normal(docs.shape).astype(np.float32)
    s2 = BruteForceStore(docs2, ids)
    res = _ev(s2, checkpoint_dir=tmp_path, checkpoint_key="docs-v2").evaluate(q, qrels)
    assert len(s2.calls) == 13
    assert res.mean() == pytest.approx(_direct(docs2, ids, q, qrels, MEASURES), abs=1e-12)
    # k and the queries are part of the key too.
    s3 = BruteForceStore(docs, ids)
    _ev(s3, k=20, checkpoint_dir=tmp_path, checkpoint_key="docs-v1").evaluate(q, qrels)
    assert len(s3.calls) == 13
    s4 = BruteForceStore(docs, ids)
    q4 = q.copy()
    q4[0, 0] += 1
    _ev(s4, checkpoint_dir=tmp_path, checkpoint_key="docs-v1").evaluate(q4, qrels)
    assert len(s4.calls) == 13


def test_no_checkpoint_without_a_key(tmp_path, caplog):
    docs, ids, q, qrels = _data()
    with caplog.at_level(logging.WARNING):
        res = _ev(BruteForceStore(docs, ids), checkpoint_dir=tmp_path).evaluate(q, qrels)
    assert list(tmp_path.iterdir()) == [] and res.checkpoint is None
    assert any(
        "without checkpoint_key: not checkpointing" in r.getMessage() for r in caplog.records
    )
    with pytest.raises(TypeError, match="checkpoint_key must be a non-empty str"):
        _ev(BruteForceStore(docs, ids), checkpoint_dir=tmp_path, checkpoint_key="")


def test_clear_checkpoints_and_remove_checkpoints(tmp_path):
    docs, ids, q, qrels = _data()
    ev = _ev(BruteForceStore(docs, ids), checkpoint_dir=tmp_path / "a", checkpoint_key="v")
    res = ev.evaluate(q, qrels)
    assert res.checkpoint is not None and len(list(res.checkpoint.glob("batch_*.npz"))) == 13
    assert not list(res.checkpoint.glob("*.tmp"))  # atomic writes leave nothing behind
    assert ev.clear_checkpoints() == 14  # 13 batches + the manifest
    assert not res.checkpoint.exists()
    s2 = BruteForceStore(docs, ids)
    _ev(s2, checkpoint_dir=tmp_path / "a", checkpoint_key="v").evaluate(q, qrels)
    assert len(s2.calls) == 13  # nothing left to resume from
    (tmp_path / "a" / "keep.txt").write_text("not ours")
    assert remove_checkpoints(tmp_path) == 14
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["keep.txt"]


def test_a_checkpoint_that_cannot_be_written_does_not_fail_the_run(tmp_path, monkeypatch, caplog):
    import errno

    import imsearch_align.framework.evaluator.checkpoint as evaluator_mod

    docs, ids, q, qrels = _data()
    real = evaluator_mod.atomic_write

    def full_disk(path, data, **kw):
        if Path(path).name.startswith("batch_"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(path, data, **kw)

    monkeypatch.setattr(evaluator_mod, "atomic_write", full_disk)
    with caplog.at_level(logging.WARNING):
        res = _ev(BruteForceStore(docs, ids), checkpoint_dir=tmp_path, checkpoint_key="v").evaluate(
            q, qrels
        )
    assert res.n_failed == 0
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)
    lines = [r for r in caplog.records if "not written" in r.getMessage()]
    assert len(lines) == 1 and "No space left on device" in lines[0].getMessage()


def test_checkpoint_files_honour_the_umask(tmp_path):
    docs, ids, q, qrels = _data(nq=20)
    old = os.umask(0o027)
    try:
        res = _ev(BruteForceStore(docs, ids), checkpoint_dir=tmp_path, checkpoint_key="v").evaluate(
            q, qrels
        )
    finally:
        os.umask(old)
    modes = {p.stat().st_mode & 0o777 for p in res.checkpoint.iterdir()}
    assert modes == {0o640}


# --------------------------------------------------------------------------- threads and Ctrl-C


class NotThreadSafeStore(BruteForceStore):
    """Keeps the current queries on the instance: concurrent calls answer each other's queries."""

    def __init__(self, *a, thread_safe: bool, **kw):
        super().__init__(*a, **kw)
        self.thread_safe = thread_safe

    def search(self, name, queries, k):
        with self.lock:
            self.active += 1
            self.max_active = max(self.max_active, self.active)
        self._current = queries
        time.sleep(0.004)  # another thread overwrites _current meanwhile
        try:
            return self._answer(self._current, k)
        finally:
            with self.lock:
                self.active -= 1


def test_a_store_that_is_not_thread_safe_is_called_one_at_a_time():
    docs, ids, q, qrels = _data()
    want = _direct(docs, ids, q, qrels, MEASURES)
    unsafe = NotThreadSafeStore(docs, ids, thread_safe=False)
    res = _ev(unsafe, workers=4, batch_size=8).evaluate(q, qrels)
    assert unsafe.max_active == 1
    assert res.mean() == pytest.approx(want, abs=1e-12)
    # The control: declared thread-safe, the same store answers the wrong queries.
    lying = NotThreadSafeStore(docs, ids, thread_safe=True)
    bad = _ev(lying, workers=4, batch_size=8).evaluate(q, qrels)
    assert lying.max_active > 1
    assert bad.n_failed > 0 or bad.mean() != pytest.approx(want, abs=1e-12)


def test_ctrl_c_cancels_queued_batches_and_reraises_quickly(tmp_path):
    docs, ids, q, qrels = _data(nq=640)
    store = BruteForceStore(docs, ids, delay_s=0.1)  # 40 batches, about 2 s with two workers
    ev = _ev(store, workers=2, checkpoint_dir=tmp_path, checkpoint_key="v")
    timer = threading.Timer(0.35, _thread.interrupt_main)
    timer.start()
    t = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        ev.evaluate(q, qrels)
    elapsed = time.perf_counter() - t
    timer.join()
    assert elapsed < 0.35 + 2.0
    time.sleep(0.25)  # let the two in-flight searches return
    searched = sum(store.calls.values())
    assert searched < 12  # the queued batches were cancelled, not run
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    saved = len(list(folder.glob("batch_*.npz")))
    assert 1 <= saved <= searched
    # Resuming searches only what was not saved and equals the uninterrupted result.
    s2 = BruteForceStore(docs, ids)
    res = _ev(s2, checkpoint_dir=tmp_path, checkpoint_key="v").evaluate(q, qrels)
    assert len(s2.calls) == 40 - saved
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES), abs=1e-12)


def test_sigint_to_a_process_exits_within_two_seconds(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, time
            sys.path.insert(0, {str(Path(__file__).parent)!r})
            import numpy as np
            from test_evaluator import BruteForceStore, _data, _ev
            docs, ids, q, qrels = _data(nq=1600)
            store = BruteForceStore(docs, ids, delay_s=0.5)  # 100 batches: 25 s if not cancelled
            try:
                print("ready", flush=True)
                _ev(store, workers=2).evaluate(q, qrels)
            except KeyboardInterrupt:
                print("interrupted", sum(store.calls.values()), flush=True)
                sys.exit(130)
            """
        )
    )
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.8)
    t = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=10)
    assert time.perf_counter() - t < 2.0
    assert proc.returncode == 130
    assert out.startswith("interrupted") and int(out.split()[1]) < 10


# --------------------------------------------------------------------------- frames and bad input


def test_bootstrap_intervals_breakdown_and_extra_score_ndcg():
    docs, ids, q, qrels = _data()
    md = pd.DataFrame({"group": np.where(np.arange(200) < 100, "a", "b")}, index=np.arange(200))
    store = BruteForceStore(docs, ids, extra=True)
    res = _ev(store, batch_size=50, seed=1).evaluate(q, qrels, metadata=md)
    summ = res.summary().set_index("measure")
    assert (summ["ci_low"] <= summ["mean"]).all() and (summ["mean"] <= summ["ci_high"]).all()
    assert res.intervals == _ev(store, batch_size=50, seed=1).evaluate(q, qrels).intervals
    br = res.breakdown("group").set_index("group")
    pq = res.per_query
    assert br.loc["a", "n_queries"] == 100
    assert br.loc["a", "P@1"] == pytest.approx(pq.loc[pq.group == "a", "P@1"].mean())
    # The extra column ranks in reverse: its nDCG is that of the reversed list.
    assert "nDCG@10[rerank]" in res.mean()
    assert res.mean()["nDCG@10[rerank]"] < res.mean()["nDCG@10"]


def test_evaluate_frame_dedupes_by_id_not_text():
    docs, ids, q, qrels = _data(nq=4)
    df = pd.DataFrame(
        {
            "query": ["same", "same", "other", "x"],
            "query_id": [0, 1, 2, 3],
            "doc_id": qrels.doc_ids,
            "relevance": [1, 1, 1, 1],
            "camera": ["n", "s", "n", "s"],
        }
    )
    store = BruteForceStore(docs, ids)
    lookup = {0: q[0], 1: q[1], 2: q[2], 3: q[3]}
    seen = []

    def embed(texts):
        seen.extend(texts)
        return np.stack([lookup[i] for i in range(len(texts))])

    res = _ev(store, measures=["P@1"]).evaluate_frame(df, embed)
    assert seen == ["same", "same", "other", "x"]
    assert len(res.per_query) == 4 and set(res.per_query["camera"]) == {"n", "s"}


def test_evaluate_frame_with_string_ids_equals_evaluate_and_names_queries_by_their_ids():
    docs, ids, q, qrels = _data(nq=60)
    rng = np.random.default_rng(1)
    names = np.array([f"query-{i:03d}" for i in range(60)], dtype=object)
    # Two judged rows per query (one relevant, one not), shuffled; metadata per query.
    other = rng.choice(ids, 60)
    df = pd.DataFrame(
        {
            "query": np.repeat([f"text {i}" for i in range(60)], 2),
            "query_id": np.repeat(names, 2),
            "doc_id": np.column_stack([qrels.doc_ids, other]).ravel(),
            "relevance": np.tile([1, 0], 60),
            "site": np.repeat(np.where(np.arange(60) % 3 == 0, "W", "E"), 2),
        }
    ).sample(frac=1, random_state=2)
    order = pd.unique(df["query_id"])
    row_of = {n: i for i, n in enumerate(names)}

    def embed(texts):
        return np.stack([q[int(t.split()[1])] for t in texts])

    store = BruteForceStore(docs, ids, nan_rows=[])
    res = _ev(store).evaluate_frame(df, embed)
    assert list(res.evaluation.query_ids) == list(order)
    want = _direct(docs, ids, q, qrels, MEASURES, rows=True)
    got = res.per_query.set_index("query_id")
    for n in names:
        for m in MEASURES:
            assert got.loc[n, m] == pytest.approx(want.loc[row_of[n], m], abs=1e-12)
    assert set(res.breakdown("site")["site"]) == {"W", "E"}
    assert list(res.run.query_ids) == list(order)
    # A failed query is named by its id, in errors and failed_queries alike.
    store2 = BruteForceStore(docs, ids, fail_batches=[row_of[order[0]]], fail_times=99)
    res2 = _ev(store2, retries=0, batch_size=1).evaluate_frame(df, embed)
    assert res2.failed_queries.tolist() == [order[0]] and order[0] in res2.errors
    with pytest.raises(NaNScoreError, match=f"NaN score for query '{order[1]}'") as ei:
        _ev(BruteForceStore(docs, ids, nan_rows=[row_of[order[1]]])).evaluate_frame(df, embed)
    assert ei.value.partial.failed_queries.tolist() == [order[1]]


def test_evaluate_frame_with_given_qrels_scores_judged_queries_missing_from_the_frame():
    docs, ids, q, qrels = _data(nq=6)
    df = pd.DataFrame({"query": [f"t{i}" for i in range(4)], "query_id": ["a", "b", "c", "d"]})
    given = Qrels(np.array(list("abcdef"), dtype=object), qrels.doc_ids, np.ones(6))
    res = _ev(BruteForceStore(docs, ids), measures=["P@1"]).evaluate_frame(
        df, lambda t: q[[int(x[1]) for x in t]], qrels=given
    )
    assert list(res.evaluation.query_ids) == list("abcdef")
    assert sorted(res.evaluation.missing_queries.tolist()) == ["e", "f"]


def test_string_qrels_doc_ids_against_a_store_fail_before_any_search():
    docs, ids, q, qrels = _data(nq=4)
    df = pd.DataFrame(
        {
            "query": ["a", "b", "c", "d"],
            "query_id": [0, 1, 2, 3],
            "doc_id": [str(d) for d in qrels.doc_ids],
            "relevance": [1, 1, 1, 1],
        }
    )
    store = BruteForceStore(docs, ids)
    with pytest.raises(TypeError, match="relevant doc ids are strings"):
        _ev(store).evaluate_frame(df, lambda t: q[: len(t)])
    assert store.calls == {}


def test_bad_arguments():
    docs, ids, q, qrels = _data(nq=4)
    store = BruteForceStore(docs, ids)
    with pytest.raises(ValueError, match=r"k must be in \[1, inf\], got 0"):
        BenchmarkEvaluator(store, "c", k=0)
    with pytest.raises(
        ValueError, match=r"k must be >= the largest cutoff among measures \(10\), got k=5"
    ):
        BenchmarkEvaluator(store, "c", k=5, measures=["P@10"])
    with pytest.raises(ValueError, match="unknown measure 'Recall@5'"):
        BenchmarkEvaluator(store, "c", k=10, measures=["Recall@5"])
    with pytest.raises(
        ValueError, match=r"retry_backoff_s must be a finite number in \[0, inf\], got -1"
    ):
        BenchmarkEvaluator(store, "c", retry_backoff_s=-1)
    with pytest.raises(TypeError, match=r"max_backoff_s must be a number, got str '1s'"):
        BenchmarkEvaluator(store, "c", max_backoff_s="1s")
    with pytest.raises(ValueError, match=r"max_backoff_s must be a finite number in \[0, inf\]"):
        BenchmarkEvaluator(store, "c", max_backoff_s=float("nan"))
    with pytest.raises(ValueError, match=r"max_consecutive_failures must be in \[1, inf\], got 0"):
        BenchmarkEvaluator(store, "c", max_consecutive_failures=0)
    ev = BenchmarkEvaluator(store, "c", k=10, progress=False)
    with pytest.raises(ValueError, match=r"queries must be 2-D \(n, d\), got 1-D"):
        ev.evaluate(q[0], qrels)
    bad = q.copy()
    bad[2, 1] = np.inf
    with pytest.raises(ValueError, match="queries must be finite, got NaN or inf in row 2"):
        ev.evaluate(bad, qrels)
    with pytest.raises(ValueError, match="query_ids has 3 entries, queries has 4 rows"):
        ev.evaluate(q, qrels, query_ids=[1, 2, 3])
    with pytest.raises(ValueError, match="query_ids must be unique"):
        ev.evaluate(q, qrels, query_ids=[1, 2, 3, 3])
    with pytest.raises(ValueError, match=r"df is missing required column\(s\) \['relevance'\]"):
        ev.evaluate_frame(
            pd.DataFrame({"query": ["a"], "query_id": [1], "doc_id": [1]}), lambda t: q[:1]
        )
    with pytest.raises(ValueError, match=r"metadata_cols \['nope'\] are not columns of df"):
        ev.evaluate_frame(
            pd.DataFrame({"query": ["a"], "query_id": [1], "doc_id": [1], "relevance": [1]}),
            lambda t: q[:1],
            metadata_cols=["nope"],
        )
