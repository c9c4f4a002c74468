"""Is a test server ready? One cheap RPC, plus Milvus 2.3.5's own health check.

A Milvus Lite server is ready when its port is open and one gRPC call
succeeds; a Milvus 2.3.5 standalone when its ``/healthz`` says OK (found on
the metrics port its wrapper chose, read with psutil when installed) and
one gRPC call succeeds.

The checks read a server through :class:`RunningServer` (where it listens,
its process, its extra ports): a
:class:`~imsearch_align.testing.servers.handle.ServerHandle` is one, and
this room does not depend on it.
"""

from __future__ import annotations

import contextlib
import subprocess
import urllib.error
import urllib.request
from typing import Protocol

from imsearch_align.testing.servers.processes import HOST, ServerStartError, port_in_use

__all__ = ["RunningServer", "grpc_ready", "lite_ready", "standalone_ready"]


class RunningServer(Protocol):
    """What a readiness check reads of a server (a ``ServerHandle`` has all of it)."""

    uri: str
    port: int
    process: subprocess.Popen
    extra_ports: dict[str, int]


def grpc_ready(uri: str) -> bool:
    """One cheap RPC that only succeeds when the server serves requests."""
    try:
        from pymilvus import MilvusClient
    except ImportError as exc:  # pragma: no cover - the milvus extra is installed in tests
        raise ServerStartError(
            "pymilvus is required to talk to Milvus: pip install 'imsearch-align[milvus]'"
        ) from exc
    from imsearch_align.adapters.milvus import quiet_pymilvus_logs

    # Polling a server that is not up yet makes pymilvus log a traceback per try.
    quiet_pymilvus_logs()
    client = None
    try:
        client = MilvusClient(uri=uri, timeout=2, dedicated=True)
        client.list_collections(timeout=2)
        return True
    except Exception:
        return False
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()


def lite_ready(handle: RunningServer) -> bool:
    """Whether a Milvus Lite server answers: its port is open and one RPC succeeds."""
    return port_in_use(handle.port) and grpc_ready(handle.uri)


def standalone_ready(handle: RunningServer) -> bool:
    """Milvus's own ``/healthz`` (when psutil finds its port) plus one gRPC call."""
    metrics = _metrics_port(handle.process)
    if metrics is not None:
        handle.extra_ports["metrics-port"] = metrics
        healthy = _http_ok(f"http://{HOST}:{metrics}/healthz")
    else:
        healthy = not _have_psutil()
    return healthy and grpc_ready(handle.uri)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return b"OK" in resp.read()
    except (urllib.error.URLError, OSError):
        return False


def _have_psutil() -> bool:
    try:
        import psutil  # noqa: F401
    except ImportError:
        return False
    return True


def _metrics_port(wrapper: subprocess.Popen) -> int | None:
    """The metrics/healthz port the wrapper chose (from 9091 up) for its child.

    The wrapper passes it to the binary as ``METRICS_PORT``; reading the
    child's environment needs psutil. Without psutil, None (readiness then
    rests on the gRPC check alone).
    """
    try:
        import psutil
    except ImportError:
        return None
    try:
        for child in psutil.Process(wrapper.pid).children(recursive=True):
            value = child.environ().get("METRICS_PORT")
            if value:
                return int(value)
    except (psutil.Error, ValueError):
        return None
    return None
