"""Conformance kit: the pytest suite every vector store adapter must pass.

Subclass :class:`StoreConformance` in a test module, say what your store
promises with a few class attributes, and give a ``make_store`` fixture that
returns a *factory* (called once per test; called again to reopen the store
when it is persistent). pytest then runs every case below against it::

    # tests/test_my_store.py (in your package, or in imsearch_align)
    import pytest
    from imsearch_align.testing.store_conformance import StoreConformance
    from mypackage import MyStore

    class TestMyStore(StoreConformance):
        exact = True             # exact index: top-k must be the true top-k (tie-tolerant)
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

Run it with ``pytest tests/test_my_store.py``. A class whose name does not
start with ``Test`` is not collected, so importing ``StoreConformance``
itself runs nothing.

**The kit believes nothing a store says about its results.** Every returned
id is looked up among the inserted ids and its true inner product with the
query is recomputed from the inserted vectors (float64), as ann-benchmarks
does; recall and fidelity come from those true scores
(:func:`imsearch_align.framework.fidelity.ann_recall`), never from the
reported ones. This holds for exact and approximate stores alike: an
approximate index may miss neighbours (its recall is measured), but what it
returns must be true. A failure names the first bad query, id and score and
the likely cause, e.g. ``query 3: id 17 reported 5.1, true -5.1: sign
flipped?``.

What every store must do (test names in brackets):

* Be a :class:`~imsearch_align.framework.interfaces.VectorStoreAdapter`
  with every protocol method, ``supports_sparse`` equal to the class
  attribute and, when declared, a bool ``thread_safe`` [test_protocol].
* Return the truth, dense and sparse: every hit is an inserted id, at most
  once per row, with a reported score equal to its true inner product
  within ``rtol * ||q|| * ||x||``; each row holds ``min(k, n)`` hits (dense)
  or the documents with a non-zero inner product, at most ``k`` (sparse);
  hits in descending true order; results in the row of their query
  [test_scores_are_true_dense, test_scores_are_true_sparse].
* Exact indexes: the true top-k, tie-tolerantly (a doc tied with the k-th
  true score is as good as the one brute force keeps) [test_exact_topk_dense,
  test_exact_topk_sparse].
* recall@10 from true scores on *clustered* data (uniform random 512-d data
  gives ANN indexes recall near 0.25 whatever the library): 1.0 for exact
  indexes, at least ``ann_min_recall`` otherwise [test_recall_dense,
  test_recall_sparse].
* ``search`` from several threads at once gives the answers of serial
  calls, because the evaluator searches from a thread pool; a store that
  cannot do that declares ``thread_safe = False`` and the evaluator
  serialises its calls (the test is then skipped) [test_concurrent_search].
* Sparse: a query that shares terms with fewer than ``k`` documents gets
  exactly those documents, then ``-1`` / ``-inf``; one that shares no term
  gets only ``-1`` [test_sparse_fewer_than_k_documents_share_terms].
* ``create_collection`` without ``dim``: the first insert fixes it
  [test_create_collection_without_dim].
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
* Scores are float32 ``(nq, k)``, ids int64, each row sorted by reported
  score descending and, among equal scores, by id ascending, no-hits last
  [test_rows_ordered_with_tie_rule].
* ``drop_collection`` removes it [test_drop_collection]; with
  ``persistent = True`` dense and sparse data survive ``close()`` and a new
  store from ``make_store()`` [test_close_and_reopen,
  test_sparse_close_and_reopen].

Every test uses its own collection name (``conf_<random hex>``, valid in
Milvus) and drops it afterwards, so a shared server stays clean. Data are
small and seeded; the in-process stores run the whole suite in seconds. The
helpers (:func:`check_search`, :func:`assert_rows_ordered`,
:func:`assert_exact_topk`, :func:`clustered_vectors`,
:func:`sparse_clustered`) are public for adapter-specific tests.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.framework.fidelity import FidelityReport, ann_recall
from imsearch_align.framework.interfaces import SearchResult, VectorStoreAdapter, is_thread_safe
from imsearch_align.framework.registry import store_protocol_problems

__all__ = [
    "StoreConformance",
    "assert_exact_topk",
    "assert_rows_ordered",
    "check_search",
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


def _first(mask: np.ndarray) -> tuple[int, int]:
    """(row, column) of the first True of a 2-D mask, in row-major order."""
    r, c = np.argwhere(mask)[0]
    return int(r), int(c)


def assert_rows_ordered(result: SearchResult, k: int, nq: int) -> None:
    """Shape, dtypes, and each row sorted by (score desc, id asc) with no-hits (-1, -inf) last.

    Checks the *reported* scores only (the order a caller sees); whether
    they are true is :func:`check_search`'s business.
    """
    assert isinstance(result, SearchResult), f"search must return SearchResult, got {type(result)}"
    assert result.ids.shape == (nq, k), f"ids shape {result.ids.shape}, expected {(nq, k)}"
    assert result.ids.dtype == np.int64, f"ids dtype {result.ids.dtype}, expected int64"
    assert result.scores.dtype == np.float32, (
        f"scores dtype {result.scores.dtype}, expected float32"
    )
    ids, sc = result.ids, result.scores
    miss = ids < 0
    if (ids[miss] != -1).any():
        i, j = _first(miss & (ids != -1))
        raise AssertionError(
            f"query {i}, rank {j}: id {ids[i, j]}: a negative id other than -1 was returned"
        )
    if not np.isneginf(sc[miss]).all():
        i, j = _first(miss & ~np.isneginf(sc))
        raise AssertionError(
            f"query {i}, rank {j}: a no-hit (-1) must have score -inf, got {sc[i, j]}"
        )
    if not np.isfinite(sc[~miss]).all():
        i, j = _first(~miss & ~np.isfinite(sc))
        raise AssertionError(
            f"query {i}, rank {j}: id {ids[i, j]} has score {sc[i, j]}; a hit needs a finite score"
        )
    hole = miss[:, :-1] & ~miss[:, 1:]
    if hole.any():
        i, j = _first(hole)
        raise AssertionError(
            f"query {i}, rank {j + 1}: id {ids[i, j + 1]} follows a no-hit (-1): "
            "a hit follows a no-hit; pad rows at the end"
        )
    a_s, b_s = sc[:, :-1], sc[:, 1:]
    real = ~miss[:, 1:]
    up = real & (b_s > a_s)
    if up.any():
        i, j = _first(up)
        raise AssertionError(
            f"query {i}: rank {j} id {ids[i, j]} score {a_s[i, j]:.6g} is below rank {j + 1} "
            f"id {ids[i, j + 1]} score {b_s[i, j]:.6g}: scores are not sorted descending "
            "(rows not sorted?)"
        )
    tie = real & (a_s == b_s) & (ids[:, 1:] <= ids[:, :-1])
    if tie.any():
        i, j = _first(tie)
        raise AssertionError(
            f"query {i}: ranks {j} and {j + 1} have equal scores {a_s[i, j]:.6g} but ids "
            f"{ids[i, j]} then {ids[i, j + 1]}: equal scores are not ordered by ascending id "
            "(finish rows with finalize_rows)"
        )


def check_search(
    result: SearchResult,
    queries: Any,
    vectors: Any,
    ids: Any,
    k: int,
    *,
    exact: bool,
    rtol: float | None = None,
    min_recall: float | None = None,
) -> FidelityReport:
    """Check a search result against the truth; raise ``AssertionError`` naming the first fault.

    Structure and reported order (:func:`assert_rows_ordered`), then every
    returned id and score against the true inner products
    (:func:`~imsearch_align.framework.fidelity.ann_recall`): inserted ids,
    no repeats, true scores, the row length of the sparse/dense rule, true
    order. Then recall@k: 1.0 when ``exact``, else at least ``min_recall``
    (no recall requirement when ``min_recall`` is None).

    Returns:
        The :class:`~imsearch_align.framework.fidelity.FidelityReport`.
    """
    nq = int(queries.shape[0])
    assert_rows_ordered(result, k, nq)
    rep = ann_recall(result, vectors, ids, queries, k, rtol=rtol)
    if not rep.ok:
        counts = ", ".join(
            f"{v} {label}"
            for v, label in (
                (rep.n_score_mismatch, "scores that are not the true inner product"),
                (rep.n_unknown_ids, "ids never inserted"),
                (rep.n_duplicate_ids, "repeated ids"),
                (rep.n_zero_ip_hits, "documents sharing no term with the query"),
                (rep.n_short_rows, "rows with too few hits"),
                (rep.n_misordered_rows, "rows out of true order"),
            )
            if v
        )
        more = "".join(f"\n  {p}" for p in rep.problems[1:])
        raise AssertionError(f"{rep.first_problem}\n({counts}, k={k}){more}")
    need = 1.0 if exact else min_recall
    if need is not None and rep.recall < need - 1e-12:
        worst = int(np.argmin(rep.per_query))
        kind = "an exact index must find the true top-k" if exact else "ann_min_recall"
        raise AssertionError(
            f"recall@{k} = {rep.recall:.4f} from true scores, expected >= {need} ({kind}); "
            f"query {worst} has recall {rep.per_query[worst]:.3f}: "
            f"returned ids {result.ids[worst, :k].tolist()}"
        )
    return rep


def assert_exact_topk(
    result: SearchResult,
    queries: Any,
    vectors: Any,
    ids: np.ndarray,
    k: int,
    *,
    rtol: float | None = None,
) -> None:
    """The result is the true top-k, tie-tolerantly: :func:`check_search` with ``exact=True``."""
    check_search(result, queries, vectors, ids, k, exact=True, rtol=rtol)


def _dense_ties(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """400 x 24 Gaussian docs with 60 exact duplicates under other ids, 40 queries."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((400, 24)).astype(np.float32)
    x[200:260] = x[100:160]  # exact duplicates under other ids: ties
    ids = rng.choice(10**12, size=len(x), replace=False).astype(np.int64)
    q = np.concatenate([rng.standard_normal((30, 24)).astype(np.float32), x[100:110]])
    return x, ids, q


class StoreConformance:
    """Base class of the conformance suite; see the module docstring.

    Class attributes to set in a subclass:
        exact: the index is exact (flat / brute force).
        supports_sparse: the store accepts sparse collections.
        persistent: data survive ``close()`` and a new ``make_store()``.
        ann_min_recall: recall@10 an ANN index must reach on clustered data.
        rtol: score tolerance relative to ``||q|| * ||x||``; None = the
            float32 default of :func:`~imsearch_align.framework.fidelity.default_rtol`.
        threads: threads of the concurrency test.
    """

    exact: bool = True
    supports_sparse: bool = False
    persistent: bool = False
    ann_min_recall: float = 0.9
    rtol: float | None = None
    threads: int = 8

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

    def _check(self, res: SearchResult, q: Any, x: Any, ids: Any, k: int, **kw: Any) -> Any:
        kw.setdefault("exact", self.exact)
        return check_search(res, q, x, ids, k, rtol=self.rtol, **kw)

    # -- declaration ---------------------------------------------------------------
    def test_protocol(self, store: Any) -> None:
        problems = store_protocol_problems(store)
        assert not problems, f"{type(store).__name__}: {'; '.join(problems)}"
        assert isinstance(store, VectorStoreAdapter)
        assert bool(store.supports_sparse) is bool(self.supports_sparse), (
            f"store.supports_sparse is {store.supports_sparse}, the test class says "
            f"{self.supports_sparse}"
        )

    # -- truth ---------------------------------------------------------------------------
    def test_scores_are_true_dense(self, store: Any, name: str) -> None:
        x, ids, q = _dense_ties(1)
        store.create_collection(name, 24)
        store.insert(name, x[:150], ids[:150])
        store.insert(name, x[150:], ids[150:])
        for k in (1, 10, 50):
            self._check(store.search(name, q, k), q, x, ids, k, exact=False)

    def test_scores_are_true_sparse(self, store: Any, name: str) -> None:
        if not self.supports_sparse:
            pytest.skip("store declares supports_sparse = False")
        x, q = sparse_clustered(300, 64, nnz=6, n_queries=25, seed=2)
        ids = np.arange(300, dtype=np.int64)[::-1] * 1000 + 7
        store.create_collection(name, 64, sparse=True)
        store.insert(name, x, ids)
        for k in (1, 10):
            self._check(store.search(name, q, k), q, x, ids, k, exact=False)

    def test_exact_topk_dense(self, store: Any, name: str) -> None:
        if not self.exact:
            pytest.skip("approximate index: recall is measured by test_recall_dense")
        x, ids, q = _dense_ties(1)
        store.create_collection(name, 24)
        store.insert(name, x[:150], ids[:150])
        store.insert(name, x[150:], ids[150:])
        for k in (1, 10, 50):
            self._check(store.search(name, q, k), q, x, ids, k)

    def test_exact_topk_sparse(self, store: Any, name: str) -> None:
        if not self.supports_sparse:
            pytest.skip("store declares supports_sparse = False")
        if not self.exact:
            pytest.skip("approximate index: recall is measured by test_recall_sparse")
        x, q = sparse_clustered(300, 64, nnz=6, n_queries=25, seed=2)
        ids = np.arange(300, dtype=np.int64)[::-1] * 1000 + 7
        store.create_collection(name, 64, sparse=True)
        store.insert(name, x, ids)
        for k in (1, 10):
            self._check(store.search(name, q, k), q, x, ids, k)

    def _check_recall(self, store: Any, name: str, x: Any, q: Any, ids: np.ndarray) -> None:
        store.create_collection(name, x.shape[1], sparse=sp.issparse(x))
        store.insert(name, x, ids)
        self._check(store.search(name, q, 10), q, x, ids, 10, min_recall=self.ann_min_recall)

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

    def test_concurrent_search(self, store: Any, name: str) -> None:
        if not is_thread_safe(store):
            pytest.skip("store declares thread_safe = False: the evaluator serialises its calls")
        x, q = clustered_vectors(2000, 32, n_clusters=40, n_queries=8 * self.threads, seed=9)
        ids = np.arange(2000, dtype=np.int64) * 7 + 1
        store.create_collection(name, 32)
        store.insert(name, x, ids)
        batches = np.array_split(q, self.threads)
        rounds = 3
        serial = [store.search(name, b, 10) for b in batches]
        got: dict[tuple[int, int], SearchResult] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(self.threads)

        def work(t: int) -> None:
            try:
                start.wait()
                for r in range(rounds):
                    got[t, r] = store.search(name, batches[t], 10)
            except BaseException as exc:  # reported below, with the thread
                errors.append(exc)

        pool = [threading.Thread(target=work, args=(t,)) for t in range(self.threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join(timeout=120)
        advice = (
            "the evaluator searches from a thread pool: make search thread-safe, or declare "
            "thread_safe = False so that it serialises the calls"
        )
        if errors:
            raise AssertionError(
                f"search from {self.threads} threads at once raised "
                f"{type(errors[0]).__name__}: {errors[0]}; {advice}"
            ) from errors[0]
        assert len(got) == self.threads * rounds, "a search thread did not finish in 120 s"
        for (t, r), res in sorted(got.items()):
            ref = serial[t]
            diff = (res.ids != ref.ids) | ~np.isclose(res.scores, ref.scores, rtol=1e-6, atol=0)
            if diff.any():
                i, j = _first(diff)
                raise AssertionError(
                    f"search from {self.threads} threads at once differs from serial calls: "
                    f"thread {t}, round {r}, query {i}, rank {j}: id {res.ids[i, j]} score "
                    f"{res.scores[i, j]:.6g}, serially id {ref.ids[i, j]} score "
                    f"{ref.scores[i, j]:.6g}: not thread-safe? {advice}"
                )
        for t, b in enumerate(batches):
            self._check(serial[t], b, x, ids, 10, min_recall=self.ann_min_recall)

    # -- sparse rule, dim=None ------------------------------------------------------------
    def test_sparse_fewer_than_k_documents_share_terms(self, store: Any, name: str) -> None:
        if not self.supports_sparse:
            pytest.skip("store declares supports_sparse = False")
        rng = np.random.default_rng(10)
        n, dim = 40, 50
        # docs 0-36 use terms 0-39; docs 37-39 also use term 45, which only query 0 has
        dense = np.zeros((n, dim), dtype=np.float32)
        for i in range(n):
            dense[i, rng.choice(40, size=3, replace=False)] = rng.uniform(0.1, 1.0, 3)
        dense[37:, 45] = [0.5, 0.9, 0.2]
        x = sp.csr_matrix(dense)
        ids = np.arange(n, dtype=np.int64) * 10 + 3
        qd = np.zeros((2, dim), dtype=np.float32)
        qd[0, 45] = 1.0  # shares a term with exactly 3 documents
        qd[1, 48] = 1.0  # shares no term with any document
        q = sp.csr_matrix(qd)
        store.create_collection(name, dim, sparse=True)
        store.insert(name, x, ids)
        res = store.search(name, q, 10)
        want = ids[[38, 37, 39]].tolist()  # by score 0.9, 0.5, 0.2
        rule = (
            "a sparse collection returns the documents whose inner product with the query is "
            "non-zero, at most k, then pads with -1 / -inf"
        )
        assert res.ids[0, :3].tolist() == want and (res.ids[0, 3:] == -1).all(), (
            f"query 0 shares a term with 3 documents {want}, got ids {res.ids[0].tolist()}: {rule}"
        )
        assert (res.ids[1] == -1).all(), (
            f"query 1 shares no term with any document, got ids {res.ids[1].tolist()}: {rule}"
        )
        self._check(res, q, x, ids, 10)

    def test_create_collection_without_dim(self, store: Any, name: str) -> None:
        x, q = clustered_vectors(300, 16, n_queries=20, seed=11)
        ids = np.arange(300, dtype=np.int64) + 100
        store.create_collection(name)
        store.insert(name, x[:100], ids[:100])
        store.insert(name, x[100:], ids[100:])
        self._check(store.search(name, q, 10), q, x, ids, 10, min_recall=self.ann_min_recall)
        with pytest.raises(ValueError, match="dimension"):
            store.insert(name, np.ones((2, 17), dtype=np.float32), np.array([1, 2]))
        if self.supports_sparse:
            xs, qs = sparse_clustered(200, 40, nnz=5, n_queries=10, seed=12)
            other = f"{name}_s"
            store.create_collection(other, sparse=True)
            try:
                store.insert(other, xs, np.arange(200, dtype=np.int64))
                res = store.search(other, qs, 10)
                self._check(res, qs, xs, np.arange(200), 10, min_recall=self.ann_min_recall)
            finally:
                store.drop_collection(other)

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
        self._check(store.search(name, x[:20], 5), x[:20], x, ids, 5, exact=False)

    def test_k_larger_than_collection(self, store: Any, name: str) -> None:
        x, q = clustered_vectors(5, 8, n_clusters=5, n_queries=3, seed=6)
        ids = np.array([50, 10, 40, 20, 30], dtype=np.int64)
        store.create_collection(name, 8)
        store.insert(name, x, ids)
        res = store.search(name, q, 8)
        self._check(res, q, x, ids, 8)
        assert (np.sort(res.ids[:, :5], axis=1) == np.sort(ids)).all(), "every stored id, once"
        assert (res.ids[:, 5:] == -1).all() and np.isneginf(res.scores[:, 5:]).all()

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
        self._check(res, base, x, ids, 12)
        if self.exact:
            # the four copies of the query vector score highest, ids ascending
            own = np.sort(ids.reshape(10, 4), axis=1)
            assert (res.ids[:, :4] == own).all(), (
                f"the 4 copies of each query must come first, ids ascending: expected "
                f"{own[0].tolist()}, got {res.ids[0, :4].tolist()} (query 0)"
            )

    def test_drop_collection(self, store: Any, name: str) -> None:
        store.create_collection(name, 4)
        store.insert(name, np.eye(4, dtype=np.float32), np.arange(4))
        store.drop_collection(name)
        with pytest.raises((LookupError, ValueError), match=name):
            store.search(name, np.ones((1, 4), dtype=np.float32), 1)
        store.create_collection(name, 4)  # the name is free again

    def _reopen(self, make_store: Callable[[], Any], x: Any, q: Any, ids: np.ndarray) -> None:
        name = f"conf_{uuid.uuid4().hex[:12]}"
        sparse = sp.issparse(x)
        s = make_store()
        try:
            s.create_collection(name, x.shape[1], sparse=sparse)
            s.insert(name, x, ids)
            before = s.search(name, q, 5)
        finally:
            s.close()
        s = make_store()
        try:
            after = s.search(name, q, 5)
            np.testing.assert_array_equal(after.ids, before.ids)
            np.testing.assert_allclose(after.scores, before.scores, rtol=1e-5, atol=1e-6)
            self._check(after, q, x, ids, 5, min_recall=self.ann_min_recall)
            if sparse:
                with pytest.raises(_BAD_INPUT, match="sparse"):
                    s.search(name, np.ones((1, x.shape[1]), dtype=np.float32), 1)
        finally:
            with contextlib.suppress(Exception):
                s.drop_collection(name)
            s.close()

    def test_close_and_reopen(self, make_store: Callable[[], Any]) -> None:
        if not self.persistent:
            pytest.skip("store declares persistent = False")
        x, q = clustered_vectors(50, 8, n_clusters=5, n_queries=5, seed=8)
        self._reopen(make_store, x, q, np.arange(50, dtype=np.int64) * 7 + 3)

    def test_sparse_close_and_reopen(self, make_store: Callable[[], Any]) -> None:
        if not self.persistent:
            pytest.skip("store declares persistent = False")
        if not self.supports_sparse:
            pytest.skip("store declares supports_sparse = False")
        x, q = sparse_clustered(60, 30, nnz=4, n_queries=6, seed=13)
        self._reopen(make_store, x, q, np.arange(60, dtype=np.int64) * 5 + 2)
