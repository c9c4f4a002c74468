"""Local CKA: the factorisation against an independent HSIC oracle, base sets, matching."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from imsearch_align.methods import LocalCKA, hungarian_match


def cka_oracle(
    Xp: np.ndarray, Yp: np.ndarray, kernel: str, sx: float = 1.0, sy: float = 1.0
) -> float:
    """Textbook CKA (Kornblith et al.): HSIC with explicit centring matrices, pairwise loops."""
    m = len(Xp)
    H = np.eye(m) - np.ones((m, m)) / m

    def gram(P, s):
        if kernel == "linear":
            return P @ P.T
        D = np.array([[np.sum((a - b) ** 2) for b in P] for a in P])
        return np.exp(-D / (2 * s * s))

    K, L = gram(Xp, sx), gram(Yp, sy)
    hsic = lambda A, B: np.trace(A @ H @ B @ H)  # noqa: E731
    return hsic(K, L) / np.sqrt(hsic(K, K) * hsic(L, L))


@pytest.mark.parametrize("kernel", ["linear", "rbf"])
def test_factorised_scores_equal_textbook_cka(kernel, correlated_pairs):
    X, Y = correlated_pairs(60, 7, 5, seed=8)
    m = LocalCKA(kernel, base_size=20, seed=1).fit(X[:40], Y[:40])
    Xb, Yb = X[:40][m.base_index_], Y[:40][m.base_index_]
    sx = getattr(m, "sigma_image_", 1.0)
    sy = getattr(m, "sigma_text_", 1.0)
    Q, T = X[40:44], Y[40:46]
    scores = m.transform_images(Q).astype(np.float64) @ m.transform_texts(T).T.astype(np.float64)
    S = m.similarity(Q, T)
    for i in range(len(Q)):
        for j in range(len(T)):
            o = cka_oracle(np.vstack([Q[i], Xb]), np.vstack([T[j], Yb]), kernel, sx, sy)
            assert S[i, j] == pytest.approx(o, abs=1e-10)
            assert scores[i, j] == pytest.approx(o, abs=1e-6)


def test_output_dims(correlated_pairs):
    X, Y = correlated_pairs(50, 7, 5)
    assert LocalCKA().fit(X, Y).output_dim_ == 5 + 2
    assert LocalCKA("rbf", base_size=12).fit(X, Y).output_dim_ == 12 + 1


def test_rbf_sigma_is_the_median_heuristic_of_the_base(correlated_pairs):
    X, Y = correlated_pairs(30, 4, 3)
    m = LocalCKA("rbf").fit(X, Y)
    d = [np.sum((X[i] - X[j]) ** 2) for i in range(30) for j in range(i + 1, 30)]
    assert m.sigma_image_ == pytest.approx(np.sqrt(np.median(d)), rel=1e-10)


def test_base_subset_is_seeded_and_none_means_all(correlated_pairs):
    X, Y = correlated_pairs(80, 6, 5)
    a = LocalCKA(base_size=30, seed=4).fit(X, Y)
    b = LocalCKA(base_size=30, seed=4).fit(X, Y)
    c = LocalCKA(base_size=30, seed=5).fit(X, Y)
    np.testing.assert_array_equal(a.base_index_, b.base_index_)
    assert len(np.unique(a.base_index_)) == 30 and not np.array_equal(a.base_index_, c.base_index_)
    np.testing.assert_array_equal(LocalCKA().fit(X, Y).base_index_, np.arange(80))


def test_scale_invariance_per_side(correlated_pairs):
    X, Y = correlated_pairs(50, 6, 5)
    m = LocalCKA().fit(X, Y)
    m2 = LocalCKA().fit(X * 1e3, Y * 1e-3)
    np.testing.assert_allclose(
        m2.transform_images(X[:4] * 1e3) @ m2.transform_texts(Y[:5] * 1e-3).T,
        m.transform_images(X[:4]) @ m.transform_texts(Y[:5]).T,
        atol=1e-6,
    )


def test_match_is_the_maximum_weight_assignment():
    rng = np.random.default_rng(0)
    S = rng.random((6, 6))
    perm = hungarian_match(S)
    rows, cols = linear_sum_assignment(-S)
    assert S[np.arange(6), perm].sum() == pytest.approx(S[rows, cols].sum())
    assert sorted(perm.tolist()) == list(range(6))
    # A diagonal-dominant matrix matches to the identity.
    np.testing.assert_array_equal(LocalCKA().match(np.eye(4) + 0.1 * S[:4, :4]), np.arange(4))
    # More queries than candidates: leftovers get -1.
    out = hungarian_match(S[:, :3])
    assert (out == -1).sum() == 3 and sorted(out[out >= 0].tolist()) == [0, 1, 2]


@pytest.mark.parametrize("b", [1, 51])
def test_base_size_out_of_range(b, correlated_pairs):
    X, Y = correlated_pairs(50, 6, 5)
    with pytest.raises(ValueError, match=rf"base_size must be None or in \[2, 50\].*got {b}"):
        LocalCKA(base_size=b).fit(X, Y)


def test_bad_kernel(correlated_pairs):
    X, Y = correlated_pairs(50, 6, 5)
    with pytest.raises(ValueError, match="kernel must be 'linear' or 'rbf', got 'poly'"):
        LocalCKA("poly").fit(X, Y)


def test_large_linear_base_is_dropped_and_transforms_are_unchanged(correlated_pairs, monkeypatch):
    import imsearch_align.methods.cka as cka_mod

    X, Y = correlated_pairs(80, 7, 5, seed=3)
    kept = LocalCKA().fit(X[:60], Y[:60])
    monkeypatch.setattr(cka_mod, "_KEEP_BASE_MAX", 59)  # 60 base pairs: above it
    dropped = LocalCKA().fit(X[:60], Y[:60])
    assert kept.base_image_ is not None and dropped.base_image_ is None
    assert dropped.base_text_ is None and dropped.output_dim_ == kept.output_dim_ == 7
    Q, T = X[60:], Y[60:]
    np.testing.assert_array_equal(dropped.transform_images(Q), kept.transform_images(Q))
    np.testing.assert_array_equal(dropped.transform_texts(T), kept.transform_texts(T))
    # the kept model's transforms still equal the literal definition
    S = kept.transform_images(Q).astype(np.float64) @ kept.transform_texts(T).T.astype(np.float64)
    np.testing.assert_allclose(S, kept.similarity(Q, T), atol=1e-6)
    with pytest.raises(ValueError, match="base_size <= 59"):
        dropped.similarity(Q, T)
    # the RBF kernel needs its base to transform: never dropped
    assert LocalCKA("rbf").fit(X[:60], Y[:60]).base_image_ is not None
