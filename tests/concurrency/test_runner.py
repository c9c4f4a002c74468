"""The concurrency runner in threads: every query accounted for, latencies as a plain loop's,
answers (and so quality) the store's own."""

from __future__ import annotations

import time

import numpy as np
import pytest

from imsearch_align.concurrency import (
    ConcurrencyResult,
    StoreSpec,
    quality,
    run_concurrent,
    saturation,
)
from imsearch_align.concurrency.client import client_plans
from imsearch_align.framework.metrics import Qrels, evaluate
from imsearch_align.framework.metrics import Run as MetricsRun

K = 10
SHORT = {"duration_s": 0.3, "warmup_s": 0.05, "seed": 7}


def test_every_query_sent_is_answered_or_failed(built):
    store, Q, qids = built
    res = run_concurrent(store, "docs", Q, qids, K, levels=(1, 2, 4), **SHORT)
    assert isinstance(res, ConcurrencyResult)
    assert [lv.concurrency for lv in res.levels] == [1, 2, 4]
    for lv in res.levels:
        assert lv.sent > 0
        assert lv.failed == 0
        assert lv.answered == lv.sent == len(lv.answers)
        assert lv.status.ok
        assert lv.queries_per_s == pytest.approx(lv.answered / lv.wall_s)
        assert lv.wall_s >= SHORT["duration_s"]
        assert set(lv.latency_ms) >= {"p50", "p95", "p99"}
        assert lv.latency_ms["p50"] <= lv.latency_ms["p95"] <= lv.latency_ms["p99"]
        assert set(np.unique(lv.answers.client)) == set(range(lv.concurrency))
        assert np.all(np.diff(lv.answers.started_s) >= 0)  # send order
        assert np.all(lv.answers.started_s >= 0)
        assert np.all(lv.answers.started_s < SHORT["duration_s"])
    assert res.saturation == saturation(res.curve())


def _plain_latencies_ms(store, Q, seconds: float) -> np.ndarray:
    out = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        store.search("docs", Q[i % len(Q) : i % len(Q) + 1], K)
        out.append(time.perf_counter() - t0)
        i += 1
    return np.asarray(out) * 1e3


def test_latency_at_one_client_matches_a_plain_loop(built):
    """Medians within 0.5x-2x of a plain single-client loop run just before and just after
    (the machine is shared and loaded: the band is wide, the bracket takes drift out)."""
    store, Q, qids = built
    before = np.median(_plain_latencies_ms(store, Q, 0.4))
    res = run_concurrent(store, "docs", Q, qids, K, levels=(1,), **SHORT)
    after = np.median(_plain_latencies_ms(store, Q, 0.4))
    p50 = res.level(1).latency_ms["p50"]
    assert 0.5 * min(before, after) <= p50 <= 2.0 * max(before, after), (before, p50, after)


def test_answers_are_the_stores_own_and_so_is_quality(built):
    store, Q, qids = built
    full = store.search("docs", Q, K)
    res = run_concurrent(store, "docs", Q, qids, K, levels=(1, 3), duration_s=0.4, seed=1)
    qrels = Qrels.from_pairs(qids, full.ids[:, 0])  # the top hit is the relevant one
    want = evaluate(MetricsRun.from_arrays(qids, full.ids, full.scores), qrels, ["nDCG@10"])
    for lv in res.levels:
        a = lv.answers
        np.testing.assert_array_equal(a.ids, full.ids[a.query])
        np.testing.assert_allclose(a.scores, full.scores[a.query], rtol=1e-6, atol=1e-6)
        q = quality(a, qrels, ["HitRate@1", "nDCG@10"])
        assert q.n_differing == 0
        assert q.failed_queries == ()
        assert q.n_answers == lv.answered
        if q.not_sent == 0:  # the level cycled through every query
            assert q.n_queries == len(qids)
            assert q.metrics["nDCG@10"] == pytest.approx(want.mean()["nDCG@10"], abs=1e-12)
        assert q.metrics["HitRate@1"] == 1.0
        tie = quality(a, qrels, ["nDCG@10"], dim=Q.shape[1])
        assert tie.metrics["nDCG@10"] == pytest.approx(q.metrics["nDCG@10"], abs=1e-9)


def test_quality_counts_only_the_queries_sent(built):
    """A level too short to reach every query scores the ones it sent and counts the rest."""
    store, Q, qids = built
    res = run_concurrent(store, "docs", Q, qids, K, levels=(1,), duration_s=0.3, seed=2)
    a = res.level(1).answers
    sent = np.unique(a.query)
    keep = sent[: max(1, len(sent) // 2)]
    part = type(a)(
        a.query_ids,
        a.query[np.isin(a.query, keep)],
        a.ids[np.isin(a.query, keep)],
        a.scores[np.isin(a.query, keep)],
        a.latency_s[np.isin(a.query, keep)],
        a.started_s[np.isin(a.query, keep)],
        a.client[np.isin(a.query, keep)],
        a.failed_query[:0],
    )
    full = store.search("docs", Q, K)
    qrels = Qrels.from_pairs(qids, full.ids[:, 0])
    q = quality(part, qrels, ["HitRate@1"])
    assert q.n_queries == len(keep)
    assert q.not_sent == len(qids) - len(keep)
    assert q.metrics["HitRate@1"] == 1.0


def test_clients_walk_one_seeded_permutation_from_their_own_offsets():
    plans = client_plans(10, 4, seed=5, warmup_s=0.0, duration_s=1.0)
    assert [p.offset for p in plans] == [0, 2, 5, 7]
    assert all(np.array_equal(p.order, plans[0].order) for p in plans)
    assert sorted(plans[0].order.tolist()) == list(range(10))
    again = client_plans(10, 4, seed=5, warmup_s=0.0, duration_s=1.0)
    assert np.array_equal(again[0].order, plans[0].order)


def test_a_spec_is_opened_shared_and_closed_in_threads():
    """A StoreSpec (or a callable) in threads mode: one store for every thread, closed at the end."""
    opened = []

    class Spec(StoreSpec):
        def open(self):
            store = super().open()
            X = np.eye(4, dtype=np.float32)
            store.create_collection("c", 4)
            store.insert("c", X, np.arange(4))
            opened.append(store)
            return store

    Q = np.eye(4, dtype=np.float32)
    res = run_concurrent(Spec("exact"), "c", Q, [0, 1, 2, 3], 2, levels=(2,), duration_s=0.2)
    assert len(opened) == 1
    assert res.level(2).answered == res.level(2).sent > 0
    with pytest.raises(RuntimeError, match="closed"):
        opened[0].search("c", Q, 1)


def _qdrant():
    from imsearch_align.adapters.qdrant_store import QdrantStore

    return QdrantStore()


def _lancedb(tmp_path):
    from imsearch_align.adapters.lancedb_store import LanceDBStore

    return LanceDBStore(tmp_path / "lance")


def _faiss(index: str):
    from imsearch_align.adapters.faiss_store import FaissStore

    return FaissStore(index, gpu=False)


@pytest.mark.parametrize("which", ["faiss-flat", "faiss-hnsw", "qdrant", "lancedb"])
def test_every_in_process_store_runs_in_threads(which, tmp_path):
    """Counts hold for each in-process store; exact ones answer as their own batch search."""
    pytest.importorskip({"qdrant": "qdrant_client", "lancedb": "lancedb"}.get(which, "faiss"))
    from imsearch_align.testing.store_data import clustered_vectors

    X, Q = clustered_vectors(1500, 16, n_queries=30, seed=9)
    store = {
        "faiss-flat": lambda: _faiss("flat"),
        "faiss-hnsw": lambda: _faiss("hnsw"),
        "qdrant": _qdrant,
        "lancedb": lambda: _lancedb(tmp_path),
    }[which]()
    try:
        store.create_collection("docs", 16)
        store.insert("docs", X, np.arange(1500, dtype=np.int64))
        full = store.search("docs", Q, K)
        res = run_concurrent(store, "docs", Q, np.arange(30), K, levels=(1, 2), duration_s=0.2)
        for lv in res.levels:
            assert lv.answered == lv.sent > 0 and lv.failed == 0
            if getattr(store, "exact", False):
                np.testing.assert_array_equal(lv.answers.ids, full.ids[lv.answers.query])
    finally:
        store.close()


def test_sparse_queries_are_sent_one_row_at_a_time():
    import scipy.sparse as sp

    from imsearch_align.adapters.exact import ExactStore

    rng = np.random.default_rng(0)
    docs = sp.random(300, 50, density=0.1, format="csr", random_state=1, dtype=np.float32)
    Q = sp.random(20, 50, density=0.2, format="csc", random_state=2, dtype=np.float32)
    with ExactStore() as store:
        store.create_collection("sp", sparse=True)
        store.insert("sp", docs, rng.permutation(300).astype(np.int64))
        full = store.search("sp", Q.tocsr(), K)
        res = run_concurrent(store, "sp", Q, np.arange(20), K, levels=(2,), duration_s=0.2)
    a = res.level(2).answers
    assert res.level(2).answered == res.level(2).sent > 0
    np.testing.assert_array_equal(a.ids, full.ids[a.query])
