"""Every alignment method keeps the estimator contract and the one idea:
``transform_images(X) @ transform_texts(Y).T == similarity(X, Y)``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align import METHODS
from imsearch_align.methods import NotFittedError

# name -> constructor kwargs that suit the small fixture (d_image=12, d_text=9, N=200).
CASES = {
    "csa": {"sim_dim": 5},
    "asif": {"non_zeros": 20, "progress": False},
    "cka": {"base_size": 40, "seed": 3},
    "cka-rbf": {"kernel": "rbf", "base_size": 30},
    "procrustes": {"dim": 6},
    "linear": {"alpha": 0.5},
    "identity": {},
}


def make(case: str):
    return METHODS.get(case.split("-")[0])(**CASES[case])


def data_for(case: str, pairs):
    X, Y, Xq, Yq = pairs
    if case == "identity":  # needs one shared space: texts are noisy copies of the images
        rng = np.random.default_rng(1)
        return (
            X,
            X + 0.3 * rng.standard_normal(X.shape),
            Xq,
            Xq + 0.3 * rng.standard_normal(Xq.shape),
        )
    return X, Y, Xq, Yq


def dense(a):
    return a.toarray() if sp.issparse(a) else np.asarray(a)


def test_registry_has_exactly_the_six_methods():
    assert METHODS.names() == ["asif", "cka", "csa", "identity", "linear", "procrustes"]


@pytest.mark.parametrize("case", list(CASES))
def test_fit_returns_self_and_sets_state(case, pairs):
    X, Y, _, _ = data_for(case, pairs)
    m = make(case)
    assert m.fit(X, Y) is m
    assert m.n_support_ == len(X)
    assert m.n_features_image_ == X.shape[1] and m.n_features_text_ == Y.shape[1]
    assert isinstance(m.output_dim_, int) and m.output_dim_ >= 1


@pytest.mark.parametrize("case", list(CASES))
def test_release_transform_state_keeps_the_fitted_facts(case, pairs):
    """The hook a cell calls after its last transform: the fitted attributes
    stay (the result records them); a transform after it is either what it was
    before or a clear error, never a different answer."""
    X, Y, Xq, _Yq = data_for(case, pairs)
    m = make(case).fit(X, Y)
    facts = {k: v for k, v in vars(m).items() if k.endswith("_") and isinstance(v, int | float)}
    before = dense(m.transform_images(Xq))
    m.release_transform_state()
    assert {k: getattr(m, k) for k in facts} == facts
    try:
        after = m.transform_images(Xq)
    except RuntimeError as exc:
        assert "released" in str(exc)
    else:
        np.testing.assert_array_equal(dense(after), before)


@pytest.mark.parametrize("case", list(CASES))
def test_init_stores_params_only_and_get_params_round_trips(case):
    m = make(case)
    params = m.get_params()
    assert {k: v for k, v in params.items() if k in CASES[case]} == CASES[case]
    assert not [a for a in vars(m) if a.endswith("_")], "no learned state before fit"
    clone = type(m)(**params)
    assert clone.get_params() == params
    assert repr(m).startswith(type(m).__name__ + "(")


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("call", ["transform_images", "transform_texts", "similarity"])
def test_unfitted_use_raises_clear_error(case, call, pairs):
    m = make(case)
    X, Y, _, _ = pairs
    args = (X, Y) if call == "similarity" else (X,)
    with pytest.raises(
        NotFittedError, match=r"is not fitted; call fit\(image_emb, text_emb\) first"
    ):
        getattr(m, call)(*args)


@pytest.mark.parametrize("case", list(CASES))
def test_shapes_dtypes_and_transform_product_equals_similarity(case, pairs):
    X, Y, Xq, Yq = data_for(case, pairs)
    m = make(case).fit(X, Y)
    F, G = m.transform_images(Xq), m.transform_texts(Yq)
    for T, n in ((F, len(Xq)), (G, len(Yq))):
        assert T.shape == (n, m.output_dim_)
        assert T.dtype == np.float32
        assert sp.issparse(T) == m.sparse_output
        if sp.issparse(T):
            assert T.format == "csr"
    S = m.similarity(Xq, Yq)
    assert S.shape == (len(Xq), len(Yq)) and S.dtype == np.float64
    product = dense(F @ G.T).astype(np.float64)
    tol = 1e-5 if m.sparse_output else 1e-6
    np.testing.assert_allclose(product, S, atol=tol, rtol=0)
    # The score must carry information: not a constant matrix.
    assert S.std() > 1e-3


@pytest.mark.parametrize("case", list(CASES))
def test_cosine_output_says_whether_rows_are_unit_norm(case, pairs):
    """The flag the class-prompt ensemble reads: True only where every row is
    unit-norm (the inner product is a cosine); local CKA's rows are not."""
    X, Y, Xq, Yq = data_for(case, pairs)
    m = make(case).fit(X, Y)
    norms = np.concatenate(
        [np.linalg.norm(dense(T).astype(np.float64), axis=1)
         for T in (m.transform_images(Xq), m.transform_texts(Yq))]
    )  # fmt: skip
    unit = bool(np.all(np.abs(norms - 1) < 1e-5))
    assert m.cosine_output == unit, (case, norms.min(), norms.max())


@pytest.mark.parametrize("case", list(CASES))
def test_transform_does_not_modify_inputs_and_is_deterministic(case, pairs):
    X, Y, Xq, Yq = data_for(case, pairs)
    Xc = X.copy()
    a = make(case).fit(X, Y)
    b = make(case).fit(X, Y)
    np.testing.assert_array_equal(X, Xc)
    np.testing.assert_array_equal(dense(a.transform_images(Xq)), dense(b.transform_images(Xq)))
    np.testing.assert_array_equal(dense(a.transform_texts(Yq)), dense(b.transform_texts(Yq)))


# --------------------------------------------------------------- bad input
@pytest.mark.parametrize("case", list(CASES))
def test_mismatched_row_counts_raise(case, pairs):
    X, Y, _, _ = data_for(case, pairs)
    with pytest.raises(ValueError, match=r"image_emb has 200 rows, text_emb 199"):
        make(case).fit(X, Y[:199])


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_input_raises(case, bad, pairs):
    X, Y, Xq, _ = data_for(case, pairs)
    Xb = X.copy()
    Xb[7, 2] = bad
    with pytest.raises(ValueError, match=r"image_emb must be finite, got NaN or inf in row 7"):
        make(case).fit(Xb, Y)
    m = make(case).fit(X, Y)
    Qb = Xq.copy()
    Qb[3, 0] = bad
    with pytest.raises(ValueError, match=r"X must be finite, got NaN or inf in row 3"):
        m.transform_images(Qb)


@pytest.mark.parametrize("case", list(CASES))
def test_transform_dimension_mismatch_raises(case, pairs):
    X, Y, Xq, Yq = data_for(case, pairs)
    m = make(case).fit(X, Y)
    with pytest.raises(
        ValueError, match=rf"X has dimension 5, the method was fitted on {X.shape[1]}"
    ):
        m.transform_images(Xq[:, :5])
    with pytest.raises(
        ValueError, match=rf"Y has dimension 4, the method was fitted on {Y.shape[1]}"
    ):
        m.transform_texts(Yq[:, :4])
    with pytest.raises(ValueError, match=r"Y has dimension 4"):
        m.similarity(Xq, Yq[:, :4])


def test_identity_with_unequal_dims_raises(pairs):
    X, Y, _, _ = pairs
    with pytest.raises(ValueError, match=r"equal dims.*image_emb has dimension 12, text_emb 9"):
        METHODS.get("identity")().fit(X, Y)


def test_identity_is_plain_cosine(correlated_pairs):
    X, Y = correlated_pairs(50, 8, 8, seed=4)
    m = METHODS.get("identity")().fit(X, Y)
    i, j = 3, 11
    expected = X[i] @ Y[j] / (np.linalg.norm(X[i]) * np.linalg.norm(Y[j]))
    assert m.similarity(X, Y)[i, j] == pytest.approx(expected, abs=1e-12)


def test_zero_query_row_scores_zero_not_nan(pairs):
    X, Y, _, Yq = pairs
    m = METHODS.get("linear")().fit(X, Y)
    G = m.transform_texts(np.vstack([np.zeros((1, 9)), Yq[:2]]))
    assert np.all(np.isfinite(G)) and np.all(G[0] == 0)
