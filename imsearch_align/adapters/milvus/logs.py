"""pymilvus, imported on first use, and the log filters that keep it quiet.

pymilvus logs every failed RPC and every failed reconnect with a traceback,
and the in-process Milvus Lite server logs one for each RPC it does not
implement; a MilvusStore turns each failure into one exception (and one
warning per outage), so those records only repeat it. This room holds the
filters that drop exactly those records, :func:`quiet_pymilvus_logs` which
installs them, and :func:`import_pymilvus`, the one lazy import of the
client library (it installs them too).
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["LITE_LOG_FILTER", "import_pymilvus", "quiet_pymilvus_logs"]


class _LiteUnimplementedFilter(logging.Filter):
    """Drop the in-process Lite server's log of RPCs it does not implement.

    pymilvus asks for a timestamp (``AllocTimestamp``) while it waits for an
    index; Milvus Lite does not implement that RPC, pymilvus carries on, but
    gRPC's server logs a full traceback at ERROR each time. Only that exact
    record is dropped; every other server error still shows.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """False (drop) for the unimplemented-RPC traceback only."""
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
        """False (drop) for a failed-RPC or failed-reconnect record of pymilvus."""
        if record.funcName in ("_log_rpc_error", "_recover"):
            return False
        msg = record.getMessage()
        return not ("Retry run out of" in msg or "Retry timeout" in msg)


#: Installed on ``grpc._server`` when a store starts Milvus Lite in-process.
LITE_LOG_FILTER = _LiteUnimplementedFilter()
_RPC_LOG_FILTER = _PymilvusRpcLogFilter()


def quiet_pymilvus_logs() -> None:
    """Silence pymilvus's per-RPC error tracebacks in this process (idempotent).

    Applies to every pymilvus client of the process: their errors still
    raise; only the duplicate log records are dropped.
    """
    for name in ("pymilvus.decorators", "pymilvus.client.connection_manager"):
        logging.getLogger(name).addFilter(_RPC_LOG_FILTER)  # a set: adding twice is a no-op


def import_pymilvus() -> Any:
    """The ``pymilvus`` module, with its log quieted; a clear ImportError without it."""
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
