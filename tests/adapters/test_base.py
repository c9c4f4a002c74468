"""Store plumbing: tie rule and padding, vector and id checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.base import (
    CollectionInfo,
    check_k,
    check_new_ids,
    check_vectors,
    empty_result,
    finalize_rows,
)


def test_finalize_rows_applies_tie_rule_and_pads():
    ids = np.array([[9, 3, 5, -1], [4, 8, 2, 7]])
    scores = np.array([[1.0, 2.0, 1.0, 0.0], [0.5, 0.5, 0.5, 0.5]], dtype=np.float32)
    r = finalize_rows(ids, scores, 6)
    assert r.ids.tolist() == [[3, 5, 9, -1, -1, -1], [2, 4, 7, 8, -1, -1]]
    assert r.scores[0, :3].tolist() == [2.0, 1.0, 1.0]
    assert np.isneginf(r.scores[0, 3:]).all()  # -1 gets -inf even if the library said 0
    assert r.ids.dtype == np.int64 and r.scores.dtype == np.float32


def test_finalize_rows_cuts_and_matches_python_sort():
    rng = np.random.default_rng(0)
    ids = rng.permutation(1000)[:600].reshape(30, 20)
    scores = rng.integers(0, 4, (30, 20)).astype(np.float32)
    r = finalize_rows(ids, scores, 7)
    for row in range(30):
        want = sorted(zip(-scores[row], ids[row]))[:7]
        assert r.ids[row].tolist() == [int(i) for _, i in want]
    np.testing.assert_array_equal(ids, ids)  # input untouched: a copy was sorted


def test_finalize_rows_does_not_modify_inputs():
    ids = np.array([[2, 1, -1]])
    scores = np.array([[1.0, 1.0, 3.0]], dtype=np.float32)
    finalize_rows(ids, scores, 3)
    assert ids.tolist() == [[2, 1, -1]] and scores.tolist() == [[1.0, 1.0, 3.0]]


def test_empty_result():
    r = empty_result(3, 2)
    assert r.ids.shape == (3, 2) and (r.ids == -1).all() and np.isneginf(r.scores).all()


def test_check_k():
    assert check_k(np.int64(3)) == 3
    with pytest.raises(ValueError, match=r"k must be in \[1, inf\], got 0"):
        check_k(0)
    with pytest.raises(TypeError, match="k must be an integer, got bool"):
        check_k(True)


def test_check_vectors_dense_sparse_and_dimension():
    dense = CollectionInfo("d", 3, sparse=False)
    sparse = CollectionInfo("s", None, sparse=True)
    out = check_vectors(np.ones((2, 3), dtype=np.float64), "vectors", dense)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    out = check_vectors(sp.coo_matrix(np.eye(4)), "vectors", sparse)
    assert sp.isspmatrix_csr(out) and out.dtype == np.float32
    with pytest.raises(TypeError, match="sparse collection 's', got dense ndarray"):
        check_vectors(np.eye(2), "vectors", sparse)
    with pytest.raises(TypeError, match="dense collection 'd', got scipy sparse"):
        check_vectors(sp.csr_matrix(np.eye(3)), "vectors", dense)
    with pytest.raises(
        ValueError, match=r"queries must have dimension 3 \(collection 'd'\), got 2"
    ):
        check_vectors(np.ones((1, 2)), "queries", dense)


def test_check_new_ids():
    existing = np.array([5, 1, 9])
    assert check_new_ids([2, 3], 2, existing, "c").tolist() == [2, 3]
    with pytest.raises(ValueError, match=r"already stored: \[1, 9\]"):
        check_new_ids([9, 2, 1], 3, existing, "c")
    with pytest.raises(ValueError, match="ids has 1 entries, vectors have 2 rows"):
        check_new_ids([7], 2, existing, "c")
    with pytest.raises(ValueError, match=r"ids must be >= 0"):
        check_new_ids([-1], 1, existing, "c")
