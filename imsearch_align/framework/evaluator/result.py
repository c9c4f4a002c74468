"""What one evaluation produced: :class:`BenchmarkResult`, and the two errors
that carry a partial one (:class:`NaNScoreError`, :class:`EvaluationAborted`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.interfaces import StoreUnavailableError
from imsearch_align.framework.metrics import EvaluationResult, Run, py_scalar

__all__ = ["BenchmarkResult", "EvaluationAborted", "NaNScoreError", "summary_frame"]


def _describe(exc: BaseException) -> str:
    """``Type: first line of the message``: how an error is told in logs and results."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


class NaNScoreError(ValueError):
    """A store returned a NaN score. ``partial`` holds the result, those queries failed."""

    def __init__(self, message: str, query_ids: np.ndarray, partial: BenchmarkResult | None):
        super().__init__(message)
        self.query_ids = query_ids
        self.partial = partial


class EvaluationAborted(StoreUnavailableError):
    """The store became unavailable during an evaluation; the rest was cancelled.

    Attributes:
        partial: the result over the finished batches (a :class:`BenchmarkResult`
            from :meth:`~imsearch_align.framework.evaluator.BenchmarkEvaluator.evaluate`,
            a :class:`~imsearch_align.framework.ranking.RankingResult` from
            :func:`~imsearch_align.framework.ranking.score_ranking`); the queries
            of the cancelled and failed batches are failed queries (score 0, counted).
        cause: the error that declared the store unavailable.
        n_batches_done: batches that finished (searched now or resumed).
        n_batches_cancelled: batches never searched.
    """

    def __init__(
        self,
        message: str,
        *,
        partial: Any,
        cause: BaseException | None,
        n_batches_done: int,
        n_batches_cancelled: int,
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.cause = cause
        self.n_batches_done = n_batches_done
        self.n_batches_cancelled = n_batches_cancelled


@dataclass(frozen=True, eq=False)
class BenchmarkResult:
    """What one evaluation produced.

    Attributes:
        evaluation: the per-query measure values (every qrels query).
        run: the ranked results the store returned for the queries that did not fail.
        metadata: per-query metadata columns (indexed by query id).
        timings: ``total_s``, ``search_s`` (wall time of the batches searched
            in this call), ``metrics_s``, ``queries_per_s`` (queries searched
            in this call / ``search_s``; NaN when nothing was searched),
            ``batch_p50_ms``, ``batch_p95_ms``, ``batch_p99_ms`` (searched
            batches only; NaN when none), ``n_batches``, ``n_batches_searched``,
            ``n_batches_resumed`` (loaded from checkpoints),
            ``n_batches_failed``, ``n_queries_searched``, ``n_retries``.
        errors: ``query_id -> error text`` for every failed query.
        notes: other reasons the numbers are not what they seem (rankings
            not sorted by score, relevant docs missing from the collection).
        extra: more measures added by options (e.g. ANN fidelity).
        seed: seed of the bootstrap intervals.
        n_bootstrap: number of bootstrap resamples for the intervals.
        checkpoint: the checkpoint folder used, or None.
    """

    evaluation: EvaluationResult
    run: Run
    metadata: pd.DataFrame | None = None
    timings: dict[str, float] = field(default_factory=dict)
    errors: dict[Any, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    n_bootstrap: int = 1000
    checkpoint: Path | None = None

    @property
    def measures(self) -> tuple[str, ...]:
        """Measure names, in order."""
        return self.evaluation.measures

    @property
    def failed_queries(self) -> np.ndarray:
        """Queries whose search failed (scored 0, counted)."""
        return self.evaluation.failed_queries

    @property
    def n_failed(self) -> int:
        """Number of failed queries."""
        return len(self.evaluation.failed_queries)

    @property
    def n_batches_searched(self) -> int:
        """Batches searched in this call (not loaded from checkpoints)."""
        return int(self.timings.get("n_batches_searched", 0))

    @property
    def n_batches_resumed(self) -> int:
        """Batches loaded from checkpoints."""
        return int(self.timings.get("n_batches_resumed", 0))

    @property
    def degraded(self) -> bool:
        """Whether the numbers are not the whole truth (see :meth:`degraded_reasons`)."""
        return bool(self.errors or self.notes)

    def degraded_reasons(self) -> list[str]:
        """Human-readable reasons this result is degraded; empty when it is clean.

        One line per distinct error of the failed queries (with their
        count), then the notes.
        """
        out = []
        n = len(self.evaluation.query_ids)
        if self.errors:
            counts = Counter(self.errors.values())
            for msg, c in counts.most_common(5):
                out.append(f"{c} of {n} queries failed: {msg}")
            if len(counts) > 5:
                rest = sum(c for _, c in counts.most_common()[5:])
                out.append(f"{rest} more queries failed with {len(counts) - 5} other errors")
        return out + list(self.notes)

    def mean(self) -> dict[str, float]:
        """Mean of each measure over every qrels query."""
        return self.evaluation.mean()

    @cached_property
    def intervals(self) -> dict[str, tuple[float, float]]:
        """Seeded 95% percentile-bootstrap interval of each mean (computed once, on use)."""
        return self.evaluation.confidence_intervals(n_resamples=self.n_bootstrap, seed=self.seed)

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: id, measures, missing/failed flags, error, metadata."""
        cols = self.evaluation._columns()
        qids = self.evaluation.query_ids
        cols.setdefault("failed", np.zeros(len(qids), dtype=bool))
        if self.errors:
            cols["error"] = [self.errors.get(q) for q in qids.tolist()]
        if self.metadata is not None and len(self.metadata.columns):
            idx = self.metadata.index.to_numpy()
            aligned = len(idx) == len(qids) and np.array_equal(idx, qids)
            md = self.metadata if aligned else self.metadata.reindex(qids)
            for c in md.columns:
                if c not in cols:
                    cols[c] = md[c].array  # as stored: no per-column conversion
        return pd.DataFrame(cols)

    def summary(self) -> pd.DataFrame:
        """Measure, mean, 95% CI low/high, as a DataFrame (one row a measure)."""
        return summary_frame(self.mean(), self.intervals)

    def breakdown(self, by: str | Sequence[str]) -> pd.DataFrame:
        """Means of every measure per value of metadata column(s) ``by``, with counts."""
        cols = [by] if isinstance(by, str) else list(by)
        df = self.per_query
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise KeyError(
                f"breakdown: by={missing} is not a metadata column; available: "
                f"{[c for c in df.columns if c not in self.measures]}"
            )
        g = df.groupby(cols, dropna=False)
        out = g[list(self.measures)].mean()
        out.insert(0, "n_queries", g.size())
        return out.reset_index()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: means, intervals, timings, failures, degraded reasons."""
        ci = self.intervals
        return {
            "metrics": self.mean(),
            "intervals": {m: list(v) for m, v in ci.items()},
            "timings": dict(self.timings),
            "n_queries": len(self.evaluation.query_ids),
            "n_failed": self.n_failed,
            "n_missing": len(self.evaluation.missing_queries),
            "n_ignored": len(self.evaluation.ignored_queries),
            "n_batches_searched": self.n_batches_searched,
            "n_batches_resumed": self.n_batches_resumed,
            "failed_queries": [py_scalar(q) for q in self.failed_queries[:100]],
            "degraded_reasons": self.degraded_reasons(),
            "extra": {k: v for k, v in self.extra.items() if _is_scalar(v)},
        }


def _is_scalar(v: Any) -> bool:
    return isinstance(v, int | float | str | bool | np.generic)


def summary_frame(
    means: dict[str, float], intervals: dict[str, tuple[float, float]]
) -> pd.DataFrame:
    """Measure, mean, 95% CI low/high, one row a measure: the one summary table."""
    return pd.DataFrame(
        {
            "measure": list(means),
            "mean": list(means.values()),
            "ci_low": [intervals[m][0] for m in means],
            "ci_high": [intervals[m][1] for m in means],
        }
    )
