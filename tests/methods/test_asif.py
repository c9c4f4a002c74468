"""ASIF: top-k against brute force, tie rule, near-ties, blocking, the definition, errors."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.methods import ASIF
from imsearch_align.methods.asif import plan_rows

#: float32 unit roundoff
U32 = 2.0**-24


def weight_rtol(exponent: float, dim: int) -> float:
    """Relative tolerance of an ASIF weight computed from float32 cosines by different BLAS calls.

    A float32 dot product of unit vectors is off by at most about ``dim * U32``;
    ``c ** p`` multiplies a relative error by ``p``, the normalisation at most doubles it.
    """
    return 2.0 * exponent * dim * U32


@pytest.fixture(scope="module")
def fitted(correlated_pairs):
    X, Y = correlated_pairs(400, 16, 12, seed=5)
    return ASIF(25, exponent=3.0, progress=False).fit(X[:300], Y[:300]), X[300:], Y[300:]


@pytest.fixture(scope="module")
def support(correlated_pairs):
    X, Y = correlated_pairs(400, 16, 12, seed=5)
    return X[:300], Y[:300]


def brute_force_topk(Q: np.ndarray, anchors: np.ndarray, k: int):
    """Oracle: float64 cosines, full stable sort (ties -> lower anchor index)."""
    Qn = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    An = anchors / np.linalg.norm(anchors, axis=1, keepdims=True)
    C = Qn @ An.T
    order = np.argsort(-C, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(C, order, axis=1), order


def test_top_anchors_equal_brute_force(fitted):
    m, Xq, Yq = fitted
    for modality, Q, A in (("image", Xq, m.anchors_image_), ("text", Yq, m.anchors_text_)):
        vals, ids = m.top_anchors(Q, modality)
        bvals, bids = brute_force_topk(Q, A.astype(np.float64), 25)
        np.testing.assert_array_equal(ids, bids)
        np.testing.assert_allclose(vals, bvals, atol=1e-6)  # float32 cosines


def test_transform_matches_hand_computed_definition(fitted):
    m, Xq, _ = fitted
    R = m.transform_images(Xq[:3]).toarray()
    vals, ids = brute_force_topk(Xq[:3], m.anchors_image_.astype(np.float64), 25)
    for i in range(3):
        r = np.zeros(300)
        r[ids[i]] = np.maximum(vals[i], 0) ** 3.0
        np.testing.assert_allclose(R[i], r / np.linalg.norm(r), atol=1e-7)
        assert np.count_nonzero(R[i]) <= 25
    csr = m.transform_images(Xq)
    assert all(np.all(np.diff(csr.indices[a:b]) > 0) for a, b in zip(csr.indptr, csr.indptr[1:]))


def two_hot(n: int, d: int, rng) -> np.ndarray:
    M = np.zeros((n, d))
    for i in range(n):
        M[i, rng.choice(d, 2, replace=False)] = 1.0
    return M


def test_ties_broken_by_ascending_anchor_index():
    # Two-hot rows: cosines are exactly 0, 0.5 or 1, so ties are everywhere and exact.
    rng = np.random.default_rng(0)
    A = two_hot(200, 8, rng)
    Q = two_hot(15, 8, rng)
    for budget in (2.0, 1e-9):
        m = ASIF(30, max_memory_gb=budget, progress=False).fit(A, A)
        _, ids = m.top_anchors(Q)
        np.testing.assert_array_equal(ids, brute_force_topk(Q, A, 30)[1])


def assert_same_transform(a, b, exponent: float, dim: int) -> None:
    """Same anchors per row (exactly), weights equal to the float32 tolerance of the cosines."""
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_allclose(a.data, b.data, rtol=weight_rtol(exponent, dim), atol=0)


def test_tiny_memory_budget_forces_one_row_blocks_and_gives_the_same_output(fitted, support):
    m, Xq, Yq = fitted
    tiny = ASIF(25, exponent=3.0, max_memory_gb=1e-9, progress=False).fit(*support)
    assert plan_rows(len(Xq), 300, 25, 1e-9) == 1  # the smallest block: one row
    assert_same_transform(m.transform_images(Xq), tiny.transform_images(Xq), 3.0, 16)
    assert_same_transform(m.transform_texts(Yq), tiny.transform_texts(Yq), 3.0, 12)


def test_plan_rows_respects_budget():
    from imsearch_align.methods.asif import _MAX_ROWS, _WORKER_BYTES_PER_ANCHOR, _workers

    for gb in (0.05, 0.5, 1.0):
        rows = plan_rows(30_000, 30_000, 800, gb)
        used = rows * (30_000 * 4 + 800 * 8) + _workers() * _WORKER_BYTES_PER_ANCHOR * 30_000
        assert 1 <= rows <= _MAX_ROWS and used <= gb * 1024**3
    assert plan_rows(10, 50, 5, 100.0) == 10  # everything in one block
    assert (
        plan_rows(100_000, 1000, 5, 100.0) == _MAX_ROWS == 1024
    )  # capped: bigger blocks are not faster


def test_budget_changes_the_blocks_but_not_the_output():
    # More rows than one small block, so the budgets below give different plans.
    rng = np.random.default_rng(3)
    A = rng.standard_normal((2500, 8))
    Q = rng.standard_normal((300, 8))
    budgets = (1e-9, 0.001, 10.0)
    assert len({plan_rows(300, 2500, 40, gb) for gb in budgets}) == 3
    outs = [
        ASIF(40, max_memory_gb=gb, progress=False).fit(A, A).transform_images(Q) for gb in budgets
    ]
    for o in outs[1:]:
        assert_same_transform(o, outs[0], 8.0, 8)
    _, ids = brute_force_topk(Q, A, 40)
    np.testing.assert_array_equal(np.sort(ids, axis=1), outs[0].indices.reshape(300, 40))


def test_near_ties_below_float32_resolution_are_decided_exactly():
    """Anchors one float32 ulp apart: the float32 product cannot order them, float64 can."""
    rng = np.random.default_rng(7)
    d, n_groups, per = 48, 6, 40
    base = rng.standard_normal((n_groups, d))
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    anchors = np.repeat(base.astype(np.float32), per, axis=0)
    # nudge a few coordinates of every copy by a few ulps, in random directions
    for r in range(len(anchors)):
        cols = rng.choice(d, 4, replace=False)
        steps = rng.integers(-3, 4, 4)
        for c, st in zip(cols, steps):
            for _ in range(abs(st)):
                anchors[r, c] = np.nextafter(anchors[r, c], np.float32(np.sign(st) * np.inf))
    Q = base[rng.integers(0, n_groups, 30)] + 1e-3 * rng.standard_normal((30, d))
    k = 50  # the boundary falls inside a group of near-identical anchors
    m = ASIF(k, progress=False).fit(np.ones((len(anchors), d)), np.ones((len(anchors), d)))
    m.anchors_image_ = anchors  # exactly these float32 anchors
    q32 = (Q / np.linalg.norm(Q, axis=1, keepdims=True)).astype(np.float32).astype(np.float64)
    C = q32 @ anchors.astype(np.float64).T  # exact products; the oracle's cosines
    want = np.argsort(-C, axis=1, kind="stable")[:, :k]
    vals, ids = m.top_anchors(Q)
    np.testing.assert_array_equal(ids, want)
    np.testing.assert_allclose(vals, np.take_along_axis(C, want, 1), rtol=0, atol=1e-12)
    csr = m.transform_images(Q)
    np.testing.assert_array_equal(csr.indices.reshape(30, k), np.sort(want, axis=1))


def test_output_is_float32_csr_with_int32_indices(fitted):
    m, Xq, _ = fitted
    csr = m.transform_images(Xq)
    assert csr.dtype == np.float32 and csr.indices.dtype == np.int32
    assert csr.indptr.dtype == np.int32


def test_negative_cosines_are_clipped_to_zero():
    # With k = M every anchor is kept, including anti-aligned ones; an even
    # exponent must not turn them into positive weight.
    A = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0]])
    m = ASIF(3, exponent=2.0, progress=False).fit(A, A)
    r = m.transform_images(np.array([[1.0, 0.0]])).toarray()[0]
    np.testing.assert_allclose(r, [1.0, 0.0, 0.0])


def test_both_sides_are_normalised(correlated_pairs):
    X, Y = correlated_pairs(100, 6, 5, seed=1)
    m = ASIF(10, progress=False).fit(X, Y)
    np.testing.assert_allclose(
        m.similarity(X[:5] * 7.0, Y[:6] * 0.1), m.similarity(X[:5], Y[:6]), atol=1e-12
    )
    norms = np.linalg.norm(m.transform_images(X[:5] * 7.0).toarray(), axis=1)
    np.testing.assert_allclose(norms, 1.0, rtol=1e-6)


@pytest.mark.parametrize("k", [0, 101, -3])
def test_non_zeros_out_of_range_names_the_range(k, correlated_pairs):
    X, Y = correlated_pairs(100, 6, 5)
    with pytest.raises(ValueError, match=rf"non_zeros must be in \[1, 100\].*got {k}"):
        ASIF(k).fit(X, Y)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"exponent": 0.0}, "exponent must be a finite float > 0"),
        ({"max_memory_gb": -1.0}, "max_memory_gb"),
    ],
)
def test_bad_params(kwargs, msg, correlated_pairs):
    X, Y = correlated_pairs(100, 6, 5)
    with pytest.raises(ValueError, match=msg):
        ASIF(5, **kwargs).fit(X, Y)


def test_float32_input_is_transformed_without_a_float64_copy(fitted):
    m, Xq, Yq = fitted
    X32 = np.ascontiguousarray(Xq, dtype=np.float32)
    assert m._check_input(X32, "X", "image", X32.shape[1]) is X32  # taken as it came
    # the same values in float64 give the same output, bit for bit (same code path)
    a, b = m.transform_images(X32), m.transform_images(X32.astype(np.float64))
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)
    # similarity (the definition) still works in float64
    assert m.similarity(X32[:2], Yq[:3].astype(np.float32)).dtype == np.float64


@pytest.mark.parametrize("budget", [1e-9, 10.0])
def test_rows_of_different_lengths_across_blocks_equal_the_definition(budget):
    """Every anchor kept (k = M) on centred data: about half the cosines are
    negative and dropped, so rows have different lengths (and an all-zero
    query has none); blocks of one row and one block give the dense definition."""
    rng = np.random.default_rng(11)
    A = rng.standard_normal((60, 5))
    Q = rng.standard_normal((50, 5))
    Q[7] = 0.0
    m = ASIF(60, exponent=3.0, max_memory_gb=budget, progress=False).fit(A, A)
    out = m.transform_images(Q)
    lengths = np.diff(out.indptr)
    assert lengths[7] == 0 and len(set(lengths.tolist())) > 5
    assert out.data.size == out.nnz == int(lengths.sum())  # no padding kept
    want = m._dense_relative(Q, m.anchors_image_)
    # float32 cosines: small weights carry the cosines' absolute error
    np.testing.assert_allclose(out.toarray(), want, rtol=weight_rtol(3.0, 5), atol=1e-7)
    assert np.array_equal(out.toarray() > 0, want > 0)  # the same anchors kept
    for i in range(out.shape[0]):  # columns ascending in each row
        cols = out.indices[out.indptr[i] : out.indptr[i + 1]]
        assert np.all(np.diff(cols) > 0)


def test_release_transform_state_drops_the_anchors_and_transforms_then_raise(correlated_pairs):
    X, Y = correlated_pairs(200, 16, 12, seed=2)
    m = ASIF(20, progress=False).fit(X[:150], Y[:150])
    before = m.transform_texts(Y[150:]).toarray()
    m.release_transform_state()
    assert m.anchors_image_ is None and m.anchors_text_ is None
    assert m.output_dim_ == 150 and m.n_support_ == 150  # the fitted facts stay
    for call in (lambda: m.transform_images(X[150:]), lambda: m.transform_texts(Y[150:])):
        with pytest.raises(RuntimeError, match="anchors were released"):
            call()
    m.fit(X[:150], Y[:150])  # fitting again restores them: same output
    np.testing.assert_array_equal(m.transform_texts(Y[150:]).toarray(), before)
