"""The tie-aware result: :class:`TieAwareResult`, expected values beside the tie-rule ones."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from imsearch_align.framework.metrics import EvaluationResult

__all__ = ["TieAwareResult"]


@dataclass(frozen=True, eq=False)
class TieAwareResult:
    """Tie-aware per-query values beside the tie-rule ones.

    Every per-query array is ``(n_queries,)``, aligned with ``query_ids``
    (every qrels query, in order of first appearance, as in
    :class:`~imsearch_align.framework.metrics.EvaluationResult`).

    Attributes:
        measures: the measure names, in the requested order.
        query_ids: every qrels query.
        values: measure -> expected value over the orders of tied documents.
        low: measure -> value with ties broken against the relevant documents.
        high: measure -> value with ties broken for them.
        tie_dependent: measure -> bool, ``high - low > DEPENDENCE_EPS``.
        truncated: measure -> bool, the run ends inside a tie group (of two
            or more returned documents) that reaches the measure's cut-off, so
            the store returned only part of it; always False when
            ``groups_closed``.
        plain: the tie-rule result (:func:`~imsearch_align.framework.metrics.evaluate`).
        tol: the tolerance used.
        groups_closed: whether the run was declared (and checked) extended
            until the tie groups reaching a cut-off closed.
    """

    measures: tuple[str, ...]
    query_ids: np.ndarray
    values: dict[str, np.ndarray]
    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    tie_dependent: dict[str, np.ndarray]
    truncated: dict[str, np.ndarray]
    plain: EvaluationResult = field(repr=False)
    tol: float = 0.0
    groups_closed: bool = False

    def _mean(self, d: dict[str, np.ndarray]) -> dict[str, float]:
        n = len(self.query_ids)
        return {m: (float(d[m].mean()) if n else float("nan")) for m in self.measures}

    def mean(self) -> dict[str, float]:
        """Mean expected value of each measure over every qrels query."""
        return self._mean(self.values)

    def low_mean(self) -> dict[str, float]:
        """Lowest mean reachable by breaking ties against the relevant documents."""
        return self._mean(self.low)

    def high_mean(self) -> dict[str, float]:
        """Highest mean reachable by breaking ties for the relevant documents."""
        return self._mean(self.high)

    @property
    def n_tie_dependent(self) -> dict[str, int]:
        """Number of queries whose value depends on the order of tied documents."""
        return {m: int(self.tie_dependent[m].sum()) for m in self.measures}

    @property
    def n_truncated(self) -> dict[str, int]:
        """Number of queries flagged ``truncated`` for each measure."""
        return {m: int(self.truncated[m].sum()) for m in self.measures}

    def summary(self) -> dict[str, dict[str, float | int]]:
        """Per measure: tie-rule, expected, low and high means and the two counts (JSON-ready)."""
        plain, mean, lo, hi = self.plain.mean(), self.mean(), self.low_mean(), self.high_mean()
        dep, trunc = self.n_tie_dependent, self.n_truncated
        return {
            m: {
                "tie_rule": plain[m],
                "expected": mean[m],
                "low": lo[m],
                "high": hi[m],
                "n_tie_dependent": dep[m],
                "n_truncated": trunc[m],
            }
            for m in self.measures
        }

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: ``query_id``, then per measure ``m`` (expected),
        ``m tie_rule``, ``m low``, ``m high``, ``m truncated``."""
        df = pd.DataFrame({"query_id": self.query_ids})
        for m in self.measures:
            df[m] = self.values[m]
            df[f"{m} tie_rule"] = self.plain.values[m]
            df[f"{m} low"] = self.low[m]
            df[f"{m} high"] = self.high[m]
            df[f"{m} truncated"] = self.truncated[m]
        return df
