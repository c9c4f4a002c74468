"""ASIF: top-k against brute force, tie rule, chunking, the definition, errors."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.methods import ASIF
from imsearch_align.methods.asif import TILE_COLS, TILE_ROWS, plan_chunks


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


def test_tiny_memory_budget_forces_chunking_and_gives_identical_output(fitted, support):
    m, Xq, Yq = fitted
    tiny = ASIF(25, exponent=3.0, max_memory_gb=1e-9, progress=False).fit(*support)
    assert plan_chunks(len(Xq), 300, 25, 1e-9) == (TILE_ROWS, TILE_COLS)  # smallest step
    for a, b in (
        (m.transform_images(Xq), tiny.transform_images(Xq)),
        (m.transform_texts(Yq), tiny.transform_texts(Yq)),
    ):
        np.testing.assert_array_equal(a.indptr, b.indptr)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.data, b.data)


def test_plan_chunks_respects_budget_and_tiles():
    rows, block = plan_chunks(30_000, 30_000, 800, 1.0)
    assert rows * (800 + block) * 24 <= 1024**3
    assert rows % TILE_ROWS == 0 and block % TILE_COLS == 0
    assert plan_chunks(10, 50, 5, 100.0) == (TILE_ROWS, TILE_COLS)  # everything in one step


def test_budget_changes_the_chunking_but_not_the_output():
    # Larger than one tile in both directions, so several budgets give different plans.
    rng = np.random.default_rng(3)
    A = rng.standard_normal((2500, 8))
    Q = rng.standard_normal((300, 8))
    outs = []
    for gb in (1e-9, 0.0125, 10.0):
        m = ASIF(40, max_memory_gb=gb, progress=False).fit(A, A)
        outs.append(m.transform_images(Q))
    assert len({plan_chunks(300, 2500, 40, gb) for gb in (1e-9, 0.0125, 10.0)}) == 3
    for o in outs[1:]:
        np.testing.assert_array_equal(o.indices, outs[0].indices)
        np.testing.assert_array_equal(o.data, outs[0].data)
    _, ids = brute_force_topk(Q, A, 40)
    np.testing.assert_array_equal(np.sort(ids, axis=1), outs[0].indices.reshape(300, 40))


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
