"""Shared plumbing for vector stores: collection bookkeeping and input checks.

Two layers, both optional for an adapter author:

* Free functions any adapter can call, whatever its base class:
  :func:`check_k`, :func:`check_vectors`, :func:`check_new_ids`,
  :func:`empty_result`, :func:`finalize_rows` (pad to ``k`` and apply the tie
  rule *score descending, then doc id ascending* to each returned row).
* :class:`BaseStore`, a template that implements the public verbs of
  :class:`~imsearch_align.framework.interfaces.VectorStoreAdapter` once (input
  validation, errors, ``has_collection`` / ``count`` / ``list_collections``,
  context manager) and calls four small hooks a subclass writes:
  ``_create(info)``, ``_insert(info, vectors, ids)``,
  ``_search(info, queries, k)`` and ``_drop(info)``. Bookkeeping is in
  memory (:class:`CollectionInfo`); a persistent store registers the
  collections it finds on open with :meth:`BaseStore._register`.

Errors (all name the argument, what was expected and what came):

* an unknown collection raises :class:`CollectionNotFoundError` (a
  ``LookupError``) listing the existing ones;
* creating an existing collection raises :class:`CollectionExistsError`
  (a ``ValueError``);
* dense vectors into a sparse collection and the reverse raise ``TypeError``;
* ``k <= 0``, a wrong dimension, NaN/inf, duplicate ids raise ``ValueError``.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.validation import check_ids, check_int, check_matrix, is_sparse

__all__ = [
    "METRICS",
    "BaseStore",
    "CollectionExistsError",
    "CollectionInfo",
    "CollectionNotFoundError",
    "check_k",
    "check_new_ids",
    "check_vectors",
    "empty_result",
    "finalize_rows",
]

#: Metrics every store supports. Every aligned space is searched by inner product.
METRICS = ("ip",)

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class CollectionNotFoundError(LookupError):
    """A verb named a collection the store does not have."""


class CollectionExistsError(ValueError):
    """``create_collection`` named a collection that already exists."""


@dataclass
class CollectionInfo:
    """What a store knows about one collection.

    Attributes:
        name: collection name.
        dim: vector dimension (columns); ``None`` until known (set by the
            first insert when ``create_collection`` got no ``dim``).
        sparse: whether the collection holds scipy CSR vectors.
        metric: always ``"ip"``.
        ids: every stored id, int64, in insertion order (row ``i`` of the
            store's data has id ``ids[i]``).
        state: free slot for the subclass (an index, a data matrix, ...).
    """

    name: str
    dim: int | None
    sparse: bool
    metric: str = "ip"
    ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    state: Any = None

    @property
    def count(self) -> int:
        """Number of stored vectors."""
        return len(self.ids)


def check_k(k: Any) -> int:
    """Validate ``k`` as an integer >= 1."""
    return check_int(k, "k", low=1)


def check_vectors(x: Any, name: str, info: CollectionInfo) -> Any:
    """Validate vectors (or queries) against a collection.

    Dense input must meet a dense collection and sparse input a sparse one;
    the matrix must be 2-D, finite, and have the collection's dimension
    (when it is known). Returns a C-contiguous float32 array or a float32
    CSR matrix.
    """
    sparse_in = is_sparse(x)
    if info.sparse and not sparse_in:
        raise TypeError(
            f"{name} must be a scipy sparse matrix for the sparse collection {info.name!r}, "
            f"got dense {type(x).__name__}"
        )
    if not info.sparse and sparse_in:
        raise TypeError(
            f"{name} must be a dense array for the dense collection {info.name!r}, "
            f"got scipy sparse {type(x).__name__}"
        )
    m = check_matrix(x, name, allow_sparse=info.sparse)
    if info.dim is not None and m.shape[1] != info.dim:
        raise ValueError(
            f"{name} must have dimension {info.dim} (collection {info.name!r}), got {m.shape[1]}"
        )
    return m


def check_new_ids(ids: Any, n: int, existing: np.ndarray, collection: str) -> np.ndarray:
    """Validate ``n`` unique non-negative int64 ids not already in ``existing``."""
    arr = check_ids(ids, "ids", n=n)
    if existing.size and arr.size:
        clash = arr[np.isin(arr, existing)]
        if clash.size:
            raise ValueError(
                f"ids must be new to collection {collection!r}, got {clash.size} id(s) "
                f"already stored: {np.sort(clash)[:5].tolist()}"
            )
    return arr


def empty_result(nq: int, k: int) -> SearchResult:
    """``nq`` rows of ``k`` no-hits (id ``-1``, score ``-inf``)."""
    return SearchResult(
        ids=np.full((nq, k), -1, dtype=np.int64),
        scores=np.full((nq, k), -np.inf, dtype=np.float32),
    )


def finalize_rows(ids: np.ndarray, scores: np.ndarray, k: int) -> SearchResult:
    """Apply the tie rule to each row and pad it to ``k`` columns.

    Each row is reordered by (score descending, id ascending) with one
    vectorised ``np.lexsort`` (libraries such as faiss order equal scores
    arbitrarily); entries with id ``-1`` get score ``-inf`` and go last.
    Rows wider than ``k`` are cut to ``k``; narrower ones are padded.
    """
    ids = np.asarray(ids, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32).copy()
    scores[ids < 0] = -np.inf
    if ids.shape[1]:
        # lexsort: last key is primary; mergesort keeps equal scores in id order.
        order = np.lexsort((ids, -scores), axis=1)
        ids = np.take_along_axis(ids, order, axis=1)
        scores = np.take_along_axis(scores, order, axis=1)
    ids, scores = ids[:, :k], scores[:, :k]
    if ids.shape[1] < k:
        pad = k - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return SearchResult(ids=ids, scores=scores)


class BaseStore(ABC):
    """Template for a vector store: validation, bookkeeping, errors, context manager.

    A subclass sets ``supports_sparse`` and implements the hooks:

    * ``_create(info)``: allocate an empty collection (``info.dim`` may be
      ``None`` until the first insert);
    * ``_insert(info, vectors, ids)``: store validated vectors (float32
      ndarray or CSR with ``info.dim`` columns; ``info.dim`` is already set)
      and their new unique ids; ``info.ids`` is extended *after* it returns;
    * ``_search(info, queries, k)``: top-``k`` of a non-empty collection
      for validated queries; ``k`` may exceed ``info.count`` (pad with
      :func:`finalize_rows`);
    * ``_drop(info)``: free the collection.

    Every public verb raises a clear error on a closed store.
    """

    #: Whether ``create_collection(..., sparse=True)`` is accepted.
    supports_sparse: bool = False

    def __init__(self) -> None:
        self._collections: dict[str, CollectionInfo] = {}
        self._closed = False

    # -- bookkeeping ---------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed; open a new store")

    def _get(self, name: str) -> CollectionInfo:
        self._check_open()
        try:
            return self._collections[name]
        except (KeyError, TypeError):
            existing = ", ".join(repr(n) for n in sorted(self._collections)) or "(none)"
            raise CollectionNotFoundError(
                f"collection {name!r} does not exist; existing collections: {existing}"
            ) from None

    def _register(self, info: CollectionInfo) -> None:
        """Record a collection (used by ``create_collection`` and by persistent stores on open)."""
        self._collections[info.name] = info

    # -- public verbs ----------------------------------------------------------
    def create_collection(
        self, name: str, dim: int | None = None, *, sparse: bool = False, metric: str = "ip"
    ) -> None:
        """Create an empty collection; an existing name raises :class:`CollectionExistsError`.

        Args:
            name: letters, digits and underscores, not starting with a digit
                (Milvus's rule, so a name that works here works there).
            dim: vector dimension; ``None`` = taken from the first insert.
            sparse: the collection holds scipy CSR vectors.
            metric: ``"ip"`` (inner product), the only metric.
        """
        self._check_open()
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(
                "name must be letters, digits and underscores, not starting with a digit, "
                f"got {name!r}"
            )
        if name in self._collections:
            raise CollectionExistsError(
                f"name: collection {name!r} already exists; drop it first or pick another name"
            )
        if dim is not None:
            dim = check_int(dim, "dim", low=1)
        if metric not in METRICS:
            raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
        if not isinstance(sparse, bool):
            raise TypeError(f"sparse must be a bool, got {type(sparse).__name__} {sparse!r}")
        if sparse and not self.supports_sparse:
            raise TypeError(
                f"sparse=True: {type(self).__name__} does not support sparse collections "
                "(expected sparse=False); use ExactStore or MilvusStore for sparse vectors"
            )
        info = CollectionInfo(name=name, dim=dim, sparse=sparse, metric=metric)
        self._create(info)
        self._register(info)

    def insert(self, name: str, vectors: Any, ids: Any) -> None:
        """Add ``vectors`` (float32 ``(n, d)`` or CSR for sparse collections) with new int64 ``ids``."""
        info = self._get(name)
        m = check_vectors(vectors, "vectors", info)
        new_ids = check_new_ids(ids, m.shape[0], info.ids, name)
        if m.shape[0] == 0:
            return
        if info.dim is None:
            info.dim = int(m.shape[1])
        self._insert(info, m, new_ids)
        info.ids = np.concatenate([info.ids, new_ids])

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        """Top-``k`` by inner product per query row; see :class:`SearchResult`."""
        k = check_k(k)
        info = self._get(name)
        q = check_vectors(queries, "queries", info)
        if info.count == 0:
            return empty_result(q.shape[0], k)
        if q.shape[0] == 0:
            return empty_result(0, k)
        return self._search(info, q, k)

    def drop_collection(self, name: str) -> None:
        """Remove a collection and its data."""
        info = self._get(name)
        self._drop(info)
        del self._collections[name]

    def has_collection(self, name: str) -> bool:
        """Whether the collection exists."""
        self._check_open()
        return name in self._collections

    def count(self, name: str) -> int:
        """Number of vectors stored in the collection."""
        return self._get(name).count

    def list_collections(self) -> list[str]:
        """Names of all collections, sorted."""
        self._check_open()
        return sorted(self._collections)

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

    # -- hooks -----------------------------------------------------------------
    def _create(self, info: CollectionInfo) -> None:  # noqa: B027 - an optional hook
        """Allocate an empty collection (default: nothing to do)."""

    @abstractmethod
    def _insert(self, info: CollectionInfo, vectors: Any, ids: np.ndarray) -> None:
        """Add validated vectors with validated, new ids to the collection."""

    @abstractmethod
    def _search(self, info: CollectionInfo, queries: Any, k: int) -> SearchResult:
        """Top-``k`` of validated queries (rows finalised by the caller)."""

    def _drop(self, info: CollectionInfo) -> None:
        """Free a collection (default: forget its state)."""
        info.state = None
