"""Uniformity (Wang & Isola, 2020): ``log mean_{i<j} exp(-t ||u_i - u_j||^2)``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from imsearch_align.diagnostics.geometry.normalization import unit_rows
from imsearch_align.diagnostics.geometry.scan import _self_scan

__all__ = ["uniformity"]


def _log_n_pairs(n: int) -> float:
    return math.log(n) + math.log(n - 1) - math.log(2.0)


def _check_t(t: float) -> float:
    if not (isinstance(t, int | float | np.floating) and math.isfinite(t) and t > 0):
        raise ValueError(f"t must be a finite number > 0, got {t!r}")
    return float(t)


def uniformity(u: Any, *, t: float = 2.0, chunk_size: int | None = None) -> float:
    """Wang & Isola's ``L_uniform = log mean_{i<j} exp(-t ||u_i - u_j||^2)``.

    Computed as ``logsumexp - log(n(n-1)/2)`` over row chunks of the Gram
    matrix, so no ``n x n`` matrix is held (memory ``chunk x n``). Dense or
    sparse rows; at least 2. For the uniform distribution on S^(d-1) the
    population value is ``-2t + log[Gamma(d/2) t^(1-d/2) I_(d/2-1)(2t)]``
    (-3.9844 at d = 512, t = 2).
    """
    t = _check_t(t)
    uu = unit_rows(u, "u", allow_sparse=True, min_rows=2)
    lse, _ = _self_scan(uu, t=t, n_neighbors=None, chunk_size=chunk_size, progress=False)
    return float(lse - _log_n_pairs(uu.shape[0]))
