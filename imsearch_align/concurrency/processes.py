"""One concurrency level in processes: each client process opens its own store and searches.

As VectorDBBench's multiprocessing runner does, and for the same reason (a
server is measured from clients that share nothing, not from threads that
share one interpreter and one connection), each client is a ``spawn``-ed
process (a fork would copy the parent's gRPC and OpenMP threads in an
undefined state). A level goes:

1. start one process per client; each opens its store from the
   :class:`~imsearch_align.concurrency.spec.StoreSpec`, searches one query
   (connection made, collection loaded) and says ``ready``: at most
   ``open_timeout_s``;
2. the parent sets the common start instant and releases them all;
3. each runs :func:`~imsearch_align.concurrency.client.run_client` and sends
   its :class:`~imsearch_align.concurrency.client.ClientRecord` back on a
   ``multiprocessing`` queue: at most ``grace_s`` after the level's end.

A client that cannot open its store, crashes, dies or overruns raises
:class:`~imsearch_align.concurrency.client.ConcurrencyRunError` naming it
and its cause, never a silent shortfall. Whatever happens, every client
process ends before the level returns or raises: joined, then terminated
(SIGTERM), then killed (SIGKILL).

A script that runs this mode needs the ``if __name__ == "__main__":`` guard
``spawn`` asks for.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from typing import Any

from imsearch_align.concurrency.client import (
    ClientPlan,
    ClientRecord,
    ConcurrencyRunError,
    run_client,
)
from imsearch_align.concurrency.spec import StoreSpec
from imsearch_align.concurrency.threads import START_DELAY_S

__all__ = ["STOP_GRACE_S", "run_level_processes"]

#: How long a client process may take to exit once told to, before SIGTERM, then SIGKILL.
STOP_GRACE_S = 5.0


def _close(store: Any) -> None:
    if store is not None:
        try:
            store.close()
        except Exception:  # closing is best effort: the process ends anyway
            pass


def _client_main(
    spec: StoreSpec,
    collection: str,
    queries: Any,
    k: int,
    plan: ClientPlan,
    messages: Any,
    go: Any,
    start: Any,
    wait_s: float,
) -> None:
    """A client process: open the store, probe it, wait for the start, run, send the record."""
    cid = plan.client
    store = None
    try:
        store = spec.open()
        i = int(plan.order[plan.offset])
        store.search(collection, queries[i : i + 1], k)
    except BaseException as exc:
        messages.put(
            (
                "error",
                cid,
                f"could not open {spec!r} or search {collection!r}: {type(exc).__name__}: {exc}",
            )
        )
        _close(store)
        return
    messages.put(("ready", cid, None))
    try:
        if not go.wait(wait_s):
            return
        record = run_client(
            lambda one: store.search(collection, one, k), queries, plan, start.value
        )
        messages.put(("done", cid, record))
    except BaseException as exc:
        messages.put(("error", cid, f"failed while searching: {type(exc).__name__}: {exc}"))
    finally:
        _close(store)


def _collect(
    messages: Any, procs: list[Any], kind: str, deadline: float, doing: str
) -> dict[int, Any]:
    """Wait for one ``kind`` message per process until ``deadline``; errors, deaths and
    overruns raise :class:`ConcurrencyRunError` naming the client."""
    got: dict[int, Any] = {}
    while len(got) < len(procs):
        left = deadline - time.perf_counter()
        if left <= 0:
            late = [c for c in range(len(procs)) if c not in got]
            raise ConcurrencyRunError(
                f"client processes {late} did not {doing} (a search or connection that "
                "hangs?); every client process was ended"
            )
        try:
            what, cid, payload = messages.get(timeout=min(0.5, left))
        except queue.Empty:
            dead = [c for c, p in enumerate(procs) if c not in got and p.exitcode is not None]
            if dead:
                try:  # its last message may still be in the pipe
                    what, cid, payload = messages.get(timeout=1.0)
                except queue.Empty:
                    c = dead[0]
                    raise ConcurrencyRunError(
                        f"client process {c} ended (exit code {procs[c].exitcode}) before it "
                        f"could {doing}"
                    ) from None
            else:
                continue
        if what == "error":
            raise ConcurrencyRunError(f"client process {cid}: {payload}")
        if what == kind:
            got[cid] = payload
    return got


def _stop(procs: list[Any], *, finished: bool) -> None:
    """End every process: when the level ``finished``, let them exit (closing their stores)
    for up to :data:`STOP_GRACE_S`; then terminate, then kill, the ones still running."""
    end = time.perf_counter() + (STOP_GRACE_S if finished else 0.0)
    for p in procs:
        if p.pid is not None:
            p.join(max(0.0, end - time.perf_counter()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        if p.pid is not None:
            p.join(STOP_GRACE_S)
        if p.is_alive():
            p.kill()
            p.join(STOP_GRACE_S)


def run_level_processes(
    spec: StoreSpec,
    collection: str,
    queries: Any,
    k: int,
    plans: list[ClientPlan],
    *,
    grace_s: float,
    open_timeout_s: float,
) -> tuple[list[ClientRecord], float]:
    """Run one level with one client process per plan; ``(records, t_measure)``."""
    ctx = mp.get_context("spawn")
    messages = ctx.Queue()
    go = ctx.Event()
    start = ctx.Value("d", 0.0, lock=False)
    wait_s = open_timeout_s + plans[0].warmup_s + plans[0].duration_s + grace_s
    procs = [
        ctx.Process(
            target=_client_main,
            args=(spec, collection, queries, k, p, messages, go, start, wait_s),
            name=f"concurrency-client-{p.client}",
            daemon=True,
        )
        for p in plans
    ]
    finished = False
    try:
        for p in procs:
            p.start()
        opening = f"open a store and answer a first query within {open_timeout_s:g} s"
        _collect(messages, procs, "ready", time.perf_counter() + open_timeout_s, opening)
        start.value = time.perf_counter() + START_DELAY_S
        go.set()
        t_measure = start.value + plans[0].warmup_s
        done_by = t_measure + plans[0].duration_s + grace_s
        finishing = f"finish within {grace_s:g} s after the level's end"
        got = _collect(messages, procs, "done", done_by, finishing)
        finished = True
        return [got[p.client] for p in plans], t_measure
    finally:
        _stop(procs, finished=finished)
        messages.close()
