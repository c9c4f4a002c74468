"""ExactStore: conformance kit, brute-force oracle with ties, tiling, backends, errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from imsearch_align.adapters.base import CollectionExistsError, CollectionNotFoundError
from imsearch_align.adapters.exact import ExactStore, topk_exact
from imsearch_align.testing.store_conformance import StoreConformance, assert_exact_topk

EPS32 = float(np.finfo(np.float32).eps)


class TestExactConformance(StoreConformance):
    exact = True
    supports_sparse = True

    @pytest.fixture
    def make_store(self):
        return lambda: ExactStore()


class TestExactTiledConformance(StoreConformance):
    """The same suite with a tiny memory bound, so every search is tiled and merged."""

    exact = True
    supports_sparse = True

    @pytest.fixture
    def make_store(self):
        return lambda: ExactStore(max_memory_mb=1, topk="numpy")


def oracle(q: np.ndarray, x: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Pure-Python definition: sort every doc by (score desc, id asc), keep k, pad with -1."""
    s = q.astype(np.float64) @ x.astype(np.float64).T
    out_i = np.full((len(q), k), -1, dtype=np.int64)
    out_s = np.full((len(q), k), -np.inf)
    for r in range(len(q)):
        order = sorted(range(len(ids)), key=lambda j: (-s[r, j], ids[j]))[:k]
        out_i[r, : len(order)] = ids[order]
        out_s[r, : len(order)] = s[r, order]
    return out_i, out_s


def tie_heavy(n: int, nq: int, d: int, seed: int):
    """Small-integer vectors: scores are exact in float32 and ties are everywhere."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, (n, d)).astype(np.float32)
    q = rng.integers(-2, 3, (nq, d)).astype(np.float32)
    ids = rng.choice(10**9, size=n, replace=False).astype(np.int64)
    return x, q, ids


@pytest.mark.parametrize("topk", ["numpy", "torch"])
@pytest.mark.parametrize("max_memory_mb", [1, 512])
def test_matches_definition_with_ties(topk, max_memory_mb):
    if topk == "torch":
        pytest.importorskip("torch")
    x, q, ids = tie_heavy(1200, 40, 6, seed=0)
    with ExactStore(max_memory_mb=max_memory_mb, topk=topk) as s:
        s.create_collection("c", 6)
        s.insert("c", x[:700], ids[:700])  # two inserts: consolidation sorts by id
        s.insert("c", x[700:], ids[700:])
        for k in (1, 7, 100, 1200, 1205):
            res = s.search("c", q, k)
            want_i, want_s = oracle(q, x, ids, k)
            np.testing.assert_array_equal(res.ids, want_i)
            np.testing.assert_array_equal(res.scores, want_s.astype(np.float32))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.integers(1, 70),
    seed=st.integers(0, 2**16),
    mem=st.sampled_from([1, 64]),
)
def test_property_equals_definition(n, k, seed, mem):
    x, q, ids = tie_heavy(n, 5, 3, seed)
    with ExactStore(max_memory_mb=mem, topk="numpy") as s:
        s.create_collection("c")
        s.insert("c", x, ids)
        res = s.search("c", q, k)
    want_i, _ = oracle(q, x, ids, k)
    np.testing.assert_array_equal(res.ids, want_i)


def test_topk_exact_boundary_ties_pick_lowest_columns():
    s = np.array([[1, 5, 5, 5, 0, 5], [3, 3, 3, 3, 3, 3]], dtype=np.float32)
    for backend in ("numpy", "torch"):
        if backend == "torch":
            pytest.importorskip("torch")
        cols, vals = topk_exact(s, 2, backend=backend)
        assert cols.tolist() == [[1, 2], [0, 1]]
        assert vals.tolist() == [[5, 5], [3, 3]]


def test_torch_and_numpy_agree_on_float_data_and_match_the_product():
    pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    d = 64
    x = rng.standard_normal((5000, d)).astype(np.float32)
    x[2500:3000] = x[:500]  # duplicated rows: exact ties across tiles
    q = rng.standard_normal((300, d)).astype(np.float32)
    ids = rng.permutation(5000).astype(np.int64)
    results = []
    for topk in ("numpy", "torch"):
        with ExactStore(topk=topk, max_memory_mb=2) as s:
            s.create_collection("c", d)
            s.insert("c", x, ids)
            results.append(s.search("c", q, 50))
    # Same tiles, same product call: the two top-k backends see identical
    # scores and the tie fix-up makes the selection unique.
    np.testing.assert_array_equal(results[0].ids, results[1].ids)
    np.testing.assert_array_equal(results[0].scores, results[1].scores)
    # Against the untiled product (another BLAS call, so other rounding, on
    # any CPU): scores to float32 precision for this dimension, ranking
    # tie-aware against the float64 brute force.
    for res in results:
        assert_exact_topk(res, q, x, ids, 50, rtol=4 * d * EPS32)
        ref = q.astype(np.float64) @ x.astype(np.float64).T
        got = np.take_along_axis(ref, np.argsort(ids)[res.ids], 1)
        bound = 2 * d * EPS32 * (np.abs(q) @ np.abs(x).T).max(axis=1, keepdims=True)
        assert (np.abs(res.scores - got) <= bound).all()


def sparse_oracle(q, x, ids, k):
    """The sparse rule on the definition: only non-zero inner products, at most k, padded."""
    all_i, all_s = oracle(q, x, ids, len(ids))
    out_i = np.full((len(q), k), -1, dtype=np.int64)
    out_s = np.full((len(q), k), -np.inf)
    for r in range(len(q)):
        keep = all_s[r] != 0
        hi, hs = all_i[r][keep][:k], all_s[r][keep][:k]
        out_i[r, : len(hi)], out_s[r, : len(hs)] = hi, hs
    return out_i, out_s


def test_sparse_equals_dense_on_exact_scores():
    """Integer data: every product and sum is exact, so both paths give the same numbers."""
    x, q, ids = tie_heavy(800, 30, 10, seed=2)
    with ExactStore(max_memory_mb=1) as s:
        s.create_collection("d", 10)
        s.insert("d", x, ids)
        s.create_collection("s", 10, sparse=True)
        s.insert("s", sp.csr_matrix(x[:300]), ids[:300])  # two inserts: sorted by id
        s.insert("s", sp.csr_matrix(x[300:]), ids[300:])
        for k in (1, 10, 900):
            dense, sparse = s.search("d", q, k), s.search("s", sp.csr_matrix(q), k)
            want_i, want_s = oracle(q, x, ids, k)
            np.testing.assert_array_equal(dense.ids, want_i)
            np.testing.assert_array_equal(dense.scores, want_s.astype(np.float32))
            # the sparse rule: the documents with a non-zero inner product only
            want_i, want_s = sparse_oracle(q, x, ids, k)
            np.testing.assert_array_equal(sparse.ids, want_i)
            np.testing.assert_array_equal(sparse.scores, want_s.astype(np.float32))
        assert (sparse.ids == -1).any()  # k = 900 > the matches: padded


def test_sparse_query_sharing_no_term_gets_no_hit():
    x = sp.csr_matrix(np.array([[1, 0, 0], [0, 2, 0]], np.float32))
    with ExactStore() as s:
        s.create_collection("s", 3, sparse=True)
        s.insert("s", x, np.array([5, 3]))
        r = s.search("s", sp.csr_matrix(np.array([[0, 0, 1], [1, 1, 0]], np.float32)), 3)
    assert r.ids.tolist() == [[-1, -1, -1], [3, 5, -1]]
    assert np.isneginf(r.scores[0]).all() and r.scores[1, :2].tolist() == [2.0, 1.0]


def test_sparse_memory_budget_too_small_names_the_need():
    x = sp.csr_matrix(np.eye(200_000, 5, dtype=np.float32))
    with ExactStore(max_memory_mb=1) as s:
        s.create_collection("s", 5, sparse=True)
        s.insert("s", x, np.arange(200_000))
        with pytest.raises(MemoryError, match=r"max_memory_mb=1 is too small for one query row"):
            s.search("s", x[:2], 3)


def test_empty_and_k_larger():
    with ExactStore() as s:
        s.create_collection("c")  # dim unknown until the first insert
        r = s.search("c", np.ones((2, 3), np.float32), 4)
        assert (r.ids == -1).all() and np.isneginf(r.scores).all() and r.ids.shape == (2, 4)
        s.insert("c", np.eye(3, dtype=np.float32), np.array([9, 4, 6]))
        r = s.search("c", np.ones((1, 3), np.float32), 5)
        assert r.ids.tolist() == [[4, 6, 9, -1, -1]]
        assert r.scores[0, :3].tolist() == [1, 1, 1] and np.isneginf(r.scores[0, 3:]).all()


def test_bookkeeping_and_context_manager():
    s = ExactStore()
    with s:
        s.create_collection("b", 2)
        s.create_collection("a", 2, sparse=True)
        assert s.list_collections() == ["a", "b"]
        assert s.has_collection("a") and not s.has_collection("z")
        s.insert("b", np.ones((3, 2), np.float32), np.arange(3))
        s.insert("b", np.ones((2, 2), np.float32), np.arange(3, 5))
        assert s.count("b") == 5 and s.count("a") == 0
        s.drop_collection("a")
        assert s.list_collections() == ["b"]
    with pytest.raises(RuntimeError, match="closed"):
        s.search("b", np.ones((1, 2), np.float32), 1)
    s.close()  # twice is fine


# -- every bad input names the argument, what was expected and what came ---------------
@pytest.fixture
def store():
    with ExactStore() as s:
        s.create_collection("c", 3)
        s.insert("c", np.eye(3, dtype=np.float32), np.array([1, 2, 3]))
        s.create_collection("sp", 3, sparse=True)
        yield s


@pytest.mark.parametrize("k", [0, -1])
def test_k_not_positive(store, k):
    with pytest.raises(ValueError, match=rf"k must be in \[1, inf\], got {k}"):
        store.search("c", np.ones((1, 3), np.float32), k)


def test_k_not_integer(store):
    with pytest.raises(TypeError, match="k must be an integer, got float"):
        store.search("c", np.ones((1, 3), np.float32), 2.0)


def test_vectors_not_2d(store):
    with pytest.raises(ValueError, match=r"vectors must be 2-D \(n, d\), got 1-D"):
        store.insert("c", np.ones(3, np.float32), np.array([7]))
    with pytest.raises(ValueError, match=r"queries must be 2-D \(n, d\), got 3-D"):
        store.search("c", np.ones((1, 1, 3), np.float32), 1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_vectors(store, bad):
    v = np.ones((2, 3), np.float32)
    v[1, 2] = bad
    with pytest.raises(ValueError, match="vectors must be finite, got NaN or inf in row 1"):
        store.insert("c", v, np.array([8, 9]))
    with pytest.raises(ValueError, match="queries must be finite"):
        store.search("c", v, 1)


@pytest.mark.parametrize("bad", [[np.nan], [np.inf], [-np.inf], [np.inf, -np.inf]])
def test_non_finite_sparse_vectors_name_their_row(bad):
    """The sparse check reads the values without a temporary; +inf and -inf
    together (a NaN sum) are caught as well as each alone."""
    s = ExactStore()
    s.create_collection("sp", 4, sparse=True)
    v = sp.csr_matrix(np.ones((3, 4), np.float32))
    v.data[-len(bad) - 1 : -1] = bad  # row 2
    with pytest.raises(ValueError, match="vectors must be finite, got NaN or inf in row 2"):
        s.insert("sp", v, np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="queries must be finite, got NaN or inf in row 2"):
        s.search("sp", v, 1)


def test_query_dimension_differs(store):
    with pytest.raises(
        ValueError, match=r"queries must have dimension 3 \(collection 'c'\), got 4"
    ):
        store.search("c", np.ones((1, 4), np.float32), 1)
    with pytest.raises(
        ValueError, match=r"vectors must have dimension 3 \(collection 'c'\), got 2"
    ):
        store.insert("c", np.ones((1, 2), np.float32), np.array([5]))


def test_duplicate_ids_in_one_insert(store):
    with pytest.raises(ValueError, match=r"ids must be unique, got duplicate id\(s\) \[5\]"):
        store.insert("c", np.ones((3, 3), np.float32), np.array([5, 6, 5]))
    assert store.count("c") == 3  # nothing was added


def test_duplicate_ids_against_stored(store):
    with pytest.raises(
        ValueError,
        match=r"ids must be new to collection 'c', got 2 id\(s\) already stored: \[1, 3\]",
    ):
        store.insert("c", np.ones((3, 3), np.float32), np.array([3, 10, 1]))
    assert store.count("c") == 3


def test_unknown_collection_lists_existing(store):
    with pytest.raises(
        CollectionNotFoundError,
        match=r"collection 'zz' does not exist; existing collections: 'c', 'sp'",
    ):
        store.search("zz", np.ones((1, 3), np.float32), 1)
    for call in (
        lambda: store.insert("zz", np.ones((1, 3)), [1]),
        lambda: store.drop_collection("zz"),
        lambda: store.count("zz"),
    ):
        with pytest.raises(LookupError, match="'zz'"):
            call()


def test_dense_into_sparse_and_reverse(store):
    with pytest.raises(
        TypeError,
        match="vectors must be a scipy sparse matrix for the sparse collection 'sp', got dense ndarray",
    ):
        store.insert("sp", np.ones((1, 3), np.float32), [1])
    with pytest.raises(
        TypeError,
        match="vectors must be a dense array for the dense collection 'c', got scipy sparse",
    ):
        store.insert("c", sp.csr_matrix(np.ones((1, 3), np.float32)), [9])
    store.insert("sp", sp.csr_matrix(np.ones((1, 3), np.float32)), [1])
    with pytest.raises(TypeError, match="queries must be a scipy sparse matrix"):
        store.search("sp", np.ones((1, 3), np.float32), 1)


def test_create_existing(store):
    with pytest.raises(CollectionExistsError, match="collection 'c' already exists"):
        store.create_collection("c", 3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "1bad"}, "name must be letters, digits and underscores"),
        ({"name": "ok", "dim": 0}, r"dim must be in \[1, inf\], got 0"),
        ({"name": "ok", "metric": "l2"}, r"metric must be one of \['ip'\], got 'l2'"),
    ],
)
def test_create_bad_arguments(store, kwargs, message):
    with pytest.raises(ValueError, match=message):
        store.create_collection(**kwargs)


def test_constructor_arguments():
    with pytest.raises(ValueError, match="topk must be one of"):
        ExactStore(topk="cuda")
    with pytest.raises(ValueError, match=r"max_memory_mb must be in \[1, inf\], got 0"):
        ExactStore(max_memory_mb=0)
    with pytest.raises(ValueError, match=r"threads must be in \[1, inf\], got 0"):
        ExactStore(threads=0)


def test_declares_exact_search_and_provenance():
    from imsearch_align.framework.interfaces import ExactSearch

    s = ExactStore()
    assert isinstance(s, ExactSearch) and s.exact is True
    pk = s.provenance()["packages"]
    assert "numpy" in pk and "numba" in pk
