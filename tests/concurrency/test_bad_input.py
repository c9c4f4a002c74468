"""Bad input gets a clear error: levels above the client's limit, modes a store cannot run in,
wrong arguments; failed searches are counted, a hung search does not hang the run."""

from __future__ import annotations

import re
import threading
import time

import numpy as np
import pytest

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.concurrency import (
    ConcurrencyLimitError,
    ConcurrencyRunError,
    StoreSpec,
    process_limit,
    run_concurrent,
    thread_limit,
)
from imsearch_align.framework.interfaces import SearchResult, StoreUnavailableError

Q = np.eye(4, dtype=np.float32)
QIDS = [10, 11, 12, 13]


class _Wrapped:
    """A store that delegates to an ExactStore holding collection ``c`` (4 unit vectors)."""

    supports_sparse = False

    def __init__(self) -> None:
        self.inner = ExactStore()
        self.inner.create_collection("c", 4)
        self.inner.insert("c", Q, np.arange(4))

    def create_collection(self, name, dim=None, *, sparse=False, metric="ip"):
        self.inner.create_collection(name, dim, sparse=sparse, metric=metric)

    def insert(self, name, vectors, ids):
        self.inner.insert(name, vectors, ids)

    def search(self, name, queries, k) -> SearchResult:
        return self.inner.search(name, queries, k)

    def drop_collection(self, name):
        self.inner.drop_collection(name)

    def close(self):
        self.inner.close()


class Unsafe(_Wrapped):
    thread_safe = False


class Limited(_Wrapped):
    max_concurrency = 3


class Flaky(_Wrapped):
    """Every query of position 2 fails."""

    def search(self, name, queries, k):
        if queries[0, 2] == 1.0:
            raise RuntimeError("shard 2 is down")
        return super().search(name, queries, k)


class Gone(_Wrapped):
    """Answers the probe, then the server is gone: unavailable for good."""

    calls = 0

    def search(self, name, queries, k):
        Gone.calls += 1
        if Gone.calls > 1:
            raise StoreUnavailableError("server at http://h:1 is gone")
        return super().search(name, queries, k)


def test_a_thread_unsafe_store_is_refused_above_one_client():
    store = Unsafe()
    with pytest.raises(ConcurrencyLimitError) as err:
        run_concurrent(store, "c", Q, QIDS, 2, levels=(1, 2, 4), duration_s=0.1)
    msg = str(err.value)
    assert "concurrency 2 is above what Unsafe allows" in msg
    assert "at most 1 client" in msg and "thread_safe = False" in msg
    assert "mode='processes'" in msg
    # one client is no concurrency: it runs
    res = run_concurrent(store, "c", Q, QIDS, 2, levels=(1,), duration_s=0.1)
    assert res.level(1).answered > 0


def test_a_declared_max_concurrency_is_the_limit():
    store = Limited()
    assert thread_limit(store).limit == 3
    with pytest.raises(ConcurrencyLimitError, match=r"concurrency 4 is above .*at most 3 clients"):
        run_concurrent(store, "c", Q, QIDS, 2, levels=(1, 2, 4, 8), duration_s=0.1)


def test_the_limit_is_checked_before_any_level_runs():
    store = Limited()
    t0 = time.perf_counter()
    with pytest.raises(ConcurrencyLimitError, match=r"levels above the limit: \[4, 8\]"):
        run_concurrent(store, "c", Q, QIDS, 2, levels=(1, 2, 4, 8), duration_s=5.0)
    assert time.perf_counter() - t0 < 2.0


@pytest.mark.parametrize(
    ("spec", "limit", "words"),
    [
        (StoreSpec("exact"), 0, "memory of the process that filled it"),
        (StoreSpec("faiss", {"index": "flat"}), 0, "memory of the process that filled it"),
        (StoreSpec("milvus", {"uri": "x/y.db"}), 1, "Milvus Lite"),
        (StoreSpec("qdrant", {"path": "/tmp/q"}), 1, "locks its folder"),
        (StoreSpec("qdrant"), 0, "in-memory"),
        (StoreSpec("milvus", {"uri": "http://127.0.0.1:19530"}), None, ""),
        (StoreSpec("qdrant", {"url": "http://127.0.0.1:6333"}), None, ""),
        (StoreSpec("lancedb", {"path": "/tmp/l"}), None, ""),
    ],
)
def test_process_limits_of_the_builtin_stores(spec, limit, words):
    got = process_limit(spec)
    assert got.limit == limit
    assert words in got.reason


def test_processes_refuse_what_they_cannot_run():
    with pytest.raises(ConcurrencyLimitError, match=r"mode='processes' cannot run store 'exact'"):
        run_concurrent(StoreSpec("exact"), "c", Q, QIDS, 2, levels=(1,), mode="processes",
                       duration_s=0.1)  # fmt: skip
    lite = StoreSpec("milvus", {"uri": "some/dir.db"})
    with pytest.raises(
        ConcurrencyLimitError,
        match=r"concurrency 2 is above what store 'milvus' allows in mode='processes' "
        r"\(at most 1 client\): Milvus Lite",
    ):
        run_concurrent(lite, "c", Q, QIDS, 2, levels=(1, 2), mode="processes", duration_s=0.1)
    with pytest.raises(TypeError, match="mode='processes' needs a StoreSpec"):
        run_concurrent(ExactStore(), "c", Q, QIDS, 2, mode="processes", duration_s=0.1)


def test_secrets_stay_out_of_a_spec_repr():
    spec = StoreSpec("milvus", {"uri": "http://root:pw@h:19530", "token": "s3cret"})
    shown = repr(spec)
    assert "s3cret" not in shown and "pw" not in shown and "***" in shown


@pytest.mark.parametrize(
    ("kwargs", "err", "words"),
    [
        ({"levels": (0, 1)}, ValueError, "integer >= 1, got 0"),
        ({"levels": (1, 1)}, ValueError, "may appear once"),
        ({"levels": ()}, ValueError, "levels is empty"),
        ({"levels": (1.5,)}, ValueError, "got 1.5"),
        ({"mode": "fibers"}, ValueError, "mode must be one of"),
        ({"duration_s": 0}, ValueError, "duration_s must be > 0"),
        ({"warmup_s": -1}, ValueError, "warmup_s"),
        ({"k": 0}, ValueError, "k must be in"),
    ],
)
def test_bad_arguments_are_named(kwargs, err, words):
    args = {"levels": (1,), "duration_s": 0.1, **kwargs}
    k = args.pop("k", 2)
    with pytest.raises(err, match=re.escape(words)):
        run_concurrent(_Wrapped(), "c", Q, QIDS, k, **args)


def test_bad_queries_are_named():
    with pytest.raises(ValueError, match="query_ids has 3 entries, queries has 4 rows"):
        run_concurrent(_Wrapped(), "c", Q, QIDS[:3], 2, levels=(1,), duration_s=0.1)
    with pytest.raises(ValueError, match="appears twice"):
        run_concurrent(_Wrapped(), "c", Q, [1, 1, 2, 3], 2, levels=(1,), duration_s=0.1)
    with pytest.raises(TypeError, match="2-D float ndarray"):
        run_concurrent(_Wrapped(), "c", Q[0], QIDS, 2, levels=(1,), duration_s=0.1)


def test_an_unknown_collection_is_the_stores_own_error():
    with pytest.raises(LookupError, match="collection 'nope' does not exist"):
        run_concurrent(_Wrapped(), "nope", Q, QIDS, 2, levels=(1,), duration_s=0.1)


def test_failed_searches_are_counted_not_lost():
    res = run_concurrent(Flaky(), "c", Q, QIDS, 2, levels=(1, 2), duration_s=0.2)
    for lv in res.levels:
        assert lv.failed > 0 and lv.answered > 0
        assert lv.sent == lv.answered + lv.failed
        assert set(lv.answers.failed_query.tolist()) == {2}
        assert 2 not in set(lv.answers.query.tolist())
        assert lv.errors == {"RuntimeError: shard 2 is down": lv.failed}
        assert lv.status.state == "degraded"
        assert "queries failed (RuntimeError: shard 2 is down)" in lv.status.reasons[0]


def test_an_unavailable_store_ends_the_client():
    Gone.calls = 0
    res = run_concurrent(Gone(), "c", Q, QIDS, 2, levels=(1,), duration_s=0.3)
    lv = res.level(1)
    assert lv.sent == lv.failed == 1 and lv.answered == 0
    assert lv.status.state == "failed"
    assert lv.stopped and "is gone" in lv.stopped[0]
    assert res.saturation is None


def test_a_hung_search_does_not_hang_the_run():
    release = threading.Event()

    class Hangs(_Wrapped):
        calls = 0

        def search(self, name, queries, k):
            Hangs.calls += 1
            if Hangs.calls > 3:
                release.wait(30)
            return super().search(name, queries, k)

    t0 = time.perf_counter()
    try:
        with pytest.raises(ConcurrencyRunError, match=r"still searching 'c' 0.5 s after"):
            run_concurrent(Hangs(), "c", Q, QIDS, 2, levels=(2,), duration_s=0.2, grace_s=0.5)
        assert time.perf_counter() - t0 < 5.0
    finally:
        release.set()


def test_a_thread_the_system_refuses_is_a_run_error_that_says_why(monkeypatch):
    from imsearch_align.concurrency import run_concurrent

    real = threading.Thread.start
    started = []

    def start(self):
        if self.name.startswith("concurrency-client-") and len(started) >= 3:
            raise RuntimeError("can't start new thread")
        started.append(self.name)
        return real(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((50, 8)).astype(np.float32)
    from imsearch_align.concurrency.client import ConcurrencyRunError

    with ExactStore() as store:
        store.create_collection("c", 8)
        store.insert("c", docs, np.arange(50))
        with pytest.raises(ConcurrencyRunError, match=r"8 client threads: the system refused "
                           r"thread 4 \(can't start new thread\).*ulimit"):  # fmt: skip
            run_concurrent(store, "c", docs[:5], np.arange(5), 3, levels=(8,),
                           duration_s=0.2, warmup_s=0.0, mode="threads")  # fmt: skip
