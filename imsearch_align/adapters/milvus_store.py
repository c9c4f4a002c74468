"""Milvus as a vector store: Milvus Lite in-process, or any Milvus server.

One adapter, three deployments, chosen by ``uri``:

* a path ending in ``.db`` (or an existing directory): Milvus Lite 3.x
  in-process (``milvus-lite`` runs a gRPC server in threads of this process
  on 127.0.0.1; the path is its data directory);
* ``http://host:port``: a server: ``milvus-lite server``, a Milvus
  standalone (PyPI ``milvus`` 2.3.5, ``docker/milvus-compose.yml``) or a
  cluster (Helm chart / Milvus Operator); only the URI changes.

:class:`MilvusStore` is a :class:`~imsearch_align.adapters.base.BaseStore`:
the same name rule, input checks and errors as every other store. The
server holds the catalog and the ids (``keeps_ids = False``): collections
made by other clients are found, counts are ``count(*)`` queries, and
duplicate ids are looked up on the server before an insert.

Collections have an ``INT64`` primary key ``id`` (the caller's ids), a
vector field ``vector`` (``FLOAT_VECTOR`` or ``SPARSE_FLOAT_VECTOR`` with
``SPARSE_INVERTED_INDEX``), metric ``IP``, and a dynamic field, so scalar
metadata columns given at insert can be filtered on at search. Consistency
is ``Strong`` by default, so what was inserted is what is searched. A
``FLAT`` index is exact, so the store (without a filter) chooses the
documents tied at the k-th score by ascending id, as ExactStore does: it asks
for ``k + 8`` hits and again, wider, for rows still tied at the end
(:func:`~imsearch_align.adapters.base.search_closing_ties`); other indexes
return the server's choice among tied documents.

**Ownership** (servers are shared between runs): every collection a store
creates carries the property ``imsearch_align.owner`` = the store's
``owner`` token (random per store unless given; pass a run id so a resumed
run owns its collections again). Any store may search any collection; only
the owner may insert into it or drop it (``drop_collection(name,
force=True)`` overrides); creating an existing name raises
:class:`~imsearch_align.adapters.base.CollectionExistsError` and never
drops anything; a creation race between two stores is detected by reading
the marker back. Build unique names with
:func:`~imsearch_align.adapters.base.unique_collection_name`.

**Faults** (one retry budget per outage, ``retry_budget_s``): a broken
connection (gRPC UNAVAILABLE, connect failed, deadline exceeded) is retried
with backoff (pymilvus reconnects the channel) until the server answers
or the budget is spent; a collection the server reports as not loaded (it
was restarted: ``state 'released'``) is loaded again and the request
repeated; an insert that may have reached the server before the failure is
repeated only for the ids not stored. When the budget is spent the store
raises :class:`MilvusUnavailableError` (a
:class:`~imsearch_align.framework.interfaces.StoreUnavailableError`) with
the URI and the cause in one line, and every later call that fails the
same way raises at once (no new budget) until the server answers again.
Errors that cannot heal are never retried: a collection dropped by another
client raises :class:`~imsearch_align.adapters.base.CollectionNotFoundError`,
a refused request (bad expression, parameter) :class:`MilvusStoreError`.
pymilvus's own log of every failed RPC (a traceback each) is silenced by
:func:`quiet_pymilvus_logs`; the store logs one warning when an outage
starts and one line when it ends.

Server limits handled here (https://milvus.io/docs/limitations.md): inserts
and searches are split under the 64 MB request limit and searches under
16,384 queries per request; ``k`` above the 16,384 top-k limit is a clear
error (set ``max_k`` for a server configured higher). Sparse queries are sent
one dict per row (pymilvus 3.0.2 fails on a whole CSR matrix). The token
(argument or ``MILVUS_TOKEN``) is never logged, shown in ``repr``, put into
an error message or into :meth:`MilvusStore.provenance`.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from imsearch_align.adapters.base import (
    BaseStore,
    CollectionExistsError,
    CollectionInfo,
    CollectionNotFoundError,
    CollectionOwnedError,
    finalize_rows,
    search_closing_ties,
)
from imsearch_align.framework.interfaces import SearchResult, StoreUnavailableError
from imsearch_align.framework.registry import STORES
from imsearch_align.framework.validation import check_int

__all__ = [
    "INDEX_TYPES",
    "OWNER_PROPERTY",
    "MilvusStore",
    "MilvusStoreError",
    "MilvusUnavailableError",
    "quiet_pymilvus_logs",
]

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
MAX_DIM = 32_768
CONSISTENCY_LEVELS = ("Strong", "Bounded", "Session", "Eventually")
#: Collection property holding the owner token of the store that created it.
OWNER_PROPERTY = "imsearch_align.owner"

_ID_FIELD = "id"
_VEC_FIELD = "vector"
_RESERVED = (_ID_FIELD, _VEC_FIELD)
_SCALAR_TYPES = {"int": "INT64", "float": "DOUBLE", "str": "VARCHAR", "bool": "BOOL"}
_OWNER_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")
_FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")

# Milvus Lite data directories opened in this process -> number of open stores.
_LITE_REFS: dict[str, int] = {}
_LITE_LOCK = threading.Lock()


class MilvusStoreError(RuntimeError):
    """Milvus refused a request; the message says which and why."""


class MilvusUnavailableError(StoreUnavailableError):
    """The server did not answer within the store's retry budget."""


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


class _PymilvusRpcLogFilter(logging.Filter):
    """Drop pymilvus's log of each failed RPC and each failed reconnect.

    pymilvus logs every failed request at ERROR with a full traceback, and
    every failed channel recovery at WARNING with another; a dead server
    then fills the log with pages of them. MilvusStore turns every failure
    into one exception (and one warning per outage), so these records only
    repeat it.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.funcName in ("_log_rpc_error", "_recover"):
            return False
        msg = record.getMessage()
        return not ("Retry run out of" in msg or "Retry timeout" in msg)


_LITE_LOG_FILTER = _LiteUnimplementedFilter()
_RPC_LOG_FILTER = _PymilvusRpcLogFilter()


def quiet_pymilvus_logs() -> None:
    """Silence pymilvus's per-RPC error tracebacks in this process (idempotent).

    Applies to every pymilvus client of the process: their errors still
    raise; only the duplicate log records are dropped.
    """
    for name in ("pymilvus.decorators", "pymilvus.client.connection_manager"):
        logging.getLogger(name).addFilter(_RPC_LOG_FILTER)  # a set: adding twice is a no-op


def _import_pymilvus() -> Any:
    try:
        import pymilvus
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(
            "MilvusStore needs pymilvus (and milvus-lite for a local .db): "
            "pip install 'imsearch-align[milvus]'"
        ) from exc
    # After the import: pymilvus configures its loggers when it is imported.
    quiet_pymilvus_logs()
    return pymilvus


def _redact_uri(uri: str) -> str:
    """``uri`` without user:password (a token can also travel there)."""
    parts = urlsplit(uri)
    if parts.scheme and parts.hostname and (parts.username or parts.password):
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return uri


def _is_lite_uri(uri: str) -> bool:
    return uri.endswith(".db") or (not re.match(r"^[a-z]+://", uri) and Path(uri).is_dir())


# -- what a failure means ----------------------------------------------------------
_TRANSIENT = "transient"  # connection broken, server restarting: wait and retry
_NOT_LOADED = "not_loaded"  # the server was restarted: load the collection, retry
_NOT_FOUND = "not_found"  # the collection is gone: never retried
_EXISTS = "exists"  # create_collection on a taken name
_REFUSED = "refused"  # bad parameters, expression...: never retried
_OTHER = "other"  # not a Milvus error at all (a bug): re-raised as is

_TRANSIENT_TEXT = (
    "server unavailable",
    "deadline exceeded",
    "fail connecting",
    "failed to connect",
    "connection refused",
    "closed channel",
    "not ready",
    "notreadyserve",
    "socket closed",
    "stream removed",
)


def _error_text(exc: BaseException) -> str:
    text = str(getattr(exc, "message", "") or "")
    if not text and hasattr(exc, "details"):
        try:
            text = str(exc.details() or "")
        except Exception:  # a grpc error without details
            text = ""
    return text or str(exc)


def _classify(exc: BaseException) -> str:
    """Sort a failed call into one of the kinds above (grpc or pymilvus errors)."""
    try:
        import grpc
    except ImportError:  # pragma: no cover - grpc comes with pymilvus
        grpc = None
    if grpc is not None and isinstance(exc, grpc.RpcError):
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return _TRANSIENT
        return _REFUSED
    if isinstance(exc, ValueError) and "closed channel" in str(exc).lower():
        return _TRANSIENT  # a call raced with pymilvus resetting the channel
    pymilvus = _import_pymilvus()
    if not isinstance(exc, pymilvus.exceptions.MilvusException):
        return _OTHER
    if isinstance(exc, pymilvus.exceptions.MilvusUnavailableException):
        return _TRANSIENT
    from pymilvus.client.types import Status

    code = exc.code
    text = _error_text(exc).lower()
    if code == Status.CONNECT_FAILED or any(t in text for t in _TRANSIENT_TEXT):
        return _TRANSIENT
    if grpc is not None and code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    ):
        return _TRANSIENT
    if code == 101 or "not loaded" in text or "state 'released'" in text:
        return _NOT_LOADED
    if code == 100 or "collection not found" in text or "can't find collection" in text:
        return _NOT_FOUND
    # Milvus Lite answers a create that lost a race with "[Errno 17] File exists".
    if "already exists" in text or "duplicate collection" in text or "file exists" in text:
        return _EXISTS
    return _REFUSED


@dataclass
class _Meta:
    """What MilvusStore keeps about a collection (``CollectionInfo.state``)."""

    owner: str | None
    #: Rows known to be stored (None: not read yet); inserts add to it.
    count: int | None = None
    #: A dense collection created with ``dim=None``: made on the server by
    #: the first insert, which brings the dimension.
    pending: bool = False
    fields: dict[str, str] = field(default_factory=dict)


@STORES.register("milvus")
class MilvusStore(BaseStore):
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
        index: ``"FLAT"`` (exact), ``"HNSW"``, ``"IVF_FLAT"`` or
            ``"AUTOINDEX"`` for dense collections; sparse collections always
            use ``SPARSE_INVERTED_INDEX`` (exact inner product).
        index_params: build parameters: HNSW ``M``, ``efConstruction``;
            IVF_FLAT ``nlist``.
        search_params: HNSW ``ef``; IVF_FLAT ``nprobe``; AUTOINDEX ``level``.
        consistency_level: ``"Strong"`` (default: inserted rows are visible
            to the next search), ``"Bounded"``, ``"Session"``, ``"Eventually"``.
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

    Scalar metadata: ``create_collection(..., fields={"cat": "int"})`` and
    ``insert(..., fields={"cat": array})`` store columns (int, float, str,
    bool) beside each vector; ``search(..., filter="cat == 3")`` passes a
    Milvus boolean expression through.
    """

    #: pymilvus's MilvusClient is safe to share between threads (one gRPC
    #: channel; checked with concurrent searches against a real server in
    #: tests/adapters/test_milvus_faults.py); the store's own state is locked.
    thread_safe = True
    provenance_packages = ("pymilvus", "milvus-lite")
    keeps_ids = False

    def __init__(
        self,
        uri: str = "milvus.db",
        *,
        token: str | None = None,
        owner: str | None = None,
        index: str = "FLAT",
        index_params: Mapping[str, Any] | None = None,
        search_params: Mapping[str, Any] | None = None,
        consistency_level: str = "Strong",
        db_name: str = "",
        timeout: float | None = None,
        retry_budget_s: float = 10.0,
        backoff_s: float = 0.1,
        max_backoff_s: float = 1.0,
        request_bytes: int = 48 * 1024 * 1024,
        max_k: int = MAX_TOPK,
        check_duplicates: bool = True,
    ) -> None:
        super().__init__()
        if not isinstance(uri, str | os.PathLike) or not str(uri):
            raise TypeError(f"uri must be a path or 'http://host:port' string, got {uri!r}")
        self.uri = str(uri)
        if owner is None:
            owner = uuid.uuid4().hex
        if not isinstance(owner, str) or not _OWNER_RE.match(owner):
            raise ValueError(
                f"owner must be 1-128 letters, digits or '_.:-' characters, got {owner!r}"
            )
        self.owner = owner
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
        for nm, v in (
            ("retry_budget_s", retry_budget_s),
            ("backoff_s", backoff_s),
            ("max_backoff_s", max_backoff_s),
        ):
            if isinstance(v, bool) or not isinstance(v, int | float) or not v >= 0:
                raise ValueError(f"{nm} must be a number >= 0, got {v!r}")
        self.retry_budget_s = float(retry_budget_s)
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
        self._server_version: str | None = None
        # Guards the client, the catalog cache and the outage state; held
        # across connecting only, never across a request, so searches from
        # several threads overlap.
        self._lock = threading.RLock()
        self._outage_since: float | None = None
        self._gave_up = False

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

    @property
    def exact(self) -> bool:
        """Whether search scores every vector (a FLAT index; see ExactSearch)."""
        return self.index == "FLAT"

    def __repr__(self) -> str:
        return (
            f"MilvusStore(uri={_redact_uri(self.uri)!r}, index={self.index!r}, "
            f"consistency_level={self.consistency_level!r}, owner={self.owner!r}, "
            f"token={'***' if self.__token else None})"
        )

    def _where(self) -> str:
        return f" at {_redact_uri(self.uri)}"

    def _no_sparse_reason(self) -> str:
        return (
            f"Milvus {self.server_version()} at {_redact_uri(self.uri)} has no sparse vectors "
            "(SPARSE_FLOAT_VECTOR needs Milvus >= 2.4 or Milvus Lite)"
        )

    @property
    def supports_sparse(self) -> bool:  # type: ignore[override]
        """Whether the target has SPARSE_FLOAT_VECTOR: Milvus Lite and servers >= 2.4.

        For a server this asks its version once (Milvus 2.3 accepts a sparse
        schema but fails every insert, so it is refused up front).
        """
        if self.is_lite:
            return True
        version = self.server_version()
        found = re.search(r"(\d+)\.(\d+)", version)
        # Lite servers report "milvus_lite-3.x"; unknown formats get the benefit of the doubt.
        return found is None or (int(found[1]), int(found[2])) >= (2, 4)

    @property
    def is_lite(self) -> bool:
        """Whether ``uri`` selects Milvus Lite in-process."""
        return _is_lite_uri(self.uri)

    def server_version(self) -> str:
        """The version the server reports (``get_server_version``), asked once."""
        if self._server_version is None:
            self._server_version = str(self._call("get_server_version", None, "get_server_version"))
        return self._server_version

    @property
    def deployment(self) -> str:
        """``"milvus-lite (in-process)"``, ``"milvus-lite server"`` or ``"milvus server"``."""
        if self.is_lite:
            return "milvus-lite (in-process)"
        if self.server_version().startswith("milvus_lite"):
            return "milvus-lite server"
        return "milvus server (standalone or cluster)"

    def provenance(self) -> dict[str, Any]:
        """Client package versions, the server's own version and the deployment kind.

        Never the token or a local path (a Lite data directory is not recorded).
        """
        out = super().provenance()
        out["server_version"] = self.server_version()
        out["deployment"] = self.deployment
        return out

    # -- connection, retries, healing ----------------------------------------------------
    def _connect(self) -> Any:
        with self._lock:
            self._check_open()
            if self._client is not None:
                return self._client
            pymilvus = _import_pymilvus()
            target = self.uri
            if self.is_lite and self._lite_path is None:
                self._lite_path = self._start_lite()
            if self._lite_path is not None:
                from milvus_lite.server_manager import server_manager_instance

                target = server_manager_instance.start_and_get_uri(self._lite_path)
            kwargs: dict[str, Any] = {"uri": target, "db_name": self.db_name, "dedicated": True}
            if self.__token:
                kwargs["token"] = self.__token
            # Also pymilvus's wait for the channel, on connect and on reconnect.
            kwargs["timeout"] = self.timeout or max(1.0, min(10.0, self.retry_budget_s))
            self._client = pymilvus.MilvusClient(**kwargs)
            return self._client

    def _start_lite(self) -> str:
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
            if server_manager_instance.start_and_get_uri(path) is None:
                raise MilvusStoreError(
                    f"uri: Milvus Lite could not open {self.uri!r} (is another process "
                    "using this data directory? Milvus Lite allows one process per directory)"
                )
            _LITE_REFS[path] = _LITE_REFS.get(path, 0) + 1
        return path

    def _scrub(self, text: str) -> str:
        if self.__token:
            text = text.replace(self.__token, "***")
        text = text.replace(self.uri, _redact_uri(self.uri))
        # One line, bounded: a server's message can carry a stack of its own.
        text = " ".join(text.split())
        return text if len(text) <= 300 else text[:297] + "..."

    def _call(self, op: str, collection: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        """A client method through :meth:`_run` (retries, reload, clear errors)."""
        if self.timeout is not None:
            kwargs.setdefault("timeout", self.timeout)
        return self._run(op, collection, lambda client, _: getattr(client, method)(*args, **kwargs))

    def _run(self, op: str, collection: str | None, fn: Callable[[Any, bool], Any]) -> Any:
        """Run ``fn(client, retried)``; heal what can heal, translate the rest.

        ``retried`` is True once an attempt failed in a way that may have
        reached the server (a broken connection), so a write can skip what
        was already applied.
        """
        wait = self.backoff_s
        retried = False
        reloaded = False
        while True:
            try:
                result = fn(self._connect(), retried)
            except Exception as exc:
                kind = _classify(exc)
                if kind == _NOT_LOADED and collection is not None and not reloaded:
                    reloaded = True
                    self._load(collection)
                    continue
                if kind == _TRANSIENT:
                    wait = self._wait_out(op, collection, exc, wait)
                    retried = True
                    reloaded = False  # a restart in between releases it again
                    continue
                if kind == _OTHER:
                    raise
                raise self._translate(op, collection, exc, kind) from None
            self._recovered()
            return result

    def _load(self, name: str) -> None:
        """Load a collection the server reports as released (after a server restart)."""
        t0 = time.monotonic()
        self._call("load_collection", name, "load_collection", name)
        log.info(
            "Milvus at %s had released collection %r (restarted?); loaded it again in %.2f s",
            _redact_uri(self.uri),
            name,
            time.monotonic() - t0,
        )

    def _wait_out(self, op: str, collection: str | None, exc: BaseException, wait: float) -> float:
        """Sleep before the next attempt, or raise once the outage outlasts the budget."""
        where = f" on collection {collection!r}" if collection else ""
        cause = f"{type(exc).__name__}: {self._scrub(_error_text(exc))}"
        with self._lock:
            now = time.monotonic()
            if self._outage_since is None:
                self._outage_since = now
                if not self._gave_up:
                    log.warning(
                        "Milvus at %s is not answering (%s%s: %s); retrying for up to %.1f s",
                        _redact_uri(self.uri),
                        op,
                        where,
                        cause,
                        self.retry_budget_s,
                    )
            elapsed = now - self._outage_since
            if self._gave_up or elapsed >= self.retry_budget_s:
                self._gave_up = True
                raise MilvusUnavailableError(
                    f"Milvus at {_redact_uri(self.uri)} is unavailable: {op}{where} failed and "
                    f"the server did not answer for {elapsed:.1f} s (retry_budget_s="
                    f"{self.retry_budget_s:g}); last error {cause}. Is the server running and "
                    "the uri right?"
                ) from None
            pause = min(wait, self.retry_budget_s - elapsed)
        time.sleep(max(pause, 0.0))
        return min(max(wait, 1e-3) * 2, self.max_backoff_s)

    def _recovered(self) -> None:
        if self._outage_since is None and not self._gave_up:
            return
        with self._lock:
            if self._outage_since is not None or self._gave_up:
                since = self._outage_since
                took = "" if since is None else f" after {time.monotonic() - since:.1f} s"
                log.warning("Milvus at %s answers again%s", _redact_uri(self.uri), took)
                self._outage_since = None
                self._gave_up = False

    def _translate(
        self, op: str, collection: str | None, exc: BaseException, kind: str
    ) -> Exception:
        where = f" on collection {collection!r}" if collection else ""
        msg = self._scrub(_error_text(exc))
        if kind == _NOT_FOUND and collection is not None:
            self._forget(collection)
            return CollectionNotFoundError(
                f"collection {collection!r} does not exist at {_redact_uri(self.uri)} "
                f"({op}: {msg}); was it dropped by another client?"
            )
        if kind == _EXISTS and op == "create_collection" and collection is not None:
            return CollectionExistsError(
                f"name: collection {collection!r} already exists at {_redact_uri(self.uri)}; "
                "a store never drops a collection to make room: pick another name"
            )
        return MilvusStoreError(
            f"Milvus at {_redact_uri(self.uri)} refused {op}{where}: {msg} "
            f"(code {getattr(exc, 'code', '?')})"
        )

    # -- catalog (the server holds it) --------------------------------------------------
    def _lookup(self, name: str) -> CollectionInfo | None:
        with self._lock:
            info = self._collections.get(name)
        if info is not None:
            return info
        try:
            desc = self._call("describe_collection", name, "describe_collection", name)
        except CollectionNotFoundError:
            return None
        info = self._info_from(name, desc)
        with self._lock:
            return self._collections.setdefault(name, info)

    def _info_from(self, name: str, desc: Mapping[str, Any]) -> CollectionInfo:
        pymilvus = _import_pymilvus()
        vec = next((f for f in desc.get("fields", []) if f.get("name") == _VEC_FIELD), None)
        if vec is None:
            raise MilvusStoreError(
                f"collection {name!r} at {_redact_uri(self.uri)} was not created by "
                f"MilvusStore: it has no {_VEC_FIELD!r} field"
            )
        sparse = vec["type"] == pymilvus.DataType.SPARSE_FLOAT_VECTOR
        dim = None if sparse else int(vec["params"]["dim"])
        props = desc.get("properties") or {}
        return CollectionInfo(
            name=name, dim=dim, sparse=sparse, state=_Meta(owner=props.get(OWNER_PROPERTY))
        )

    def _exists(self, name: str) -> bool:
        with self._lock:
            info = self._collections.get(name)
        if info is not None and info.state.pending:
            return True
        found = bool(self._call("has_collection", name, "has_collection", name))
        if not found and info is not None:
            self._forget(name)  # dropped by another client
        return found

    def _catalog(self) -> list[str]:
        with self._lock:
            pending = {n for n, i in self._collections.items() if i.state.pending}
        return sorted(set(self._call("list_collections", None, "list_collections")) | pending)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._collections.pop(name, None)

    def _count(self, info: CollectionInfo) -> int:
        if info.state.pending:
            return 0
        res = self._call(
            "count", info.name, "query", info.name, filter="", output_fields=["count(*)"]
        )
        n = int(res[0]["count(*)"])
        info.state.count = n
        return n

    def _is_empty(self, info: CollectionInfo) -> bool:
        return info.state.pending

    def _stored_among(self, info: CollectionInfo, ids: np.ndarray) -> np.ndarray:
        """Milvus keeps duplicate primary keys: look the ids up before inserting."""
        if info.state.pending or not self.check_duplicates:
            return ids[:0]
        found: list[int] = []
        for lo in range(0, len(ids), 8192):
            found += self._run(
                "insert (id check)",
                info.name,
                lambda client, _, chunk=ids[lo : lo + 8192]: self._ids_present(
                    client, info.name, chunk
                ),
            )
        return np.asarray(sorted(found), dtype=np.int64)

    def _ids_present(self, client: Any, name: str, ids: np.ndarray) -> list[int]:
        expr = f"{_ID_FIELD} in [{','.join(map(str, ids.tolist()))}]"
        kwargs: dict[str, Any] = {"consistency_level": "Strong"}
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        hits = client.query(name, filter=expr, output_fields=[_ID_FIELD], **kwargs)
        return [int(h[_ID_FIELD]) for h in hits]

    def owner_of(self, name: str) -> str | None:
        """The owner token on the collection, read from the server (None: no marker)."""
        info = self._get(name)
        if info.state.pending:
            return info.state.owner
        desc = self._call("describe_collection", name, "describe_collection", name)
        return (desc.get("properties") or {}).get(OWNER_PROPERTY)

    def _check_writable(self, info: CollectionInfo, verb: str) -> None:
        owner = info.state.owner
        if owner == self.owner:
            return
        whose = (
            f"another run (owner {owner!r})"
            if owner
            else "no run of imsearch_align (it has no owner marker)"
        )
        raise CollectionOwnedError(
            f"{verb}: collection {info.name!r} at {_redact_uri(self.uri)} belongs to {whose}; "
            f"this store (owner {self.owner!r}) may search it but not change it. Use a name of "
            "your own (unique_collection_name), or open the store with that owner"
            + (", or drop_collection(name, force=True)" if verb == "drop_collection" else "")
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

        Raises:
            CollectionExistsError: the name is taken on the server (also
                when another store created it a moment earlier).
        """
        if dim is not None and not sparse:
            check_int(dim, "dim", low=1, high=MAX_DIM)
        info = self._new_collection(name, dim, sparse, metric)
        columns = self._check_schema_fields(fields)
        info.state = _Meta(
            owner=self.owner, count=0, pending=info.dim is None and not sparse, fields=columns
        )
        if not info.state.pending:
            self._create_on_server(info)
        with self._lock:
            self._register(info)

    @staticmethod
    def _check_schema_fields(fields: Mapping[str, str] | None) -> dict[str, str]:
        out = dict(fields or {})
        for fname, ftype in out.items():
            if not isinstance(fname, str) or not _FIELD_RE.match(fname) or fname in _RESERVED:
                raise ValueError(f"fields: invalid or reserved field name {fname!r}")
            if ftype not in _SCALAR_TYPES:
                raise ValueError(
                    f"fields[{fname!r}] must be one of {sorted(_SCALAR_TYPES)}, got {ftype!r}"
                )
        return out

    def _create_on_server(self, info: CollectionInfo) -> None:
        pymilvus = _import_pymilvus()
        DataType = pymilvus.DataType
        schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
        schema.add_field(_ID_FIELD, DataType.INT64, is_primary=True)
        if info.sparse:
            schema.add_field(_VEC_FIELD, DataType.SPARSE_FLOAT_VECTOR)
        else:
            schema.add_field(_VEC_FIELD, DataType.FLOAT_VECTOR, dim=info.dim)
        for fname, ftype in info.state.fields.items():
            extra = {"max_length": 65_535} if ftype == "str" else {}
            schema.add_field(fname, getattr(DataType, _SCALAR_TYPES[ftype]), **extra)
        index_params = pymilvus.MilvusClient.prepare_index_params()
        if info.sparse:
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
            info.name,
            "create_collection",
            info.name,
            schema=schema,
            index_params=index_params,
            consistency_level=self.consistency_level,
            properties={OWNER_PROPERTY: self.owner},
        )
        # Two stores may race for a free name; some servers answer the second
        # create with success. The marker read back says who won.
        desc = self._call("describe_collection", info.name, "describe_collection", info.name)
        winner = (desc.get("properties") or {}).get(OWNER_PROPERTY)
        if winner != self.owner:
            raise CollectionExistsError(
                f"name: collection {info.name!r} at {_redact_uri(self.uri)} was created at the "
                f"same moment by another run (owner {winner!r}); pick another name"
            )
        info.state.pending = False

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
            name: a collection this store owns.
            vectors: float32 ``(n, d)`` (dense collection) or CSR (sparse).
                Milvus rejects an all-zero sparse row and (Lite) negative
                sparse weights; both are checked here first.
            ids: ``n`` unique non-negative integers, new to the collection.
            fields: column name -> length-``n`` array of int/float/str/bool.

        Raises:
            CollectionOwnedError: the collection belongs to another owner.
        """
        info, m, new_ids = self._prepare_insert(name, vectors, ids)
        n = int(m.shape[0])
        columns = self._check_fields(fields, n)
        self._check_writable(info, "insert")
        if info.sparse and n:
            row_bytes = self._check_sparse_rows(m)
        else:
            row_bytes = np.full(n, 4 * m.shape[1] + 16, dtype=np.int64)
        self._check_new(info, new_ids)
        if n == 0:
            return
        if info.dim is None:
            info.dim = int(m.shape[1])
        if info.state.pending:
            self._create_on_server(info)
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
                8 * np.diff(m.indptr).astype(np.int64) + 16
                if info.sparse
                else np.full(m.shape[0], 4 * m.shape[1] + 16, dtype=np.int64)
            )
        for lo, hi in _byte_batches(row_bytes, self.request_bytes):
            rows = self._rows(info, m, new_ids, columns, lo, hi)
            self._run(
                "insert",
                name,
                lambda client, retried, rows=rows, chunk=new_ids[lo:hi]: self._insert_rows(
                    client, name, rows, chunk, retried
                ),
            )
            with self._lock:
                if info.state.count is not None:
                    info.state.count += hi - lo

    def _insert_rows(
        self, client: Any, name: str, rows: list[dict], ids: np.ndarray, retried: bool
    ) -> Any:
        if retried:
            # The failed attempt may have been applied: send only what is missing.
            present = set(self._ids_present(client, name, ids))
            rows = [r for r in rows if r[_ID_FIELD] not in present]
            if not rows:
                return None
        kwargs = {"timeout": self.timeout} if self.timeout is not None else {}
        return client.insert(name, rows, **kwargs)

    def _check_sparse_rows(self, m: Any) -> np.ndarray:
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
        return 8 * nnz.astype(np.int64) + 16

    @staticmethod
    def _check_fields(fields: Mapping[str, Any] | None, n: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for fname, values in dict(fields or {}).items():
            if not isinstance(fname, str) or not _FIELD_RE.match(fname) or fname in _RESERVED:
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

        Rows are ordered by (score descending, id ascending) and padded with
        id ``-1``: a dense row holds ``min(k, count)`` hits (fewer only
        under a filter or an approximate index); a sparse row holds the
        documents whose inner product with the query is non-zero, at most
        ``k``.

        Raises:
            MilvusStoreError: a FLAT dense search without filter returned
                fewer than ``min(k, count)`` hits (rows inserted but not
                visible, or the collection changed under this run).
        """
        if not isinstance(filter, str):
            raise TypeError(
                f"filter must be a Milvus expression string, got {type(filter).__name__}"
            )
        info, q, k, done = self._prepare_search(name, queries, k)
        if done is not None:
            return done
        return self._search(info, q, k, filter=filter)

    def _search(self, info: CollectionInfo, q: Any, k: int, *, filter: str = "") -> SearchResult:
        """Checked queries in batches under the request limits; finished rows."""
        name = info.name
        nq = int(q.shape[0])
        params: dict[str, Any] = {"metric_type": "IP", "params": dict(self.search_params)}
        if info.sparse:
            nnz = np.diff(q.indptr)
            row_bytes = 8 * nnz.astype(np.int64) + 16
            # Milvus rejects an empty sparse query; it matches nothing anyway.
            asked = nnz > 0
        else:
            row_bytes = np.full(nq, 4 * q.shape[1] + 16, dtype=np.int64)
            asked = np.ones(nq, dtype=bool)
        kwargs: dict[str, Any] = {
            "output_fields": [_ID_FIELD],
            "search_params": params,
            "anns_field": _VEC_FIELD,
            "filter": filter,
            "consistency_level": self.consistency_level,
        }

        def fetch(rows: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
            """Hits of query rows ``rows``, ``limit`` per row, in requests under the limits."""
            ids = np.full((len(rows), limit), -1, dtype=np.int64)
            scores = np.full((len(rows), limit), -np.inf, dtype=np.float32)
            todo = np.flatnonzero(asked[rows])
            for lo, hi in _byte_batches(row_bytes[rows[todo]], self.request_bytes, max_rows=MAX_NQ):
                sel = todo[lo:hi]
                qs = q[rows[sel]]
                data = _sparse_rows(qs, 0, len(sel)) if info.sparse else list(qs)
                res = self._call("search", name, "search", name, data=data, limit=limit, **kwargs)
                for r, hits in zip(sel, res):
                    h_ids = hits.ids
                    if h_ids:
                        cnt = len(h_ids)
                        ids[r, :cnt] = h_ids
                        scores[r, :cnt] = hits.distances
            return ids, scores

        if self.index == "FLAT" and not filter:
            # exact: the documents tied at the k-th score are chosen by id, not by
            # the server. Bounded by the server's top-k limit, not by this store's
            # count, which another client's inserts can leave behind: a row that
            # ends in no-hits ends the widening.
            ids, scores = search_closing_ties(fetch, nq, self.max_k, k)
        else:
            ids, scores = fetch(np.arange(nq, dtype=np.int64), k)
        if info.sparse:
            # The package rule: a document with a zero inner product is no hit
            # (explicit zero weights can make a shared term score 0).
            ids[scores == 0] = -1
        elif self.index == "FLAT" and not filter:
            self._check_full_rows(info, ids, k)
        return finalize_rows(ids, scores, k)

    def _check_full_rows(self, info: CollectionInfo, ids: np.ndarray, k: int) -> None:
        """An exact dense search returns ``min(k, count)`` hits per row, or it failed.

        ``count`` is what this store inserted (or found on first use); a
        short row makes the store read the server's count again, to say
        whether rows vanished (changed by another client) or are not
        visible yet (consistency).
        """
        hits = (ids >= 0).sum(axis=1)
        if not hits.size or hits.min() >= k:
            return
        if info.state.count is None:
            self._count(info)
        expected = int(info.state.count)
        if hits.min() >= min(k, expected):
            return
        held = self._count(info)  # also refreshes the cached count
        r = int(np.argmin(hits))
        short = int((hits < min(k, expected)).sum())
        if held < expected:
            why = (
                f"the collection lost rows (this store counted {expected}, the server holds "
                f"{held}): it was changed by another client"
            )
        else:
            why = (
                f"the server holds {held} rows but they are not all visible to search "
                f"(consistency_level={self.consistency_level!r})"
            )
        raise MilvusStoreError(
            f"search on collection {info.name!r} at {_redact_uri(self.uri)} returned "
            f"{int(hits[r])} hits for query row {r} ({short} short rows) where a FLAT index "
            f"returns min(k, count) = {min(k, expected)}: {why}"
        )

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
            client, self._client = self._client, None
            lite_path, self._lite_path = self._lite_path, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # closing a dead connection must not raise
                log.debug("closing the Milvus client: %s", type(exc).__name__)
        if lite_path is not None:
            with _LITE_LOCK:
                left = _LITE_REFS.get(lite_path, 1) - 1
                if left <= 0:
                    _LITE_REFS.pop(lite_path, None)
                    from milvus_lite.server_manager import server_manager_instance

                    server_manager_instance.release_server(lite_path)
                else:
                    _LITE_REFS[lite_path] = left

    def __enter__(self) -> MilvusStore:
        return self


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
