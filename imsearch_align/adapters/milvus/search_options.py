"""What a MilvusStore search is asked with: search-time parameters and filter expressions.

:class:`MilvusSearchOptions` is the part of
:class:`~imsearch_align.adapters.milvus.MilvusStore` that chooses how one
collection is searched, without touching its index:

* **TunableSearch**: :meth:`~MilvusSearchOptions.set_search_params` changes a
  collection's ``nprobe`` / ``ef`` / ``level`` for its next searches. Milvus
  takes them with each search request, so nothing is rebuilt
  (:meth:`~MilvusSearchOptions.build_count` stays 1); the checks and
  defaults are :mod:`~imsearch_align.adapters.milvus.tuning`'s.
* **FilteredSearch**: ``search_filtered`` (from
  :class:`~imsearch_align.adapters.filterable.FilterableStore`) sends the
  filter as a Milvus boolean expression, a raw one verbatim, checked once
  per collection (:mod:`~imsearch_align.adapters.milvus.filters`).
"""

from __future__ import annotations

from typing import Any

from imsearch_align.adapters.base import CollectionInfo
from imsearch_align.adapters.milvus.catalog import MilvusCatalog
from imsearch_align.adapters.milvus.filters import check_expression, expression_of
from imsearch_align.adapters.milvus.tuning import check_search_update, effective_search
from imsearch_align.framework.interfaces import Filter, SearchResult

__all__ = ["MilvusSearchOptions"]


class MilvusSearchOptions(MilvusCatalog):
    """Search-time parameters per collection (TunableSearch) and filtered search hooks.

    The base of :class:`~imsearch_align.adapters.milvus.searching.MilvusSearching`,
    which implements ``_search`` (a search of checked queries under a Milvus
    expression) and ``_ensure_searchable`` (the wait after inserts); the store
    sets the attributes below.
    """

    index: str
    index_params: dict[str, int]
    default_search_params: dict[str, int]

    # -- tunable search (TunableSearch) ------------------------------------------------
    def search_params(self, name: str) -> dict[str, int]:
        """The search-time parameters collection ``name`` is searched with now.

        ``{}`` for FLAT and sparse collections; else the index's parameters
        (``nprobe``, ``ef``, ``level``) with the value each search sends
        (HNSW's ``ef`` is raised to ``k`` for a search of more hits).
        """
        info = self._get(name)
        return {} if info.sparse else self._search_values(info)

    def set_search_params(self, name: str, **params: Any) -> None:
        """Search collection ``name`` with ``params`` from now on; its index is kept.

        Milvus takes search-time parameters with each search request, so
        nothing is rebuilt (``build_count`` does not change). Every
        parameter is checked first: a build-time one, one the index does
        not take (``nprobe`` on HNSW), a bad value or an ``nprobe`` above
        ``nlist`` raises, naming the parameter, the index and the ones it
        takes, and nothing changes. A sparse collection takes none.
        """
        info = self._get(name)
        if info.sparse and params:
            raise ValueError(
                f"set_search_params: collection {name!r} is sparse (SPARSE_INVERTED_INDEX, "
                f"exact) and takes no search parameters, got {sorted(params)}"
            )
        checked = check_search_update(self.index, params, nlist=self._nlist(info))
        with self._lock:
            info.state.search.update(checked)
            info.state.one_query = None  # its request carries the old values

    def build_count(self, name: str) -> int:
        """How many times collection ``name``'s index was built: 1 once it is on the server.

        The index is defined once, when the collection is created (Milvus
        then builds each sealed segment's index from that definition); no
        verb of this store rebuilds it, a search-time change included. 0 for
        a collection created with ``dim=None`` before its first insert.
        """
        return int(self._get(name).state.builds)

    def _nlist(self, info: CollectionInfo) -> int | None:
        return info.state.index_params.get("nlist", self.index_params.get("nlist"))

    def _search_values(self, info: CollectionInfo) -> dict[str, int]:
        return effective_search(
            self.index,
            self.default_search_params,
            info.state.search,
            nlist=self._nlist(info),
        )

    # -- filtered search (FilteredSearch) ---------------------------------------------
    def _check_expression(self, filter: Filter) -> None:
        """Milvus parses raw expressions: ``filter.expression`` is sent verbatim."""

    def _holds_unattributed_rows(self, info: CollectionInfo) -> bool:
        return info.attribute_names is None and bool(info.state.count)

    def _search_filtered(
        self, info: CollectionInfo, queries: Any, k: int, filter: Filter, keep: Any
    ) -> SearchResult:
        """The search under the filter's Milvus expression (see
        :mod:`~imsearch_align.adapters.milvus.filters`); an expression the server
        cannot evaluate raises ``ValueError`` with its message and the expression."""
        expr = expression_of(filter)
        self._ensure_searchable(info, "search_filtered")
        checked = info.state.expressions
        if expr not in checked:
            check_expression(
                self._call, info, expr, consistency_level=self.consistency_level, uri=self.uri
            )
            with self._lock:
                checked.add(expr)
        return self._search(info, queries, k, filter=expr)
