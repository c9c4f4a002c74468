"""The conformance kit's cases about the contract: ids, k, edge cases, bad input, persistence.

:class:`ContractCases` is a mixin of
:class:`~imsearch_align.testing.store_conformance.StoreConformance`, which
supplies the fixtures (``make_store``, ``store``, ``name``), the declarations
(``exact``, ``supports_sparse``, ``persistent``, ``ann_min_recall``) and
``_check``. The module docstring of
``store_conformance`` lists what each case requires.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.testing.store_data import clustered_vectors, sparse_clustered

__all__ = ["ContractCases"]

_BAD_INPUT = (ValueError, TypeError)


class ContractCases:
    """Cases: ids and k, empty and unknown collections, bad input, tie rule, drop, reopen."""

    exact: bool
    supports_sparse: bool
    persistent: bool
    ann_min_recall: float

    #: :func:`~imsearch_align.testing.store_checks.check_search` with the class's
    #: declarations (``StoreConformance._check``).
    _check: Callable[..., Any]

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
