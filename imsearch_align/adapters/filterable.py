"""The filtered-search verb on top of :class:`~imsearch_align.adapters.base.BaseStore`.

:class:`FilterableStore` implements
:meth:`~imsearch_align.framework.interfaces.FilteredSearch.search_filtered`
once (the checks of ``search``, the filter against the collection's declared
attributes, a raw expression refused unless the store parses them, the mask
of kept rows, the all-no-hit answer when nothing passes) and calls one hook a
subclass writes, ``_search_filtered``. ExactStore, FaissStore, QdrantStore
and LanceDBStore build on it; :func:`sparse_search_kept` is the exact sparse
search over the kept rows that ExactStore and FaissStore share.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from imsearch_align.adapters.attributes import check_filter, kept_rows, refuse_expression
from imsearch_align.adapters.base import BaseStore
from imsearch_align.adapters.naming import CollectionInfo
from imsearch_align.adapters.rows import empty_result
from imsearch_align.adapters.sparse_search import SparseCollection, sparse_topk
from imsearch_align.framework.interfaces import Filter, SearchResult

__all__ = ["FilterableStore", "sparse_search_kept"]


class FilterableStore(BaseStore):
    """:class:`BaseStore` with the ``search_filtered`` verb (FilteredSearch).

    A subclass writes one more hook, ``_search_filtered(info, queries, k,
    filter, keep)``: the top-``k`` of validated queries among the rows the
    filter keeps, finished as ``_search``'s are. ``keep`` is a boolean mask
    over the collection's rows in insertion order (row ``i`` has id
    ``info.ids[i]``; ``None`` for a store that does not keep ids), never
    all False (that answer, all no-hits, is given here). A store that
    parses raw expressions overrides :meth:`_check_expression`.
    """

    def search_filtered(
        self, collection: str, queries: Any, k: int, filter: Filter
    ) -> SearchResult:
        """Top-``k`` by inner product per query row among the documents ``filter`` keeps.

        The same conventions as :meth:`search`: rows ordered by the tie rule,
        padded with ``-1`` / ``-inf`` where fewer than ``k`` documents pass.
        A ``filter.field`` the collection did not declare raises
        ``ValueError`` naming its attributes; a value no row has gives
        no-hits.
        """
        info, q, k, done = self._prepare_search(collection, queries, k)
        f = check_filter(filter, info)
        self._check_expression(f)
        if done is not None:
            return done
        keep = kept_rows(info, f) if self.keeps_ids else None
        if keep is not None and not keep.any():
            return empty_result(q.shape[0], k)
        return self._search_filtered(info, q, k, f, keep)

    def _check_expression(self, filter: Filter) -> None:
        """Refuse ``filter.expression`` (default: this store does not parse expressions)."""
        refuse_expression(self, filter)

    @abstractmethod
    def _search_filtered(
        self, info: CollectionInfo, queries: Any, k: int, filter: Filter, keep: np.ndarray | None
    ) -> SearchResult:
        """Top-``k`` of validated queries among the kept rows, as finished rows."""


def sparse_search_kept(
    state: SparseCollection,
    queries: Any,
    k: int,
    kept_ids: np.ndarray,
    *,
    max_memory_mb: float,
    threads: int | None,
) -> SearchResult:
    """The exact sparse search of a :class:`SparseCollection` over the rows of ``kept_ids``.

    The kept rows' sub-matrix (in id order, so the kernel's tie rule stays the
    store's) is searched with :func:`~imsearch_align.adapters.sparse_search.sparse_topk`;
    ExactStore and FaissStore answer filtered sparse queries with it.
    """
    docs, ids = state.prepared()
    rows = np.sort(np.searchsorted(ids, kept_ids))
    pos, scores = sparse_topk(
        queries, docs.csr[rows], k, max_memory_mb=max_memory_mb, threads=threads
    )
    return SearchResult(ids=np.where(pos >= 0, ids[rows][np.maximum(pos, 0)], -1), scores=scores)
