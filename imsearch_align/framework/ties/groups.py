"""Tie groups: which neighbours of a ranked row float32 rounding cannot order.

In each ranked row, neighbours whose scores differ by at most
``tol * max(1, |s_i|, |s_{i+1}|)`` are linked, and a tie group is a maximal
chain of links (single linkage on the sorted scores). The grouping is a
function of the set of scores alone: it does not depend on a scan direction
or on which member comes first, which an "anchor on the group's first
score" rule would (the anchor is itself a rounded score, so the boundary
would move with it). A chain may span more than ``tol``; each link is a
pair that float32 rounding cannot order. The comparison is made in float64
on the stored scores (the difference of two float32 scores is exact there),
so it is deterministic. No-hit cells (doc ``-1``) are not documents and are
never in a group. The default tolerance is :func:`default_tolerance`.

This room holds the tolerance, the link rule and its scans
(:func:`tie_groups`, the rows whose groups the run's own scores cannot
decide: :func:`ambiguous_rows`, the rows whose group at a cut-off may go on
past the last column: :func:`open_tie_groups`).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from imsearch_align.framework.metrics import Run, py_scalar

__all__ = [
    "EPS_F32",
    "TOL_LAMBDA",
    "ambiguous_rows",
    "default_tolerance",
    "open_tie_groups",
    "tie_groups",
]

#: float32 machine epsilon, ``2**-23`` (twice the unit roundoff ``u``).
EPS_F32 = float(np.finfo(np.float32).eps)
#: Confidence parameter of the probabilistic rounding bound behind :func:`default_tolerance`.
TOL_LAMBDA = 7.0
#: Rows per block in the tie scan, so the temporaries of a block stay in cache.
_BLOCK_CELLS = 4096 * 64


# ----------------------------------------------------------------------------- tolerance


def default_tolerance(dim: int, *, worst_case: bool = False) -> float:
    """Default tie tolerance for inner products of unit vectors of dimension ``dim``.

    Two stores computing the same exact score ``s = x . y`` of float32 unit
    vectors differ only by their rounding errors (summation order, blocking,
    FMA). With ``u = EPS_F32 / 2`` the unit roundoff:

    * **default, probabilistic** (Higham and Mary, "A new approach to
      probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5),
      2019, Thm 3.1): if the rounding errors are independent with mean zero,
      a computed inner product, in any summation order, satisfies
      ``|fl(x . y) - s| <= g sum|x_i y_i| <= g`` (Cauchy-Schwarz) with
      ``g = exp(lambda sqrt(d) u + d u^2 / (1 - u)) - 1 ~ lambda sqrt(d) u``,
      with probability at least ``1 - 2 d exp(-lambda^2 (1 - u)^2 / 2)``.
      ``lambda = 7`` makes that ``>= 1 - 5e-8`` for ``d <= 1024``
      (``1 - 2e-7`` at ``d = 4096``). Two stores then differ by at most
      ``2 g``; ``2 u`` more covers rounding a score accumulated in higher
      precision to float32. So ``tol = 2 g + 2 u ~ EPS_F32 (7 sqrt(d) + 1)``:
      1.9e-5 at ``d = 512``.
    * ``worst_case=True``, deterministic, any order (Higham, *Accuracy and
      Stability of Numerical Algorithms*, 2nd ed., 2002, §3.1):
      ``|fl(x . y) - s| <= gamma_d = d u / (1 - d u)``, so
      ``tol = 2 gamma_d + 2 u = EPS_F32 (d / (1 - d u) + 1)``, about
      ``d * EPS_F32`` (6.1e-5 at ``d = 512``).

    Measured (numpy/OpenBLAS sgemm, FAISS ``IndexFlatIP`` and sequential
    float32 sums against float64, 2M scores of unit vectors, d = 64..1024):
    the largest difference between two implementations was
    ``0.5 EPS_F32 sqrt(d)``, 14 times below the default. The worst-case
    bound, ``sqrt(d)/7`` times wider again, would group scores that no real
    store confuses. Scores are compared relative to ``max(1, |s|)``; for
    vectors that are not unit, scale ``tol`` by ``max ||x|| ||y||``. For
    sparse vectors pass the largest number of non-zeros as ``dim``.
    """
    if isinstance(dim, bool) or not isinstance(dim, Integral) or dim < 1:
        raise ValueError(
            f"dim must be a positive integer (the vector dimension), got {py_scalar(dim)!r}"
        )
    d = int(dim)
    u = EPS_F32 / 2
    if worst_case:
        if d * u >= 1:
            raise ValueError(f"dim must be < {int(1 / u)} for the worst-case bound, got {d}")
        return EPS_F32 * (d / (1 - d * u) + 1)
    g = math.expm1(TOL_LAMBDA * math.sqrt(d) * u + d * u * u / (1 - u))
    return 2 * g + 2 * u


def _resolve_tolerance(tol: float | None, dim: int | None, where: str) -> float:
    """``tol`` checked, or the default for ``dim``; one of the two is required."""
    if tol is None:
        if dim is None:
            raise ValueError(
                f"{where}: give tol (the tie tolerance) or dim (the vector dimension, "
                "for default_tolerance(dim)), got neither"
            )
        return default_tolerance(dim)
    if isinstance(tol, bool) or not isinstance(tol, Real):
        raise TypeError(f"{where}: tol must be a real number, got {type(tol).__name__}")
    t = float(tol)
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"{where}: tol must be a finite number >= 0, got {t}")
    return t


# ----------------------------------------------------------------------------- tie groups


def _is_link(a: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
    """The tie rule for neighbours ``a >= b``, in float64 (exact and deterministic)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # -inf - -inf in no-hit padding: NaN, no link
        return (a - b) <= tol * np.maximum(np.maximum(a, -b), 1.0)


def _link_matrix(scores: np.ndarray, empty: np.ndarray, tol: float) -> np.ndarray:
    """``(n, K-1)`` bool: columns ``i`` and ``i+1`` are both hits and tie within ``tol``."""
    n, K = scores.shape
    if K < 2:
        return np.zeros((n, max(K - 1, 0)), dtype=bool)
    link = _is_link(scores[:, :-1], scores[:, 1:], tol)
    link &= ~empty[:, 1:]
    link &= ~empty[:, :-1]
    return link


def _sparse_links(scores: np.ndarray, empty: np.ndarray, tol: float):
    """Every tie link of a run as ``(row, i)`` pairs in row-major order (``i`` joins ``i, i+1``).

    Most rows hold no tie, so a prefilter scans the scores once, in
    cache-sized row blocks, in their own dtype: for float32 scores with the
    threshold widened by ``1e-6`` (relative), far more than the float32
    rounding of the gap and of ``tol * scale`` (``2**-24`` each), so it never
    misses a link. The exact float64 rule then decides each candidate pair.
    """
    n, K = scores.shape
    none = np.zeros(0, dtype=np.int64)
    if K < 2 or n == 0:
        return none, none
    if scores.dtype == np.float32:
        thr = tol * (1 + 1e-6)
    else:
        thr = tol
        if scores.dtype != np.float64:
            scores = scores.astype(np.float64)
    step = max(1, _BLOCK_CELLS // K)
    rows, cols = [], []
    for b0 in range(0, n, step):
        blk = scores[b0 : b0 + step]
        a, b = blk[:, :-1], blk[:, 1:]
        with np.errstate(invalid="ignore"):
            gap = a - b
            cand = gap <= thr
            # The relative term matters only where |s| > 1. Rows are sorted:
            # column 0 holds each row's largest score, the last column its
            # smallest unless the row is padded (then look at every hit).
            last = blk[:, -1]
            big = blk[:, 0].max() > 1 or (
                last.min() < -1
                and (
                    np.isfinite(last).all()
                    or np.min(blk, where=np.isfinite(blk), initial=np.inf) < -1
                )
            )
            if big:
                cand |= gap <= thr * np.maximum(np.maximum(a, -b), 1.0)
        # Rows first: nonzero over a whole block costs more than the scan.
        hit_rows = np.flatnonzero(cand.any(axis=1))
        if 4 * len(hit_rows) > len(blk):  # most rows tie: no gather
            r, c = np.nonzero(cand)
            rows.append(r + b0)
            cols.append(c)
        elif len(hit_rows):
            r, c = np.nonzero(cand[hit_rows])
            rows.append(hit_rows[r] + b0)
            cols.append(c)
    if not rows:
        return none, none
    r, c = np.concatenate(rows), np.concatenate(cols)
    keep = _is_link(scores[r, c], scores[r, c + 1], tol) & ~empty[r, c] & ~empty[r, c + 1]
    return r[keep].astype(np.int64), c[keep].astype(np.int64)


def ambiguous_rows(run: Run, tol: float, error: float) -> np.ndarray:
    """Rows whose tie groups the run's own scores cannot decide: sorted row indices.

    A store's score is the true inner product give or take its rounding, and
    two stores' gaps between the same two documents differ by up to
    ``error`` (relative, as ``tol``; :func:`default_tolerance` of the
    dimension bounds it). A gap ``<= tol - error`` is then a link in every
    store and one ``> tol + error`` in none, so only rows holding a gap in
    between (or, with ``tol < error``, any gap ``<= tol + error``) may group
    differently from store to store: those need their scores recomputed in
    float64 before grouping. No-hit cells never link.
    """
    if not isinstance(run, Run):
        raise TypeError(f"ambiguous_rows: run must be a Run, got {type(run).__name__}")
    t = _resolve_tolerance(tol, None, "ambiguous_rows")
    e = _resolve_tolerance(error, None, "ambiguous_rows (error)")
    r, c = _sparse_links(run.scores, run.empty, t + e)
    if not len(r):
        return r
    a = run.scores[r, c].astype(np.float64)
    b = run.scores[r, c + 1].astype(np.float64)
    sure = (a - b) <= (t - e) * np.maximum(np.maximum(a, -b), 1.0)
    return np.unique(r[~sure])


def _link_runs(lr: np.ndarray, li: np.ndarray):
    """Tie groups of two or more members from row-major links: ``(row, a, b)``, columns ``[a, b)``."""
    if not len(lr):
        return lr, li, li
    new = np.ones(len(lr), dtype=bool)
    new[1:] = (lr[1:] != lr[:-1]) | (li[1:] != li[:-1] + 1)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(lr)) - 1
    return lr[starts], li[starts], li[ends] + 2


def tie_groups(run: Run, *, tol: float | None = None, dim: int | None = None) -> np.ndarray:
    """Tie group of every cell of ``run``: ``(nq, k)`` int64, the group's first column.

    Cells ``i`` and ``i+1`` of a row are in the same group when both are hits
    and ``s_i - s_{i+1} <= tol * max(1, |s_i|, |s_{i+1}|)`` (computed in
    float64); groups are the maximal chains of such links. No-hit cells get
    ``-1``. ``tol`` defaults to :func:`default_tolerance` of ``dim``.
    """
    if not isinstance(run, Run):
        raise TypeError(f"tie_groups: run must be a Run, got {type(run).__name__}")
    t = _resolve_tolerance(tol, dim, "tie_groups")
    link = _link_matrix(run.scores, run.empty, t)
    n, K = run.doc_ids.shape
    start = np.ones((n, K), dtype=bool)
    start[:, 1:] = ~link
    col = np.broadcast_to(np.arange(K, dtype=np.int64), (n, K))
    label = np.maximum.accumulate(np.where(start, col, 0), axis=1) if K else col.copy()
    return np.where(run.empty, -1, label)


def _open_rows(run: Run, tol: float, k: int) -> np.ndarray:
    """See :func:`open_tie_groups`."""
    n, K = run.doc_ids.shape
    if K == 0:
        return np.zeros(n, dtype=bool)
    full = ~run.empty[:, -1]
    if K < k:
        return full
    tail = run.scores[:, k - 1 :]
    if tail.shape[1] < 2:
        return full
    link = _link_matrix(tail, run.empty[:, k - 1 :], tol)
    return full & link.all(axis=1)


def open_tie_groups(
    run: Run, k: int, *, tol: float | None = None, dim: int | None = None
) -> np.ndarray:
    """``(nq,)`` bool: rows whose ranking may continue the tie group at rank ``k``.

    True where the row is full (its last column is a hit) and the tie group
    holding rank ``k`` reaches the last column, or the row has fewer than
    ``k`` columns: the store may hold more members of that group than it
    returned, and a deeper search is needed to close it. An exact store can
    be asked for ``k + 1`` or more results, then again deeper for the rows
    this marks, until none is marked; such a run may be scored with
    ``groups_closed=True``. A row ending in a singleton at column ``k`` is
    open too: only the next score can show it is not tied.
    """
    if not isinstance(run, Run):
        raise TypeError(f"open_tie_groups: run must be a Run, got {type(run).__name__}")
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"open_tie_groups: k must be a positive integer, got {py_scalar(k)!r}")
    return _open_rows(run, _resolve_tolerance(tol, dim, "open_tie_groups"), int(k))
