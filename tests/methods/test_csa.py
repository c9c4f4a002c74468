"""CSA: canonical correlations against cca_zoo, invariances, the score's definition, errors."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.methods import CSA


def zoo_correlations(X: np.ndarray, Y: np.ndarray, r: int) -> np.ndarray:
    """Oracle: cca_zoo 4.x CCA fitted independently; in-sample |corr| per component, sorted."""
    from cca_zoo.linear import CCA as ZooCCA

    model = ZooCCA(n_components=r).fit([X, Y])
    Zx = (X - X.mean(0)) @ model.weights_[0]
    Zy = (Y - Y.mean(0)) @ model.weights_[1]
    c = [abs(np.corrcoef(Zx[:, i], Zy[:, i])[0, 1]) for i in range(r)]
    return np.sort(c)[::-1]


@pytest.fixture(scope="module")
def big_pairs(correlated_pairs):
    return correlated_pairs(1500, 30, 20, d_latent=8, seed=2)


@pytest.mark.parametrize("eps", [0.0, 1e-8])
def test_correlations_equal_cca_zoo(big_pairs, eps):
    X, Y = big_pairs
    m = CSA(12, eps=eps).fit(X, Y)
    np.testing.assert_allclose(m.canonical_correlations_, zoo_correlations(X, Y, 12), atol=1e-6)


def test_cca_zoo_backend_matches_numpy_backend(big_pairs):
    X, Y = big_pairs
    a = CSA(10).fit(X, Y)
    b = CSA(10, backend="cca_zoo").fit(X, Y)
    np.testing.assert_allclose(a.canonical_correlations_, b.canonical_correlations_, atol=1e-6)
    np.testing.assert_allclose(
        a.similarity(X[:20], Y[:30]), b.similarity(X[:20], Y[:30]), atol=1e-5
    )


def test_correlations_in_unit_interval_sorted_and_whitened(big_pairs):
    X, Y = big_pairs
    m = CSA(15).fit(X, Y)
    rho = m.canonical_correlations_
    assert rho.shape == (15,)
    assert np.all((rho >= 0) & (rho <= 1))
    assert np.all(np.diff(rho) <= 0)
    # Definition of the canonical variates: unit variance, uncorrelated, corr = rho.
    Zx, Zy = m.canonical_variates(X, Y)
    n = len(X)
    np.testing.assert_allclose(Zx.T @ Zx / (n - 1), np.eye(15), atol=1e-6)
    np.testing.assert_allclose(Zy.T @ Zy / (n - 1), np.eye(15), atol=1e-6)
    np.testing.assert_allclose(Zx.T @ Zy / (n - 1), np.diag(rho), atol=1e-6)


def test_similarity_is_weighted_corr_sim_by_hand(big_pairs):
    X, Y = big_pairs
    m = CSA(6).fit(X, Y)
    Zx, Zy = m.canonical_variates(X[:4], Y[:5])
    i, j = 2, 3
    zx, zy = Zx[i] / np.linalg.norm(Zx[i]), Zy[j] / np.linalg.norm(Zy[j])
    expected = sum(m.canonical_correlations_[k] * zx[k] * zy[k] for k in range(6))
    assert m.similarity(X[:4], Y[:5])[i, j] == pytest.approx(expected, abs=1e-12)


def test_equal_weights_is_plain_cosine_of_variates(big_pairs):
    X, Y = big_pairs
    m = CSA(6, equal_weights=True).fit(X, Y)
    np.testing.assert_array_equal(m.rho_, np.ones(6))
    Zx, Zy = m.canonical_variates(X[:4], Y[:5])
    cos = (Zx / np.linalg.norm(Zx, axis=1, keepdims=True)) @ (
        Zy / np.linalg.norm(Zy, axis=1, keepdims=True)
    ).T
    np.testing.assert_allclose(m.similarity(X[:4], Y[:5]), cos, atol=1e-12)
    assert m.canonical_correlations_[0] < 1  # the correlations are still recorded


def test_sign_flip_of_inputs_does_not_change_scores(big_pairs):
    X, Y = big_pairs
    rng = np.random.default_rng(0)
    flip_x = rng.choice([-1.0, 1.0], size=X.shape[1])
    ref = CSA(8).fit(X, Y)
    S = ref.similarity(X[:30], Y[:40])
    for Xf, Yf in ((-X, Y), (X, -Y), (X * flip_x, Y)):
        m = CSA(8).fit(Xf, Yf)
        np.testing.assert_allclose(m.similarity(Xf[:30], Yf[:40]), S, atol=1e-9)
        np.testing.assert_allclose(
            m.canonical_correlations_, ref.canonical_correlations_, atol=1e-12
        )


def test_signs_are_deterministic(big_pairs):
    X, Y = big_pairs
    m = CSA(5).fit(X, Y)
    W = m.weights_image_
    # The largest-|.| entry of each whitened direction is positive, so a refit is identical.
    np.testing.assert_array_equal(W, CSA(5).fit(X.copy(), Y.copy()).weights_image_)


def test_support_is_centred_once(big_pairs):
    X, Y = big_pairs
    m = CSA(4).fit(X + 100.0, Y)  # a shift of the inputs is absorbed by the mean exactly once
    ref = CSA(4).fit(X, Y)
    np.testing.assert_allclose(
        m.similarity(X[:5] + 100.0, Y[:6]), ref.similarity(X[:5], Y[:6]), atol=1e-8
    )


# ------------------------------------------------------------------- errors
@pytest.mark.parametrize("sim_dim", [0, 10, -1])
def test_sim_dim_out_of_range_names_the_range(sim_dim, correlated_pairs):
    X, Y = correlated_pairs(100, 12, 9)
    with pytest.raises(ValueError, match=r"sim_dim must be in \[1, 9\].*got " + str(sim_dim)):
        CSA(sim_dim).fit(X, Y)


def test_sim_dim_wrong_type(correlated_pairs):
    X, Y = correlated_pairs(100, 12, 9)
    with pytest.raises(TypeError, match="sim_dim must be an integer"):
        CSA(2.5).fit(X, Y)


def test_explicit_small_eps_with_fewer_pairs_than_dimensions_says_so(correlated_pairs):
    X, Y = correlated_pairs(20, 30, 9)
    with pytest.raises(
        ValueError,
        match=r"CCA needs more support pairs than dimensions: got 20 pairs but image_emb has "
        r"dimension 30.*eps >= 0.001.*leave eps unset.*sim_dim <= 19",
    ):
        CSA(5, eps=1e-8).fit(X, Y)
    with pytest.raises(ValueError, match="more support pairs than dimensions"):
        CSA(5, backend="cca_zoo", eps=0.1).fit(X, Y)


def test_default_adds_a_ridge_only_when_needed_and_works_with_few_pairs():
    from imsearch_align.datasets.synthetic import make_synthetic_pairs
    from imsearch_align.methods.csa import AUTO_EPS

    # 40 support pairs of 96-d images / 64-d texts (N < d), 300 test pairs.
    p = make_synthetic_pairs(340, d_latent=8, d_image=96, d_text=64, noise=0.6, seed=3)
    Xs, Ys = p.image_emb[:40], p.text_emb[:40]
    Xt, Yt = p.image_emb[40:], p.text_emb[40:]
    m = CSA().fit(Xs, Ys)
    assert m.eps_ == AUTO_EPS and m.sim_dim_ == 39
    S = m.similarity(Xt, Yt)
    r1 = np.mean(np.argmax(S.T, axis=1) == np.arange(300))  # text -> image R@1
    assert r1 > 10 / 300  # chance is 1/300
    # The default is exactly the ridge CCA it says it is.
    ref = CSA(eps=AUTO_EPS).fit(Xs, Ys)
    np.testing.assert_array_equal(m.weights_image_, ref.weights_image_)


def test_default_equals_plain_csa_when_pairs_are_plenty(big_pairs):
    X, Y = big_pairs
    m = CSA(8).fit(X, Y)
    assert m.eps_ == 1e-8
    plain = CSA(8, eps=1e-8).fit(X, Y)
    np.testing.assert_array_equal(m.weights_image_, plain.weights_image_)
    np.testing.assert_array_equal(m.canonical_correlations_, plain.canonical_correlations_)
    # ... and matches unregularised CCA to round-off.
    np.testing.assert_allclose(
        m.similarity(X[:20], Y[:30]),
        CSA(8, eps=0.0).fit(X, Y).similarity(X[:20], Y[:30]),
        atol=1e-6,
    )


def test_regularised_fit_with_few_pairs_is_allowed_and_sim_dim_bounded_by_pairs(correlated_pairs):
    X, Y = correlated_pairs(20, 30, 25)
    m = CSA(5, eps=0.1).fit(X, Y)
    assert np.all(np.isfinite(m.similarity(X, Y))) and m.eps_ == 0.1
    with pytest.raises(ValueError, match=r"sim_dim must be in \[1, 19\].*use a smaller sim_dim"):
        CSA(22, eps=0.1).fit(X, Y)


def test_singular_covariance_without_ridge_raises_and_default_regularises(correlated_pairs):
    X, Y = correlated_pairs(200, 6, 5)
    X = np.column_stack([X, X[:, 0]])  # a duplicated feature
    with pytest.raises(ValueError, match=r"image_emb: the support covariance is singular.*eps"):
        CSA(3, eps=0.0).fit(X, Y)
    assert CSA(3, eps=1e-3).fit(X, Y).canonical_correlations_[0] <= 1
    m = CSA(3).fit(X, Y)
    assert m.eps_ == 0.1 and np.all(np.isfinite(m.similarity(X[:5], Y[:5])))


@pytest.mark.parametrize(
    ("kwargs", "exc", "msg"),
    [
        ({"eps": -1.0}, ValueError, "eps must be a finite float >= 0 or None"),
        ({"eps": "x"}, TypeError, "eps must be a float"),
        ({"backend": "torch"}, ValueError, "backend must be 'numpy' or 'cca_zoo', got 'torch'"),
    ],
)
def test_bad_params(kwargs, exc, msg, correlated_pairs):
    X, Y = correlated_pairs(100, 12, 9)
    with pytest.raises(exc, match=msg):
        CSA(3, **kwargs).fit(X, Y)
