"""Conformance kit: the pytest suite every vector store adapter must pass.

Subclass :class:`StoreConformance` in a test module, say what your store
promises with four class attributes, and give a ``make_store`` fixture that
returns a *factory* (called once per test; called again to reopen the store
when it is persistent). pytest then runs every case below against it::

    # tests/adapters/test_my_store.py
    import pytest
    from imsearch_align.testing.store_conformance import StoreConformance
    from mypackage import MyStore

    class TestMyStore(StoreConformance):
        exact = True             # exact index: top-k must equal exact search (tie-tolerant)
        supports_sparse = False  # must equal MyStore.supports_sparse; False = sparse input raises
        persistent = False       # True: data survive close() and a new make_store()
        ann_min_recall = 0.9     # ANN indexes (exact = False): recall@10 on clustered data

        @pytest.fixture
        def make_store(self, tmp_path):
            return lambda: MyStore(path=tmp_path / "db")

    # several configurations of one store: one subclass each, or parametrise
    class TestMyStoreHnsw(StoreConformance):
        exact = False
        @pytest.fixture(params=[32, 128], ids=["ef32", "ef128"])
        def make_store(self, request):
            return lambda: MyStore(index="hnsw", ef=request.param)

Run it with ``pytest tests/adapters/test_my_store.py``. A class whose name
does not start with ``Test`` is not collected, so importing
``StoreConformance`` itself runs nothing.

What the store must do (one test each, names in brackets):

* Be a :class:`~imsearch_align.framework.interfaces.VectorStoreAdapter`
  whose ``supports_sparse`` equals the class attribute [test_protocol].
* Exact indexes: on random data with deliberate ties, every returned row
  is what brute force says, tie-tolerantly: ``min(k, n)`` distinct stored
  ids, each with a reported score equal (to ``rtol``) to its true inner
  product and at least the true k-th best score minus the tolerance; this
  is the rule of ann-benchmarks / faiss contrib, so a store may return any
  of several docs tied at the k-th score [test_exact_topk_dense,
  test_exact_topk_sparse].
* recall@10 against ``ExactStore`` on *clustered* data (uniform random
  512-d data gives ANN indexes recall near 0.25 whatever the library):
  1.0 for exact indexes, at least ``ann_min_recall`` otherwise; recall is
  :func:`imsearch_align.framework.fidelity.ann_recall` [test_recall_dense,
  test_recall_sparse].
* Keep arbitrary int64 ids up to ``2**63 - 1`` [test_ids_round_trip].
* ``k`` larger than the collection: every stored id once, then ``-1`` with
  score ``-inf`` [test_k_larger_than_collection].
* An empty collection returns only ``-1`` / ``-inf``
  [test_search_empty_collection]; an unknown one raises ``LookupError`` or
  ``ValueError`` naming it [test_search_unknown_collection];
  ``create_collection`` of an existing name raises [test_create_existing].
* Reject ``k <= 0``, duplicate ids in one insert or against stored ids,
  a dimension that differs from the collection's (insert and query), and
  NaN/inf vectors, with a ``ValueError`` (or ``TypeError``) [test_bad_k,
  test_duplicate_ids_*, test_dimension_mismatch_*, test_non_finite].
* Sparse declared and honoured: with ``supports_sparse = True`` dense
  vectors into a sparse collection and sparse into a dense one raise;
  with ``False`` a sparse collection or sparse insert raises
  [test_sparse_declared].
* Scores are float32 ``(nq, k)``, ids int64, each row sorted by score
  descending and, among equal scores, by id ascending, no-hits last
  [test_rows_ordered_with_tie_rule].
* ``drop_collection`` removes it [test_drop_collection]; with
  ``persistent = True`` data survive ``close()`` and a new store from
  ``make_store()`` [test_close_and_reopen].

Every test uses its own collection name (``conf_<random hex>``, valid in
Milvus) and drops it afterwards, so a shared server stays clean. Data are
small and seeded; the in-process stores run the whole suite in a few
seconds. The helpers (:func:`clustered_vectors`, :func:`sparse_clustered`,
:func:`assert_exact_topk`, :func:`assert_rows_ordered`) are public for
adapter-specific tests.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.framework.fidelity import ann_recall
from imsearch_align.framework.interfaces import SearchResult, VectorStoreAdapter

__all__ = [
    "StoreConformance",
    "assert_exact_topk",
    "assert_rows_ordered",
    "clustered_vectors",
    "sparse_clustered",
]

_BAD_INPUT = (ValueError, TypeError)


def clustered_vectors(
    n: int,
    dim: int,
    *,
    n_clusters: int = 20,
    noise: float = 0.3,
    n_queries: int = 0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm float32 vectors around ``n_clusters`` random centres, and queries.

    Centres are random unit vectors; a document is its centre plus isotropic
    noise of expected norm ``noise`` (so its cosine to the centre is about
    ``1 / sqrt(1 + noise**2)`` in any dimension), re-normalised. Queries are
    stored rows plus noise of expected norm ``noise / 2``, re-normalised, so
    their true neighbours sit in one cluster, as real embeddings do.

    Returns:
        ``(docs (n, dim), queries (n_queries, dim))``.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    scale = 1.0 / np.sqrt(dim)  # per-coordinate sd giving noise vectors of norm ~1
    x = centres[rng.integers(0, n_clusters, n)] + noise * scale * rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.integers(0, n, n_queries)] + 0.5 * noise * scale * rng.standard_normal(
        (n_queries, dim)
    )
    if n_queries:
        q /= np.linalg.norm(q, axis=1, keepdims=True)
    return x.astype(np.float32), q.astype(np.float32)


def sparse_clustered(
    n: int, dim: int, *, nnz: int = 12, n_queries: int = 0, seed: int = 0
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Sparse non-negative unit rows (ASIF-like: top-``nnz`` entries kept) from clustered data."""
    docs, queries = clustered_vectors(n, dim, n_clusters=10, n_queries=n_queries, seed=seed)

    def sparsify(x: np.ndarray) -> sp.csr_matrix:
        x = np.abs(x)
        keep = np.argpartition(x, dim - nnz, axis=1)[:, dim - nnz :]
        out = np.zeros_like(x)
        np.put_along_axis(out, keep, np.take_along_axis(x, keep, axis=1), axis=1)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return sp.csr_matrix(out.astype(np.float32))

    return sparsify(docs), sparsify(queries) if n_queries else sp.csr_matrix(
        (0, dim), dtype=np.float32
    )


def _dense(x: Any) -> np.ndarray:
    return np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float64)


def assert_rows_ordered(result: SearchResult, k: int, nq: int) -> None:
    """Shape, dtypes, and each row sorted by (score desc, id asc) with no-hits (-1, -inf) last."""
    assert isinstance(result, SearchResult), f"search must return SearchResult, got {type(result)}"
    assert result.ids.shape == (nq, k), f"ids shape {result.ids.shape}, expected {(nq, k)}"
    assert result.ids.dtype == np.int64, f"ids dtype {result.ids.dtype}, expected int64"
    assert result.scores.dtype == np.float32, (
        f"scores dtype {result.scores.dtype}, expected float32"
    )
    ids, sc = result.ids, result.scores
    miss = ids < 0
    assert (ids[miss] == -1).all(), "a negative id other than -1 was returned"
    assert np.isneginf(sc[miss]).all(), "a no-hit (-1) must have score -inf"
    assert np.isfinite(sc[~miss]).all(), "a hit must have a finite score"
    # no-hits only at the end of a row
    assert not (miss[:, :-1] & ~miss[:, 1:]).any(), "a hit follows a no-hit (-1) in a row"
    a_s, b_s = sc[:, :-1], sc[:, 1:]
    a_i, b_i = ids[:, :-1], ids[:, 1:]
    real = ~miss[:, 1:]
    assert not (real & (b_s > a_s)).any(), "scores are not sorted descending"
    tie = real & (a_s == b_s)
    assert not (tie & (b_i <= a_i)).any(), "equal scores are not ordered by ascending id"


def assert_exact_topk(
    result: SearchResult,
    queries: Any,
    vectors: Any,
    ids: np.ndarray,
    k: int,
    *,
    rtol: float = 1e-5,
) -> None:
    """Check a result against brute force, tie-tolerantly (float64 oracle).

    Each row must hold ``min(k, n)`` distinct stored ids then ``-1``; each
    reported score must equal the true inner product of that id to
    ``rtol * max(1, |score|)``, and be at least the true k-th best score minus
    that tolerance.
    """
    q, x = _dense(queries), _dense(vectors)
    ids = np.asarray(ids, dtype=np.int64)
    n, nq = len(ids), q.shape[0]
    m = min(k, n)
    true = q @ x.T
    kth = np.sort(true, axis=1)[:, n - m] if n else np.full(nq, np.inf)
    scale = rtol * np.maximum(1.0, np.abs(true).max(axis=1))
    got = result.ids
    assert (got[:, :m] >= 0).all(), f"expected {m} hits per row, some rows have fewer"
    assert (got[:, m:] == -1).all(), f"expected -1 after the first {m} columns"
    hits = got[:, :m]
    srt = np.sort(hits, axis=1)
    assert not (srt[:, 1:] == srt[:, :-1]).any(), "an id is returned twice in a row"
    order = np.argsort(ids)
    pos = np.searchsorted(ids, hits, sorter=order)
    pos = order[np.minimum(pos, n - 1)]
    assert (ids[pos] == hits).all(), "an id that was never inserted was returned"
    true_sc = np.take_along_axis(true, pos, axis=1)
    err = np.abs(result.scores[:, :m].astype(np.float64) - true_sc)
    assert (err <= scale[:, None]).all(), (
        f"reported scores differ from the true inner products by up to {err.max():.3g}"
    )
    short = true_sc < (kth - scale)[:, None]
    assert not short.any(), (
        f"{int(short.any(axis=1).sum())} of {nq} rows return a doc below the true k-th score"
    )


class StoreConformance:
    """Base class of the conformance suite; see the module docstring.

    Class attributes to set in a subclass:
        exact: the index is exact (flat / brute force).
        supports_sparse: the store accepts sparse collections.
        persistent: data survive ``close()`` and a new ``make_store()``.
        ann_min_recall: recall@10 an ANN index must reach on clustered data.
        rtol: relative score tolerance for the exact comparisons.
    """

    exact: bool = True
    supports_sparse: bool = False
    persistent: bool = False
    ann_min_recall: float = 0.9
    rtol: float = 1e-5

    # -- fixtures ---------------------------------------------------------------
    @pytest.fixture
    def make_store(self) -> Callable[[], Any]:
        """Override: return a zero-argument factory of the store under test."""
        pytest.fail(f"{type(self).__name__} must define a make_store fixture")

    @pytest.fixture
    def store(self, make_store: Callable[[], Any]) -> Iterator[Any]:
        """A fresh store, closed after the test."""
        s = make_store()
        try:
            yield s
        finally:
            s.close()

    @pytest.fixture
    def name(self, store: Any) -> Iterator[str]:
        """A unique collection name, dropped after the test."""
        n = f"conf_{uuid.uuid4().hex[:12]}"
        yield n
        with contextlib.suppress(Exception):
            store.drop_collection(n)

    @staticmethod
    def _exact_reference(vectors: Any, ids: np.ndarray, queries: Any, k: int) -> SearchResult:
        from imsearch_align.adapters.exact import ExactStore

        with ExactStore(topk="numpy") as ex:
            ex.create_collection("ref", sparse=sp.issparse(vectors))
            ex.insert("ref", vectors, ids)
            return ex.search("ref", queries, k)

    # -- declaration ---------------------------------------------------------------
    def test_protocol(self, store: Any) -> None:
        assert isinstance(store, VectorStoreAdapter)
        assert bool(store.supports_sparse) is bool(self.supports_sparse), (
            f"store.supports_sparse is {store.supports_sparse}, the test class says "
            f"{self.supports_sparse}"
        )

    # -- quality -----------------------------------------------------------------------
    def test_exact_topk_dense(self, store: Any, name: str) -> None:
        if not self.exact:
            pytest.skip("approximate index: covered by test_recall_dense")
        rng = np.random.default_rng(1)
        x = rng.standard_normal((400, 24)).astype(np.float32)
        x[200:260] = x[100:160]  # exact duplicates under other ids: ties
        ids = rng.choice(10**12, size=len(x), replace=False).astype(np.int64)
        q = np.concatenate([rng.standard_normal((30, 24)).astype(np.float32), x[100:110]])
        store.create_collection(name, 24)
        store.insert(name, x[:150], ids[:150])
        store.insert(name, x[150:], ids[150:])
        for k in (1, 10, 50):
            res = store.search(name, q, k)
            assert_rows_ordered(res, k, len(q))
            assert_exact_topk(res, q, x, ids, k, rtol=self.rtol)

    def test_exact_topk_sparse(self, store: Any, name: str) -> None:
        if not self.supports_sparse:
            pytest.skip("store declares supports_sparse = False")
        if not self.exact:
            pytest.skip("approximate index: covered by test_recall_sparse")
        x, q = sparse_clustered(300, 64, nnz=6, n_queries=25, seed=2)
        ids = np.arange(300, dtype=np.int64)[::-1] * 1000 + 7
        store.create_collection(name, 64, sparse=True)
        store.insert(name, x, ids)
        for k in (1, 10):
            res = store.search(name, q, k)
            assert_rows_ordered(res, k, q.shape[0])
            assert_exact_topk(res, q, x, ids, k, rtol=self.rtol)

    def _check_recall(self, store: Any, name: str, x: Any, q: Any, ids: np.ndarray) -> None:
        store.create_collection(name, x.shape[1], sparse=sp.issparse(x))
        store.insert(name, x, ids)
        res = store.search(name, q, 10)
        assert_rows_ordered(res, 10, q.shape[0])
        ref = self._exact_reference(x, ids, q, 10)
        _, recall = ann_recall(res, ref, 10, rtol=self.rtol)
        need = 1.0 if self.exact else self.ann_min_recall
        assert recall >= need, f"recall@10 = {recall:.4f} on clustered data, expected >= {need}"

    def test_recall_dense(self, store: Any, name: str) -> None:
        x, q = clustered_vectors(3000, 32, n_clusters=30, n_queries=100, seed=3)
        ids = np.random.default_rng(3).permutation(3000).astype(np.int64) * 3 + 5
        self._check_recall(store, name, x, q, ids)

    def test_recall_sparse(self, store: Any, name: str) -> None:
        if not self.supports_sparse:
            pytest.skip("store declares supports_sparse = False")
        x, q = sparse_clustered(1500, 64, nnz=12, n_queries=60, seed=4)
        ids = np.arange(1500, dtype=np.int64) * 11 + 2
        self._check_recall(store, name, x, q, ids)

    # -- ids, k and edge cases ------------------------------------------------------------
    def test_ids_round_trip(self, store: Any, name: str) -> None:
        rng = np.random.default_rng(5)
        x, _ = clustered_vectors(200, 16, n_clusters=200, noise=0.05, seed=5)
        ids = rng.choice(2**62, size=200, replace=False).astype(np.int64) + (2**62 - 1)
        ids[0] = 2**63 - 1
        ids[1] = 0
        store.create_collection(name, 16)
        store.insert(name, x, ids)
        res = store.search(name, x[:20], 1)
        assert res.ids[:, 0].tolist() == ids[:20].tolist(), "a stored vector must find its own id"
        res = store.search(name, x[:20], 5)
        assert np.isin(res.ids[res.ids >= 0], ids).all(), "returned ids must be stored ids"

    def test_k_larger_than_collection(self, store: Any, name: str) -> None:
        x, q = clustered_vectors(5, 8, n_clusters=5, n_queries=3, seed=6)
        ids = np.array([50, 10, 40, 20, 30], dtype=np.int64)
        store.create_collection(name, 8)
        store.insert(name, x, ids)
        res = store.search(name, q, 8)
        assert_rows_ordered(res, 8, 3)
        assert (np.sort(res.ids[:, :5], axis=1) == np.sort(ids)).all(), "every stored id, once"
        assert (res.ids[:, 5:] == -1).all() and np.isneginf(res.scores[:, 5:]).all()
        if self.exact:
            assert_exact_topk(res, q, x, ids, 8, rtol=self.rtol)

    def test_search_empty_collection(self, store: Any, name: str) -> None:
        store.create_collection(name, 8)
        res = store.search(name, np.ones((4, 8), dtype=np.float32), 3)
        assert res.ids.shape == (4, 3) and (res.ids == -1).all()
        assert np.isneginf(res.scores).all()

    def test_search_unknown_collection(self, store: Any) -> None:
        missing = f"conf_missing_{uuid.uuid4().hex[:8]}"
        with pytest.raises((LookupError, ValueError), match=missing):
            store.search(missing, np.ones((1, 8), dtype=np.float32), 1)

    def test_create_existing(self, store: Any, name: str) -> None:
        store.create_collection(name, 8)
        with pytest.raises(ValueError, match=name):
            store.create_collection(name, 8)

    def test_bad_k(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        store.insert(name, np.eye(4, dtype=np.float32), np.arange(4))
        for k in (0, -3):
            with pytest.raises(ValueError, match="k"):
                store.search(name, np.ones((1, 4), dtype=np.float32), k)

    def test_duplicate_ids_in_one_insert(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        with pytest.raises(ValueError, match="ids"):
            store.insert(name, np.eye(4, dtype=np.float32), np.array([1, 2, 2, 3]))

    def test_duplicate_ids_against_stored(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        store.insert(name, np.eye(4, dtype=np.float32), np.array([1, 2, 3, 4]))
        with pytest.raises(ValueError, match="ids"):
            store.insert(name, np.eye(4, dtype=np.float32), np.array([9, 8, 4, 7]))

    def test_dimension_mismatch_insert(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        with pytest.raises(ValueError, match="dimension"):
            store.insert(name, np.ones((2, 5), dtype=np.float32), np.array([1, 2]))

    def test_dimension_mismatch_query(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        store.insert(name, np.eye(4, dtype=np.float32), np.arange(4))
        with pytest.raises(ValueError, match="dimension"):
            store.search(name, np.ones((1, 5), dtype=np.float32), 1)

    def test_non_finite(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        bad = np.eye(4, dtype=np.float32)
        bad[2, 1] = np.nan
        with pytest.raises(ValueError, match="finite"):
            store.insert(name, bad, np.arange(4))

    def test_sparse_declared(self, store: Any, name: str) -> None:
        x = sp.csr_matrix(np.eye(4, dtype=np.float32))
        if not self.supports_sparse:
            with pytest.raises((*_BAD_INPUT, NotImplementedError)):
                store.create_collection(name, 4, sparse=True)
                store.insert(name, x, np.arange(4))
            return
        store.create_collection(name, 4, sparse=True)
        with pytest.raises(_BAD_INPUT, match="sparse"):
            store.insert(name, np.eye(4, dtype=np.float32), np.arange(4))
        store.insert(name, x, np.arange(4))
        with pytest.raises(_BAD_INPUT, match="sparse"):
            store.search(name, np.ones((1, 4), dtype=np.float32), 1)
        dense = f"{name}_d"
        store.create_collection(dense, 4)
        try:
            with pytest.raises(_BAD_INPUT, match="dense"):
                store.insert(dense, x, np.arange(4))
        finally:
            store.drop_collection(dense)

    def test_rows_ordered_with_tie_rule(self, store: Any, name: str) -> None:
        rng = np.random.default_rng(7)
        base = rng.standard_normal((10, 8))
        base = (base / np.linalg.norm(base, axis=1, keepdims=True)).astype(np.float32)
        x = np.repeat(base, 4, axis=0)  # four identical copies of each vector
        ids = rng.permutation(1000)[:40].astype(np.int64)
        store.create_collection(name, 8)
        store.insert(name, x, ids)
        res = store.search(name, base, 12)
        assert_rows_ordered(res, 12, 10)
        if self.exact:
            assert_exact_topk(res, base, x, ids, 12, rtol=self.rtol)
            # the four copies of the query vector score highest, ids ascending
            own = np.sort(ids.reshape(10, 4), axis=1)
            assert (res.ids[:, :4] == own).all()

    def test_drop_collection(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        store.insert(name, np.eye(4, dtype=np.float32), np.arange(4))
        store.drop_collection(name)
        with pytest.raises((LookupError, ValueError), match=name):
            store.search(name, np.ones((1, 4), dtype=np.float32), 1)
        store.create_collection(name, 4)  # the name is free again

    def test_close_and_reopen(self, make_store: Callable[[], Any]) -> None:
        if not self.persistent:
            pytest.skip("store declares persistent = False")
        name = f"conf_{uuid.uuid4().hex[:12]}"
        x, q = clustered_vectors(50, 8, n_clusters=5, n_queries=5, seed=8)
        ids = np.arange(50, dtype=np.int64) * 7 + 3
        s = make_store()
        try:
            s.create_collection(name, 8)
            s.insert(name, x, ids)
            before = s.search(name, q, 5)
        finally:
            s.close()
        s = make_store()
        try:
            after = s.search(name, q, 5)
            np.testing.assert_array_equal(after.ids, before.ids)
            np.testing.assert_allclose(after.scores, before.scores, rtol=self.rtol)
        finally:
            with contextlib.suppress(Exception):
                s.drop_collection(name)
            s.close()
