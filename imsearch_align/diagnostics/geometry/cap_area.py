"""Areas on the unit sphere S^(d-1): the whole sphere and a spherical cap, in log space.

The cap area is what the k-NN entropy integrates; it stays finite where
``log(scipy.special.betainc(...))`` underflows (log-gamma plus a
continued-fraction log incomplete beta).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.special import betaln

from imsearch_align.framework.validation import check_int

__all__ = ["log_cap_area", "log_sphere_area"]


def log_sphere_area(d: int) -> float:
    """``log |S^(d-1)|``, the log surface area of the unit sphere in R^d: ``log(2 pi^(d/2) / Gamma(d/2))``."""
    d = check_int(d, "d", low=1)
    return math.log(2.0) + 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d)


_TINY = 1e-300


def _log_betacf(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """log of the Numerical Recipes ``betacf`` continued fraction (modified Lentz), vectorised."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < _TINY, _TINY, d)
    d = 1.0 / d
    h = d.copy()
    active = np.ones(x.shape, bool)
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        h = np.where(active, h * d * c, h)
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        delta = d * c
        h = np.where(active, h * delta, h)
        active &= np.abs(delta - 1.0) > 1e-16
        if not active.any():
            return np.log(h)
    raise RuntimeError(f"betacf did not converge for a={a}, b={b}")  # pragma: no cover


def _log_betainc(a: float, b: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``log I_x(a, b)`` with ``y = 1 - x`` passed separately (no cancellation).

    Direct series where the continued fraction converges fast
    (``x < (a+1)/(a+b+2)``), else ``log1p(-I_y(b, a))``.
    """
    out = np.empty_like(x)
    lbeta = betaln(a, b)
    with np.errstate(divide="ignore"):
        direct = x < (a + 1.0) / (a + b + 2.0)
        zero = x <= 0.0
        one = y <= 0.0
        sel = direct & ~zero & ~one
        if sel.any():
            xs, ys = x[sel], y[sel]
            out[sel] = a * np.log(xs) + b * np.log(ys) - lbeta - math.log(a) + _log_betacf(a, b, xs)
        sel = ~direct & ~zero & ~one
        if sel.any():
            xs, ys = x[sel], y[sel]
            log_comp = b * np.log(ys) + a * np.log(xs) - lbeta - math.log(b) + _log_betacf(b, a, ys)
            out[sel] = np.log1p(-np.exp(log_comp))
        out[zero] = -np.inf
        out[one & ~zero] = 0.0
    return out


def log_cap_area(theta: Any, d: int) -> np.ndarray:
    """log area of the spherical cap of geodesic radius ``theta`` on S^(d-1) in R^d.

    ``A_d(theta) = |S^(d-2)| int_0^theta sin^(d-2) s ds``
    ``= |S^(d-1)| / 2 * I_{sin^2 theta}((d-1)/2, 1/2)`` for ``theta <= pi/2`` and
    ``|S^(d-1)| - A_d(pi - theta)`` above. Everything stays in log space
    (log-gamma plus a continued-fraction log incomplete beta), so it is finite
    where ``log(scipy.special.betainc(...))`` underflows to -inf (d = 512,
    ``theta < 0.24``). ``theta = 0`` gives -inf, ``theta = pi`` ``log |S^(d-1)|``.

    Args:
        theta: angle(s) in ``[0, pi]`` (radians), any shape.
        d: ambient dimension, at least 2.
    """
    d = check_int(d, "d", low=2)
    th = np.asarray(theta, dtype=np.float64)
    if th.size and (not np.all(np.isfinite(th)) or th.min() < 0 or th.max() > math.pi):
        raise ValueError(
            f"theta must be in [0, pi], got values in [{np.nanmin(th)}, {np.nanmax(th)}]"
        )
    flat = th.ravel()
    a, b = 0.5 * (d - 1), 0.5
    log_s = log_sphere_area(d)
    small = flat <= 0.5 * math.pi
    ref = np.where(small, flat, math.pi - flat)
    # sin^2 and cos^2 computed separately: 1 - sin^2 near pi/2 would cancel.
    x, y = np.sin(ref) ** 2, np.cos(ref) ** 2
    log_half = log_s - math.log(2.0) + _log_betainc(a, b, x, y)
    out = np.where(small, log_half, 0.0)
    big = ~small
    if big.any():
        with np.errstate(divide="ignore"):
            out[big] = log_s + np.log1p(-np.exp(log_half[big] - log_s))
    return out.reshape(th.shape)
