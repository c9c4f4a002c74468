"""Expected values: the candidate rows' tie groups fed to each measure entry's tie kernel.

A row is described by its relevant singletons and the tie groups holding
relevant docs (:class:`~imsearch_align.framework.tie_kernels.TieGroups`);
each measure's closed form is its entry's ``tie_kernel`` in
:mod:`imsearch_align.framework.measures`, so this room knows no measure.

**Bounds**. Per query, ``low`` and ``high`` are the values with ties broken
against and for the relevant documents (each group ordered by gain
ascending, resp. descending). Both orders are extreme for every measure at
once (an adjacent swap that moves a higher gain up never lowers any of
them), so ``low``/``high`` are the smallest and largest values any store's
tie order can give, and each is attained. They are the tie-rule values of
the two arrangements, scored by the same kernels with every group a
singleton.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from imsearch_align.framework.measures import TieGroups, compute_tie_aware

__all__ = ["TiedHits", "bounds", "expected_values"]

Values = dict[str, np.ndarray]


@dataclass(frozen=True)
class TiedHits:
    """The hits of ``n`` candidate rows and the tie groups (of two or more) among them.

    Attributes:
        n: the number of rows.
        row, col, gain: every hit (a positive judgement), sorted by (row, col).
        relevant: float64 binary relevance of each hit (at ``relevance_level``).
        g_row, g_a, g_b: the tie groups, sorted by (row, a): columns ``[a, b)``.
        group: the group of each hit (valid where ``in_group``).
        in_group: whether the hit is in a tie group.
    """

    n: int
    row: np.ndarray
    col: np.ndarray
    gain: np.ndarray
    relevant: np.ndarray
    g_row: np.ndarray
    g_a: np.ndarray
    g_b: np.ndarray
    group: np.ndarray
    in_group: np.ndarray

    @classmethod
    def locate(
        cls,
        n: int,
        hits: tuple[np.ndarray, np.ndarray, np.ndarray],
        groups: tuple[np.ndarray, np.ndarray, np.ndarray],
        width: int,
        relevance_level: float | None,
    ) -> TiedHits:
        """Assign each hit ``(row, col, gain)`` to its group ``(row, a, b)`` (rows < ``width`` cols)."""
        hr, hc, hg = hits
        g_row, g_a, g_b = groups
        hb = hg > 0 if relevance_level is None else (hg > 0) & (hg >= relevance_level)
        g_key = g_row * width + g_a
        h_key = hr * width + hc
        idx = np.searchsorted(g_key, h_key, side="right") - 1
        inside = idx >= 0
        inside[inside] = h_key[inside] < g_row[idx[inside]] * width + g_b[idx[inside]]
        return cls(n, hr, hc, hg, hb.astype(np.float64), g_row, g_a, g_b, idx, inside)


def _group_values(
    n: int,
    g_row: np.ndarray,
    g_a: np.ndarray,
    g_m: np.ndarray,
    g_r: np.ndarray,
    g_s: np.ndarray,
    measures: Sequence[str],
    R: np.ndarray,
    idcg: dict[int, np.ndarray] | Callable[[int], np.ndarray],
) -> Values:
    """Expected measures of ``n`` rows from their tie groups, by each entry's tie kernel.

    Each group: row, first column ``a`` (0-based), size ``m``, relevant docs
    ``r`` (binary) and gain sum ``s``; ``R`` the relevant judgements and
    ``idcg`` the ideal DCG per row (by ``k``). With every group a singleton
    this is the tie-rule value (to rounding).
    """
    ideal = idcg.__getitem__ if isinstance(idcg, dict) else idcg
    groups = TieGroups(n, g_row, g_a, g_m, g_r, g_s, n_relevant=R, ideal_dcg=ideal)
    return compute_tie_aware(groups, measures)


def expected_values(
    h: TiedHits, measures: Sequence[str], R: np.ndarray, ideal: Callable[[int], np.ndarray]
) -> Values:
    """Each measure's expected value over the orders of the tied docs, per row."""
    inside = h.in_group
    idx = h.group[inside]
    ng = len(h.g_row)
    g_m = h.g_b - h.g_a
    g_r = np.bincount(idx, weights=h.relevant[inside], minlength=ng)
    g_s = np.bincount(idx, weights=h.gain[inside], minlength=ng)
    tied = g_s > 0
    single = ~inside
    return _group_values(
        h.n,
        np.concatenate([h.row[single], h.g_row[tied]]),
        np.concatenate([h.col[single], h.g_a[tied]]),
        np.concatenate([np.ones(int(single.sum()), dtype=np.int64), g_m[tied]]),
        np.concatenate([h.relevant[single], g_r[tied]]),
        np.concatenate([h.gain[single], g_s[tied]]),
        measures,
        R,
        ideal,
    )


def bounds(
    h: TiedHits, measures: Sequence[str], R: np.ndarray, ideal: Callable[[int], np.ndarray]
) -> tuple[Values, Values]:
    """``(low, high)``: each measure with ties broken against, resp. for, the relevant docs."""
    args = (h.row, h.col, h.gain, h.group, h.in_group, h.g_a, h.g_b)
    col_lo = _arranged_hits(*args, descending=False)
    col_hi = _arranged_hits(*args, descending=True)
    n = h.n
    # Both bounds in one pass: rows n..2n-1 are the "for" arrangement.
    both = _group_values(
        2 * n,
        np.concatenate([h.row, h.row + n]),
        np.concatenate([col_lo, col_hi]),
        np.ones(2 * len(h.row), dtype=np.int64),
        np.tile(h.relevant, 2),
        np.tile(h.gain, 2),
        measures,
        np.tile(R, 2),
        lambda k: np.tile(ideal(k), 2),
    )
    return {m: v[:n] for m, v in both.items()}, {m: v[n:] for m, v in both.items()}


def _arranged_hits(
    hr: np.ndarray,
    hc: np.ndarray,
    hg: np.ndarray,
    idx: np.ndarray,
    inside: np.ndarray,
    g_a: np.ndarray,
    g_b: np.ndarray,
    descending: bool,
) -> np.ndarray:
    """Columns of the hits once each tie group is ordered by gain.

    Descending: a group's relevant docs take its first ranks, highest gain
    first; ascending: its last ranks, highest gain last.
    """
    col = hc.copy()
    w = np.flatnonzero(inside)
    if not len(w):
        return col
    gi = idx[w]
    order = np.lexsort((-hg[w] if descending else hg[w], gi))
    w, gi = w[order], gi[order]
    first = np.ones(len(w), dtype=bool)
    first[1:] = gi[1:] != gi[:-1]
    seg_start = np.flatnonzero(first)
    counts = np.diff(np.append(seg_start, len(w)))
    rank = np.arange(len(w)) - np.repeat(seg_start, counts)
    n_pos = np.repeat(counts, counts)
    col[w] = g_a[gi] + rank if descending else g_b[gi] - n_pos + rank
    return col
