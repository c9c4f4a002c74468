"""The tie-rule result: :class:`EvaluationResult` and the seeded bootstrap of its means."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.metrics.ids import _is_member

__all__ = ["EvaluationResult", "bootstrap_ci"]


@dataclass(frozen=True, eq=False)
class EvaluationResult:
    """Per-query scores of a set of measures.

    Attributes:
        measures: the measure names, in the requested order.
        query_ids: every qrels query, in order of first appearance.
        values: measure -> ``(n_queries,)`` float64 per-query values.
        missing_queries: qrels queries absent from the run (scored 0, counted).
        ignored_queries: run queries absent from the qrels (not scored).
        failed_queries: queries whose search failed (scored 0, counted).
    """

    measures: tuple[str, ...]
    query_ids: np.ndarray
    values: dict[str, np.ndarray]
    missing_queries: np.ndarray
    ignored_queries: np.ndarray
    failed_queries: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))

    def mean(self) -> dict[str, float]:
        """Mean of each measure over every qrels query."""
        n = len(self.query_ids)
        return {m: (float(self.values[m].mean()) if n else float("nan")) for m in self.measures}

    def _columns(self) -> dict[str, Any]:
        """The per-query columns, for one DataFrame constructor call."""
        qids = self.query_ids
        cols: dict[str, Any] = {
            # Object ids stay object: no conversion of every id to an arrow string.
            "query_id": pd.Series(qids, dtype=object, copy=False) if qids.dtype == object else qids
        }
        cols.update({m: self.values[m] for m in self.measures})
        cols["missing"] = _is_member(qids, self.missing_queries)
        if len(self.failed_queries):
            cols["failed"] = _is_member(qids, self.failed_queries)
        return cols

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: ``query_id`` and one column per measure."""
        return pd.DataFrame(self._columns())

    def confidence_intervals(
        self, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
    ) -> dict[str, tuple[float, float]]:
        """Seeded percentile bootstrap interval of each mean (queries resampled)."""
        mat = np.column_stack([self.values[m] for m in self.measures]) if self.measures else None
        if mat is None or len(mat) == 0:
            return {m: (float("nan"), float("nan")) for m in self.measures}
        lo, hi = bootstrap_ci(mat, n_resamples=n_resamples, level=level, seed=seed)
        return {m: (float(lo[i]), float(hi[i])) for i, m in enumerate(self.measures)}


def bootstrap_ci(
    values: np.ndarray, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the column means of ``values`` ``(n, m)``.

    Resamples rows with replacement ``n_resamples`` times with a seeded
    generator; returns ``(low, high)`` arrays of length ``m``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    n = v.shape[0]
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, v.shape[1]))
    # A resample's mean is (multiplicity counts) @ values / n: one bincount
    # and one matrix product per chunk instead of gathering (B, n, m) values.
    chunk = max(1, 1_000_000 // max(n, 1))  # ~24 MB of temporaries per chunk
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.int64)
        idx += (np.arange(b, dtype=np.int64) * n)[:, None]
        counts = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)
        means[start : start + b] = (counts @ v) / n
    alpha = (1 - level) / 2
    return np.quantile(means, alpha, axis=0), np.quantile(means, 1 - alpha, axis=0)
