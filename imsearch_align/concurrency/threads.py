"""One concurrency level in threads: every client thread searches the one in-process store.

The threads start together at an instant set once all of them run (see
:mod:`~imsearch_align.concurrency.client`). A thread cannot be killed: one
still searching ``grace_s`` after the level's end (a search that hangs) is
left behind as a daemon and the level raises :class:`ConcurrencyRunError`
naming it, so the run always returns within bounded time.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from imsearch_align.concurrency.client import (
    ClientPlan,
    ClientRecord,
    ConcurrencyRunError,
    run_client,
)

__all__ = ["START_DELAY_S", "run_level_threads"]

#: Time between launching a level's clients and their common start.
START_DELAY_S = 0.05


def run_level_threads(
    store: Any,
    collection: str,
    queries: Any,
    k: int,
    plans: list[ClientPlan],
    *,
    grace_s: float,
) -> tuple[list[ClientRecord], float]:
    """Run one level with one thread per plan; ``(records, t_measure)``."""

    def search(one: Any) -> Any:
        return store.search(collection, one, k)

    out: dict[int, ClientRecord] = {}
    crashed: dict[int, str] = {}
    go = threading.Event()
    start: list[float] = []

    def client(plan: ClientPlan) -> None:
        go.wait()
        try:
            out[plan.client] = run_client(search, queries, plan, start[0])
        except BaseException as exc:  # a bug in the loop itself: reported, never lost
            crashed[plan.client] = f"{type(exc).__name__}: {exc}"

    threads = [
        threading.Thread(target=client, args=(p,), name=f"concurrency-client-{p.client}")
        for p in plans
    ]
    for i, th in enumerate(threads):
        th.daemon = True
        try:
            th.start()
        except RuntimeError as exc:  # the OS refused a thread: say which level and why
            start.append(time.perf_counter() - 1e9)  # long over: started clients return
            go.set()
            raise ConcurrencyRunError(
                f"{len(plans)} client threads: the system refused thread {i + 1} ({exc}); "
                "this process may not start that many threads (ulimit -u, memory for their "
                "stacks): measure fewer clients, or client processes against a server"
            ) from None
    start.append(time.perf_counter() + START_DELAY_S)
    go.set()
    t_measure = start[0] + plans[0].warmup_s
    deadline = t_measure + plans[0].duration_s + grace_s
    for th in threads:
        th.join(max(0.0, deadline - time.perf_counter()))
    late = [th.name for th in threads if th.is_alive()]
    if late:
        raise ConcurrencyRunError(
            f"{len(late)} of {len(plans)} client threads ({', '.join(late)}) were still "
            f"searching {collection!r} {grace_s:g} s after the level's end (a search that "
            "hangs?); they are left running as daemon threads"
        )
    if crashed:
        c, msg = next(iter(crashed.items()))
        raise ConcurrencyRunError(f"client thread {c} failed: {msg}")
    return [out[p.client] for p in plans], t_measure
