"""Spherical k-NN entropy (Kozachenko-Leonenko on the sphere; Li, Mnatsakanov
& Andrew, Entropy 13:650, 2011).

``psi(N) - psi(k) + mean_i log A_d(theta_i)`` in nats, ``theta_i`` the
geodesic angle to the k-th neighbour, found by a chunked Gram scan and
re-ranked in float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import digamma

from imsearch_align.diagnostics.geometry.cap_area import log_cap_area, log_sphere_area
from imsearch_align.diagnostics.geometry.normalization import unit_rows
from imsearch_align.diagnostics.geometry.scan import _self_scan
from imsearch_align.framework.validation import check_int

__all__ = ["EntropyResult", "spherical_knn_entropy"]

#: Extra k-NN candidates re-ranked by exact float64 distances, so a neighbour
#: that float32 dot products misorder by rounding is still found.
_EXTRA_CANDIDATES = 3


@dataclass(frozen=True)
class EntropyResult:
    """Spherical k-NN entropy of one set of unit vectors (nats).

    Attributes:
        entropy: ``psi(N) - psi(k) + mean_i log A_d(theta_i)``.
        log_sphere_area: ``log |S^(d-1)|``, the entropy of the uniform law.
        relative: ``entropy - log_sphere_area`` (<= 0 in expectation: the log
            fraction of the sphere the data occupy). Use it comparatively at
            fixed (N, k, d): concentrated data are biased upward.
        n: points used (after removing exact duplicates).
        k: neighbour order.
        d: dimension.
        n_duplicates: exact duplicate rows removed (a zero distance has no log area).
    """

    entropy: float
    log_sphere_area: float
    relative: float
    n: int
    k: int
    d: int
    n_duplicates: int


def _kth_angles(u: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, bool]:
    """Exact float64 geodesic angle from each row to its k-th nearest candidate.

    Also says whether some row has a neighbour at distance exactly 0 (a duplicate).
    """
    u64 = u.astype(np.float64, copy=False)
    out = np.empty(len(u64))
    dup = False
    step = max(1, (1 << 24) // (cand.shape[1] * u64.shape[1]))
    for a in range(0, len(u64), step):
        c = cand[a : a + step]
        diff = u64[a : a + step, None, :] - u64[c]
        chord = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        dup = dup or bool((chord == 0.0).any())
        out[a : a + step] = np.partition(chord, k - 1, axis=1)[:, k - 1]
    # theta = 2 arcsin(chord / 2) is exact where arccos(dot) loses digits.
    return 2.0 * np.arcsin(np.minimum(out / 2.0, 1.0)), dup


def spherical_knn_entropy(
    u: Any, *, k: int = 5, chunk_size: int | None = None, progress: bool = False
) -> EntropyResult:
    """Kozachenko-Leonenko entropy estimate on the sphere S^(d-1) (nats).

    ``H = psi(N) - psi(k) + (1/N) sum_i log A_d(theta_i)`` with ``theta_i`` the
    angle to the k-th nearest neighbour, ``2 arcsin(||u_i - u_j|| / 2)`` in
    float64, and ``A_d`` the cap area (:func:`log_cap_area`). Neighbours are
    found by chunked Gram products (float32 for float32 input), then the best
    ``k + 3`` candidates are re-ranked by exact float64 distances. Exact
    duplicate rows are removed first (reported). Dense input only.

    Raises:
        ValueError: fewer than ``k + 1`` (distinct) points.
    """
    k = check_int(k, "k", low=1)
    uu = unit_rows(u, "u")
    n0 = uu.shape[0]
    if n0 < k + 1:
        raise ValueError(f"u must have at least k + 1 = {k + 1} points for k = {k}, got {n0}")
    n_dup = 0
    angles, dup = _knn_angles(uu, k, chunk_size, progress)
    if dup:
        uu = np.unique(uu, axis=0)
        n_dup = n0 - uu.shape[0]
        if uu.shape[0] < k + 1:
            raise ValueError(
                f"u must have at least k + 1 = {k + 1} distinct points for k = {k}, "
                f"got {uu.shape[0]} after removing {n_dup} duplicates"
            )
        angles, _ = _knn_angles(uu, k, chunk_size, progress)
    n, d = uu.shape
    h = float(digamma(n) - digamma(k) + np.mean(log_cap_area(angles, d)))
    ls = log_sphere_area(d)
    return EntropyResult(h, ls, h - ls, n, k, d, n_dup)


def _knn_angles(
    u: np.ndarray, k: int, chunk_size: int | None, progress: bool
) -> tuple[np.ndarray, bool]:
    m = min(k + _EXTRA_CANDIDATES, u.shape[0] - 1)
    _, cand = _self_scan(u, t=None, n_neighbors=m, chunk_size=chunk_size, progress=progress)
    return _kth_angles(u, cand, k)


def _entropy_of_candidates(
    u: np.ndarray, cand: np.ndarray, k: int, chunk_size: int | None
) -> EntropyResult:
    """The entropy of ``u`` from k-NN candidates a scan already found.

    With duplicate rows, :func:`spherical_knn_entropy` removes them and rescans.
    """
    n, d = u.shape
    angles, dup = _kth_angles(u, cand, k)
    if dup:
        return spherical_knn_entropy(u, k=k, chunk_size=chunk_size)
    h = float(digamma(n) - digamma(k) + np.mean(log_cap_area(angles, d)))
    ls = log_sphere_area(d)
    return EntropyResult(h, ls, h - ls, n, k, d, 0)
