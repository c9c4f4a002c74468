"""Procrustes and the ridge linear map against reference implementations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import orthogonal_procrustes
from sklearn.decomposition import PCA
from sklearn.linear_model import Ridge

from imsearch_align.methods import LinearMap, Procrustes


def cos(A, B):
    return (A / np.linalg.norm(A, axis=1, keepdims=True)) @ (
        B / np.linalg.norm(B, axis=1, keepdims=True)
    ).T


def test_linear_map_equals_sklearn_ridge_then_cosine(correlated_pairs):
    X, Y = correlated_pairs(150, 10, 7)
    m = LinearMap(alpha=2.0).fit(X, Y)
    pred = Ridge(alpha=2.0).fit(X, Y).predict(X[:8])
    np.testing.assert_allclose(m.similarity(X[:8], Y[:9]), cos(pred, Y[:9]), atol=1e-10)


def test_procrustes_equals_scipy_orthogonal_procrustes_after_sklearn_pca(correlated_pairs):
    X, Y = correlated_pairs(150, 10, 7)
    m = Procrustes(dim=5).fit(X, Y)
    px, py = PCA(5).fit(X), PCA(5).fit(Y)
    A, B = px.transform(X), py.transform(Y)
    R, _ = orthogonal_procrustes(A, B)
    expected = cos(px.transform(X[:8]) @ R, py.transform(Y[:9]))
    # PCA signs may differ from sklearn's, but R absorbs them: the cosine is the same.
    np.testing.assert_allclose(m.similarity(X[:8], Y[:9]), expected, atol=1e-10)
    np.testing.assert_allclose(m.rotation_ @ m.rotation_.T, np.eye(5), atol=1e-12)


def test_procrustes_default_dim(correlated_pairs):
    X, Y = correlated_pairs(150, 10, 7)
    assert Procrustes().fit(X, Y).output_dim_ == 7
    assert Procrustes().fit(X[:5], Y[:5]).output_dim_ == 4  # centred rank N - 1


@pytest.mark.parametrize("dim", [0, 8])
def test_procrustes_dim_out_of_range(dim, correlated_pairs):
    X, Y = correlated_pairs(150, 10, 7)
    with pytest.raises(ValueError, match=rf"dim must be None or in \[1, 7\].*got {dim}"):
        Procrustes(dim=dim).fit(X, Y)


def test_linear_bad_alpha(correlated_pairs):
    X, Y = correlated_pairs(50, 6, 5)
    with pytest.raises(ValueError, match="alpha must be a finite float >= 0"):
        LinearMap(alpha=-1.0).fit(X, Y)
