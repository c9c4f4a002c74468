"""MilvusStore under faults: restarts, a dead server, shared servers, threads.

Every test runs a real ``milvus-lite server`` on 127.0.0.1 of its own
(started, stopped, killed and restarted through
:class:`~imsearch_align.testing.servers.ServerHandle`), except the
Milvus 2.3.5 restart, which restarts the session's standalone in place.

Oracle: the true inner products ``Q @ X.T`` in float64, recomputed from
the ids the store returns (never its reported scores), and the answers the
same store gave before the fault.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from imsearch_align.adapters.base import (
    CollectionExistsError,
    CollectionNotFoundError,
    CollectionOwnedError,
    unique_collection_name,
)
from imsearch_align.adapters.milvus import (
    MilvusStore,
    MilvusStoreError,
    MilvusUnavailableError,
)
from imsearch_align.framework.interfaces import (
    SearchResult,
    StoreProvenance,
    StoreUnavailableError,
    is_thread_safe,
)
from imsearch_align.testing.servers import ServerHandle, free_port

pytestmark = pytest.mark.integration

TOKEN = "s3cr3t-token-DO-NOT-LEAK"
N, DIM, NQ, K = 300, 16, 24, 10


def _data(seed: int = 0, n: int = N) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, DIM)).astype(np.float32)
    ids = rng.choice(10**9, size=n, replace=False).astype(np.int64)
    Q = rng.standard_normal((NQ, DIM)).astype(np.float32)
    return X, ids, Q


def _tol(X: np.ndarray, Q: np.ndarray) -> float:
    """float32 rounding bound of one inner product: eps * dim * |q| * |x| (x8 margin)."""
    eps = float(np.finfo(np.float32).eps)
    qn = float(np.linalg.norm(Q, axis=1).max())
    xn = float(np.linalg.norm(X, axis=1).max())
    return 8 * eps * X.shape[1] * qn * xn


def _assert_true_topk(res: SearchResult, X: np.ndarray, ids: np.ndarray, Q: np.ndarray, k: int):
    """Each row holds min(k, n) distinct stored ids whose *true* scores are a top-k."""
    true = Q.astype(np.float64) @ X.astype(np.float64).T
    col = {int(i): j for j, i in enumerate(ids)}
    kk = min(k, len(ids))
    tol = _tol(X, Q)
    assert res.ids.shape == (len(Q), k)
    assert (res.ids[:, :kk] >= 0).all() and (res.ids[:, kk:] == -1).all()
    for r in range(len(Q)):
        cols = [col[int(i)] for i in res.ids[r, :kk]]  # KeyError: an id never inserted
        assert len(set(cols)) == kk, f"row {r}: repeated ids"
        np.testing.assert_allclose(res.scores[r, :kk], true[r, cols], rtol=0, atol=tol)
        kth = np.sort(true[r])[::-1][kk - 1]
        assert true[r, cols].min() >= kth - tol, f"row {r}: not a true top-{k}"


def _assert_same(after: SearchResult, before: SearchResult, tol: float) -> None:
    """Same answers: ids equal (Gaussian data has no ties), scores within float tolerance."""
    np.testing.assert_array_equal(after.ids, before.ids)
    np.testing.assert_allclose(after.scores, before.scores, rtol=0, atol=tol)


def _filled(uri: str, name: str, seed: int = 0, **kw: Any) -> tuple[MilvusStore, tuple]:
    store = MilvusStore(uri=uri, token=TOKEN, **kw)
    X, ids, Q = _data(seed)
    store.create_collection(name, DIM)
    store.insert(name, X, ids)
    return store, (X, ids, Q)


def _in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict]:
    out: dict[str, Any] = {}

    def run() -> None:
        t0 = time.monotonic()
        try:
            out["result"] = fn()
        except BaseException as exc:  # handed to the test thread
            out["error"] = exc
        out["seconds"] = time.monotonic() - t0

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


# --------------------------------------------------------------------------
# restarts (issue 11.1)


def test_restart_between_searches_gives_the_same_answers(own_lite_server: ServerHandle) -> None:
    store, (X, ids, Q) = _filled(own_lite_server.uri, "restart_mid")
    try:
        before = store.search("restart_mid", Q, K)
        _assert_true_topk(before, X, ids, Q, K)
        outages = store.outages
        own_lite_server.restart()  # SIGTERM, same data dir and port
        after = store.search("restart_mid", Q, K)  # the server says 'released': reloaded
        _assert_same(after, before, _tol(X, Q))
        # the restart counts as an outage even when gRPC reconnected before any request
        # failed: a timing around this search must know it went through one
        assert store.outages == outages + 1
        assert store.count("restart_mid") == N
    finally:
        store.close()


def test_restart_between_index_and_search(own_lite_server: ServerHandle) -> None:
    store, (X, ids, Q) = _filled(own_lite_server.uri, "restart_idx")
    try:
        own_lite_server.restart()
        _assert_true_topk(store.search("restart_idx", Q, K), X, ids, Q, K)
    finally:
        store.close()


def test_search_waits_out_a_restart(own_lite_server: ServerHandle) -> None:
    """A search issued while the server is down returns the right answer once it is back."""
    store, (X, _, Q) = _filled(own_lite_server.uri, "down_up", retry_budget_s=20)
    try:
        before = store.search("down_up", Q, K)
        own_lite_server.stop()
        th, out = _in_thread(lambda: store.search("down_up", Q, K))
        time.sleep(0.5)
        assert th.is_alive(), "the search gave up while the budget was not spent"
        own_lite_server.start()
        th.join(30)
        assert "error" not in out, out.get("error")
        _assert_same(out["result"], before, _tol(X, Q))
    finally:
        store.close()


def test_insert_across_a_restart_stores_each_row_once(own_lite_server: ServerHandle) -> None:
    """An insert that meets a dead server is repeated for the missing ids only."""
    X, ids, Q = _data(1)
    store = MilvusStore(uri=own_lite_server.uri, retry_budget_s=20, request_bytes=2048)
    try:
        store.create_collection("ins_restart", DIM)
        store.insert("ins_restart", X[:100], ids[:100])
        own_lite_server.stop()
        # ~25 requests of ~30 rows: the first ones meet the dead server.
        th, out = _in_thread(lambda: store.insert("ins_restart", X[100:], ids[100:]))
        time.sleep(0.5)
        own_lite_server.start()
        th.join(30)
        assert "error" not in out, out.get("error")
        assert store.count("ins_restart") == N
        _assert_true_topk(store.search("ins_restart", Q, K), X, ids, Q, K)
        # No id twice: k = N returns every stored row once.
        every = store.search("ins_restart", Q[:1], N)
        assert sorted(every.ids[0].tolist()) == sorted(ids.tolist())
    finally:
        store.close()


def test_kill9_then_restart_keeps_acknowledged_data(own_lite_server: ServerHandle) -> None:
    store, (X, _, Q) = _filled(own_lite_server.uri, "crash")
    try:
        before = store.search("crash", Q, K)
        own_lite_server.restart(kill=True)  # SIGKILL: no shutdown code runs
        _assert_same(store.search("crash", Q, K), before, _tol(X, Q))
        assert store.count("crash") == N
    finally:
        store.close()


def _lost_answer() -> Exception:
    """What pymilvus raises when the server went away before it answered."""
    from pymilvus.exceptions import MilvusException

    return MilvusException(
        code=2, message="Fail connecting to server on 127.0.0.1: server unavailable"
    )


@pytest.mark.parametrize(
    ("server", "cut"),
    [
        ("milvus_lite_server", "after_create"),
        ("milvus_lite_server", "before_index"),
        pytest.param("milvus_standalone", "before_index", marks=pytest.mark.slow),
    ],
)
def test_a_create_cut_short_by_a_restart_is_finished_not_refused(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, server: str, cut: str
) -> None:
    """The server stores the collection, then the connection breaks before it answers (a
    restart): the retry finds the name taken by its own lost attempt. Before the fix that
    was CollectionExistsError, a failed cell; now the store finishes the index and the load
    and the collection answers exactly (issue 36)."""
    srv: ServerHandle = request.getfixturevalue(server)
    name = unique_collection_name("cut_create")
    store = MilvusStore(uri=srv.uri, index="HNSW", retry_budget_s=20)
    X, ids, Q = _data(3)
    client = store._conn.connect()
    real = client.create_collection
    calls = []

    def once(collection_name: str, **kw: Any) -> None:
        calls.append(collection_name)
        if len(calls) > 1:
            return real(collection_name, **kw)
        if cut == "after_create":
            real(collection_name, **kw)  # collection, index and load done; the answer lost
        else:  # only the collection: the index and the load never ran
            client._get_connection().create_collection(
                collection_name, kw["schema"], consistency_level=kw["consistency_level"],
                properties=kw["properties"],
            )  # fmt: skip
        raise _lost_answer()

    monkeypatch.setattr(client, "create_collection", once)
    try:
        store.create_collection(name, DIM)
        assert calls == [name]  # the retry saw the name and did not create again
        assert client.list_indexes(name), "the retry must build the missing index"
        store.insert(name, X, ids)
        assert store.count(name) == N
        res = store.search(name, Q, K)
        assert res.ids.shape == (NQ, K) and (res.ids >= 0).all()
        store.drop_collection(name)  # still this store's own collection
    finally:
        store.close()


def test_a_lost_create_over_another_runs_collection_is_still_refused(
    milvus_lite_server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The healing reads the owner marker: when another run created the name while this
    store's create was lost, the name is never taken over."""
    name = unique_collection_name("cut_other")
    other = MilvusStore(uri=milvus_lite_server.uri)
    store = MilvusStore(uri=milvus_lite_server.uri, retry_budget_s=20)
    client = store._conn.connect()

    def lost(collection_name: str, **kw: Any) -> None:
        other.create_collection(collection_name, DIM)  # the other run wins the name
        raise _lost_answer()

    monkeypatch.setattr(client, "create_collection", lost)
    try:
        with pytest.raises(CollectionExistsError, match="by another run"):
            store.create_collection(name, DIM)
        other.insert(name, *_data(4)[:2])  # still the other run's, and it works
        assert other.count(name) == N
    finally:
        other.drop_collection(name)
        other.close()
        store.close()


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("IMSEARCH_ALIGN_TEST_235_RESTART"),
    reason="Milvus 2.3.5's own restart on the same data dir is unreliable here (2 of 4 came "
    "back; a server that does not return takes the session server every later 2.3.5 test "
    "uses with it): run alone with IMSEARCH_ALIGN_TEST_235_RESTART=1 "
    "pytest tests/adapters/test_milvus_faults.py -k 235. Restarts are covered on milvus-lite.",
)
def test_milvus_235_standalone_restart(milvus_standalone: ServerHandle) -> None:
    """A real Milvus 2.3.5 standalone, SIGTERMed and started on the same data (about 20 s)."""
    store, (X, ids, Q) = _filled(milvus_standalone.uri, "restart_235", retry_budget_s=90)
    try:
        before = store.search("restart_235", Q, K)
        _assert_true_topk(before, X, ids, Q, K)
        milvus_standalone.restart(timeout_s=120)
        _assert_same(store.search("restart_235", Q, K), before, _tol(X, Q))
        assert store.count("restart_235") == N
    finally:
        store.drop_collection("restart_235")
        store.close()


# --------------------------------------------------------------------------
# a dead server, errors that cannot heal (issue 11, "unclear today")


def test_dead_server_raises_once_quickly_in_one_line(
    own_lite_server: ServerHandle, caplog: pytest.LogCaptureFixture, capfd: Any
) -> None:
    budget = 1.5
    store, (X, ids, Q) = _filled(own_lite_server.uri, "doomed", retry_budget_s=budget)
    caplog.set_level(logging.DEBUG)
    try:
        own_lite_server.kill()
        t0 = time.monotonic()
        with pytest.raises(MilvusUnavailableError) as info:
            store.search("doomed", Q, K)
        took = time.monotonic() - t0
        assert budget <= took < budget + 3.0, took
        err = info.value
        assert isinstance(err, StoreUnavailableError)  # what the evaluator stops on
        msg = str(err)
        assert "\n" not in msg
        assert own_lite_server.uri in msg and "search" in msg and "'doomed'" in msg
        assert "retry_budget_s=1.5" in msg and "MilvusException" in msg  # the cause
        assert err.__cause__ is None and err.__suppress_context__
        # Declared unavailable: the next call does not spend a new budget.
        t0 = time.monotonic()
        with pytest.raises(MilvusUnavailableError):
            store.count("doomed")
        assert time.monotonic() - t0 < 0.5
        # The log says it once: one warning line, no tracebacks, no token.
        logged = caplog.text + capfd.readouterr().err
        assert "Traceback" not in logged
        assert TOKEN not in logged and TOKEN not in msg
        ours = [r for r in caplog.records if r.name.startswith("imsearch_align")]
        assert len(ours) == 1 and ours[0].levelno == logging.WARNING
        # The server comes back: the store answers again, correctly.
        own_lite_server.start()
        _assert_true_topk(store.search("doomed", Q, K), X, ids, Q, K)
    finally:
        store.close()


def test_hung_server_is_bounded_by_timeout_and_budget(own_lite_server: ServerHandle) -> None:
    """SIGSTOP: the server keeps its socket but answers nothing; timeout + budget bound the wait."""
    store, (X, ids, Q) = _filled(own_lite_server.uri, "hung", retry_budget_s=2, timeout=1)
    try:
        own_lite_server.pause()
        t0 = time.monotonic()
        with pytest.raises(MilvusUnavailableError, match="Deadline Exceeded"):
            store.search("hung", Q, K)
        assert time.monotonic() - t0 < 2 + 1 + 3.0  # budget + one request timeout + slack
        own_lite_server.resume()
        _assert_true_topk(store.search("hung", Q, K), X, ids, Q, K)
    finally:
        own_lite_server.resume()
        store.close()


def test_collection_dropped_by_another_client_is_not_retried(
    milvus_lite_server: ServerHandle,
) -> None:
    name = unique_collection_name("dropped")
    store, (X, _, Q) = _filled(milvus_lite_server.uri, name, retry_budget_s=30)
    other = MilvusStore(uri=milvus_lite_server.uri)
    try:
        store.search(name, Q, K)
        other.drop_collection(name, force=True)
        for call in (
            lambda: store.search(name, Q, K),
            lambda: store.insert(name, X[:1], [10**10]),
        ):
            t0 = time.monotonic()
            with pytest.raises(CollectionNotFoundError, match=f"'{name}' does not exist"):
                call()
            assert time.monotonic() - t0 < 2.0  # no retry budget spent
        assert not store.has_collection(name)
    finally:
        store.close()
        other.close()


def test_refused_request_is_not_retried(milvus_lite_server: ServerHandle) -> None:
    name = unique_collection_name("refusal")
    store, (_, _, Q) = _filled(milvus_lite_server.uri, name, retry_budget_s=30)
    try:
        t0 = time.monotonic()
        with pytest.raises(MilvusStoreError, match=f"refused search on collection '{name}'"):
            store.search(name, Q, K, filter="id >")
        assert time.monotonic() - t0 < 2.0
        assert store.search(name, Q, K).ids.shape == (NQ, K)  # the store still works
    finally:
        store.drop_collection(name)
        store.close()


def test_wrong_uri_gives_up_after_the_budget() -> None:
    store = MilvusStore(uri=f"http://127.0.0.1:{free_port()}", retry_budget_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(MilvusUnavailableError, match="Is the server running"):
        store.list_collections()
    assert time.monotonic() - t0 < 5.0
    store.close()


# --------------------------------------------------------------------------
# shared servers (issue 11.3)


def test_a_store_cannot_drop_change_or_recreate_another_runs_collection(
    milvus_lite_server: ServerHandle,
) -> None:
    name = unique_collection_name("run_a")
    a, (X, ids, Q) = _filled(milvus_lite_server.uri, name)
    b = MilvusStore(uri=milvus_lite_server.uri, token=TOKEN)
    try:
        assert a.owner != b.owner and b.owner_of(name) == a.owner
        with pytest.raises(CollectionExistsError, match=f"'{name}' already exists"):
            b.create_collection(name, DIM)
        with pytest.raises(CollectionOwnedError, match=r"drop_collection.*another run"):
            b.drop_collection(name)
        with pytest.raises(CollectionOwnedError, match=r"insert.*another run"):
            b.insert(name, X[:2], [10**10, 10**10 + 1])
        # a's collection is untouched, and b may read it.
        assert a.count(name) == N and b.count(name) == N
        _assert_true_topk(b.search(name, Q, K), X, ids, Q, K)
        # An explicit force drops it.
        b.drop_collection(name, force=True)
        assert not a.has_collection(name)
    finally:
        a.close()
        b.close()


def test_same_owner_reclaims_its_collections(milvus_lite_server: ServerHandle) -> None:
    """A resumed run (same owner token, new store) may write and drop; others may not."""
    name = unique_collection_name("resumable")
    X, ids, Q = _data(2)
    with MilvusStore(uri=milvus_lite_server.uri, owner="run_1234") as first:
        first.create_collection(name, DIM)
        first.insert(name, X[:100], ids[:100])
    with MilvusStore(uri=milvus_lite_server.uri, owner="run_9999") as stranger:
        with pytest.raises(CollectionOwnedError, match="'run_1234'"):
            stranger.insert(name, X[100:], ids[100:])
    with MilvusStore(uri=milvus_lite_server.uri, owner="run_1234") as resumed:
        resumed.insert(name, X[100:], ids[100:])
        _assert_true_topk(resumed.search(name, Q, K), X, ids, Q, K)
        resumed.drop_collection(name)


def test_unmarked_collection_is_read_only(milvus_lite_server: ServerHandle) -> None:
    """A collection made by another tool (no owner marker) is never dropped without force."""
    from pymilvus import MilvusClient

    name = unique_collection_name("foreign")
    raw = MilvusClient(uri=milvus_lite_server.uri, dedicated=True)
    raw.create_collection(name, dimension=4, primary_field_name="id", vector_field_name="vector")
    store = MilvusStore(uri=milvus_lite_server.uri)
    try:
        assert store.owner_of(name) is None
        with pytest.raises(CollectionOwnedError, match="no owner marker"):
            store.drop_collection(name)
        with pytest.raises(CollectionOwnedError, match="no owner marker"):
            store.insert(name, np.eye(4, dtype=np.float32), np.arange(4))
        assert raw.has_collection(name)
    finally:
        store.close()
        raw.drop_collection(name)
        raw.close()


def test_concurrent_create_of_one_name_has_one_winner(milvus_lite_server: ServerHandle) -> None:
    stores = [MilvusStore(uri=milvus_lite_server.uri) for _ in range(2)]
    X, ids, Q = _data(5, n=50)
    try:
        for _ in range(4):
            name = unique_collection_name("race")
            gate = threading.Barrier(len(stores))

            def create(s: MilvusStore, name: str = name, gate: threading.Barrier = gate) -> str:
                gate.wait()
                s.create_collection(name, DIM)
                return s.owner

            runs = [_in_thread(lambda s=s: create(s)) for s in stores]
            for th, _ in runs:
                th.join(30)
            won = [out["result"] for _, out in runs if "result" in out]
            lost = [out["error"] for _, out in runs if "error" in out]
            assert len(won) == 1 and len(lost) == 1, (won, lost)
            assert isinstance(lost[0], CollectionExistsError), lost[0]
            assert stores[0].owner_of(name) == won[0]
            # The winner's collection works; the loser left nothing behind in it.
            winner = next(s for s in stores if s.owner == won[0])
            winner.insert(name, X, ids)
            assert winner.count(name) == 50
            _assert_true_topk(winner.search(name, Q, K), X, ids, Q, K)
            winner.drop_collection(name)
    finally:
        for s in stores:
            s.close()


def test_two_runs_search_the_same_server_at_the_same_time(
    milvus_lite_server: ServerHandle,
) -> None:
    """Two owners, one collection each, four threads each: every answer is the truth."""
    na, nb = unique_collection_name("conc_a"), unique_collection_name("conc_b")
    a, (Xa, ida, Qa) = _filled(milvus_lite_server.uri, na, seed=3)
    b, (Xb, idb, Qb) = _filled(milvus_lite_server.uri, nb, seed=4)
    try:
        jobs = []
        for store, name, X, ids, Q in ((a, na, Xa, ida, Qa), (b, nb, Xb, idb, Qb)):
            for t in range(4):
                rows = slice(6 * t, 6 * t + 6)
                run = _in_thread(
                    lambda s=store, n=name, q=Q[rows]: [s.search(n, q, K) for _ in "abc"]
                )
                jobs.append((run, X, ids, Q[rows]))
        for (th, out), X, ids, Q in jobs:
            th.join(60)
            assert "error" not in out, out.get("error")
            for res in out["result"]:
                _assert_true_topk(res, X, ids, Q, K)
    finally:
        a.drop_collection(na)
        b.drop_collection(nb)
        a.close()
        b.close()


def test_concurrent_searches_equal_serial_ones(milvus_lite_server: ServerHandle) -> None:
    """The basis of ``thread_safe = True``: one store, one client, eight threads at once."""
    name = unique_collection_name("threads")
    store, (X, _, Q) = _filled(milvus_lite_server.uri, name)
    try:
        assert is_thread_safe(store)
        blocks = [Q[i : i + 3] for i in range(0, NQ, 3)]
        serial = [store.search(name, q, K) for q in blocks]
        gate = threading.Barrier(len(blocks))

        def job(q: np.ndarray) -> list[SearchResult]:
            gate.wait()
            return [store.search(name, q, K) for _ in range(5)]

        runs = [_in_thread(lambda q=q: job(q)) for q in blocks]
        for (th, out), want in zip(runs, serial):
            th.join(60)
            assert "error" not in out, out.get("error")
            for got in out["result"]:
                _assert_same(got, want, _tol(X, Q))
    finally:
        store.drop_collection(name)
        store.close()


def test_concurrent_first_searches_wait_once_and_see_every_row(
    milvus_lite_server: ServerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight threads search right after an insert: one readiness wait, every row in each answer."""
    from imsearch_align.adapters.milvus import searching as searching_module

    calls: list[int] = []
    real = searching_module.wait_searchable

    def counted(*args: Any, **kw: Any) -> Any:
        calls.append(threading.get_ident())
        return real(*args, **kw)

    monkeypatch.setattr(searching_module, "wait_searchable", counted)
    name = unique_collection_name("first_searches")
    store, (X, ids, Q) = _filled(milvus_lite_server.uri, name)
    try:
        gate = threading.Barrier(8)

        def job() -> SearchResult:
            gate.wait()
            return store.search(name, Q, N)

        runs = [_in_thread(job) for _ in range(8)]
        for th, out in runs:
            th.join(60)
            assert "error" not in out, out.get("error")
            assert (out["result"].ids >= 0).all()  # k = N: every inserted row
        assert len(calls) == 1
        _assert_true_topk(store.search(name, Q, K), X, ids, Q, K)
        assert len(calls) == 1  # nothing inserted since: no new wait
    finally:
        store.drop_collection(name)
        store.close()


def test_lite_directory_held_by_another_process_is_named(tmp_path: Any) -> None:
    """The lock case keeps its message, now certain: the LOCK file another process holds."""
    import subprocess
    import sys

    uri = str(tmp_path / "held.db")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\n"
            "from imsearch_align.adapters.milvus import MilvusStore\n"
            f"s = MilvusStore(uri={uri!r}); s.list_collections()\n"
            "print('held', flush=True); time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        store = MilvusStore(uri=uri)
        with pytest.raises(MilvusStoreError) as err:
            store.list_collections()
        assert str(err.value) == (
            f"uri: Milvus Lite could not open {uri!r}: another process is using this data "
            f"directory (it holds {os.path.join(uri, 'LOCK')}); Milvus Lite allows one "
            "process per directory"
        )
        store.close()
    finally:
        holder.kill()
        holder.wait(10)


# --------------------------------------------------------------------------
# provenance (issue 13.4)


def test_provenance_of_a_lite_server(milvus_lite_server: ServerHandle) -> None:
    from importlib import metadata

    from pymilvus import MilvusClient

    store = MilvusStore(uri=milvus_lite_server.uri, token=TOKEN)
    raw = MilvusClient(uri=milvus_lite_server.uri, dedicated=True)
    try:
        assert isinstance(store, StoreProvenance)
        prov = store.provenance()
        assert prov["packages"]["pymilvus"] == metadata.version("pymilvus")
        assert prov["server_version"] == raw.get_server_version()
        assert prov["deployment"] == "milvus-lite server"
        text = json.dumps(prov)  # JSON-ready
        assert TOKEN not in text and str(milvus_lite_server.data_dir) not in text
    finally:
        store.close()
        raw.close()
