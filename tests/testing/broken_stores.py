"""A correct reference store and deliberately broken ones, for testing the conformance kit.

``RefStore`` is brute force written from the definitions (dense and sparse,
the sparse no-hit rule, the tie rule), independent of ExactStore. Each
broken store is ``RefStore`` with one fault; the kit must catch every one,
whether the test class declares the store exact or approximate.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.sparse as sp

from imsearch_align.adapters.base import BaseStore, CollectionInfo, finalize_rows
from imsearch_align.framework.interfaces import SearchResult


class RefStore(BaseStore):
    """Brute force from the definitions: every doc scored, (score desc, id asc), k kept."""

    supports_sparse = True
    thread_safe = True

    def _create(self, info: CollectionInfo) -> None:
        info.state = []

    def _insert(self, info: CollectionInfo, vectors: Any, ids: np.ndarray) -> None:
        info.state.append(vectors)

    def _search(self, info: CollectionInfo, queries: Any, k: int) -> SearchResult:
        ids = info.ids
        if info.sparse:
            prod = (queries @ sp.vstack(info.state, format="csr").T).tocsr()
            prod.eliminate_zeros()  # the sparse rule: only non-zero inner products are hits
            s = np.full(prod.shape, -np.inf, dtype=np.float32)
            rows = np.repeat(np.arange(prod.shape[0]), np.diff(prod.indptr))
            s[rows, prod.indices] = prod.data
        else:
            s = queries @ np.concatenate(info.state).T
        order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
        sc = np.take_along_axis(s, order, axis=1)
        return finalize_rows(np.where(np.isfinite(sc), ids[order], -1), sc, k)


class SignFlipped(RefStore):
    """Ranks by -<q, x> and reports that score: the worst documents, confidently."""

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        return super().search(name, -queries, k)


class OffByOne(RefStore):
    """Returns every id plus one (a row-to-id mapping bug), with the right scores."""

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        r = super().search(name, queries, k)
        return SearchResult(np.where(r.ids >= 0, r.ids + 1, -1), r.scores)


class Unsorted(RefStore):
    """Returns each row's hits in reverse order (ascending scores)."""

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        r = super().search(name, queries, k)
        ids, sc = r.ids.copy(), r.scores.copy()
        for i in range(ids.shape[0]):
            n = int((ids[i] >= 0).sum())
            ids[i, :n], sc[i, :n] = ids[i, :n][::-1], sc[i, :n][::-1]
        return SearchResult(ids, sc)


class WrongRow(RefStore):
    """Returns the results of query i in row i + 1 (rows rotated)."""

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        r = super().search(name, queries, k)
        return SearchResult(np.roll(r.ids, 1, axis=0), np.roll(r.scores, 1, axis=0))


class Racy(RefStore):
    """Keeps the current call's queries in an attribute every thread shares."""

    thread_safe = True  # a false declaration

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        self._queries = queries
        time.sleep(0.005)  # another thread replaces self._queries meanwhile
        return super().search(name, self._queries, k)


class HonestRacy(Racy):
    """The same store, declaring what it is: the evaluator serialises its calls."""

    thread_safe = False
