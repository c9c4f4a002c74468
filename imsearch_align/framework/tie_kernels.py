"""Tie kernels: each ranking measure's expected value over the orders of tied documents.

A tie kernel ``tie_kernel(groups, k) -> (n,) float64`` is the closed form of
one measure family at cutoff ``k``, averaged over every order of the members
of each tie group, each order equally likely and groups independent
(McSherry and Najork, "Computing Information Retrieval Performance Measures
Efficiently in the Presence of Tied Scores", ECIR 2008). It reads the rows
as :class:`TieGroups`: per group its row, first rank ``a_G`` (0-based), size
``m_G``, relevant docs ``r_G`` and gain sum ``S_G``. With ``p_i = r_G/m_G``
the chance that rank ``i`` (1-based, in group ``G``) holds a relevant doc
and ``e_i = S_G/m_G`` its expected gain:

- ``P@k = sum_{i<=k} p_i / k`` and ``R@k = sum_{i<=k} p_i / R``;
- ``nDCG@k = sum_{i<=k} e_i / log2(i+1) / IDCG@k``;
- ``AP@k = (1/R) sum_{i<=k} [p_i (1 + B_G) + (i - a_G - 1) q_G] / i`` with
  ``B_G`` the relevant docs in groups ranked above ``G`` and
  ``q_G = r_G (r_G - 1) / (m_G (m_G - 1))`` the chance that two given ranks
  of ``G`` both hold relevant docs (linearity of expectation on
  ``sum_i rel_i sum_{j<=i} rel_j / i``);
- ``RR@k = sum_j P(J = j) / (a_G + 1 + j)`` over the first group ``G``
  holding a relevant doc, ``J`` the offset of its first relevant doc:
  ``P(J = j) = C(m-1-j, r-1) / C(m, r)``, for ranks ``a_G + 1 + j <= k``;
- ``HitRate@k`` is 1 when a group wholly inside the top k holds a relevant
  doc, else ``1 - C(m-r, c) / C(m, c)`` for the group cut by ``k`` (``c``
  of its ranks inside); ``Accuracy`` is ``HitRate@1``.

With every group a singleton each kernel gives the tie-rule value (to
rounding). The table in :mod:`imsearch_align.framework.measures` names each
measure's tie kernel in its entry; :mod:`imsearch_align.framework.ties`
builds the groups and calls them.

This module imports numpy only.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import NamedTuple

import numpy as np

from imsearch_align.framework.hit_kernels import Judged

__all__ = [
    "TieGroups",
    "TieKernel",
    "TieRanks",
    "expected_average_precision",
    "expected_hit_rate",
    "expected_ndcg",
    "expected_precision",
    "expected_recall",
    "expected_reciprocal_rank",
]


class TieRanks(NamedTuple):
    """Every rank of every group, in group order: what the rank-wise kernels share.

    Attributes:
        group: the group index of each rank.
        offset: its 0-based offset inside the group.
        pos: its 0-based rank in the row.
        row: its row.
    """

    group: np.ndarray
    offset: np.ndarray
    pos: np.ndarray
    row: np.ndarray


class TieGroups(Judged):
    """The tie groups of ``n`` rankings, as the tie kernels read them.

    Each group has a ``row`` (0..n-1), a first rank ``a`` (0-based), a size
    ``m`` (int64), ``r`` relevant docs (binary relevance, float64) and a gain
    sum ``s`` (graded, float64); the groups are kept sorted by ``(row, a)``.
    A relevant singleton is a group of one; groups without a positive gain
    add nothing and may be left out. ``n_relevant`` is the number of relevant
    judgements per row and ``ideal_dcg(k)`` the ideal DCG@k per row, asked for
    only by a kernel that needs it. What several kernels share (every tied
    rank, the relevant docs above each group) is computed once, on first use.
    """

    def __init__(
        self,
        n: int,
        row: np.ndarray,
        a: np.ndarray,
        m: np.ndarray,
        r: np.ndarray,
        s: np.ndarray,
        *,
        n_relevant: np.ndarray,
        ideal_dcg: Callable[[int], np.ndarray],
    ) -> None:
        key = row * (int(a.max(initial=0)) + 1) + a
        if len(key) > 1 and np.any(key[1:] < key[:-1]):
            order = np.argsort(key, kind="stable")
            row, a, m, r, s = (x[order] for x in (row, a, m, r, s))
        self.n = int(n)
        self.row, self.a, self.m, self.r, self.s = row, a, m, r, s
        self.n_relevant = n_relevant
        self._ideal_dcg = ideal_dcg
        self._ideal: dict[int, np.ndarray] = {}

    @cached_property
    def mf(self) -> np.ndarray:
        """Group sizes as float64."""
        return self.m.astype(np.float64)

    @cached_property
    def row_start(self) -> np.ndarray:
        """True at each row's first group."""
        new_row = np.ones(len(self.row), dtype=bool)
        new_row[1:] = self.row[1:] != self.row[:-1]
        return new_row

    @cached_property
    def above(self) -> np.ndarray:
        """Relevant docs in the groups ranked above each group, same row (``B_G``)."""
        new_row = self.row_start
        seg = np.cumsum(new_row) - 1
        excl = np.cumsum(self.r) - self.r
        return excl - excl[new_row][seg]

    @cached_property
    def pair_chance(self) -> np.ndarray:
        """``q_G``: the chance that two given ranks of a group both hold relevant docs."""
        g_m, g_r, g_mf = self.m, self.r, self.mf
        return np.where(g_m > 1, g_r * (g_r - 1) / np.maximum(g_mf * (g_mf - 1), 1.0), 0.0)

    @cached_property
    def ranks(self) -> TieRanks:
        """Every rank of every group (``sum(m)`` entries)."""
        g_m = self.m
        cg = np.repeat(np.arange(len(self.row)), g_m)
        off = np.arange(len(cg)) - np.repeat(np.cumsum(g_m) - g_m, g_m)
        return TieRanks(cg, off, self.a[cg] + off, self.row[cg])

    def inside(self, k: int) -> np.ndarray:
        """Ranks of each group inside the top ``k`` (``c``, 0 to ``m``)."""
        return np.clip(k - self.a, 0, self.m)


#: ``tie_kernel(groups, k) -> (n,) float64``.
TieKernel = Callable[[TieGroups, int], np.ndarray]


def _expected_count(g: TieGroups, k: int) -> np.ndarray:
    """Expected relevant docs in the top ``k`` per row."""
    return np.bincount(g.row, weights=g.r * g.inside(k) / g.mf, minlength=g.n)


def expected_precision(g: TieGroups, k: int) -> np.ndarray:
    """Expected P@k over the tie orders."""
    return _expected_count(g, k) / k


def expected_recall(g: TieGroups, k: int) -> np.ndarray:
    """Expected R@k over the tie orders."""
    return g.per_relevant(_expected_count(g, k))


def _no_hit_chance(m: np.ndarray, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``C(m-r, c) / C(m, c)``: no relevant doc among ``c`` draws from ``m`` holding ``r``.

    Product form over ``min(r, c)`` factors (``C(m-r,c)/C(m,c) = C(m-c,r)/C(m,r)``).
    """
    m, r, c = (np.asarray(x, dtype=np.int64) for x in (m, r, c))
    use_r = r <= c
    n_f = np.where(use_r, r, c)
    other = np.where(use_r, c, r)  # factor t: (m - other - t) / (m - t)
    out = np.ones(len(m))
    for t in range(int(n_f.max()) if len(m) else 0):
        act = t < n_f
        out[act] *= (m[act] - other[act] - t) / (m[act] - t)
    return np.where(r + c > m, 0.0, out)


def expected_hit_rate(g: TieGroups, k: int) -> np.ndarray:
    """Expected HitRate@k: the chance that a relevant doc lands in the top ``k``."""
    v = np.zeros(g.n)
    c = g.inside(k)
    rel = np.flatnonzero((g.r > 0) & (c > 0))
    if len(rel):
        prob = 1.0 - _no_hit_chance(g.m[rel], g.r[rel].astype(np.int64), c[rel])
        # Rows are sorted: the largest chance per row (groups wholly
        # inside give 1; one group at most is cut by k).
        rr = g.row[rel]
        seg = np.flatnonzero(np.append(True, rr[1:] != rr[:-1]))
        v[rr[seg]] = np.maximum.reduceat(prob, seg)
    return v


def expected_reciprocal_rank(g: TieGroups, k: int) -> np.ndarray:
    """Expected RR@k, from the first group of each row holding a relevant doc."""
    v = np.zeros(g.n)
    rel = np.flatnonzero(g.r > 0)
    if not len(rel):
        return v
    first = np.ones(len(rel), dtype=bool)
    first[1:] = g.row[rel][1:] != g.row[rel][:-1]
    gf = rel[first]
    a, m = g.a[gf], g.mf[gf]
    r = g.r[gf]
    jmax = np.minimum(g.m[gf] - r.astype(np.int64), k - 1 - a)
    prob = r / m  # P(first relevant at offset 0)
    acc = np.where(jmax >= 0, prob / (a + 1.0), 0.0)
    t = np.flatnonzero(jmax > 0)  # groups whose first relevant may come later
    if len(t):
        pt, at, mt, rt, jt = prob[t], a[t], m[t], r[t], jmax[t]
        add = np.zeros(len(t))
        for j in range(int(jt.max())):
            pt = pt * (mt - j - rt) / np.maximum(mt - 1 - j, 1.0)
            add += np.where(j + 1 <= jt, pt / (at + j + 2.0), 0.0)
        acc[t] += add
    v[g.row[gf]] = acc
    return v


def expected_ndcg(g: TieGroups, k: int) -> np.ndarray:
    """Expected nDCG@k: each tied rank holds the group's mean gain."""
    cg, _, pos, crow = g.ranks
    w = pos < k
    ideal = g.ideal_dcg(k)
    e = (g.s / g.mf)[cg[w]]
    dcg = np.bincount(crow[w], weights=e / np.log2(pos[w] + 2.0), minlength=g.n)
    return np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 0.0)


def expected_average_precision(g: TieGroups, k: int) -> np.ndarray:
    """Expected AP@k (linearity of expectation over pairs of relevant ranks)."""
    cg, off, pos, crow = g.ranks
    w = pos < k
    gw = cg[w]
    t = (g.r[gw] / g.mf[gw]) * (1.0 + g.above[gw]) + off[w] * g.pair_chance[gw]
    s = np.bincount(crow[w], weights=t / (pos[w] + 1.0), minlength=g.n)
    return g.per_relevant(s)
