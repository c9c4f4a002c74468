"""The batch loop: a pool of worker threads that stays full, one retry budget.

:class:`_SearchPlan` is what the loop takes from its evaluator (the store
and the call's settings); :class:`_Context` is what one evaluation shares
with its workers (the queries, their batches, the collection size, the
checkpoint, the retry budget of :mod:`.attempts`); :func:`search_all` loads
checkpointed batches and searches the rest on daemon threads;
:func:`run_batch` searches one batch with retries and checks its answer
(:mod:`.answers`).
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.framework.evaluator.answers import (
    _Assembly,
    _IdTable,
    _order_problems,
    check_answer,
    hits_per_row,
)
from imsearch_align.framework.evaluator.attempts import NOT_RETRIED, _Attempts
from imsearch_align.framework.evaluator.checkpoint import _Checkpoint
from imsearch_align.framework.evaluator.progress import _progress
from imsearch_align.framework.evaluator.result import _describe
from imsearch_align.framework.interfaces import (
    CollectionCatalog,
    SearchResult,
    StoreUnavailableError,
    VectorStoreAdapter,
)
from imsearch_align.framework.validation import is_sparse

__all__ = ["search_all"]

log = logging.getLogger("imsearch_align.framework.evaluator")


@dataclass(frozen=True)
class _SearchPlan:
    """What the batch loop takes from its evaluator: the store and one call's settings.

    ``workers`` is the number of threads already decided (1 for a store whose
    one call uses every core); ``search_lock`` serialises ``store.search``
    for a store that is not thread-safe (None otherwise).
    """

    store: VectorStoreAdapter
    collection: str
    k: int
    batch_size: int
    workers: int
    retries: int
    retry_backoff_s: float
    max_backoff_s: float
    retry_budget: int | None
    max_consecutive_failures: int
    progress: bool
    checkpoint_dir: Path | None
    checkpoint_key: str | None
    search_lock: threading.Lock | None


@dataclass
class _Batch:
    """The outcome of one batch: a result (searched or resumed) or an error."""

    index: int
    result: SearchResult | None = None
    latency_s: float = float("nan")
    error: str | None = None
    searched: bool = False
    cancelled: bool = False
    #: Local row -> error text, for rows of an otherwise good answer.
    row_errors: dict[int, str] = field(default_factory=dict)
    n_unsorted: int = 0
    #: Local rows not in the canonical order (score desc, id asc, no-hits last): re-sorted.
    reorder: np.ndarray | None = None
    #: Hits per row, kept for a dense collection of unknown size (see ``_Context.check_rows``).
    n_hits: np.ndarray | None = None


class _Context:
    """Everything one :meth:`BenchmarkEvaluator.evaluate` call shares with its workers."""

    def __init__(
        self,
        plan: _SearchPlan,
        q: Any,
        qids: np.ndarray,
        labels: np.ndarray | None,
        cids: np.ndarray | None,
    ) -> None:
        self.q = q
        self.qids = qids
        self.labels = labels
        self.cids = cids
        self.k = plan.k
        self.collection = plan.collection
        nq = q.shape[0]
        self.spans = [(s, min(s + plan.batch_size, nq)) for s in range(0, nq, plan.batch_size)]
        self.asm = _Assembly(nq, plan.k)
        self.sparse = bool(is_sparse(q))
        self.search_wall_s = 0.0
        budget = plan.retry_budget
        if budget is None:
            budget = max(8, math.ceil(len(self.spans) / 10))
        self.attempts = _Attempts(
            plan.retries,
            budget,
            plan.max_consecutive_failures,
            plan.retry_backoff_s,
            plan.max_backoff_s,
        )
        # The collection size, read once: a dense answer must hold min(k, count) hits.
        self.count: int | None = None
        if not self.sparse and isinstance(plan.store, CollectionCatalog):
            try:
                self.count = int(plan.store.count(plan.collection))
            except StoreUnavailableError:
                raise
            except Exception as exc:  # short rows are then judged within each batch
                log.warning(
                    "could not read the size of collection %s (%s); short answers are judged "
                    "against the longest answer of their batch",
                    plan.collection,
                    _describe(exc),
                )
        self.id_table = _IdTable(cids) if cids is not None else None
        self.checkpoint: _Checkpoint | None = None
        if plan.checkpoint_dir is not None and plan.checkpoint_key is not None:
            self.checkpoint = _Checkpoint.open(
                plan.checkpoint_dir,
                plan.checkpoint_key,
                plan.k,
                plan.batch_size,
                q,
                qids,
                len(self.spans),
            )

    def hits_per_row(self, res: SearchResult) -> np.ndarray | None:
        """Hits per row, for a dense collection of unknown size (else None)."""
        return hits_per_row(res, self.k, self.sparse, self.count)

    def check_rows(self, res: SearchResult) -> tuple[dict[int, str], Any, np.ndarray | None]:
        """Row errors of one answer, its unsorted rows, hits per row (:func:`.batches.check_answer`)."""
        return check_answer(res, self.k, self.sparse, self.count, self.id_table)


def _resumed(ctx: _Context, batches: list[_Batch | None]) -> list[int]:
    """Fill ``batches`` from the checkpoint; returns the indices still to search."""
    spans = ctx.spans
    todo: list[int] = []
    for i in range(len(spans)):
        saved = ctx.checkpoint.load(i, spans[i]) if ctx.checkpoint is not None else None
        if saved is not None:
            reorder, n_unsorted = _order_problems(saved.ids[:, : ctx.k], saved.scores[:, : ctx.k])
            batches[i] = _Batch(
                i,
                saved,
                n_hits=ctx.hits_per_row(saved),
                reorder=reorder,
                n_unsorted=n_unsorted,
            )
            ctx.asm.place(spans[i], saved)
        else:
            todo.append(i)
    return todo


def search_all(plan: _SearchPlan, ctx: _Context) -> list[_Batch]:
    """Every batch of the call: loaded from the checkpoint or searched on the pool."""
    spans = ctx.spans
    batches: list[_Batch | None] = [None] * len(spans)
    todo = _resumed(ctx, batches)
    bar = _progress(len(spans), plan.progress, desc=f"search {plan.collection}")
    bar.update(len(spans) - len(todo))
    if todo:
        _run_pool(plan, ctx, todo, batches, bar)
    bar.close()
    for i in range(len(spans)):
        if batches[i] is None:
            batches[i] = _Batch(
                i, error="not searched: the store became unavailable", cancelled=True
            )
    return [b for b in batches if b is not None]


def _run_pool(plan: _SearchPlan, ctx: _Context, todo: list[int], batches: list, bar: Any) -> None:
    """Search batches ``todo`` on worker threads, filling ``batches`` as they finish."""
    work: queue.SimpleQueue[int] = queue.SimpleQueue()
    for i in todo:
        work.put(i)
    done: queue.SimpleQueue[_Batch] = queue.SimpleQueue()
    stop = ctx.attempts.stop

    def worker() -> None:
        while not stop.is_set():
            try:
                i = work.get_nowait()
            except queue.Empty:
                return
            try:
                out = run_batch(plan, ctx, i)
            except BaseException as exc:  # a bug in the checks: fail the batch, loudly
                out = _Batch(i, error=f"internal error: {_describe(exc)}")
                log.exception("batch %d of %s", i, plan.collection)
            done.put(out)

    threads = [
        threading.Thread(target=worker, daemon=True, name=f"imsearch-search-{j}")
        for j in range(min(plan.workers, len(todo)))
    ]
    t0 = time.perf_counter()
    try:
        for t in threads:
            t.start()
        remaining = len(todo)
        while remaining:
            try:
                out = done.get(timeout=0.05)
            except queue.Empty:
                if not any(t.is_alive() for t in threads) and done.empty():
                    break  # stopped: the rest is cancelled
                continue
            batches[out.index] = out
            remaining -= 1
            bar.update(1)
    except BaseException:
        stop.set()
        bar.close()
        raise
    ctx.search_wall_s = time.perf_counter() - t0


def run_batch(plan: _SearchPlan, ctx: _Context, i: int) -> _Batch:
    """Search batch ``i`` (retrying transient errors within the budget) and check its answer."""
    s, e = ctx.spans[i]
    q = ctx.q[s:e]
    att = ctx.attempts
    attempt = 0
    while True:
        if att.stop.is_set():
            return _Batch(i, error="not searched: the run was stopped", cancelled=True)
        try:
            with plan.search_lock or nullcontext():
                t = time.perf_counter()
                res = plan.store.search(plan.collection, q, plan.k)
                lat = time.perf_counter() - t
            if not isinstance(res, SearchResult):
                raise TypeError(
                    f"store.search must return a SearchResult, got {type(res).__name__}"
                )
            if res.ids.shape[0] != e - s:
                raise ValueError(f"store returned {res.ids.shape[0]} rows for {e - s} queries")
        except StoreUnavailableError as exc:
            att.note_error(_describe(exc), plan.collection)
            att.declare_unavailable(exc)
            return _Batch(i, error=_describe(exc))
        except Exception as exc:
            msg = _describe(exc)
            att.note_error(msg, plan.collection)
            att.failed(msg)
            if isinstance(exc, NOT_RETRIED) or not att.may_retry(attempt):
                return _Batch(i, error=msg)
            att.wait_backoff(attempt)
            attempt += 1
            continue
        row_errors, (reorder, n_unsorted), n_hits = ctx.check_rows(res)
        if row_errors and att.may_retry(attempt):
            # Short rows or foreign ids: another client may be rebuilding
            # the collection; asking again is cheap.
            att.note_error(next(iter(row_errors.values())), plan.collection)
            att.wait_backoff(attempt)
            attempt += 1
            continue
        att.succeeded()
        ctx.asm.place((s, e), res)
        if ctx.checkpoint is not None and not row_errors and not att.stop.is_set():
            ctx.checkpoint.save(i, res)
        return _Batch(
            i,
            res,
            lat,
            searched=True,
            row_errors=row_errors,
            n_unsorted=n_unsorted,
            n_hits=n_hits,
            reorder=reorder,
        )
