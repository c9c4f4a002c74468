"""Shared plumbing for vector stores: collection bookkeeping, input checks, errors.

Two layers, both optional for an adapter author:

* Free functions any adapter can call, whatever its base class:
  :func:`check_collection_name`, :func:`check_k`, :func:`check_vectors`,
  :func:`check_new_ids`, :func:`empty_result`, :func:`finalize_rows` (pad to
  ``k`` and apply the tie rule *score descending, then doc id ascending* to
  each returned row) and :func:`unique_collection_name`.
* :class:`BaseStore`, a template that implements the public verbs of
  :class:`~imsearch_align.framework.interfaces.VectorStoreAdapter` once (input
  validation, errors, ``has_collection`` / ``count`` / ``list_collections``,
  ``provenance``, context manager) and calls small hooks a subclass writes.
  An in-memory store writes four: ``_create(info)``,
  ``_insert(info, vectors, ids)``, ``_search(info, queries, k)`` and
  ``_drop(info)``; bookkeeping is then in memory (:class:`CollectionInfo`,
  every id kept). A persistent store registers the collections it finds on
  open with :meth:`BaseStore._register`. A remote store whose server holds
  the catalog and the ids (Milvus) sets ``keeps_ids = False`` and overrides
  the catalog hooks ``_lookup``, ``_exists``, ``_catalog``, ``_count`` and
  ``_stored_among``; it still goes through the same checks.

Errors (all name the argument, what was expected and what came):

* an unknown collection raises :class:`CollectionNotFoundError` (a
  ``LookupError``) listing the existing ones;
* creating an existing collection raises :class:`CollectionExistsError`
  (a ``ValueError``); a store never drops a collection to make room;
* changing a collection another run owns raises :class:`CollectionOwnedError`
  (stores shared between runs, such as a Milvus server);
* dense vectors into a sparse collection and the reverse raise ``TypeError``;
* ``k <= 0``, a wrong dimension, NaN/inf, duplicate ids raise ``ValueError``;
* a store that cannot reach its backend after its own bounded retries
  raises :class:`~imsearch_align.framework.interfaces.StoreUnavailableError`.

Filtered search: ``insert(..., attributes=)`` is checked here for every store
and kept in ``CollectionInfo.attributes``; a store that does not filter
refuses attributes, naming those that do. The ``search_filtered`` verb is
:class:`~imsearch_align.adapters.filterable.FilterableStore`'s.

Every name above is imported from here. Rooms: :mod:`~imsearch_align.adapters.naming`
(the name rule, :class:`CollectionInfo`, the collection errors),
:mod:`~imsearch_align.adapters.checks` (input checks),
:mod:`~imsearch_align.adapters.attributes` (attribute and filter checks),
:mod:`~imsearch_align.adapters.rows` (answer rows and the tie rule); this
module holds :class:`BaseStore` and :func:`package_versions` (provenance).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np

from imsearch_align.adapters.attributes import (
    check_attributes,
    keep_attributes,
    no_filter_message,
)
from imsearch_align.adapters.checks import check_k, check_new_ids, check_vectors, refuse_stored
from imsearch_align.adapters.naming import (
    METRICS,
    NAME_MAX_LEN,
    CollectionExistsError,
    CollectionInfo,
    CollectionNotFoundError,
    CollectionOwnedError,
    check_collection_name,
    is_collection_name,
    unique_collection_name,
)
from imsearch_align.adapters.rows import (
    TIE_MARGIN,
    empty_result,
    finalize_rows,
    search_closing_ties,
)
from imsearch_align.adapters.versions import package_versions
from imsearch_align.framework.interfaces import (
    FilteredSearch,
    SearchResult,
    StoreUnavailableError,
)
from imsearch_align.framework.validation import check_ids, check_int

__all__ = [
    "METRICS",
    "NAME_MAX_LEN",
    "TIE_MARGIN",
    "BaseStore",
    "CollectionExistsError",
    "CollectionInfo",
    "CollectionNotFoundError",
    "CollectionOwnedError",
    "StoreUnavailableError",
    "check_collection_name",
    "check_k",
    "check_new_ids",
    "check_vectors",
    "empty_result",
    "finalize_rows",
    "package_versions",
    "search_closing_ties",
    "unique_collection_name",
]


class BaseStore(ABC):
    """Template for a vector store: validation, bookkeeping, errors, context manager.

    A subclass sets ``supports_sparse`` (and, when they differ from the
    defaults, ``thread_safe``, ``provenance_packages``, ``max_k``,
    ``keeps_ids``) and implements the hooks:

    * ``_create(info)``: allocate an empty collection (``info.dim`` may be
      ``None`` until the first insert);
    * ``_insert(info, vectors, ids)``: store validated vectors (float32
      ndarray or CSR with ``info.dim`` columns; ``info.dim`` is already set)
      and their new unique ids; ``info.ids`` is extended *after* it returns
      (when ``keeps_ids``);
    * ``_search(info, queries, k)``: top-``k`` of a non-empty collection
      for validated queries, as a finished :class:`SearchResult` (``k`` may
      exceed the collection size: pad and order the rows, for example with
      :func:`finalize_rows`; the caller returns it unchanged);
    * ``_drop(info)``: free the collection.

    Catalog hooks, for a store whose backend holds the catalog (defaults:
    the in-memory registry): ``_lookup(name)`` (the info or None),
    ``_exists(name)``, ``_catalog()`` (all names), ``_count(info)``,
    ``_stored_among(info, ids)`` (which of ``ids`` are stored) and
    ``_is_empty(info)``.

    Every public verb raises a clear error on a closed store.
    """

    #: Whether ``create_collection(..., sparse=True)`` is accepted.
    supports_sparse: bool = False
    #: Whether ``search`` may be called from several threads at once
    #: (:class:`~imsearch_align.framework.interfaces.ThreadSafety`).
    thread_safe: bool = True
    #: Distributions whose versions :meth:`provenance` records; each store
    #: names its client libraries (uninstalled names are left out).
    provenance_packages: tuple[str, ...] = ("numpy",)
    #: Largest ``k`` a search accepts (None: no limit).
    max_k: int | None = None
    #: Whether every stored id is kept in ``CollectionInfo.ids`` (False for
    #: a store whose server holds them; it implements ``_stored_among``).
    keeps_ids: bool = True

    @classmethod
    def client_process_limit(cls, params: Mapping[str, Any]) -> tuple[int | None, str]:
        """The most client processes that may each open this store with ``params`` (None:
        no limit; 0: none, the data live in one process's memory) and why: the
        concurrency runner's process mode reads it, so no caller branches on a store."""
        return None, ""

    def __init__(self) -> None:
        self._collections: dict[str, CollectionInfo] = {}
        self._closed = False

    # -- bookkeeping ---------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed; open a new store")

    def _get(self, name: str) -> CollectionInfo:
        self._check_open()
        info = self._lookup(name) if is_collection_name(name) else None
        if info is None:
            existing = ", ".join(repr(n) for n in self._catalog()) or "(none)"
            raise CollectionNotFoundError(
                f"collection {name!r} does not exist{self._where()}; "
                f"existing collections: {existing}"
            )
        return info

    def _where(self) -> str:
        """`` at <location>`` for error messages (empty for in-memory stores)."""
        return ""

    def _no_sparse_reason(self) -> str:
        """Why ``sparse=True`` is refused (for the error message)."""
        return (
            f"{type(self).__name__}{self._where()} does not support sparse collections; "
            "use ExactStore or MilvusStore for sparse vectors"
        )

    def _register(self, info: CollectionInfo) -> None:
        """Record a collection (used by ``create_collection`` and by persistent stores on open)."""
        self._collections[info.name] = info

    def _forget(self, name: str) -> None:
        """Drop a collection from the registry (it is gone from the backend)."""
        self._collections.pop(name, None)

    # -- validation shared by the public verbs -------------------------------------
    def _new_collection(
        self, name: str, dim: int | None, sparse: bool, metric: str
    ) -> CollectionInfo:
        """Check the arguments of ``create_collection``; the info to create."""
        self._check_open()
        check_collection_name(name)
        if dim is not None:
            dim = check_int(dim, "dim", low=1)
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
        if not isinstance(sparse, bool):
            raise TypeError(f"sparse must be a bool, got {type(sparse).__name__} {sparse!r}")
        if sparse and not self.supports_sparse:
            raise TypeError(f"sparse=True: {self._no_sparse_reason()} (expected sparse=False)")
        if self._exists(name):
            raise CollectionExistsError(
                f"name: collection {name!r} already exists{self._where()}; a store never drops "
                "a collection to make room: drop it first or pick another name "
                "(unique_collection_name gives one per run)"
            )
        return CollectionInfo(name=name, dim=dim, sparse=sparse, metric=metric)

    def _prepare_insert(self, name: str, vectors: Any, ids: Any) -> tuple[CollectionInfo, Any, Any]:
        """Checks of ``insert`` that need no backend: the info, vectors and ids."""
        info = self._get(name)
        m = check_vectors(vectors, "vectors", info)
        return info, m, check_ids(ids, "ids", n=int(m.shape[0]))

    def _prepare_attributes(
        self, info: CollectionInfo, attributes: Any, n: int
    ) -> dict[str, np.ndarray]:
        """Checks of ``insert(..., attributes=)``: name -> int64 values (``{}``: none); a
        store that is not FilteredSearch refuses them, naming the stores that filter."""
        if attributes is not None and not isinstance(self, FilteredSearch):
            raise ValueError(f"attributes: {no_filter_message(self)}")
        return check_attributes(
            attributes, n, info, unattributed_rows=self._holds_unattributed_rows(info)
        )

    def _holds_unattributed_rows(self, info: CollectionInfo) -> bool:
        """Whether rows were inserted without attributes (a store without ids: override)."""
        return self.keeps_ids and info.attribute_names is None and info.count > 0

    def _check_new(self, info: CollectionInfo, ids: np.ndarray) -> None:
        """Refuse ids already stored in the collection."""
        if ids.size:
            refuse_stored(self._stored_among(info, ids), info.name)

    def _prepare_search(
        self, name: str, queries: Any, k: Any
    ) -> tuple[CollectionInfo, Any, int, SearchResult | None]:
        """Checks of ``search``: the info, queries, ``k`` and the answer if no search is needed."""
        k = check_k(k, self.max_k)
        info = self._get(name)
        q = check_vectors(queries, "queries", info)
        if q.shape[0] == 0 or self._is_empty(info):
            return info, q, k, empty_result(q.shape[0], k)
        return info, q, k, None

    # -- public verbs ----------------------------------------------------------
    def create_collection(
        self, name: str, dim: int | None = None, *, sparse: bool = False, metric: str = "ip"
    ) -> None:
        """Create an empty collection; an existing name raises :class:`CollectionExistsError`.

        Args:
            name: letters, digits and underscores, not starting with a digit,
                at most 255 characters (Milvus's rule, so a name that works
                here works there; see :func:`unique_collection_name`).
            dim: vector dimension; ``None`` = taken from the first insert.
            sparse: the collection holds scipy CSR vectors.
            metric: ``"ip"`` (inner product), the only metric.
        """
        info = self._new_collection(name, dim, sparse, metric)
        self._create(info)
        self._register(info)

    def insert(self, name: str, vectors: Any, ids: Any, *, attributes: Any = None) -> None:
        """Add ``vectors`` (float32 ``(n, d)`` or CSR for sparse collections) with new int64 ``ids``.

        ``attributes``: ``{name: n integers}`` for filtered search, declared by the first
        insert that carries them; every later insert carries the same names.
        """
        info, m, new_ids = self._prepare_insert(name, vectors, ids)
        attrs = self._prepare_attributes(info, attributes, int(m.shape[0]))
        self._check_new(info, new_ids)
        if m.shape[0] == 0:
            return
        if info.dim is None:
            info.dim = int(m.shape[1])
        if attrs:
            self._insert_attributed(info, m, new_ids, attrs)
        else:
            self._insert(info, m, new_ids)
        keep_attributes(info, attrs, values=self.keeps_ids)
        if self.keeps_ids:
            info.ids = np.concatenate([info.ids, new_ids])

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        """Top-``k`` by inner product per query row; see :class:`SearchResult`."""
        info, q, k, done = self._prepare_search(name, queries, k)
        if done is not None:
            return done
        return self._search(info, q, k)

    def drop_collection(self, name: str) -> None:
        """Remove a collection and its data."""
        info = self._get(name)
        self._drop(info)
        self._forget(name)

    def has_collection(self, name: str) -> bool:
        """Whether the collection exists."""
        self._check_open()
        # No collection can have a name outside the rule (and a server may
        # refuse to be asked about one).
        return is_collection_name(name) and self._exists(name)

    def count(self, name: str) -> int:
        """Number of vectors stored in the collection."""
        return self._count(self._get(name))

    def list_collections(self) -> list[str]:
        """Names of all collections, sorted."""
        self._check_open()
        return self._catalog()

    def provenance(self) -> dict[str, Any]:
        """What a result records about this store: ``{"packages": {dist: version}}``.

        The distributions are ``provenance_packages`` (see
        :class:`~imsearch_align.framework.interfaces.StoreProvenance`); a
        store with a server adds what the server reports about itself.
        """
        return {"packages": package_versions(self.provenance_packages)}

    def close(self) -> None:
        """Release everything; closing twice is allowed."""
        if self._closed:
            return
        for info in list(self._collections.values()):
            self._drop(info)
        self._collections.clear()
        self._closed = True

    def __enter__(self) -> BaseStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- catalog hooks (defaults: the in-memory registry) ----------------------------
    def _lookup(self, name: str) -> CollectionInfo | None:
        """The collection's info, or None if there is no such collection."""
        return self._collections.get(name)

    def _exists(self, name: str) -> bool:
        """Whether a collection of this name exists (asked of the backend if it has one)."""
        return self._lookup(name) is not None

    def _catalog(self) -> list[str]:
        """Every collection name, sorted."""
        return sorted(self._collections)

    def _count(self, info: CollectionInfo) -> int:
        """Number of stored vectors."""
        return info.count

    def _stored_among(self, info: CollectionInfo, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` the collection already holds."""
        return ids[np.isin(ids, info.ids)] if info.ids.size else ids[:0]

    def _is_empty(self, info: CollectionInfo) -> bool:
        """Whether a search can be answered with no-hits without asking the backend."""
        return self.keeps_ids and info.count == 0

    # -- data hooks -----------------------------------------------------------------
    def _create(self, info: CollectionInfo) -> None:  # noqa: B027 - an optional hook
        """Allocate an empty collection (default: nothing to do)."""

    @abstractmethod
    def _insert(self, info: CollectionInfo, vectors: Any, ids: np.ndarray) -> None:
        """Add validated vectors with validated, new ids to the collection."""

    @abstractmethod
    def _search(self, info: CollectionInfo, queries: Any, k: int) -> SearchResult:
        """Top-``k`` of validated queries as finished rows: ordered by the tie rule, padded."""

    def _insert_attributed(
        self, info: CollectionInfo, vectors: Any, ids: np.ndarray, attributes: dict[str, np.ndarray]
    ) -> None:
        """Add rows with their checked int64 attributes. Default: ``_insert`` (the base keeps
        the values in ``info.attributes``); Qdrant and LanceDB write them with the rows."""
        self._insert(info, vectors, ids)

    def _drop(self, info: CollectionInfo) -> None:
        """Free a collection (default: forget its state)."""
        info.state = None
