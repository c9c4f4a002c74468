"""One call's checked batches assembled into one :class:`Run`: a :class:`Searched`.

:func:`assemble` turns the finished batches of the pool (:mod:`.pool`) into
a :class:`Searched`: the run of the queries that did not fail, plus plain
bookkeeping (errors, timings, the store-unavailable verdict). A dense
collection of unknown size fails its short rows here
(:func:`fail_short_rows`). No measure is computed here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.framework.evaluator.answers import _NAN_ERROR, _SHORT_UNKNOWN, _sort_in_place
from imsearch_align.framework.evaluator.pool import _Batch, _Context
from imsearch_align.framework.evaluator.result import EvaluationAborted, _describe
from imsearch_align.framework.metrics import Run, py_scalar

__all__ = ["Searched"]

log = logging.getLogger("imsearch_align.framework.evaluator")


@dataclass(eq=False)
class Searched:
    """What one call's search produced, before any measure: the run of the
    queries that did not fail, in canonical order, and plain bookkeeping.

    Attributes:
        run: the queries that did not fail (their ids in search order).
        extra_scores: the store's extra score columns, rows as ``run``'s.
        errors: ``query_id -> error text`` for every failed query.
        n_unsorted: rankings whose scores were not in descending order.
        nan_queries: queries with a NaN score (among ``errors``).
        collection_ids: the collection's ids, when the caller gave them.
        timings: ``search_s``, ``queries_per_s``, batch counts and latency
            percentiles, ``n_retries`` (see :class:`BenchmarkResult`).
        checkpoint: the checkpoint folder used, or None.
        unavailable: the error that declared the store unavailable, or None.
    """

    run: Run
    extra_scores: dict[str, np.ndarray]
    errors: dict[Any, str]
    n_unsorted: int
    nan_queries: np.ndarray
    collection: str
    collection_ids: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)
    checkpoint: Path | None = None
    unavailable: BaseException | None = None
    n_batches_done: int = 0
    n_batches_cancelled: int = 0
    n_failed_attempts: int = 0
    n_distinct_errors: int = 0

    def log_failures(self, n_failed: int, n_queries: int) -> None:
        """One warning for the call's failed attempts, if any."""
        if self.n_failed_attempts:
            log.warning(
                "search of %s: %d failed attempt(s) with %d distinct error(s); %d of %d queries "
                "failed",
                self.collection,
                self.n_failed_attempts,
                self.n_distinct_errors,
                n_failed,
                n_queries,
            )

    def aborted(self, partial: Any, n_failed: int, n_scored: int) -> EvaluationAborted | None:
        """The error to raise when the store became unavailable (else None),
        carrying ``partial``, the result over the finished batches."""
        if self.unavailable is None:
            return None
        n = int(self.timings.get("n_batches", 0))
        err = EvaluationAborted(
            f"store unavailable while searching collection {self.collection!r}: "
            f"{_describe(self.unavailable)}; {self.n_batches_done} of {n} batches finished"
            + (" (checkpointed)" if self.checkpoint is not None else "")
            + f", {self.n_batches_cancelled} cancelled; {n_failed} of {n_scored}"
            " queries failed; the partial result is in err.partial",
            partial=partial,
            cause=self.unavailable,
            n_batches_done=self.n_batches_done,
            n_batches_cancelled=self.n_batches_cancelled,
        )
        err.__cause__ = self.unavailable if isinstance(self.unavailable, BaseException) else None
        return err


def fail_short_rows(ctx: _Context, batches: list[_Batch]) -> None:
    """Dense collection of unknown size: a row with fewer hits than the longest answer fails.

    Its batch's checkpoint is discarded, so a resume searches it again.
    """
    counts = [b.n_hits for b in batches if b.result is not None and b.n_hits is not None]
    if not counts:
        return
    most = max(int(c.max()) for c in counts if len(c))
    for b in batches:
        if b.result is None or b.n_hits is None:
            continue
        short = np.flatnonzero(b.n_hits < most)
        for r in short.tolist():
            b.row_errors.setdefault(r, _SHORT_UNKNOWN)
        if len(short) and ctx.checkpoint is not None:
            ctx.checkpoint.discard(b.index)


def _failures(ctx: _Context, batches: list[_Batch]) -> tuple[np.ndarray, dict[Any, str], int]:
    """Rows that did not fail, ``query_id -> error`` of those that did, unsorted rankings."""
    qids = ctx.qids
    ok = np.ones(len(qids), dtype=bool)
    errors: dict[Any, str] = {}
    n_unsorted = 0
    fail_short_rows(ctx, batches)
    for b in batches:
        s, e = ctx.spans[b.index]
        if b.result is None:
            ok[s:e] = False
            msg = b.error or "unknown error"
            errors.update(dict.fromkeys(qids[s:e].tolist(), msg))
            continue
        n_unsorted += b.n_unsorted
        for r, msg in b.row_errors.items():
            ok[s + r] = False
            errors[py_scalar(qids[s + r])] = msg
    return ok, errors, n_unsorted


def assemble(ctx: _Context, batches: list[_Batch]) -> Searched:
    """The finished batches as one run (failed rows left out) and their bookkeeping."""
    qids = ctx.qids
    nq = len(qids)
    ok, errors, n_unsorted = _failures(ctx, batches)
    nan_mask = np.zeros(nq, dtype=bool)
    for b in batches:
        for r, msg in b.row_errors.items():
            if msg == _NAN_ERROR:
                nan_mask[ctx.spans[b.index][0] + r] = True
    nan_queries = qids[np.flatnonzero(nan_mask)]
    all_ok = bool(ok.all())
    rows = None if all_ok else np.flatnonzero(ok)
    res = ctx.asm.result(rows)
    run_qids = qids if all_ok else qids[rows]
    # Rows the workers found out of canonical order are re-sorted here (with
    # their extra score columns); the rest are handed over as they are.
    fix = [
        ctx.spans[b.index][0] + b.reorder
        for b in batches
        if b.result is not None and b.reorder is not None and len(b.reorder)
    ]
    if fix:
        glob = np.concatenate(fix)
        loc = glob if rows is None else np.searchsorted(rows, glob)
        keep = loc < len(run_qids)
        if rows is not None:
            keep &= rows[np.minimum(loc, len(rows) - 1)] == glob
        _sort_in_place(res, loc[keep])
    run = Run.from_arrays(run_qids, res.ids, res.scores, assume_sorted=True, copy=False)
    att = ctx.attempts
    return Searched(
        run=run,
        extra_scores=res.extra_scores,
        errors=errors,
        n_unsorted=n_unsorted,
        nan_queries=nan_queries,
        collection=ctx.collection,
        collection_ids=ctx.cids,
        timings=_timings(ctx, batches),
        checkpoint=ctx.checkpoint.root if ctx.checkpoint is not None else None,
        unavailable=att.unavailable,
        n_batches_done=sum(b.result is not None for b in batches),
        n_batches_cancelled=sum(b.cancelled for b in batches),
        n_failed_attempts=sum(att.seen.values()),
        n_distinct_errors=len(att.seen),
    )


def _timings(ctx: _Context, batches: list[_Batch]) -> dict[str, float]:
    """Speed of the batches searched in this call (none resumed), and batch counts."""
    searched = [b for b in batches if b.searched and b.result is not None]
    lat = np.array([b.latency_s for b in searched]) * 1e3
    n_searched_q = sum(ctx.spans[b.index][1] - ctx.spans[b.index][0] for b in searched)
    search_s = ctx.search_wall_s
    nan = float("nan")
    return {
        "search_s": search_s,
        "queries_per_s": n_searched_q / search_s if n_searched_q and search_s > 0 else nan,
        "n_batches": float(len(ctx.spans)),
        "n_batches_searched": float(sum(b.searched for b in batches)),
        "n_batches_resumed": float(sum(not b.searched and b.result is not None for b in batches)),
        "n_batches_failed": float(sum(b.result is None for b in batches)),
        "n_queries_searched": float(n_searched_q),
        "n_retries": float(ctx.attempts.n_retries),
        "batch_p50_ms": float(np.percentile(lat, 50)) if lat.size else nan,
        "batch_p95_ms": float(np.percentile(lat, 95)) if lat.size else nan,
        "batch_p99_ms": float(np.percentile(lat, 99)) if lat.size else nan,
    }
