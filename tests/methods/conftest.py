"""Shared fixtures for the method tests: small correlated paired data."""

from __future__ import annotations

import numpy as np
import pytest


def _correlated_pairs(n: int, dx: int, dy: int, *, d_latent: int = 6, seed: int = 0):
    """``(X, Y)`` float64 sharing a linear latent plus noise (well conditioned)."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, d_latent))
    X = z @ rng.standard_normal((d_latent, dx)) + 0.5 * rng.standard_normal((n, dx))
    Y = z @ rng.standard_normal((d_latent, dy)) + 0.5 * rng.standard_normal((n, dy))
    return X, Y


@pytest.fixture(scope="session")
def correlated_pairs():
    """The generator ``correlated_pairs(n, dx, dy, *, d_latent=6, seed=0) -> (X, Y)``."""
    return _correlated_pairs


@pytest.fixture(scope="module")
def pairs():
    """Support ``(X, Y)`` and held-out queries ``(Xq, Yq)``; d_image=12, d_text=9."""
    X, Y = _correlated_pairs(260, 12, 9, seed=0)
    return X[:200], Y[:200], X[200:230], Y[200:]
