""":func:`run_concurrent`: queries/s and latency of a built index at 1, 2, 4, 8 and 16 clients.

VectorDBBench's concurrent-search case: at each level, ``n`` clients each
send single queries, one after another, for a fixed duration; the level's
queries/s is what they answered together over its wall time, its latency
percentiles those of every answer. Here the answers themselves are kept
too, so the task's quality is scored on the very answers that were timed
(:func:`~imsearch_align.concurrency.quality.quality`), and the saturation
point (the level beyond which queries/s stops growing) is found with the
report's definition.

Every limit is checked before the first level runs
(:mod:`~imsearch_align.concurrency.limits`); every argument is checked
with an error naming it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.concurrency.client import client_plans
from imsearch_align.concurrency.limits import (
    MODES,
    check_levels,
    process_limit,
    refuse_above,
    thread_limit,
)
from imsearch_align.concurrency.processes import run_level_processes
from imsearch_align.concurrency.result import (
    ConcurrencyResult,
    LevelResult,
    level_result,
    saturation,
)
from imsearch_align.concurrency.spec import StoreSpec
from imsearch_align.concurrency.threads import run_level_threads
from imsearch_align.framework.interfaces import VectorStoreAdapter
from imsearch_align.framework.validation import check_float, check_int, is_sparse

__all__ = ["DEFAULT_LEVELS", "run_concurrent"]

log = logging.getLogger(__name__)

#: VectorDBBench-style levels: 1, 2, 4, 8 and 16 concurrent clients.
DEFAULT_LEVELS = (1, 2, 4, 8, 16)

StoreSource = Any  # a store, a StoreSpec, or a zero-argument callable returning a store


def _positive(value: Any, name: str) -> float:
    v = check_float(value, name, low=0.0)
    if v <= 0:
        raise ValueError(f"{name} must be > 0 seconds, got {value!r}")
    return v


def _check_queries(queries: Any, query_ids: Sequence[Any]) -> tuple[Any, np.ndarray]:
    """``(queries as CSR or a 2-D ndarray, query ids as an array)``, checked."""
    if is_sparse(queries):
        queries = queries.tocsr() if queries.format != "csr" else queries
    elif not (isinstance(queries, np.ndarray) and queries.ndim == 2):
        raise TypeError(
            "queries must be a 2-D float ndarray (nq, d) or a scipy CSR matrix, got "
            f"{type(queries).__name__} of shape {getattr(queries, 'shape', None)}"
        )
    nq = int(queries.shape[0])
    if nq == 0:
        raise ValueError("queries is empty; expected at least one query row")
    qids = np.asarray(list(query_ids))
    if qids.dtype.kind not in "iu":
        qids = np.asarray(list(query_ids), dtype=object)
    if qids.ndim != 1 or len(qids) != nq:
        raise ValueError(f"query_ids has {qids.size} entries, queries has {nq} rows")
    dup = pd.Series(qids).duplicated()
    if dup.any():
        raise ValueError(f"query_ids: {qids[int(np.flatnonzero(dup)[0])]!r} appears twice")
    return queries, qids


def _open_for_threads(source: StoreSource) -> tuple[Any, bool]:
    """``(store, opened_here)``: the store the client threads share."""
    if isinstance(source, StoreSpec):
        return source.open(), True
    if isinstance(source, VectorStoreAdapter):
        return source, False
    if callable(source):
        return source(), True
    raise TypeError(
        "run_concurrent: expected a store, a StoreSpec or a callable returning a store, got "
        f"{type(source).__name__}"
    )


@dataclass(frozen=True)
class _Settings:
    """The checked arguments of one :func:`run_concurrent` call."""

    collection: str
    queries: Any
    query_ids: np.ndarray
    k: int
    levels: tuple[int, ...]
    seed: int
    warmup_s: float
    duration_s: float
    grace_s: float
    open_timeout_s: float


def _levels(
    run_level: Callable[[list], tuple[list, float]], st: _Settings, mode: str
) -> list[LevelResult]:
    """Run every level with ``run_level(plans) -> (records, t_measure)``, ascending."""
    out = []
    nq = len(st.query_ids)
    for c in st.levels:
        plans = client_plans(nq, c, seed=st.seed, warmup_s=st.warmup_s, duration_s=st.duration_s)
        records, t_measure = run_level(plans)
        lv = level_result(c, mode, st.query_ids, records, t_measure, st.duration_s)
        log.info(
            "concurrency %d (%s): %d sent, %d answered, %d failed, %.1f queries/s, p50 %.2f ms",
            c,
            mode,
            lv.sent,
            lv.answered,
            lv.failed,
            lv.queries_per_s,
            lv.latency_ms.get("p50", float("nan")),
        )
        out.append(lv)
    return out


def _in_threads(source: StoreSource, st: _Settings) -> list[LevelResult]:
    """Every level in threads sharing one store (opened here and closed when given a spec)."""
    store, opened = _open_for_threads(source)
    try:
        refuse_above(st.levels, thread_limit(store), mode="threads", what=type(store).__name__)
        store.search(st.collection, st.queries[0:1], st.k)  # the store's own error, up front

        def threads(plans: list) -> tuple[list, float]:
            return run_level_threads(
                store, st.collection, st.queries, st.k, plans, grace_s=st.grace_s
            )

        return _levels(threads, st, "threads")
    finally:
        if opened:
            store.close()


def _in_processes(spec: Any, st: _Settings) -> list[LevelResult]:
    """Every level in client processes, each opening its own store from ``spec``."""
    if not isinstance(spec, StoreSpec):
        raise TypeError(
            "mode='processes' needs a StoreSpec (store name and arguments) so each client "
            "process opens its own store, e.g. StoreSpec('milvus', {'uri': "
            f"'http://127.0.0.1:19530'}}); got {type(spec).__name__}"
        )
    refuse_above(st.levels, process_limit(spec), mode="processes", what=f"store {spec.name!r}")

    def processes(plans: list) -> tuple[list, float]:
        return run_level_processes(
            spec,
            st.collection,
            st.queries,
            st.k,
            plans,
            grace_s=st.grace_s,
            open_timeout_s=st.open_timeout_s,
        )

    return _levels(processes, st, "processes")


def run_concurrent(
    store_factory_or_store: StoreSource,
    collection: str,
    queries: Any,
    query_ids: Sequence[Any],
    k: int,
    *,
    levels: Sequence[int] = DEFAULT_LEVELS,
    duration_s: float,
    mode: str = "threads",
    warmup_s: float = 0.0,
    seed: int = 0,
    grace_s: float = 30.0,
    open_timeout_s: float = 120.0,
) -> ConcurrencyResult:
    """Measure a built collection under 1, 2, 4... concurrent clients sending single queries.

    Args:
        store_factory_or_store: ``mode="threads"``: the store the client
            threads share (a store, or a :class:`StoreSpec` / zero-argument
            callable opened once and closed at the end). ``mode="processes"``:
            a :class:`StoreSpec`; each client process opens its own store.
        collection: the built collection to search (search-time parameters
            already set, or in the spec's arguments).
        queries: ``(nq, d)`` dense float32 or CSR; each client sends one row at a time.
        query_ids: ``nq`` distinct ids (the qrels' query ids), for scoring.
        k: top-k of every search.
        levels: concurrent clients per level (distinct, >= 1; run ascending).
        duration_s: measured seconds per level.
        mode: ``"threads"`` (in-process stores) or ``"processes"`` (a server).
        warmup_s: seconds each level's clients search before measuring.
        seed: seeds the permutation of the query set the clients walk.
        grace_s: how long after a level's end a client may still finish
            its last query before the level is abandoned as hung.
        open_timeout_s: ``mode="processes"``: how long a client process
            may take to start, open its store and answer a first query.

    Returns:
        :class:`~imsearch_align.concurrency.result.ConcurrencyResult`.

    Raises:
        ConcurrencyLimitError: a level above what the store's client allows
            in this mode (the level, the limit and why), checked before any level runs.
        ConcurrencyRunError: a client could not open, crashed or overran.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {list(MODES)}, got {mode!r}")
    if not isinstance(collection, str) or not collection:
        raise TypeError(f"collection must be a non-empty name, got {collection!r}")
    queries, qids = _check_queries(queries, query_ids)
    st = _Settings(
        collection=collection,
        queries=queries,
        query_ids=qids,
        k=check_int(k, "k", low=1),
        levels=check_levels(levels),
        seed=check_int(seed, "seed", low=0),
        warmup_s=check_float(warmup_s, "warmup_s", low=0.0),
        duration_s=_positive(duration_s, "duration_s"),
        grace_s=_positive(grace_s, "grace_s"),
        open_timeout_s=_positive(open_timeout_s, "open_timeout_s"),
    )
    if mode == "threads":
        results = _in_threads(store_factory_or_store, st)
    else:
        results = _in_processes(store_factory_or_store, st)
    curve = [(r.concurrency, r.queries_per_s) for r in results if r.answered]
    return ConcurrencyResult(
        levels=tuple(results),
        collection=collection,
        k=st.k,
        mode=mode,
        duration_s=st.duration_s,
        warmup_s=st.warmup_s,
        seed=st.seed,
        saturation=saturation(curve) if len(curve) > 1 else None,
    )
