"""The filtered-search verb on top of :class:`~imsearch_align.adapters.base.BaseStore`.

:class:`FilterableStore` implements
:meth:`~imsearch_align.framework.interfaces.FilteredSearch.search_filtered`
once (the checks of ``search``, the filter against the collection's declared
attributes, a raw expression refused unless the store parses them, the mask
of kept rows, the all-no-hit answer when nothing passes) and calls one hook a
subclass writes, ``_search_filtered``. ExactStore, FaissStore, QdrantStore
and LanceDBStore build on it; :func:`sparse_search_kept` is the exact sparse
search over the kept rows that ExactStore and FaissStore share.

:class:`KeptRowsCache` remembers the kept-row mask of each (collection,
filter), and what a store derives from it (FaissStore's ``IDSelectorBitmap``,
ExactStore's row positions), for the last :data:`KEPT_CACHE_SIZE` filters of
a collection: a repeated filter does not scan every row again. An entry is
used only while the collection is the one it was made from (the same
``CollectionInfo`` and attribute array: an insert replaces the array) and is
forgotten on insert, drop and close.
"""

from __future__ import annotations

import threading
import weakref
from abc import abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from imsearch_align.adapters.attributes import check_filter, kept_rows, refuse_expression
from imsearch_align.adapters.base import BaseStore
from imsearch_align.adapters.naming import CollectionInfo
from imsearch_align.adapters.rows import empty_result
from imsearch_align.adapters.sparse_search import SparseCollection, sparse_topk
from imsearch_align.framework.interfaces import Filter, SearchResult

__all__ = ["KEPT_CACHE_SIZE", "FilterableStore", "KeptRowsCache", "sparse_search_kept"]

#: Filters per collection whose kept rows are remembered (least recently used forgotten first).
KEPT_CACHE_SIZE = 8

T = TypeVar("T")


class _Kept:
    """One filter's kept rows in one state of a collection, and what stores derived from them."""

    __slots__ = ("derived", "field", "info", "mask", "values")

    def __init__(self, info: CollectionInfo, field: str, mask: np.ndarray) -> None:
        self.info = weakref.ref(info)
        self.field = field
        # weak: a stale entry keeps no attribute array alive, and a freed one never matches
        self.values = weakref.ref(info.attributes[field])
        self.mask = mask
        self.derived: dict[str, Any] = {}

    def current(self, info: CollectionInfo) -> bool:
        """Whether ``info`` is still the collection state this entry was made from."""
        return self.info() is info and self.values() is info.attributes.get(self.field)


class KeptRowsCache:
    """Kept-row masks per (collection, filter), reused while the collection is unchanged.

    Thread-safe (searches run from several threads): lookups hold a lock;
    a mask or derived value is computed outside it, and two threads that
    miss at once compute the same value. Masks are read-only.
    """

    def __init__(self, size: int = KEPT_CACHE_SIZE) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._by_name: dict[str, OrderedDict[tuple[str, tuple[int, ...]], _Kept]] = {}

    def _entry(self, info: CollectionInfo, filter: Filter) -> _Kept:
        key = (filter.field, filter.values)
        with self._lock:
            lru = self._by_name.get(info.name)
            hit = None if lru is None else lru.get(key)
            if hit is not None and hit.current(info):
                lru.move_to_end(key)
                return hit
        mask = kept_rows(info, filter)
        mask.flags.writeable = False
        new = _Kept(info, filter.field, mask)
        with self._lock:
            lru = self._by_name.setdefault(info.name, OrderedDict())
            for old in [k for k, e in lru.items() if not e.current(info)]:
                del lru[old]
            lru[key] = new
            lru.move_to_end(key)
            while len(lru) > self.size:
                lru.popitem(last=False)
        return new

    def mask(self, info: CollectionInfo, filter: Filter) -> np.ndarray:
        """Boolean mask (read-only) over the collection's rows: those ``filter`` keeps."""
        return self._entry(info, filter).mask

    def derived(
        self, info: CollectionInfo, filter: Filter, key: str, build: Callable[[np.ndarray], T]
    ) -> T:
        """``build(mask)`` for this collection and filter, computed once while both are
        unchanged; ``key`` names what ``build`` makes."""
        entry = self._entry(info, filter)
        with self._lock:
            if key in entry.derived:
                return entry.derived[key]
        value = build(entry.mask)
        with self._lock:
            return entry.derived.setdefault(key, value)

    def forget(self, name: str) -> None:
        """Forget every filter of collection ``name`` (rows inserted, or it was dropped)."""
        with self._lock:
            self._by_name.pop(name, None)

    def clear(self) -> None:
        """Forget every collection's filters."""
        with self._lock:
            self._by_name.clear()


class FilterableStore(BaseStore):
    """:class:`BaseStore` with the ``search_filtered`` verb (FilteredSearch).

    A subclass writes one more hook, ``_search_filtered(info, queries, k,
    filter, keep)``: the top-``k`` of validated queries among the rows the
    filter keeps, finished as ``_search``'s are. ``keep`` is a boolean mask
    over the collection's rows in insertion order (row ``i`` has id
    ``info.ids[i]``; ``None`` for a store that does not keep ids), never
    all False (that answer, all no-hits, is given here). A store that
    parses raw expressions overrides :meth:`_check_expression`.

    ``keep`` comes from a :class:`KeptRowsCache` (read-only, shared by the
    searches of the same filter); :meth:`_kept_derived` caches what a
    subclass computes from it the same way.
    """

    def __init__(self) -> None:
        super().__init__()
        self._kept = KeptRowsCache()

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
        keep = self._kept.mask(info, f) if self.keeps_ids else None
        if keep is not None and not keep.any():
            return empty_result(q.shape[0], k)
        return self._search_filtered(info, q, k, f, keep)

    def insert(self, name: str, vectors: Any, ids: Any, *, attributes: Any = None) -> None:
        """Add rows as :meth:`BaseStore.insert` does; the collection's cached filters go."""
        try:
            super().insert(name, vectors, ids, attributes=attributes)
        finally:
            self._kept.forget(name)

    def close(self) -> None:
        """Release everything, as :meth:`BaseStore.close` does, and every cached filter."""
        super().close()
        self._kept.clear()

    def _forget(self, name: str) -> None:
        super()._forget(name)
        self._kept.forget(name)

    def _kept_derived(
        self, info: CollectionInfo, filter: Filter, key: str, build: Callable[[np.ndarray], T]
    ) -> T:
        """``build(keep)``, computed once per collection state and filter (see
        :meth:`KeptRowsCache.derived`)."""
        return self._kept.derived(info, filter, key, build)

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
