"""What a failed Milvus call means, and the errors a MilvusStore raises.

:func:`classify` sorts a failure (a gRPC or pymilvus error) into one of a
few kinds, which decide what the store does next: wait and retry
(:data:`TRANSIENT`: the connection broke, the server is restarting), load
the collection again and repeat (:data:`NOT_LOADED`: the server was
restarted), or never retry (:data:`NOT_FOUND`, :data:`EXISTS`,
:data:`REFUSED`); anything that is not a Milvus error (:data:`OTHER`, a bug)
is re-raised as it is. :func:`refusal` turns a failure that will not heal
into the exception the caller sees.
"""

from __future__ import annotations

from imsearch_align.adapters.base import CollectionExistsError, CollectionNotFoundError
from imsearch_align.adapters.milvus.config import redact_uri
from imsearch_align.adapters.milvus.logs import import_pymilvus
from imsearch_align.framework.interfaces import StoreUnavailableError

__all__ = [
    "EXISTS",
    "NOT_FOUND",
    "NOT_LOADED",
    "OTHER",
    "REFUSED",
    "TRANSIENT",
    "MilvusStoreError",
    "MilvusUnavailableError",
    "classify",
    "error_text",
    "refusal",
]


class MilvusStoreError(RuntimeError):
    """Milvus refused a request; the message says which and why."""


class MilvusUnavailableError(StoreUnavailableError):
    """The server did not answer within the store's retry budget."""


# -- what a failure means ----------------------------------------------------------
TRANSIENT = "transient"  # connection broken, server restarting: wait and retry
NOT_LOADED = "not_loaded"  # the server was restarted: load the collection, retry
NOT_FOUND = "not_found"  # the collection is gone: never retried
EXISTS = "exists"  # create_collection on a taken name
REFUSED = "refused"  # bad parameters, expression...: never retried
OTHER = "other"  # not a Milvus error at all (a bug): re-raised as is

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


def error_text(exc: BaseException) -> str:
    """The server's message in ``exc`` (pymilvus ``message``, gRPC ``details()``), else ``str``."""
    text = str(getattr(exc, "message", "") or "")
    if not text and hasattr(exc, "details"):
        try:
            text = str(exc.details() or "")
        except Exception:  # a grpc error without details
            text = ""
    return text or str(exc)


def classify(exc: BaseException) -> str:
    """Sort a failed call into one of the kinds above (grpc or pymilvus errors)."""
    try:
        import grpc
    except ImportError:  # pragma: no cover - grpc comes with pymilvus
        grpc = None
    if grpc is not None and isinstance(exc, grpc.RpcError):
        code = exc.code() if callable(getattr(exc, "code", None)) else None
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            return TRANSIENT
        return REFUSED
    if isinstance(exc, ValueError) and "closed channel" in str(exc).lower():
        return TRANSIENT  # a call raced with pymilvus resetting the channel
    pymilvus = import_pymilvus()
    if not isinstance(exc, pymilvus.exceptions.MilvusException):
        return OTHER
    if isinstance(exc, pymilvus.exceptions.MilvusUnavailableException):
        return TRANSIENT
    from pymilvus.client.types import Status

    code = exc.code
    text = error_text(exc).lower()
    if code == Status.CONNECT_FAILED or any(t in text for t in _TRANSIENT_TEXT):
        return TRANSIENT
    if grpc is not None and code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
    ):
        return TRANSIENT
    if code == 101 or "not loaded" in text or "state 'released'" in text:
        return NOT_LOADED
    if code == 100 or "collection not found" in text or "can't find collection" in text:
        return NOT_FOUND
    # Milvus Lite answers a create that lost a race with "[Errno 17] File exists".
    if "already exists" in text or "duplicate collection" in text or "file exists" in text:
        return EXISTS
    return REFUSED


def refusal(
    uri: str, op: str, collection: str | None, exc: BaseException, kind: str, msg: str
) -> Exception:
    """The exception for a failure that will not heal.

    Args:
        uri: the store's uri (shown without credentials).
        op: the store operation that failed (``"search"``, ``"insert"``...).
        collection: the collection it was on, if any.
        exc: the failure.
        kind: its :func:`classify` kind.
        msg: the server's message, already scrubbed of the token.
    """
    where = f" on collection {collection!r}" if collection else ""
    if kind == NOT_FOUND and collection is not None:
        return CollectionNotFoundError(
            f"collection {collection!r} does not exist at {redact_uri(uri)} "
            f"({op}: {msg}); was it dropped by another client?"
        )
    if kind == EXISTS and op == "create_collection" and collection is not None:
        return CollectionExistsError(
            f"name: collection {collection!r} already exists at {redact_uri(uri)}; "
            "a store never drops a collection to make room: pick another name"
        )
    return MilvusStoreError(
        f"Milvus at {redact_uri(uri)} refused {op}{where}: {msg} (code {getattr(exc, 'code', '?')})"
    )
