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

* Filtered search, for a store that is
  :class:`~imsearch_align.framework.interfaces.FilteredSearch` (skipped
  otherwise): brute force over the rows the filter keeps, padding, a value no
  row has, refusals (:mod:`~imsearch_align.testing.store_filter_cases`)
  [test_filtered_*, test_attributes_checked_at_insert].

Every test uses its own collection name (``conf_<random hex>``, valid in
Milvus) and drops it afterwards, so a shared server stays clean. Data are
small and seeded; the in-process stores run the whole suite in seconds. The
helpers (:func:`check_search`, :func:`assert_rows_ordered`,
:func:`assert_exact_topk`, :func:`clustered_vectors`,
:func:`sparse_clustered`) are public for adapter-specific tests.

This module is the kit's front door; its rooms are
:mod:`~imsearch_align.testing.store_data` (seeded data),
:mod:`~imsearch_align.testing.store_checks` (result checks),
:mod:`~imsearch_align.testing.store_truth_cases`,
:mod:`~imsearch_align.testing.store_contract_cases` and
:mod:`~imsearch_align.testing.store_filter_cases` (the test cases, mixed
into :class:`StoreConformance`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from imsearch_align.framework.interfaces import SearchResult, VectorStoreAdapter
from imsearch_align.framework.protocol_checks import store_protocol_problems
from imsearch_align.testing.store_checks import assert_exact_topk, assert_rows_ordered, check_search
from imsearch_align.testing.store_contract_cases import ContractCases
from imsearch_align.testing.store_data import clustered_vectors, sparse_clustered
from imsearch_align.testing.store_filter_cases import FilterCases
from imsearch_align.testing.store_truth_cases import TruthCases

__all__ = [
    "StoreConformance",
    "assert_exact_topk",
    "assert_rows_ordered",
    "check_search",
    "clustered_vectors",
    "sparse_clustered",
]


class StoreConformance(TruthCases, ContractCases, FilterCases):
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
