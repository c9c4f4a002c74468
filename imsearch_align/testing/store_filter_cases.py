"""The conformance kit's cases about filtered search, for stores that implement it.

:class:`FilterCases` is a mixin of
:class:`~imsearch_align.testing.store_conformance.StoreConformance`; every
case is skipped for a store that is not
:class:`~imsearch_align.framework.interfaces.FilteredSearch`. What they require:

* ``search_filtered`` over the rows the filter keeps is brute force over
  those rows: for an exact store the true top-k of the kept rows,
  tie-tolerantly (the data hold exact duplicates under other ids); for an
  approximate one, every returned id is a kept one with its true score, in
  true order [test_filtered_search_dense, test_filtered_search_sparse];
* ``k`` beyond the kept rows: the kept ids (all of them for an exact store),
  then ``-1`` / ``-inf`` [test_filtered_padding]; a value no row has: only
  ``-1`` [test_filtered_value_no_row_has];
* a field the collection did not declare, an expression the store cannot
  parse (its message holds the expression), attributes with other names,
  lengths or a non-integer dtype: ``ValueError`` / ``TypeError``
  [test_filtered_bad_input, test_attributes_checked_at_insert].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from imsearch_align.framework.fidelity import ann_recall
from imsearch_align.framework.interfaces import Filter, FilteredSearch
from imsearch_align.testing.store_checks import assert_rows_ordered
from imsearch_align.testing.store_data import dense_ties, sparse_clustered

__all__ = ["FilterCases", "categories"]


def categories(n: int, n_values: int = 10, seed: int = 0) -> np.ndarray:
    """Seeded int64 categories ``0..n_values-1`` for ``n`` rows (the kit's attribute)."""
    return np.random.default_rng(seed).integers(0, n_values, n).astype(np.int64)


class FilterCases:
    """Cases: filtered search against brute force over the kept rows, padding, refusals."""

    exact: bool
    supports_sparse: bool
    rtol: float | None

    _check: Callable[..., Any]

    def _need_filter(self, store: Any) -> None:
        if not isinstance(store, FilteredSearch):
            pytest.skip(f"{type(store).__name__} is not FilteredSearch")

    def _filled(self, store: Any, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, Any]:
        x, ids, q = dense_ties(5)
        cat = categories(len(ids), seed=5)
        store.create_collection(name, x.shape[1])
        store.insert(name, x[:150], ids[:150], attributes={"category": cat[:150]})
        store.insert(name, x[150:], ids[150:], attributes={"category": cat[150:]})
        return x, ids, cat, q

    def _check_kept(self, res: Any, q: Any, x: Any, ids: Any, k: int, keep: np.ndarray) -> None:
        """Exact: the true top-k of the kept rows. Approximate: kept ids, true scores, order."""
        if self.exact:
            self._check(res, q, x[keep], ids[keep], k, exact=True)
            return
        assert_rows_ordered(res, k, q.shape[0])
        rep = ann_recall(res, x[keep], ids[keep], q, k, rtol=self.rtol)
        bad = {
            "ids the filter does not keep": rep.n_unknown_ids,
            "scores that are not the true inner product": rep.n_score_mismatch,
            "repeated ids": rep.n_duplicate_ids,
            "rows out of true order": rep.n_misordered_rows,
        }
        assert not any(bad.values()), f"{rep.first_problem} ({bad}, k={k})"

    def test_filtered_search_dense(self, store: Any, name: str) -> None:
        self._need_filter(store)
        x, ids, cat, q = self._filled(store, name)
        for values in ((3,), (0, 4, 7)):
            keep = np.isin(cat, values)
            for k in (1, 10, 50):
                res = store.search_filtered(name, q, k, Filter("category", values))
                self._check_kept(res, q, x, ids, k, keep)

    def test_filtered_search_sparse(self, store: Any, name: str) -> None:
        self._need_filter(store)
        if not self.supports_sparse:
            pytest.skip("store declares supports_sparse = False")
        x, q = sparse_clustered(300, 64, nnz=6, n_queries=20, seed=4)
        ids = np.arange(300, dtype=np.int64)[::-1] * 1000 + 7
        cat = categories(300, seed=4)
        store.create_collection(name, 64, sparse=True)
        store.insert(name, x, ids, attributes={"category": cat})
        keep = np.isin(cat, (2, 5))
        for k in (1, 10):
            res = store.search_filtered(name, q, k, Filter("category", (2, 5)))
            self._check(res, q, x[keep], ids[keep], k, exact=False)
            if self.exact:
                self._check(res, q, x[keep], ids[keep], k, exact=True)

    def test_filtered_padding(self, store: Any, name: str) -> None:
        self._need_filter(store)
        _, ids, cat, q = self._filled(store, name)
        keep = cat == 6
        n_kept = int(keep.sum())
        k = n_kept + 5
        res = store.search_filtered(name, q, k, Filter("category", [6]))
        assert_rows_ordered(res, k, q.shape[0])
        hits = res.ids >= 0
        assert (hits.sum(axis=1) <= n_kept).all(), "more hits than rows the filter keeps"
        assert np.isin(res.ids[hits], ids[keep]).all(), "an id the filter does not keep"
        assert (res.scores[~hits] == -np.inf).all() and (res.ids[:, n_kept:] == -1).all()
        if self.exact:
            for row in res.ids:
                assert sorted(row[:n_kept].tolist()) == sorted(ids[keep].tolist())

    def test_filtered_value_no_row_has(self, store: Any, name: str) -> None:
        self._need_filter(store)
        _, _, _, q = self._filled(store, name)
        res = store.search_filtered(name, q, 4, Filter("category", [10_000]))
        assert res.ids.shape == (q.shape[0], 4)
        assert (res.ids == -1).all() and (res.scores == -np.inf).all()

    def test_filtered_bad_input(self, store: Any, name: str) -> None:
        self._need_filter(store)
        _, _, _, q = self._filled(store, name)
        with pytest.raises(ValueError, match="colour"):
            store.search_filtered(name, q, 3, Filter("colour", [1]))
        expr = "category in [1, 2"
        with pytest.raises(ValueError) as err:
            store.search_filtered(name, q, 3, Filter("category", [1, 2], expression=expr))
        assert expr in str(err.value), f"the message must hold the expression: {err.value}"

    def test_attributes_checked_at_insert(self, store: Any, name: str) -> None:
        self._need_filter(store)
        x, ids, cat, _ = self._filled(store, name)
        new = ids.max() + 1 + np.arange(3, dtype=np.int64)
        rows = x[:3]
        with pytest.raises(ValueError, match="same names"):
            store.insert(name, rows, new, attributes={"colour": cat[:3]})
        with pytest.raises(ValueError, match="carry them"):
            store.insert(name, rows, new)
        with pytest.raises(ValueError, match="one value per row"):
            store.insert(name, rows, new, attributes={"category": cat[:2]})
        with pytest.raises(TypeError, match="integers"):
            store.insert(name, rows, new, attributes={"category": np.ones(3)})
        assert store.count(name) == len(ids)
