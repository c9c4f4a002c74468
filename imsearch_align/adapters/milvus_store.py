"""Milvus as a vector store: Milvus Lite in-process, or any Milvus server.

One adapter, three deployments, chosen by ``uri``:

* a path ending in ``.db`` (or an existing directory): Milvus Lite 3.x
  in-process (``milvus-lite`` runs a gRPC server in threads of this process
  on 127.0.0.1; the path is its data directory);
* ``http://host:port``: a server: ``milvus-lite server``, a Milvus
  standalone (PyPI ``milvus`` 2.3.5, ``docker/milvus-compose.yml``) or a
  cluster (Helm chart / Milvus Operator); only the URI changes.

Collections have an ``INT64`` primary key ``id`` (the caller's ids), a
vector field ``vector`` (``FLOAT_VECTOR`` or ``SPARSE_FLOAT_VECTOR`` with
``SPARSE_INVERTED_INDEX``), metric ``IP``, and a dynamic field, so scalar
metadata columns given at insert can be filtered on at search. Consistency
is ``Strong`` by default, so what was inserted is what is searched.

Server limits handled here (https://milvus.io/docs/limitations.md): inserts
and searches are split under the 64 MB request limit and searches under
16,384 queries per request; ``k`` above the 16,384 top-k limit is a clear
error (set ``max_k`` for a server configured higher). Sparse queries are sent
one dict per row (pymilvus 3.0.2 fails on a whole CSR matrix). Transient
gRPC failures (unavailable, deadline exceeded, connect failed) are retried
with exponential backoff, then raise :class:`MilvusUnavailableError` showing
the URI without credentials. The token (argument or ``MILVUS_TOKEN``) is
never logged, shown in ``repr`` or put into an error message.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from imsearch_align.adapters.base import (
    CollectionExistsError,
    CollectionInfo,
    CollectionNotFoundError,
    check_vectors,
    empty_result,
    finalize_rows,
)
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.registry import STORES
from imsearch_align.framework.validation import check_ids, check_int

__all__ = ["INDEX_TYPES", "MilvusStore", "MilvusStoreError", "MilvusUnavailableError"]

log = logging.getLogger(__name__)

#: Dense index types and the parameters each accepts (build, search).
INDEX_TYPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "FLAT": (frozenset(), frozenset()),
    "HNSW": (frozenset({"M", "efConstruction"}), frozenset({"ef"})),
    "IVF_FLAT": (frozenset({"nlist"}), frozenset({"nprobe"})),
    "AUTOINDEX": (frozenset(), frozenset({"level"})),
}
#: Milvus's request limits (https://milvus.io/docs/limitations.md).
MAX_NQ = 16_384
MAX_TOPK = 16_384
MAX_REQUEST_BYTES = 64 * 1024 * 1024
CONSISTENCY_LEVELS = ("Strong", "Bounded", "Session", "Eventually")

_ID_FIELD = "id"
_VEC_FIELD = "vector"
# Milvus's collection-name rule (letters, digits, underscores; no leading
# digit; at most 255 characters). Milvus Lite is laxer, so checking here keeps
# a name that works on Lite working on a server.
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
_SCALAR_TYPES = {"int": "INT64", "float": "DOUBLE", "str": "VARCHAR", "bool": "BOOL"}

# Milvus Lite data directories opened in this process -> number of open stores.
_LITE_REFS: dict[str, int] = {}
_LITE_LOCK = threading.Lock()


class MilvusStoreError(RuntimeError):
    """Milvus refused a request; the message says which and why."""


class MilvusUnavailableError(ConnectionError):
    """The server did not answer after the configured retries."""


def _import_pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "MilvusStore needs pymilvus (and milvus-lite for a local .db): "
            "pip install 'imsearch-align[milvus]'"
        ) from exc
    return pymilvus


def _redact_uri(uri: str) -> str:
    """``uri`` without user:password (a token can also travel there)."""
    parts = urlsplit(uri)
    if parts.scheme and parts.hostname and (parts.username or parts.password):
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return uri


class _LiteUnimplementedFilter(logging.Filter):
    """Drop the in-process Lite server's log of RPCs it does not implement.

    pymilvus asks for a timestamp (``AllocTimestamp``) while it waits for an
    index; Milvus Lite does not implement that RPC, pymilvus carries on, but
    gRPC's server logs a full traceback at ERROR each time. Only that exact
    record is dropped; every other server error still shows.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, NotImplementedError) and "not implemented" in str(exc))


_LITE_LOG_FILTER = _LiteUnimplementedFilter()


def _is_lite_uri(uri: str) -> bool:
    return uri.endswith(".db") or (not re.match(r"^[a-z]+://", uri) and Path(uri).is_dir())


def _is_transient(exc: BaseException) -> bool:
    """UNAVAILABLE / DEADLINE_EXCEEDED / connect failures, from grpc or pymilvus."""
    try:
        import grpc
    except ImportError:  # pragma: no cover - grpc comes with pymilvus
        grpc = None
    transient_grpc = ()
    if grpc is not None:
        transient_grpc = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        if isinstance(exc, grpc.RpcError) and exc.code() in transient_grpc:
            return True
    pymilvus = _import_pymilvus()
    if isinstance(exc, pymilvus.exceptions.MilvusUnavailableException):
        return True
    if isinstance(exc, pymilvus.exceptions.MilvusException):
        code = exc.code
        if code in transient_grpc:
            return True
        from pymilvus.client.types import Status

        if code == Status.CONNECT_FAILED:
            return True
        msg = str(getattr(exc, "message", "")).lower()
        return "server unavailable" in msg or "deadline exceeded" in msg
    return False


@STORES.register("milvus")
class MilvusStore:
    """Milvus (Lite file, Lite server, standalone, cluster) as a vector store.

    Args:
        uri: ``"path/x.db"`` or an existing directory (Milvus Lite
            in-process) or ``"http://host:port"`` (a server).
        token: ``"user:password"`` or an API key; default ``MILVUS_TOKEN``.
            Never logged or shown.
        index: ``"FLAT"`` (exact), ``"HNSW"``, ``"IVF_FLAT"`` or
            ``"AUTOINDEX"`` for dense collections; sparse collections always
            use ``SPARSE_INVERTED_INDEX`` (exact inner product).
        index_params: build parameters: HNSW ``M``, ``efConstruction``;
            IVF_FLAT ``nlist``.
        search_params: HNSW ``ef``; IVF_FLAT ``nprobe``; AUTOINDEX ``level``.
        consistency_level: ``"Strong"`` (default: inserted rows are visible
            to the next search), ``"Bounded"``, ``"Session"``, ``"Eventually"``.
        db_name: Milvus database ("" = default).
        timeout: per-request timeout in seconds (None = pymilvus default).
        retries: retries of a transient failure (0 = try once).
        backoff_s: first wait between retries; doubles each time ...
        max_backoff_s: ... up to this.
        request_bytes: payload budget of one insert or search request
            (below Milvus's 64 MB limit, leaving room for framing).
        max_k: the server's top-k limit (16,384 unless the server is
            configured otherwise).
        check_duplicates: before an insert, ask Milvus whether any of the
            ids is already stored (Milvus itself would keep both rows).

    Scalar metadata: ``insert(..., fields={"cat": array})`` stores columns
    (int, float, str, bool) beside each vector; ``search(..., filter="cat ==
    3")`` passes a Milvus boolean expression through.
    """

    def __init__(
        self,
        uri: str = "milvus.db",
        *,
        token: str | None = None,
        index: str = "FLAT",
        index_params: Mapping[str, Any] | None = None,
        search_params: Mapping[str, Any] | None = None,
        consistency_level: str = "Strong",
        db_name: str = "",
        timeout: float | None = None,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        request_bytes: int = 48 * 1024 * 1024,
        max_k: int = MAX_TOPK,
        check_duplicates: bool = True,
    ) -> None:
        if not isinstance(uri, str | os.PathLike) or not str(uri):
            raise TypeError(f"uri must be a path or 'http://host:port' string, got {uri!r}")
        self.uri = str(uri)
        idx = str(index).upper()
        if idx not in INDEX_TYPES:
            raise ValueError(f"index must be one of {sorted(INDEX_TYPES)}, got {index!r}")
        self.index = idx
        build_ok, search_ok = INDEX_TYPES[idx]
        self.index_params = self._check_params(index_params, build_ok, "index_params")
        self.search_params = self._check_params(search_params, search_ok, "search_params")
        if consistency_level not in CONSISTENCY_LEVELS:
            raise ValueError(
                f"consistency_level must be one of {list(CONSISTENCY_LEVELS)}, "
                f"got {consistency_level!r}"
            )
        self.consistency_level = consistency_level
        self.db_name = db_name
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise ValueError(
                f"timeout must be a positive number of seconds or None, got {timeout!r}"
            )
        self.timeout = timeout
        self.retries = check_int(retries, "retries", low=0)
        for nm, v in (("backoff_s", backoff_s), ("max_backoff_s", max_backoff_s)):
            if not isinstance(v, int | float) or v < 0:
                raise ValueError(f"{nm} must be a number >= 0, got {v!r}")
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.request_bytes = check_int(
            request_bytes, "request_bytes", low=1, high=MAX_REQUEST_BYTES
        )
        self.max_k = check_int(max_k, "max_k", low=1)
        self.check_duplicates = bool(check_duplicates)
        # Kept private and out of repr; MILVUS_TOKEN is read here, once.
        self.__token = token if token is not None else os.environ.get("MILVUS_TOKEN", "")
        self._client: Any = None
        self._lite_path: str | None = None
        self._infos: dict[str, CollectionInfo] = {}
        self._loaded: set[str] = set()
        self._server_version: str | None = None
        self._closed = False

    @staticmethod
    def _check_params(params: Mapping[str, Any] | None, allowed: frozenset[str], name: str) -> dict:
        params = dict(params or {})
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ValueError(
                f"{name}: unknown key(s) {unknown} for this index; expected a subset of "
                f"{sorted(allowed) or '(none)'}"
            )
        for key, value in params.items():
            check_int(value, f"{name}[{key!r}]", low=1)
        return params

    def __repr__(self) -> str:
        return (
            f"MilvusStore(uri={_redact_uri(self.uri)!r}, index={self.index!r}, "
            f"consistency_level={self.consistency_level!r}, token={'***' if self.__token else None})"
        )

    @property
    def supports_sparse(self) -> bool:
        """Whether the target has SPARSE_FLOAT_VECTOR: Milvus Lite and servers >= 2.4.

        For a server this asks its version once (Milvus 2.3 accepts a sparse
        schema but fails every insert, so it is refused up front).
        """
        if self.is_lite:
            return True
        if self._server_version is None:
            self._server_version = str(self._call("get_server_version", None, "get_server_version"))
        found = re.search(r"(\d+)\.(\d+)", self._server_version)
        return found is None or (int(found[1]), int(found[2])) >= (2, 4)

    @property
    def is_lite(self) -> bool:
        """Whether ``uri`` selects Milvus Lite in-process."""
        return _is_lite_uri(self.uri)

    # -- connection and retries -------------------------------------------------
    def _connect(self) -> Any:
        if self._closed:
            raise RuntimeError("MilvusStore is closed; open a new store")
        if self._client is not None:
            return self._client
        pymilvus = _import_pymilvus()
        target = self.uri
        if self.is_lite:
            # Start the in-process server ourselves (pymilvus would do it for
            # .db only) so directories work too and close() can release it.
            try:
                from milvus_lite.server_manager import server_manager_instance
            except ImportError as exc:
                raise ImportError(
                    "a local Milvus Lite uri needs milvus-lite: pip install 'imsearch-align[milvus]'"
                ) from exc
            logging.getLogger("grpc._server").addFilter(_LITE_LOG_FILTER)  # idempotent
            path = os.path.abspath(self.uri)
            if not Path(path).parent.is_dir():
                raise FileNotFoundError(f"uri: the parent directory of {self.uri!r} does not exist")
            with _LITE_LOCK:
                target = server_manager_instance.start_and_get_uri(path)
                if target is None:
                    raise MilvusStoreError(
                        f"uri: Milvus Lite could not open {self.uri!r} (is another process "
                        "using this data directory? Milvus Lite allows one process per directory)"
                    )
                _LITE_REFS[path] = _LITE_REFS.get(path, 0) + 1
            self._lite_path = path
        kwargs: dict[str, Any] = {"uri": target, "db_name": self.db_name}
        if self.__token:
            kwargs["token"] = self.__token
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        self._client = self._retry("connect", None, lambda: pymilvus.MilvusClient(**kwargs))
        return self._client

    def _scrub(self, text: str) -> str:
        if self.__token:
            text = text.replace(self.__token, "***")
        return text.replace(self.uri, _redact_uri(self.uri))

    def _retry(self, op: str, collection: str | None, fn: Callable[[], Any]) -> Any:
        """Run ``fn``; retry transient failures with exponential backoff."""
        wait = self.backoff_s
        start = time.monotonic()
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except Exception as exc:
                if not _is_transient(exc):
                    raise
                last = exc
                if attempt < self.retries:
                    log.warning(
                        "Milvus %s at %s failed (%s); retry %d/%d in %.2f s",
                        op,
                        _redact_uri(self.uri),
                        type(exc).__name__,
                        attempt + 1,
                        self.retries,
                        wait,
                    )
                    time.sleep(wait)
                    wait = min(wait * 2, self.max_backoff_s)
        where = f" on collection {collection!r}" if collection else ""
        detail = self._scrub(str(getattr(last, "message", "") or last))
        raise MilvusUnavailableError(
            f"Milvus at {_redact_uri(self.uri)} is unavailable: {op}{where} failed after "
            f"{self.retries + 1} attempt(s) over {time.monotonic() - start:.1f} s "
            f"({type(last).__name__}: {detail}). Is the server running and the uri right?"
        ) from None

    def _call(self, op: str, collection: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        """A client method with retries; Milvus refusals become clear errors."""
        client = self._connect()
        if self.timeout is not None:
            kwargs.setdefault("timeout", self.timeout)
        pymilvus = _import_pymilvus()
        try:
            return self._retry(op, collection, lambda: getattr(client, method)(*args, **kwargs))
        except pymilvus.exceptions.MilvusException as exc:
            where = f" on collection {collection!r}" if collection else ""
            msg = self._scrub(str(getattr(exc, "message", "") or exc))
            raise MilvusStoreError(
                f"Milvus at {_redact_uri(self.uri)} refused {op}{where}: {msg} (code {exc.code})"
            ) from None

    # -- bookkeeping ------------------------------------------------------------
    def _info(self, name: str) -> CollectionInfo:
        """Collection kind and dimension, from the cache or Milvus (another client may own it)."""
        if name in self._infos:
            return self._infos[name]
        if not isinstance(name, str) or not self.has_collection(name):
            existing = ", ".join(repr(n) for n in self.list_collections()) or "(none)"
            raise CollectionNotFoundError(
                f"collection {name!r} does not exist at {_redact_uri(self.uri)}; "
                f"existing collections: {existing}"
            )
        desc = self._call("describe_collection", name, "describe_collection", name)
        pymilvus = _import_pymilvus()
        vec = next((f for f in desc["fields"] if f["name"] == _VEC_FIELD), None)
        if vec is None:
            raise MilvusStoreError(
                f"collection {name!r} was not created by MilvusStore: it has no {_VEC_FIELD!r} field"
            )
        sparse = vec["type"] == pymilvus.DataType.SPARSE_FLOAT_VECTOR
        dim = None if sparse else int(vec["params"]["dim"])
        info = CollectionInfo(name=name, dim=dim, sparse=sparse)
        self._infos[name] = info
        return info

    def has_collection(self, name: str) -> bool:
        """Whether the collection exists on the server."""
        return bool(self._call("has_collection", name, "has_collection", name))

    def list_collections(self) -> list[str]:
        """Names of all collections, sorted."""
        return sorted(self._call("list_collections", None, "list_collections"))

    def count(self, name: str) -> int:
        """Number of stored rows (a ``count(*)`` query)."""
        self._info(name)
        self._ensure_loaded(name)
        res = self._call("count", name, "query", name, filter="", output_fields=["count(*)"])
        return int(res[0]["count(*)"])

    # -- verbs ------------------------------------------------------------------
    def create_collection(
        self,
        name: str,
        dim: int | None = None,
        *,
        sparse: bool = False,
        metric: str = "ip",
        fields: Mapping[str, str] | None = None,
    ) -> None:
        """Create an empty collection with its index, loaded and ready to search.

        Args:
            name: Milvus's rule: letters, digits, underscores, not starting
                with a digit, at most 255 characters.
            dim: dense dimension (required for dense; ignored for sparse).
            sparse: a ``SPARSE_FLOAT_VECTOR`` collection (scipy CSR in).
            metric: ``"ip"``, the only metric.
            fields: optional typed scalar columns, name -> ``"int"``,
                ``"float"``, ``"str"`` or ``"bool"``; other columns given at
                insert go to the dynamic field (filterable too, slower).
        """
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise ValueError(
                "name must match Milvus's rule (letters, digits and underscores, not starting "
                f"with a digit, 1-255 characters), got {name!r}"
            )
        if metric != "ip":
            raise ValueError(f"metric must be 'ip', got {metric!r}")
        if not isinstance(sparse, bool):
            raise TypeError(f"sparse must be a bool, got {type(sparse).__name__} {sparse!r}")
        if sparse and not self.supports_sparse:
            raise TypeError(
                f"sparse=True: Milvus {self._server_version} at {_redact_uri(self.uri)} has no "
                "sparse vectors (SPARSE_FLOAT_VECTOR needs Milvus >= 2.4 or Milvus Lite); "
                "expected sparse=False"
            )
        if not sparse:
            if dim is None:
                raise ValueError("dim must be given for a dense Milvus collection, got None")
            dim = check_int(dim, "dim", low=1, high=32_768)
        fields = dict(fields or {})
        for fname, ftype in fields.items():
            if not _NAME_RE.match(str(fname)) or fname in (_ID_FIELD, _VEC_FIELD):
                raise ValueError(f"fields: invalid or reserved field name {fname!r}")
            if ftype not in _SCALAR_TYPES:
                raise ValueError(
                    f"fields[{fname!r}] must be one of {sorted(_SCALAR_TYPES)}, got {ftype!r}"
                )
        if self.has_collection(name):
            raise CollectionExistsError(
                f"name: collection {name!r} already exists at {_redact_uri(self.uri)}; "
                "drop it first or pick another name"
            )
        pymilvus = _import_pymilvus()
        DataType = pymilvus.DataType
        schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        schema.add_field(_ID_FIELD, DataType.INT64, is_primary=True)
        if sparse:
            schema.add_field(_VEC_FIELD, DataType.SPARSE_FLOAT_VECTOR)
        else:
            schema.add_field(_VEC_FIELD, DataType.FLOAT_VECTOR, dim=dim)
        for fname, ftype in fields.items():
            extra = {"max_length": 65_535} if ftype == "str" else {}
            schema.add_field(fname, getattr(DataType, _SCALAR_TYPES[ftype]), **extra)
        index_params = self._connect().prepare_index_params()
        if sparse:
            index_params.add_index(
                field_name=_VEC_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="IP"
            )
        else:
            index_params.add_index(
                field_name=_VEC_FIELD,
                index_type=self.index,
                metric_type="IP",
                params=dict(self.index_params),
            )
        self._call(
            "create_collection",
            name,
            "create_collection",
            name,
            schema=schema,
            index_params=index_params,
            consistency_level=self.consistency_level,
        )
        self._infos[name] = CollectionInfo(name=name, dim=dim, sparse=sparse)
        self._ensure_loaded(name)

    def _ensure_loaded(self, name: str) -> None:
        """Load a collection (a reopened or server-restarted one is released)."""
        if name in self._loaded:
            return
        state = self._call("get_load_state", name, "get_load_state", name)
        if "Loaded" not in str(state.get("state", "")):
            self._call("load_collection", name, "load_collection", name)
        self._loaded.add(name)

    def insert(
        self,
        name: str,
        vectors: Any,
        ids: Any,
        *,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        """Add ``vectors`` with the caller's int64 ``ids`` (and optional scalar columns).

        Args:
            name: collection.
            vectors: float32 ``(n, d)`` (dense collection) or CSR (sparse).
                Milvus rejects an all-zero sparse row and (Lite) negative
                sparse weights; both are checked here first.
            ids: ``n`` unique non-negative integers, new to the collection.
            fields: column name -> length-``n`` array of int/float/str/bool.
        """
        info = self._info(name)
        m = check_vectors(vectors, "vectors", info)
        n = int(m.shape[0])
        new_ids = check_ids(ids, "ids", n=n)
        columns = self._check_fields(fields, n)
        if n == 0:
            return
        if info.sparse:
            nnz = np.diff(m.indptr)
            if (nnz == 0).any():
                raise ValueError(
                    f"vectors: Milvus rejects all-zero sparse rows, got {int((nnz == 0).sum())} "
                    f"(first at row {int(np.flatnonzero(nnz == 0)[0])})"
                )
            if self.is_lite and m.nnz and m.data.min() < 0:
                row = int(np.searchsorted(m.indptr, np.flatnonzero(m.data < 0)[0], "right") - 1)
                raise ValueError(
                    "vectors: Milvus Lite needs non-negative sparse weights, got a negative "
                    f"weight in row {row}"
                )
            row_bytes = 8 * nnz.astype(np.int64) + 16
        else:
            row_bytes = np.full(n, 4 * m.shape[1] + 16, dtype=np.int64)
        for col in columns.values():
            row_bytes += col.dtype.itemsize + 8  # an upper bound for str (UTF-32 width)
        if self.check_duplicates:
            self._check_new(name, new_ids)
        self._ensure_loaded(name)
        for lo, hi in _byte_batches(row_bytes, self.request_bytes):
            rows = self._rows(info, m, new_ids, columns, lo, hi)
            self._call("insert", name, "insert", name, rows)

    @staticmethod
    def _check_fields(fields: Mapping[str, Any] | None, n: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for fname, values in dict(fields or {}).items():
            if (
                not isinstance(fname, str)
                or not _NAME_RE.match(fname)
                or fname
                in (
                    _ID_FIELD,
                    _VEC_FIELD,
                )
            ):
                raise ValueError(f"fields: invalid or reserved field name {fname!r}")
            arr = np.asarray(values)
            if arr.ndim != 1 or len(arr) != n:
                raise ValueError(
                    f"fields[{fname!r}] must be 1-D with {n} entries (one per vector), "
                    f"got shape {arr.shape}"
                )
            if arr.dtype.kind not in "iufbU":
                raise TypeError(
                    f"fields[{fname!r}] must hold int, float, bool or str, got dtype {arr.dtype}"
                )
            out[fname] = arr
        return out

    def _check_new(self, name: str, ids: np.ndarray) -> None:
        """Milvus keeps duplicate primary keys; refuse ids that are already stored."""
        self._ensure_loaded(name)
        for lo in range(0, len(ids), 8192):
            chunk = ids[lo : lo + 8192]
            expr = f"{_ID_FIELD} in [{','.join(map(str, chunk.tolist()))}]"
            hits = self._call(
                "insert (id check)", name, "query", name, filter=expr, output_fields=[_ID_FIELD]
            )
            if hits:
                clash = sorted(int(h[_ID_FIELD]) for h in hits)
                raise ValueError(
                    f"ids must be new to collection {name!r}, got {len(clash)} id(s) already "
                    f"stored: {clash[:5]}"
                )

    @staticmethod
    def _rows(
        info: CollectionInfo,
        m: Any,
        ids: np.ndarray,
        columns: dict[str, np.ndarray],
        lo: int,
        hi: int,
    ) -> list[dict[str, Any]]:
        id_list = ids[lo:hi].tolist()
        if info.sparse:
            vecs = _sparse_rows(m, lo, hi)
        else:
            vecs = list(m[lo:hi])
        cols = {c: v[lo:hi].tolist() for c, v in columns.items()}
        rows = [{_ID_FIELD: i, _VEC_FIELD: v} for i, v in zip(id_list, vecs)]
        for c, vals in cols.items():
            for row, val in zip(rows, vals):
                row[c] = val
        return rows

    def search(
        self,
        name: str,
        queries: Any,
        k: int,
        *,
        filter: str = "",
    ) -> SearchResult:
        """Top-``k`` by inner product per query row; ``filter`` is a Milvus expression.

        Rows are ordered by (score descending, id ascending); rows with fewer
        than ``k`` hits (a small collection, a filter, a sparse query sharing
        no term with most documents) are padded with id ``-1``.
        """
        k = check_int(k, "k", low=1, high=self.max_k)
        if not isinstance(filter, str):
            raise TypeError(
                f"filter must be a Milvus expression string, got {type(filter).__name__}"
            )
        info = self._info(name)
        q = check_vectors(queries, "queries", info)
        nq = int(q.shape[0])
        if nq == 0:
            return empty_result(0, k)
        self._ensure_loaded(name)
        params: dict[str, Any] = {"metric_type": "IP", "params": dict(self.search_params)}
        ids = np.full((nq, k), -1, dtype=np.int64)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        if info.sparse:
            nnz = np.diff(q.indptr)
            row_bytes = 8 * nnz.astype(np.int64) + 16
            # Milvus rejects an empty sparse query; it matches nothing anyway.
            todo = np.flatnonzero(nnz > 0)
        else:
            row_bytes = np.full(nq, 4 * q.shape[1] + 16, dtype=np.int64)
            todo = np.arange(nq)
        if todo.size == 0:
            return finalize_rows(ids, scores, k)
        for lo, hi in _byte_batches(row_bytes[todo], self.request_bytes, max_rows=MAX_NQ):
            rows = todo[lo:hi]
            data = _sparse_rows(q[rows], 0, len(rows)) if info.sparse else list(q[rows])
            res = self._call(
                "search",
                name,
                "search",
                name,
                data=data,
                limit=k,
                output_fields=[_ID_FIELD],
                search_params=params,
                anns_field=_VEC_FIELD,
                filter=filter,
                consistency_level=self.consistency_level,
            )
            for r, hits in zip(rows, res):
                h_ids = hits.ids
                if h_ids:
                    cnt = len(h_ids)
                    ids[r, :cnt] = h_ids
                    scores[r, :cnt] = hits.distances
        return finalize_rows(ids, scores, k)

    def drop_collection(self, name: str) -> None:
        """Remove a collection and its data (an unknown name raises)."""
        self._info(name)
        self._call("drop_collection", name, "drop_collection", name)
        self._infos.pop(name, None)
        self._loaded.discard(name)

    def close(self) -> None:
        """Close the connection (data stay on the server / on disk); idempotent.

        For Milvus Lite in-process, the last store closing a data directory
        stops its in-process server, which releases the directory lock.
        """
        if self._closed:
            return
        self._closed = True
        if self._client is not None:
            try:
                self._client.close()
            except Exception as exc:  # closing a dead connection must not raise
                log.debug("closing the Milvus client: %s", type(exc).__name__)
            self._client = None
        if self._lite_path is not None:
            with _LITE_LOCK:
                left = _LITE_REFS.get(self._lite_path, 1) - 1
                if left <= 0:
                    _LITE_REFS.pop(self._lite_path, None)
                    from milvus_lite.server_manager import server_manager_instance

                    server_manager_instance.release_server(self._lite_path)
                else:
                    _LITE_REFS[self._lite_path] = left
            self._lite_path = None

    def __enter__(self) -> MilvusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sparse_rows(m: Any, lo: int, hi: int) -> list[dict[int, float]]:
    """Rows ``lo:hi`` of a CSR matrix as ``{index: value}`` dicts (what pymilvus takes)."""
    indptr, indices, data = m.indptr, m.indices, m.data
    return [
        dict(
            zip(
                indices[indptr[i] : indptr[i + 1]].tolist(),
                data[indptr[i] : indptr[i + 1]].tolist(),
            )
        )
        for i in range(lo, hi)
    ]


def _byte_batches(
    row_bytes: np.ndarray, budget: int, *, max_rows: int | None = None
) -> list[tuple[int, int]]:
    """Split rows into consecutive ``[lo, hi)`` ranges of at most ``budget`` bytes
    (and ``max_rows`` rows); a single row over budget gets a batch of its own."""
    n = len(row_bytes)
    out: list[tuple[int, int]] = []
    csum = np.concatenate([[0], np.cumsum(row_bytes, dtype=np.int64)])
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(csum, csum[lo] + budget, side="right")) - 1
        hi = max(hi, lo + 1)
        if max_rows is not None:
            hi = min(hi, lo + max_rows)
        hi = min(hi, n)
        out.append((lo, hi))
        lo = hi
    return out
