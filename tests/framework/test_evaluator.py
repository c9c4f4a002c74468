"""BenchmarkEvaluator: parallel batches, failures, NaN, checkpoints, breakdowns."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from imsearch_align import Qrels, Run, SearchResult, evaluate
from imsearch_align.framework.evaluator import BenchmarkEvaluator, NaNScoreError


class BruteForceStore:
    """Tiny exact store for these tests (independent of the package's stores)."""

    supports_sparse = False

    def __init__(
        self,
        docs: np.ndarray,
        ids: np.ndarray,
        *,
        fail_batches=(),
        fail_times=1,
        nan_rows=(),
        extra=False,
    ):
        self.docs, self.ids = docs, ids
        self.fail_first = {int(b) for b in fail_batches}
        self.fail_times = fail_times
        self.calls: dict[int, int] = {}
        self.nan_rows = set(nan_rows)
        self.extra = extra
        self.lock = threading.Lock()
        self.threads: set[int] = set()

    def search(self, name, queries, k):
        first = round(float(queries[0, -1]))  # the test encodes the row index in the last column
        with self.lock:
            self.threads.add(threading.get_ident())
            n = self.calls.get(first, 0)
            self.calls[first] = n + 1
        if first in self.fail_first and n < self.fail_times:
            raise ConnectionError(f"batch starting at row {first} is down")
        s = queries[:, :-1] @ self.docs.T
        order = np.lexsort((np.broadcast_to(self.ids, s.shape), -s), axis=1)[:, :k]
        ids = self.ids[order]
        sc = np.take_along_axis(s, order, 1).astype(np.float32)
        rows = np.round(queries[:, -1]).astype(int)
        for i, r in enumerate(rows):
            if r in self.nan_rows:
                sc[i, 0] = np.nan
        extra = {"rerank": -sc.copy()} if self.extra else {}
        return SearchResult(ids, sc, extra)


def _data(nq=200, nd=300, d=8, seed=0):
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((nd, d)).astype(np.float32)
    doc_ids = rng.choice(10**6, size=nd, replace=False).astype(np.int64)
    target = rng.integers(0, nd, nq)
    q = docs[target] + 0.8 * rng.standard_normal((nq, d)).astype(np.float32)
    q = np.hstack([q, np.arange(nq, dtype=np.float32)[:, None]])  # row tag for the fake store
    qrels = Qrels.from_pairs(np.arange(nq), doc_ids[target])
    return docs, doc_ids, q, qrels


def _direct(docs, doc_ids, q, qrels, measures, k=10):
    s = q[:, :-1] @ docs.T
    order = np.argsort(-s, axis=1, kind="stable")[:, :k]
    return evaluate(
        Run.from_arrays(np.arange(len(q)), doc_ids[order], np.take_along_axis(s, order, 1)),
        qrels,
        measures,
    ).mean()


MEASURES = ["P@1", "R@5", "nDCG@10", "RR@10", "AP@10", "HitRate@5", "Accuracy"]


def test_matches_direct_computation_and_uses_parallel_workers():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids)
    ev = BenchmarkEvaluator(
        store, "c", k=10, measures=MEASURES, batch_size=16, workers=3, progress=False
    )
    res = ev.evaluate(q, qrels)
    want = _direct(docs, ids, q, qrels, MEASURES)
    for m in MEASURES:
        assert res.mean()[m] == pytest.approx(want[m], abs=1e-12)
    assert 0 < res.mean()["Accuracy"] < 1
    assert res.timings["n_batches"] == 13
    assert (
        res.timings["queries_per_s"] > 0
        and res.timings["batch_p99_ms"] >= res.timings["batch_p50_ms"]
    )
    assert len(store.threads) >= 2


def test_failed_batch_is_retried_then_succeeds():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, fail_batches=[32], fail_times=2)
    res = BenchmarkEvaluator(
        store,
        "c",
        k=10,
        measures=MEASURES,
        batch_size=16,
        retries=2,
        retry_backoff_s=0,
        progress=False,
    ).evaluate(q, qrels)
    assert len(res.failed_queries) == 0
    assert res.mean() == pytest.approx(_direct(docs, ids, q, qrels, MEASURES))


def test_batch_failing_after_retries_scores_zero_counts_and_is_listed():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, fail_batches=[32], fail_times=99)
    res = BenchmarkEvaluator(
        store,
        "c",
        k=10,
        measures=MEASURES,
        batch_size=16,
        retries=1,
        retry_backoff_s=0,
        progress=False,
    ).evaluate(q, qrels)
    assert sorted(res.failed_queries.tolist()) == list(range(32, 48))
    assert store.calls[32] == 2
    pq = res.per_query.set_index("query_id")
    assert (pq.loc[32:47, MEASURES] == 0).all().all()
    assert (
        pq.loc[32:47, "failed"].all() and "batch starting at row 32 is down" in pq.loc[40, "error"]
    )
    # The mean counts the failed queries as zeros over all 200 queries.
    ok = pq.drop(index=range(32, 48))
    assert res.mean()["P@1"] == pytest.approx(ok["P@1"].sum() / 200)
    assert res.to_dict()["n_failed"] == 16


def test_nan_score_raises_naming_query_and_keeps_other_results():
    docs, ids, q, qrels = _data()
    store = BruteForceStore(docs, ids, nan_rows=[57])
    ev = BenchmarkEvaluator(store, "c", k=10, measures=MEASURES, batch_size=16, progress=False)
    with pytest.raises(NaNScoreError, match="NaN score for query 57") as ei:
        ev.evaluate(q, qrels)
    partial = ei.value.partial
    assert partial is not None and partial.failed_queries.tolist() == [57]
    assert len(partial.per_query) == 200
    full = BenchmarkEvaluator(
        BruteForceStore(docs, ids), "c", k=10, measures=MEASURES, batch_size=16, progress=False
    ).evaluate(q, qrels)
    a = partial.per_query.set_index("query_id").drop(index=57)[MEASURES]
    b = full.per_query.set_index("query_id").drop(index=57)[MEASURES]
    pd.testing.assert_frame_equal(a, b)


def test_checkpoint_resume_skips_finished_batches_and_equals_uninterrupted(tmp_path):
    docs, ids, q, qrels = _data()
    # First run: batch at row 64 fails for good, the rest are checkpointed.
    s1 = BruteForceStore(docs, ids, fail_batches=[64], fail_times=99)
    r1 = BenchmarkEvaluator(
        s1,
        "c",
        k=10,
        measures=MEASURES,
        batch_size=16,
        retries=0,
        progress=False,
        checkpoint_dir=tmp_path,
    ).evaluate(q, qrels)
    assert len(r1.failed_queries) == 16
    s2 = BruteForceStore(docs, ids)
    r2 = BenchmarkEvaluator(
        s2, "c", k=10, measures=MEASURES, batch_size=16, progress=False, checkpoint_dir=tmp_path
    ).evaluate(q, qrels)
    assert set(s2.calls) == {64}  # only the missing batch was searched again
    assert r2.mean() == _direct(docs, ids, q, qrels, MEASURES)


def test_bootstrap_intervals_breakdown_and_extra_score_ndcg():
    docs, ids, q, qrels = _data()
    md = pd.DataFrame({"group": np.where(np.arange(200) < 100, "a", "b")}, index=np.arange(200))
    store = BruteForceStore(docs, ids, extra=True)
    res = BenchmarkEvaluator(
        store, "c", k=10, measures=MEASURES, batch_size=50, progress=False, seed=1
    ).evaluate(q, qrels, metadata=md)
    summ = res.summary().set_index("measure")
    assert (summ["ci_low"] <= summ["mean"]).all() and (summ["mean"] <= summ["ci_high"]).all()
    assert (
        res.intervals
        == BenchmarkEvaluator(
            store, "c", k=10, measures=MEASURES, batch_size=50, progress=False, seed=1
        )
        .evaluate(q, qrels)
        .intervals
    )
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

    res = BenchmarkEvaluator(store, "c", k=10, measures=["P@1"], progress=False).evaluate_frame(
        df, embed
    )
    assert seen == ["same", "same", "other", "x"]
    assert len(res.per_query) == 4 and set(res.per_query["camera"]) == {"n", "s"}


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
    ev = BenchmarkEvaluator(store, "c", k=10, progress=False)
    with pytest.raises(ValueError, match=r"queries must be 2-D \(n, d\), got 1-D"):
        ev.evaluate(q[0], qrels)
    bad = q.copy()
    bad[2, 1] = np.inf
    with pytest.raises(ValueError, match="queries must be finite, got NaN or inf in row 2"):
        ev.evaluate(bad, qrels)
    with pytest.raises(ValueError, match="query_ids has 3 entries, queries has 4 rows"):
        ev.evaluate(q, qrels, query_ids=[1, 2, 3])
    with pytest.raises(ValueError, match=r"df is missing required column\(s\) \['relevance'\]"):
        ev.evaluate_frame(
            pd.DataFrame({"query": ["a"], "query_id": [1], "doc_id": [1]}), lambda t: q[:1]
        )
