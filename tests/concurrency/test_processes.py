"""The concurrency runner in processes against a real server (``milvus-lite server``):
each client process opens its own MilvusStore; every query is accounted for; the answers are
the server's own; a client that cannot open or hangs ends the level, and no process is left."""

from __future__ import annotations

import multiprocessing as mp
import time

import numpy as np
import pytest

from imsearch_align.adapters.base import unique_collection_name
from imsearch_align.adapters.milvus import MilvusStore
from imsearch_align.concurrency import ConcurrencyRunError, StoreSpec, quality, run_concurrent
from imsearch_align.framework.metrics import Qrels
from imsearch_align.testing.store_data import clustered_vectors

pytestmark = pytest.mark.integration

N, DIM, NQ, K = 2000, 16, 40, 5


@pytest.fixture(scope="module")
def served(milvus_lite_server):
    """``(uri, collection, queries, query ids, the server's own batch answers)``."""
    X, Q = clustered_vectors(N, DIM, n_queries=NQ, seed=11)
    name = unique_collection_name("concurrency")
    store = MilvusStore(uri=milvus_lite_server.uri)
    store.create_collection(name, DIM)
    store.insert(name, X, np.arange(N, dtype=np.int64))
    full = store.search(name, Q, K)
    try:
        yield milvus_lite_server.uri, name, Q, np.arange(NQ) + 500, full, store
    finally:
        store.drop_collection(name)
        store.close()


def test_processes_answer_every_query_with_the_servers_answers(served):
    uri, name, Q, qids, full, _ = served
    res = run_concurrent(
        StoreSpec("milvus", {"uri": uri}),
        name,
        Q,
        qids,
        K,
        levels=(1, 2),
        mode="processes",
        duration_s=0.5,
        warmup_s=0.1,
        open_timeout_s=120,
    )
    qrels = Qrels.from_pairs(qids, full.ids[:, 0])
    for lv in res.levels:
        assert lv.mode == "processes"
        assert lv.sent > 0 and lv.failed == 0
        assert lv.answered == lv.sent == len(lv.answers)
        assert set(np.unique(lv.answers.client)) == set(range(lv.concurrency))
        assert lv.wall_s >= 0.5
        np.testing.assert_array_equal(lv.answers.ids, full.ids[lv.answers.query])
        q = quality(lv.answers, qrels, ["HitRate@1"])
        assert q.metrics["HitRate@1"] == 1.0 and q.n_differing == 0
    assert mp.active_children() == []


def test_one_client_process_is_as_fast_as_a_plain_loop(served):
    uri, name, Q, qids, _, store = served

    def plain_p50() -> float:
        lat, end, i = [], time.perf_counter() + 0.5, 0
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            store.search(name, Q[i % NQ : i % NQ + 1], K)
            lat.append(time.perf_counter() - t0)
            i += 1
        return float(np.median(lat)) * 1e3

    before = plain_p50()
    res = run_concurrent(
        StoreSpec("milvus", {"uri": uri}),
        name,
        Q,
        qids,
        K,
        levels=(1,),
        mode="processes",
        duration_s=0.5,
        warmup_s=0.1,
    )
    after = plain_p50()
    p50 = res.level(1).latency_ms["p50"]
    # within noise of a shared 2-core machine (seen: 2.3 ms in the client against 6.0 and
    # 6.4 ms in this busy process): a per-query cost of the runner would be 10x, not 3x
    assert min(before, after) / 3 <= p50 <= 3.0 * max(before, after), (before, p50, after)


def test_a_client_that_cannot_search_is_named_and_no_process_is_left(served):
    uri, _, Q, qids, _, _ = served
    with pytest.raises(
        ConcurrencyRunError, match=r"client process \d: could not open .* or search 'nope'"
    ):
        run_concurrent(
            StoreSpec("milvus", {"uri": uri}),
            "nope",
            Q,
            qids,
            K,
            levels=(2,),
            mode="processes",
            duration_s=0.2,
        )
    assert mp.active_children() == []


@pytest.mark.slow
def test_clients_of_a_hung_server_are_ended(own_lite_server):
    X, Q = clustered_vectors(200, DIM, n_queries=8, seed=2)
    store = MilvusStore(uri=own_lite_server.uri)
    store.create_collection("hung", DIM)
    store.insert("hung", X, np.arange(200, dtype=np.int64))
    store.search("hung", Q, K)
    store.close()
    own_lite_server.pause()
    t0 = time.perf_counter()
    try:
        with pytest.raises(ConcurrencyRunError, match="client process"):
            run_concurrent(
                StoreSpec("milvus", {"uri": own_lite_server.uri, "retry_budget_s": 1.0}),
                "hung",
                Q,
                np.arange(8),
                K,
                levels=(2,),
                mode="processes",
                duration_s=0.2,
                open_timeout_s=4.0,
            )
        assert time.perf_counter() - t0 < 4.0 + 15.0  # the open timeout, then reaped
        assert mp.active_children() == []
    finally:
        own_lite_server.resume()
