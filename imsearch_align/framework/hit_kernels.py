"""Tie-rule kernels: each ranking measure over the sparse hit structure :class:`Hits`.

A kernel ``kernel(hits, k) -> (n_queries,) float64`` computes one measure
family at cutoff ``k`` on the ranking as it stands (ties already broken by
doc id). It is a segment reduction over the relevant hits, so its cost grows
with the number of relevant hits, not with ``n_queries * k``. The table in
:mod:`imsearch_align.framework.measures` names each kernel in its entry;
:mod:`imsearch_align.framework.tie_kernels` holds the expected values over
tie orders.

This module imports numpy only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

import numpy as np

__all__ = [
    "Hits",
    "Judged",
    "Kernel",
    "average_precision",
    "hit_rate",
    "ndcg",
    "precision",
    "recall",
    "reciprocal_rank",
]


# ----------------------------------------------------------------------------- hit structure


class Judged:
    """What every kernel reads of the judgements, per row (query): ``n_relevant``
    and the ideal DCG at a cut-off, computed once per ``k``. Subclasses set
    ``n_relevant``, ``_ideal_dcg`` (``k -> (n,)``) and ``_ideal = {}``."""

    n_relevant: np.ndarray

    def ideal_dcg(self, k: int) -> np.ndarray:
        """Ideal DCG@k per row (from the judgements, trec_eval)."""
        if k not in self._ideal:
            self._ideal[k] = np.asarray(self._ideal_dcg(k), dtype=np.float64)
        return self._ideal[k]

    def per_relevant(self, values: np.ndarray) -> np.ndarray:
        """``values / n_relevant``, 0 for rows without relevant judgements."""
        R = self.n_relevant
        return np.where(R > 0, values / np.where(R > 0, R, 1.0), 0.0)


class Hits(Judged):
    """The non-zero cells of a ``(n_queries, K)`` gain matrix, and what kernels share.

    ``rows`` index the queries, ``cols`` are 0-based ranks, ``gains`` the
    graded relevance (> 0), sorted by ``(row, col)``. ``n_relevant`` is the
    number of relevant judgements per query (at ``relevance_level``) and
    ``ideal_dcg(k)`` the ideal DCG@k per query from the qrels. Derived arrays
    (the binary hits, the first relevant rank, counts within ``k``) are
    computed once and shared by every kernel that needs them.
    """

    def __init__(
        self,
        rows: np.ndarray,
        cols: np.ndarray,
        gains: np.ndarray,
        *,
        n_queries: int,
        n_relevant: np.ndarray,
        ideal_dcg: Callable[[int], np.ndarray],
        relevance_level: float | None = None,
    ) -> None:
        self.rows = rows
        self.cols = cols
        self.gains = gains
        self.n_queries = int(n_queries)
        self.n_relevant = np.asarray(n_relevant, dtype=np.float64)
        self.relevance_level = relevance_level
        self._ideal_dcg = ideal_dcg
        self._ideal: dict[int, np.ndarray] = {}
        self._count: dict[int, np.ndarray] = {}

    @cached_property
    def binary(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, cols)`` of the hits that are relevant at ``relevance_level``."""
        if self.relevance_level is None:
            return self.rows, self.cols  # gains are > 0 by construction
        keep = self.gains >= self.relevance_level
        return self.rows[keep], self.cols[keep]

    @cached_property
    def _row_start(self) -> np.ndarray:
        br, _ = self.binary
        new = np.ones(len(br), dtype=bool)
        if len(br):
            new[1:] = br[1:] != br[:-1]
        return new

    @cached_property
    def rank_among_relevant(self) -> np.ndarray:
        """1-based position of each binary hit among its query's binary hits."""
        new = self._row_start
        n = len(new)
        return np.arange(n) - np.maximum.accumulate(np.where(new, np.arange(n), 0)) + 1

    @cached_property
    def first_rank(self) -> np.ndarray:
        """0-based rank of each query's first relevant hit (int64 max where none)."""
        br, bc = self.binary
        first = np.full(self.n_queries, np.iinfo(np.int64).max, dtype=np.int64)
        new = self._row_start
        first[br[new]] = bc[new]
        return first

    @cached_property
    def discounted_gains(self) -> np.ndarray:
        """``gain / log2(rank + 1)`` of every hit (1-based rank), shared by every nDCG cutoff."""
        return self.gains / np.log2(self.cols + 2.0)

    def count_within(self, k: int) -> np.ndarray:
        """Relevant hits in the top ``k`` per query (float64)."""
        if k not in self._count:
            br, bc = self.binary
            self._count[k] = np.bincount(br[bc < k], minlength=self.n_queries).astype(np.float64)
        return self._count[k]


# ----------------------------------------------------------------------------- kernels


def precision(h: Hits, k: int) -> np.ndarray:
    """P@k: relevant hits in the top ``k``, divided by ``k``."""
    return h.count_within(k) / k


def recall(h: Hits, k: int) -> np.ndarray:
    """R@k: relevant hits in the top ``k``, divided by the relevant judgements."""
    return h.per_relevant(h.count_within(k))


def hit_rate(h: Hits, k: int) -> np.ndarray:
    """HitRate@k: 1 when a relevant doc is in the top ``k``."""
    return (h.count_within(k) > 0).astype(np.float64)


def reciprocal_rank(h: Hits, k: int) -> np.ndarray:
    """RR@k: 1 / rank of the first relevant doc within ``k``, else 0."""
    first = h.first_rank
    return np.where(first < k, 1.0 / (first + 1.0), 0.0)


def average_precision(h: Hits, k: int) -> np.ndarray:
    """AP@k: P@i summed at each relevant rank ``i <= k``, divided by the relevant judgements."""
    br, bc = h.binary
    within = bc < k
    s = np.bincount(
        br[within],
        weights=h.rank_among_relevant[within] / (bc[within] + 1.0),
        minlength=h.n_queries,
    )
    return h.per_relevant(s)


def ndcg(h: Hits, k: int) -> np.ndarray:
    """nDCG@k: graded DCG@k over the ideal DCG@k from the judgements (trec_eval)."""
    # Graded gains: every positive judgement counts, whatever relevance_level.
    w = h.cols < k
    dcg = np.bincount(h.rows[w], weights=h.discounted_gains[w], minlength=h.n_queries)
    idcg = h.ideal_dcg(k)
    return np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)


#: ``kernel(hits, k) -> (n_queries,) float64``.
Kernel = Callable[[Hits, int], np.ndarray]
