"""One client of a concurrency level: single queries, one after another, until the level ends.

The same loop runs in a thread and in a client process. Each client walks
the level's seeded permutation of the query set from its own offset
(client ``c`` of ``n`` starts at ``c * nq // n``), cycling, so the clients
send different queries at once and together cover the set. Times are
``time.perf_counter()`` values: a system-wide monotonic clock on Linux,
macOS and Windows, so the start a parent sets is the same instant in its
client processes (all on one host; the server may be anywhere).

A level has three instants: ``t_start`` (clients begin; queries up to
``t_measure`` are warm-up, sent but not recorded), ``t_measure`` and
``t_end``. A query is measured when it starts in ``[t_measure, t_end)``;
the one in flight at ``t_end`` finishes and counts. Every measured query is
either answered (its ids, scores and latency kept) or failed (its error
kept): ``sent == answered + failed`` per client by construction. A
:class:`~imsearch_align.framework.interfaces.StoreUnavailableError` counts
as failed and ends the client (the store says retrying will not help).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imsearch_align.framework.interfaces import SearchResult, StoreUnavailableError

__all__ = ["ClientPlan", "ClientRecord", "ConcurrencyRunError", "client_plans", "run_client"]


class ConcurrencyRunError(RuntimeError):
    """A client could not run its level: it failed to open or search, died, or overran."""


@dataclass(frozen=True)
class ClientPlan:
    """What one client sends and when.

    Attributes:
        client: the client's index in its level, from 0.
        order: the seeded permutation of query positions (shared by the level).
        offset: where in ``order`` this client starts.
        warmup_s: warm-up seconds from the level's start (sent, not recorded).
        duration_s: measured seconds after the warm-up.
    """

    client: int
    order: np.ndarray
    offset: int
    warmup_s: float
    duration_s: float


@dataclass
class ClientRecord:
    """What one client measured.

    Attributes:
        client: the client's index.
        query: ``(n,)`` positions (in the query set) of the answered queries, in send order.
        ids, scores: ``(n, k)`` the answers' top-k ids and scores.
        latency_s: ``(n,)`` seconds from sending each query to its answer.
        started_s: ``(n,)`` when each answered query was sent, seconds after ``t_measure``.
        failed_query: positions of the queries whose search raised.
        errors: error text -> how many measured queries failed with it.
        warmup_sent: queries sent during the warm-up (not recorded).
        end: ``perf_counter()`` when the client's last measured query ended.
        stopped: why the client ended early (the store became unavailable), else "".
    """

    client: int
    query: np.ndarray
    ids: np.ndarray
    scores: np.ndarray
    latency_s: np.ndarray
    started_s: np.ndarray
    failed_query: np.ndarray
    errors: dict[str, int] = field(default_factory=dict)
    warmup_sent: int = 0
    end: float = 0.0
    stopped: str = ""

    @property
    def sent(self) -> int:
        """Measured queries sent: answered plus failed."""
        return len(self.query) + len(self.failed_query)


def client_plans(
    n_queries: int, clients: int, *, seed: int, warmup_s: float, duration_s: float
) -> list[ClientPlan]:
    """One plan per client of a level: a seeded permutation, each client its own offset."""
    order = np.random.default_rng(seed).permutation(n_queries)
    return [
        ClientPlan(c, order, (c * n_queries) // clients, warmup_s, duration_s)
        for c in range(clients)
    ]


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def run_client(
    search: Callable[[Any], SearchResult], queries: Any, plan: ClientPlan, t_start: float
) -> ClientRecord:
    """Send single queries with ``search(one_row)`` from ``t_start`` until the plan's end.

    Waits until ``t_start`` first (clients start together), then warms up
    and measures as the module docstring says.
    """
    t_measure = t_start + plan.warmup_s
    t_end = t_measure + plan.duration_s
    order, n = plan.order, len(plan.order)
    pos = plan.offset
    delay = t_start - time.perf_counter()
    if delay > 0:
        time.sleep(delay)
    warm = 0
    while time.perf_counter() < t_measure:
        i = int(order[pos % n])
        pos += 1
        warm += 1
        try:
            search(queries[i : i + 1])
        except Exception:  # warm-up failures are not measured; the measured ones show
            pass
    answered: list[int] = []
    ids: list[np.ndarray] = []
    scores: list[np.ndarray] = []
    latency: list[float] = []
    started: list[float] = []
    failed: list[int] = []
    errors: Counter[str] = Counter()
    stopped = ""
    end = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        if t0 >= t_end:
            break
        i = int(order[pos % n])
        pos += 1
        try:
            res = search(queries[i : i + 1])
        except StoreUnavailableError as exc:
            end = time.perf_counter()
            failed.append(i)
            errors[_error_text(exc)] += 1
            stopped = _error_text(exc)
            break
        except Exception as exc:
            end = time.perf_counter()
            failed.append(i)
            errors[_error_text(exc)] += 1
            continue
        end = time.perf_counter()
        answered.append(i)
        ids.append(res.ids[0])
        scores.append(res.scores[0])
        latency.append(end - t0)
        started.append(t0 - t_measure)
    k = len(ids[0]) if ids else 0
    return ClientRecord(
        client=plan.client,
        query=np.asarray(answered, dtype=np.int64),
        ids=np.stack(ids) if ids else np.zeros((0, k), np.int64),
        scores=np.stack(scores) if scores else np.zeros((0, k), np.float32),
        latency_s=np.asarray(latency, dtype=np.float64),
        started_s=np.asarray(started, dtype=np.float64),
        failed_query=np.asarray(failed, dtype=np.int64),
        errors=dict(errors),
        warmup_sent=warm,
        end=end,
        stopped=stopped,
    )
