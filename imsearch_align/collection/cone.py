"""Cone-shaped, clustered unit vectors: data shaped like a real encoder's output (a shared
direction, clusters), for tests and benchmarks that must not measure on zero-mean
Gaussians."""

from __future__ import annotations

import numpy as np

__all__ = ["cone_vectors"]


def cone_vectors(
    n: int, dim: int, *, seed: int = 0, clusters: int = 64, cone: float = 1.0, spread: float = 0.8
) -> np.ndarray:
    """``(n, dim)`` float32 unit rows around a common direction, in ``clusters`` clusters.

    Each cluster centre is ``cone * m + g`` (``m`` the shared unit
    direction, ``g`` Gaussian with ``1/sqrt(dim)`` per coordinate), each row
    its centre plus Gaussian noise of norm about ``spread``, normalised: mean
    pairwise cosine about 0.3-0.5 with the defaults (a real encoder's cone).
    """
    rng = np.random.default_rng(seed)
    m = rng.standard_normal(dim)
    m /= np.linalg.norm(m)
    centres = cone * m + rng.standard_normal((clusters, dim)) / np.sqrt(dim)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 65536):
        b = min(n, s + 65536) - s
        x = centres[rng.integers(0, clusters, b)]
        x += rng.standard_normal((b, dim)) * (spread / np.sqrt(dim))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s : s + b] = x
    return out
