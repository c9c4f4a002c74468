"""MilvusStore: the BaseStore verbs (create, insert, drop, count...) on Milvus; search is
:mod:`~imsearch_align.adapters.milvus.searching`'s.

The store checks its options (:mod:`~imsearch_align.adapters.milvus.config`,
the index setting in :mod:`~imsearch_align.adapters.milvus.tuning`),
talks to the server through one
:class:`~imsearch_align.adapters.milvus.connection.MilvusConnection`
(retries, Lite server, clear errors), lays collections out as
:mod:`~imsearch_align.adapters.milvus.schema` says and sends rows in
batches under the request limit (:mod:`~imsearch_align.adapters.milvus.rows`).
The server holds the catalog and the ids (``keeps_ids = False``): the
catalog hooks here ask it, and ownership (the owner marker on each
collection) decides who may change a collection. Search-time parameters
change per collection without a rebuild (``TunableSearch``) and filtered
search sends a boolean expression (``FilteredSearch``,
:mod:`~imsearch_align.adapters.milvus.filters`).
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from imsearch_align.adapters.base import CollectionInfo
from imsearch_align.adapters.milvus.config import (
    ID_FIELD,
    INDEX_TYPES,
    LITE_REFUSED,
    MAX_DIM,
    MAX_REQUEST_BYTES,
    MAX_TOPK,
    check_attribute_storage,
    check_consistency_level,
    check_index,
    check_owner,
    check_params,
    check_schema_fields,
    check_seconds,
    check_timeout,
    is_lite_uri,
    redact_uri,
)
from imsearch_align.adapters.milvus.connection import MilvusConnection
from imsearch_align.adapters.milvus.filters import (
    check_declared,
    declare_on_server,
)
from imsearch_align.adapters.milvus.lite import check_lite_path
from imsearch_align.adapters.milvus.rows import (
    byte_batches,
    check_columns,
    check_sparse_rows,
    dense_row_bytes,
    insert_rows,
    sparse_row_bytes,
)
from imsearch_align.adapters.milvus.schema import CollectionMeta
from imsearch_align.adapters.milvus.searching import MilvusSearching
from imsearch_align.adapters.milvus.tuning import (
    build_values,
    check_search_update,
    check_server_accepts,
    pq_subquantizers,
)
from imsearch_align.framework.registry import STORES
from imsearch_align.framework.validation import check_int

__all__ = ["MilvusStore"]


@STORES.register("milvus")
class MilvusStore(MilvusSearching):
    """Milvus (Lite file, Lite server, standalone, cluster) as a vector store.

    Args:
        uri: ``"path/x.db"`` or an existing directory (Milvus Lite
            in-process) or ``"http://host:port"`` (a server).
        token: ``"user:password"`` or an API key; default ``MILVUS_TOKEN``.
            Never logged or shown.
        owner: ownership token written on the collections this store
            creates (1-128 letters, digits, ``_.:-``); only a store with
            the same owner may insert into them or drop them. Default: a
            fresh random token per store. Pass a run id to reclaim a run's
            collections after a restart of the run.
        index: ``"FLAT"`` (exact), ``"IVF_FLAT"``, ``"IVF_SQ8"``,
            ``"IVF_PQ"``, ``"HNSW"`` or ``"AUTOINDEX"`` for dense
            collections; sparse collections always use
            ``SPARSE_INVERTED_INDEX`` (exact inner product). Milvus Lite
            does not build ``IVF_PQ`` (refused before any work).
        index_params: build parameters: IVF ``nlist`` (128); IVF_PQ also
            ``m`` (a divisor of the dimension; default its largest divisor up
            to dim / 4) and ``nbits`` (8); HNSW ``M`` (16), ``efConstruction``
            (200). Defaults are sent, so every deployment builds alike.
        search_params: search-time defaults of every collection: IVF
            ``nprobe`` (8, at most ``nlist``); HNSW ``ef`` (64; a search of
            more hits uses ``ef = k``); AUTOINDEX ``level``. One collection's
            change with :meth:`set_search_params` (no rebuild).
        consistency_level: of every search: ``"Bounded"`` (default, as
            production searches), ``"Session"``, ``"Eventually"`` or
            ``"Strong"`` (each request then waits for the server to catch
            up: about 280 ms on Milvus 2.3.5). Whatever the level, the first
            search after inserts waits until every row is searchable
            (:meth:`make_searchable`).
        ready_timeout_s: the longest :meth:`make_searchable` waits for the
            flush, the index build and the load (an HNSW index over 1M rows
            takes about 10 minutes on Milvus 2.3.5).
        db_name: Milvus database ("" = default).
        timeout: per-request timeout in seconds. None (the default) waits
            as long as a request takes; set it so that a hung server (one
            that accepts connections but answers nothing) counts as
            unavailable after ``timeout + retry_budget_s``.
        retry_budget_s: how long one outage may last before the store gives
            up with :class:`MilvusUnavailableError` (a Milvus Lite server
            restarts in 1-3 s; a Milvus 2.3.5 standalone in about 10 s).
        backoff_s: first wait between retries; doubles each time ...
        max_backoff_s: ... up to this.
        request_bytes: payload budget of one insert or search request
            (below Milvus's 64 MB limit, leaving room for framing).
        max_k: the server's top-k limit (16,384 unless the server is
            configured otherwise).
        check_duplicates: before an insert, ask Milvus whether any of the
            ids is already stored (Milvus itself would keep both rows).
        attribute_storage: where the integer attributes a collection declares
            go: ``"typed"`` (default), INT64 fields with a scalar index each
            (``STL_SORT`` on a server, ``INVERTED`` on Milvus Lite);
            ``"dynamic"``, the dynamic JSON field without an index (slower; to
            measure that path).

    Scalar metadata: ``create_collection(..., fields={"cat": "int"})`` and
    ``insert(..., fields={"cat": array})`` store columns (int, float, str,
    bool) beside each vector; ``search(..., filter="cat == 3")`` passes a
    Milvus boolean expression through. Integer attributes for filtered search
    (``FilteredSearch``): ``insert(..., attributes={"category": ints})`` and
    :meth:`search_filtered` (see :mod:`~imsearch_align.adapters.milvus.filters`).
    """

    #: pymilvus's MilvusClient is safe to share between threads (one gRPC
    #: channel; checked with concurrent searches against a real server in
    #: tests/adapters/test_milvus_faults.py); the store's own state is locked.
    thread_safe = True
    provenance_packages = ("pymilvus", "milvus-lite")
    keeps_ids = False
    #: ``create_collection(..., attributes={name: "int64"})`` declares typed attributes.
    typed_attributes = True

    @classmethod
    def client_process_limit(cls, params: Mapping[str, Any]) -> tuple[int | None, str]:
        """One process for a Milvus Lite file (it serves its data directory from one
        process); no limit for a server."""
        uri = str(params.get("uri", "milvus.db"))
        if not is_lite_uri(uri):
            return None, ""
        return 1, (
            f"Milvus Lite (uri={redact_uri(uri)!r}) serves its data directory from one "
            "process; start `milvus-lite server` on it and pass uri='http://host:port' "
            "for several client processes"
        )

    def __init__(
        self,
        uri: str = "milvus.db",
        *,
        token: str | None = None,
        owner: str | None = None,
        index: str = "FLAT",
        index_params: Mapping[str, Any] | None = None,
        search_params: Mapping[str, Any] | None = None,
        consistency_level: str = "Bounded",
        ready_timeout_s: float = 3600.0,
        db_name: str = "",
        timeout: float | None = None,
        retry_budget_s: float = 10.0,
        backoff_s: float = 0.1,
        max_backoff_s: float = 1.0,
        request_bytes: int = 48 * 1024 * 1024,
        max_k: int = MAX_TOPK,
        check_duplicates: bool = True,
        attribute_storage: str = "typed",
    ) -> None:
        super().__init__()
        if not isinstance(uri, str | os.PathLike) or not str(uri):
            raise TypeError(f"uri must be a path or 'http://host:port' string, got {uri!r}")
        self.uri = str(uri)
        if is_lite_uri(self.uri):
            check_lite_path(self.uri)  # an ordinary file is refused before any work
        self.owner = check_owner(uuid.uuid4().hex if owner is None else owner)
        self.index = check_index(index)
        if is_lite_uri(self.uri):  # a Milvus Lite server at a URL: at create_collection
            check_server_accepts(self.index, lite=True, where=f"uri {self.uri!r}")
        build_ok = INDEX_TYPES[self.index][0]
        #: Build parameters every dense collection's index is created with (defaults filled).
        self.index_params = build_values(
            self.index, check_params(index_params, build_ok, "index_params")
        )
        #: Search-time values of every collection without its own (``set_search_params``).
        self.default_search_params = check_search_update(
            self.index,
            search_params or {},
            nlist=self.index_params.get("nlist"),
            what="search_params",
        )
        self.consistency_level = check_consistency_level(consistency_level)
        self.ready_timeout_s = check_seconds("ready_timeout_s", ready_timeout_s)
        self.db_name = db_name
        self.timeout = check_timeout(timeout)
        self.retry_budget_s = check_seconds("retry_budget_s", retry_budget_s)
        self.backoff_s = check_seconds("backoff_s", backoff_s)
        self.max_backoff_s = check_seconds("max_backoff_s", max_backoff_s)
        self.request_bytes = check_int(
            request_bytes, "request_bytes", low=1, high=MAX_REQUEST_BYTES
        )
        self.max_k = check_int(max_k, "max_k", low=1)
        self.check_duplicates = bool(check_duplicates)
        self.attribute_storage = check_attribute_storage(attribute_storage)
        self._server_version: str | None = None
        # Guards the client, the catalog cache and the outage state; held
        # across connecting only, never across a request, so searches from
        # several threads overlap.
        self._lock = threading.RLock()
        # Held across a readiness wait (requests included): a search waits
        # for the wait another thread started instead of starting its own.
        self._ready_lock = threading.Lock()
        # The token lives in the connection only, out of repr; MILVUS_TOKEN is read here, once.
        self._conn = MilvusConnection(
            self.uri,
            token=token if token is not None else os.environ.get("MILVUS_TOKEN", ""),
            db_name=db_name,
            timeout=self.timeout,
            retry_budget_s=self.retry_budget_s,
            backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s,
            lock=self._lock,
            check_open=self._check_open,
            forget=self._forget,
        )

    @property
    def exact(self) -> bool:
        """Whether search scores every vector (a FLAT index; see ExactSearch)."""
        return self.index == "FLAT"

    @property
    def outages(self) -> int:
        """Outages the store's connection has gone through (each counted when it starts):
        compare before and after a timed search to know it ran on a healthy server."""
        return self._conn.outages

    def __repr__(self) -> str:
        return (
            f"MilvusStore(uri={redact_uri(self.uri)!r}, index={self.index!r}, "
            f"consistency_level={self.consistency_level!r}, owner={self.owner!r}, "
            f"token={'***' if self._conn.has_token else None})"
        )

    # -- verbs --------------------------------------------------------------------------
    def create_collection(
        self,
        name: str,
        dim: int | None = None,
        *,
        sparse: bool = False,
        metric: str = "ip",
        fields: Mapping[str, str] | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        """Create an empty collection owned by this store, with its index, loaded.

        Args:
            name: Milvus's rule: letters, digits, underscores, not starting
                with a digit, at most 255 characters (see
                :func:`~imsearch_align.adapters.base.unique_collection_name`).
            dim: dense dimension; ``None`` = the first insert's (the server
                collection is then created by that insert). Sparse
                collections have none on the server.
            sparse: a ``SPARSE_FLOAT_VECTOR`` collection (scipy CSR in).
            metric: ``"ip"``, the only metric.
            fields: optional typed scalar columns, name -> ``"int"``,
                ``"float"``, ``"str"`` or ``"bool"``; other columns given at
                insert go to the dynamic field (filterable too, slower).
            attributes: optional integer attributes for filtered search, name
                -> ``"int64"``, made ``INT64`` fields of the schema with a
                scalar index each (the dynamic field, no index, with
                ``attribute_storage="dynamic"``); every insert then carries
                them (``insert(..., attributes=...)``). Attributes first given
                at insert into a collection already on the server go to its
                dynamic field.

        Raises:
            CollectionExistsError: the name is taken on the server (also
                when another store created it a moment earlier).
            ValueError: an index the server does not build (named with the
                ones it does), or an IVF_PQ ``m`` that does not divide ``dim``.
        """
        if dim is not None and not sparse:
            check_int(dim, "dim", low=1, high=MAX_DIM)
        columns = check_schema_fields(fields)
        declared = check_declared(attributes, columns)
        info = self._new_collection(name, dim, sparse, metric)
        if not sparse:
            self._check_index_for(info)
        info.state = CollectionMeta(
            owner=self.owner,
            count=0,
            pending=info.dim is None and not sparse,
            fields=columns,
            ready_at=0,  # empty: nothing to wait for
        )
        info.attribute_names = declared or None
        if not info.state.pending:
            self._create_on_server(info)
        with self._lock:
            self._register(info)

    def _check_index_for(self, info: CollectionInfo) -> None:
        """Refuse, before any work, an index the server does not build or an IVF_PQ ``m``
        that does not divide the collection's dimension."""
        if self.index in LITE_REFUSED and not self.is_lite and self.lite_server:
            check_server_accepts(self.index, lite=True, where=f"a Milvus Lite server at {self.uri}")
        if self.index == "IVF_PQ" and info.dim is not None:
            pq_subquantizers(self.index_params.get("m"), info.dim, info.name)

    def insert(
        self,
        name: str,
        vectors: Any,
        ids: Any,
        *,
        fields: Mapping[str, Any] | None = None,
        attributes: Mapping[str, Any] | None = None,
    ) -> None:
        """Add ``vectors`` with the caller's int64 ``ids`` (and optional scalar columns).

        Args:
            name: a collection this store owns.
            vectors: float32 ``(n, d)`` (dense collection) or CSR (sparse).
                Milvus rejects an all-zero sparse row and (Lite) negative
                sparse weights; both are checked here first.
            ids: ``n`` unique non-negative integers, new to the collection.
            fields: column name -> length-``n`` array of int/float/str/bool.
            attributes: integer attributes for filtered search, name ->
                ``n`` integers (the first insert carrying them declares the
                names; every later insert carries the same ones).

        Raises:
            CollectionOwnedError: the collection belongs to another owner.
        """
        info, m, new_ids = self._prepare_insert(name, vectors, ids)
        n = int(m.shape[0])
        columns = check_columns(fields, n)
        attrs = self._prepare_attributes(info, attributes, n)
        if set(attrs) & set(columns):
            raise ValueError(
                f"attributes: {sorted(set(attrs) & set(columns))} also given in fields; give "
                "each column once"
            )
        self._check_writable(info, "insert")
        if info.sparse and n:
            row_bytes = check_sparse_rows(m, lite=self.is_lite)
        else:
            row_bytes = dense_row_bytes(n, m.shape[1])
        self._check_new(info, new_ids)
        if n == 0:
            return
        if info.dim is None:
            info.dim = int(m.shape[1])
            self._check_index_for(info)
        if attrs and info.attribute_names is None:
            if not info.state.pending:  # on the server already: the dynamic field holds them
                declare_on_server(self._call, name, tuple(attrs))
            info.attribute_names = tuple(attrs)
        if info.state.pending:
            self._create_on_server(info)
        columns.update(attrs)
        for col in columns.values():
            row_bytes += col.dtype.itemsize + 8  # an upper bound for str (UTF-32 width)
        self._insert(info, m, new_ids, columns, row_bytes)

    def _insert(
        self,
        info: CollectionInfo,
        m: Any,
        new_ids: np.ndarray,
        columns: dict[str, np.ndarray] | None = None,
        row_bytes: np.ndarray | None = None,
    ) -> None:
        """Send checked rows in batches under the request limit."""
        name = info.name
        columns = columns or {}
        if row_bytes is None:
            row_bytes = (
                sparse_row_bytes(np.diff(m.indptr))
                if info.sparse
                else dense_row_bytes(m.shape[0], m.shape[1])
            )
        for lo, hi in byte_batches(row_bytes, self.request_bytes):
            rows = insert_rows(info, m, new_ids, columns, lo, hi)
            self._run(
                "insert",
                name,
                lambda client, retried, rows=rows, chunk=new_ids[lo:hi]: self._insert_rows(
                    client, name, rows, chunk, retried
                ),
            )
            with self._lock:
                info.state.writes += 1
                if info.state.count is not None:
                    info.state.count += hi - lo

    def _insert_rows(
        self, client: Any, name: str, rows: list[dict], ids: np.ndarray, retried: bool
    ) -> Any:
        if retried:
            # The failed attempt may have been applied: send only what is missing.
            present = set(self._ids_present(client, name, ids))
            rows = [r for r in rows if r[ID_FIELD] not in present]
            if not rows:
                return None
        kwargs = {"timeout": self.timeout} if self.timeout is not None else {}
        return client.insert(name, rows, **kwargs)

    def drop_collection(self, name: str, *, force: bool = False) -> None:
        """Remove a collection this store owns, and its data.

        Args:
            name: the collection.
            force: drop it even if another owner's marker (or none) is on it.

        Raises:
            CollectionNotFoundError: no such collection.
            CollectionOwnedError: another owner's collection, without ``force``.
        """
        info = self._get(name)
        if not info.state.pending:
            info.state.owner = self.owner_of(name)  # fresh: the cache may be old
            if not force:
                self._check_writable(info, "drop_collection")
            self._call("drop_collection", name, "drop_collection", name)
        self._forget(name)

    def close(self) -> None:
        """Close the connection (data stay on the server / on disk); idempotent.

        For Milvus Lite in-process, the last store closing a data directory
        stops its in-process server, which releases the directory lock.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._collections.clear()
        self._conn.close()

    def __enter__(self) -> MilvusStore:
        return self
