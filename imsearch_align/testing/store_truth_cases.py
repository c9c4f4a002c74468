"""The conformance kit's cases about the truth of answers: scores, top-k, recall, threads.

:class:`TruthCases` is a mixin of
:class:`~imsearch_align.testing.store_conformance.StoreConformance`, which
supplies the fixtures (``store``, ``name``), the declarations (``exact``,
``supports_sparse``, ``ann_min_recall``, ``threads``) and ``_check``
(:func:`~imsearch_align.testing.store_checks.check_search` with the class's
tolerance). The module docstring of ``store_conformance`` lists what each
case requires.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.framework.interfaces import SearchResult, is_thread_safe
from imsearch_align.testing.store_checks import first_true
from imsearch_align.testing.store_data import clustered_vectors, dense_ties, sparse_clustered

__all__ = ["TruthCases"]


class TruthCases:
    """Cases: true scores, exact top-k, recall, concurrent search, the sparse rule, dim=None."""

    exact: bool
    supports_sparse: bool
    ann_min_recall: float
    threads: int

    #: :func:`~imsearch_align.testing.store_checks.check_search` with the class's
    #: declarations (``StoreConformance._check``).
    _check: Callable[..., Any]

    # -- truth ---------------------------------------------------------------------------
    def test_scores_are_true_dense(self, store: Any, name: str) -> None:
        x, ids, q = dense_ties(1)
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
        x, ids, q = dense_ties(1)
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
                i, j = first_true(diff)
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
