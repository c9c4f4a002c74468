"""The conformance kit can fail: its checks catch broken stores; its data are what they claim."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.testing.store_conformance import (
    assert_exact_topk,
    assert_rows_ordered,
    clustered_vectors,
    sparse_clustered,
)


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((100, 8))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    x[50:60] = x[:10]  # ties
    ids = rng.permutation(10_000)[:100].astype(np.int64)
    q = np.concatenate([x[:5], rng.standard_normal((5, 8)).astype(np.float32)])
    with ExactStore() as s:
        s.create_collection("c", 8)
        s.insert("c", x, ids)
        res = s.search("c", q, 10)
    return x, ids, q, res


def mutate(res, fn):
    ids, sc = res.ids.copy(), res.scores.copy()
    fn(ids, sc)
    return SearchResult(ids, sc)


def test_correct_result_passes(case):
    x, ids, q, res = case
    assert_rows_ordered(res, 10, 10)
    assert_exact_topk(res, q, x, ids, 10)


@pytest.mark.parametrize(
    ("fn", "message"),
    [
        (lambda i, s: i.__setitem__((0, 9), i[1, 0]), "differ|below"),
        (lambda i, s: i.__setitem__((0, 1), i[0, 2]), "twice"),
        (lambda i, s: s.__setitem__((3, 4), s[3, 4] + 1e-3), "differ|sorted"),
        (
            lambda i, s: (i.__setitem__((2, 9), -1), s.__setitem__((2, 9), -np.inf)),
            "expected 10 hits",
        ),
        (lambda i, s: i.__setitem__((4, 3), 10**7), "never inserted"),
    ],
)
def test_exact_check_catches(case, fn, message):
    x, ids, q, res = case
    with pytest.raises(AssertionError, match=message):
        assert_exact_topk(mutate(res, fn), q, x, ids, 10)


def test_exact_check_catches_a_doc_below_the_kth_score(case):
    x, ids, q, res = case
    true = q.astype(np.float64) @ x.T.astype(np.float64)
    worst = int(np.argmin(true[0]))  # the worst doc, reported with its true score
    bad = mutate(
        res, lambda i, s: (i.__setitem__((0, 9), ids[worst]), s.__setitem__((0, 9), true[0, worst]))
    )
    with pytest.raises(AssertionError, match="1 of 10 rows return a doc below the true k-th score"):
        assert_exact_topk(bad, q, x, ids, 10)


def test_order_check_catches_tie_and_padding_errors(case):
    _, _, _, res = case
    # query 0 equals stored rows 0 and 50: two docs tied at the top, ids must ascend
    assert res.scores[0, 0] == res.scores[0, 1] and res.ids[0, 0] < res.ids[0, 1]
    swapped = mutate(res, lambda i, s: i.__setitem__((0, slice(0, 2)), i[0, 1::-1]))
    with pytest.raises(AssertionError, match="ascending id"):
        assert_rows_ordered(swapped, 10, 10)
    hole = mutate(res, lambda i, s: (i.__setitem__((1, 3), -1), s.__setitem__((1, 3), -np.inf)))
    with pytest.raises(AssertionError, match="hit follows a no-hit"):
        assert_rows_ordered(hole, 10, 10)
    zero = mutate(res, lambda i, s: (i.__setitem__((1, 9), -1), s.__setitem__((1, 9), 0.0)))
    with pytest.raises(AssertionError, match="-inf"):
        assert_rows_ordered(zero, 10, 10)
    wide = SearchResult(res.ids, res.scores)
    object.__setattr__(wide, "scores", res.scores.astype(np.float64))  # bypass the cast
    with pytest.raises(AssertionError, match="float32"):
        assert_rows_ordered(wide, 10, 10)
    with pytest.raises(AssertionError, match="shape"):
        assert_rows_ordered(res, 5, 10)


def test_clustered_vectors():
    x, q = clustered_vectors(500, 16, n_clusters=5, n_queries=20, seed=3)
    assert x.shape == (500, 16) and q.shape == (20, 16) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1, rtol=1e-5)
    x2, _ = clustered_vectors(500, 16, n_clusters=5, n_queries=20, seed=3)
    np.testing.assert_array_equal(x, x2)
    # clustered: a query's best doc is far closer than a random doc
    s = q @ x.T
    assert s.max(axis=1).mean() > 0.8 and abs(s.mean()) < 0.3


def test_sparse_clustered():
    x, q = sparse_clustered(100, 32, nnz=5, n_queries=7, seed=1)
    assert sp.isspmatrix_csr(x) and x.shape == (100, 32) and q.shape == (7, 32)
    assert (np.diff(x.indptr) == 5).all() and (x.data > 0).all()
    np.testing.assert_allclose(sp.linalg.norm(x, axis=1), 1, rtol=1e-5)
