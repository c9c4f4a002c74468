"""The two launchers: ``milvus-lite server`` and a Milvus 2.3.5 standalone, as context managers.

Each picks free ports, starts the server, waits until it answers, yields
its :class:`~imsearch_align.testing.servers.handle.ServerHandle`, and on
exit stops it (SIGTERM, then SIGKILL after a grace period) and deletes the
data directory it created.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from imsearch_align.testing.servers.handle import ServerHandle
from imsearch_align.testing.servers.processes import (
    ETCD_PEER_PORT,
    HOST,
    ServerStartError,
    find_bin,
    free_port,
    port_in_use,
    spawn,
    stop_process,
    temp_dir,
)
from imsearch_align.testing.servers.readiness import lite_ready, standalone_ready

__all__ = ["milvus_lite_server", "milvus_standalone_server"]

#: Components of Milvus 2.3.5 whose advertised address must be loopback;
#: without it they register on the first non-loopback address.
_MILVUS_COMPONENTS = (
    "rootCoord",
    "proxy",
    "queryCoord",
    "queryNode",
    "indexNode",
    "dataCoord",
    "dataNode",
)

#: Background intervals a test server shortens (``fast_intervals``): how often queryCoord
#: checks and refreshes its target (a new indexed segment is served after the next refresh:
#: ~13 s after a flush by default) and how long a segment's row assignment lives (a flush
#: waits for it). ``--extra-config`` only replaces keys the shipped milvus.yaml has; the
#: target interval is not among them, so it goes by environment (Milvus reads
#: ``QUERYCOORD_UPDATENEXTTARGETINTERVAL`` as ``queryCoord.updateNextTargetInterval``).
_FAST_CONFIG = {"queryCoord.checkInterval": "200", "dataCoord.segment.assignmentExpiration": "500"}
_FAST_ENV = {"QUERYCOORD_UPDATENEXTTARGETINTERVAL": "1"}

#: ``milvus-server`` flags for every port the wrapper lets us set.
_MILVUS_PORT_FLAGS = (
    "--etcd-port",
    "--root-coord-port",
    "--proxy-internal-port",
    "--query-coord-port",
    "--query-node-port",
    "--index-coord-port",
    "--index-node-port",
    "--data-coord-port",
    "--data-node-port",
)


@contextlib.contextmanager
def milvus_lite_server(
    data_dir: str | os.PathLike | None = None,
    *,
    port: int | None = None,
    start_timeout_s: float = 60.0,
    stop_grace_s: float = 10.0,
) -> Iterator[ServerHandle]:
    """Run ``milvus-lite server`` on 127.0.0.1 for the duration of the block.

    Args:
        data_dir: data directory; a temporary one (deleted on exit) if None.
            Only one process may use a data directory at a time.
        port: gRPC port; a free one if None.
        start_timeout_s: how long to wait for the server to answer.
        stop_grace_s: how long SIGTERM may take before SIGKILL.

    Yields:
        The :class:`ServerHandle` (``uri`` for ``MilvusStore``; ``stop``,
        ``kill``, ``start``, ``restart`` for fault tests).
    """
    port = free_port() if port is None else port
    with temp_dir(data_dir, "milvus-lite-") as root:
        log_path = root.parent / f"{root.name}.milvus-lite.log"
        cmd = [
            find_bin("milvus-lite"),
            "server",
            "--data-dir",
            str(root / "data"),
            "--host",
            HOST,
            "--port",
            str(port),
        ]
        with open(log_path, "wb") as log:
            proc = spawn(cmd, log, group=False)
        handle = ServerHandle(
            uri=f"http://{HOST}:{port}",
            port=port,
            data_dir=root / "data",
            log_path=log_path,
            process=proc,
            kind="milvus-lite",
            supports_sparse=True,
            command=cmd,
            group=False,
            start_timeout_s=start_timeout_s,
            stop_grace_s=stop_grace_s,
            ready_check=lite_ready,
        )
        try:
            handle.wait_ready()
            yield handle
        finally:
            # handle.process: a test may have restarted it (or paused it).
            handle.resume()
            stop_process(handle.process, group=False, grace_s=stop_grace_s)
            with contextlib.suppress(OSError):
                log_path.unlink()


@contextlib.contextmanager
def milvus_standalone_server(
    data_dir: str | os.PathLike | None = None,
    *,
    port: int | None = None,
    start_timeout_s: float = 120.0,
    graceful_stop_s: int = 5,
    fast_intervals: bool = True,
) -> Iterator[ServerHandle]:
    """Run a real Milvus 2.3.5 standalone (PyPI ``milvus``) on 127.0.0.1.

    Every component advertises 127.0.0.1 (``--extra-config <c>.ip=127.0.0.1``)
    and every settable port is a free one, so several sessions do not
    collide, except on embedded etcd's peer port 2380, which the binary
    fixes (checked up front). The first start unpacks ~250 MB of binaries
    into the data directory (a few seconds); readiness is Milvus's own
    ``/healthz`` plus one gRPC call. :meth:`ServerHandle.restart` reuses the
    same ports and data directory.

    Args:
        data_dir: base directory (binaries, data, logs); temporary if None.
        port: proxy (gRPC) port; a free one if None.
        start_timeout_s: how long to wait for readiness.
        graceful_stop_s: Milvus's ``common.gracefulStopTimeout``; 2.3.5's
            default is 1800 s and its standalone shutdown can hang on it,
            so it is lowered; SIGKILL follows 10 s after that.
        fast_intervals: shorten three background intervals (queryCoord's
            target refresh 10 s -> 1 s and check 1 s -> 0.2 s, a segment
            assignment's life 2 s -> 0.5 s), so a new collection is
            searchable in about 2-5 s after its inserts instead of 5-20 s
            (a flush 3.0 -> 1.5 s; an IVF or HNSW index served 13-17 s ->
            0.4-2.6 s after it, measured on 3,000 rows). Nothing a search
            returns changes: the store waits for the same states either way;
            ``False`` keeps Milvus's defaults.

    Yields:
        The :class:`ServerHandle`.
    """
    if port_in_use(ETCD_PEER_PORT):
        raise ServerStartError(
            f"port {ETCD_PEER_PORT} on 127.0.0.1 is in use (another Milvus 2.3.5 or etcd?); "
            "the embedded etcd of Milvus 2.3.5 needs it and the binary cannot move it"
        )
    port = free_port() if port is None else port
    ports = {flag: free_port() for flag in _MILVUS_PORT_FLAGS}
    with temp_dir(data_dir, "milvus-2.3.5-") as root:
        cmd = [find_bin("milvus-server"), "--data", str(root), "--proxy-port", str(port)]
        for flag, p in ports.items():
            cmd += [flag, str(p)]
        for comp in _MILVUS_COMPONENTS:
            cmd += ["--extra-config", f"{comp}.ip={HOST}"]
        cmd += ["--extra-config", f"common.gracefulStopTimeout={int(graceful_stop_s)}"]
        for key, value in (_FAST_CONFIG if fast_intervals else {}).items():
            cmd += ["--extra-config", f"{key}={value}"]
        env = {**os.environ, **_FAST_ENV} if fast_intervals else None
        log_path = root / "milvus-server-wrapper.log"
        with open(log_path, "wb") as log:
            proc = spawn(cmd, log, group=True, env=env)
        handle = ServerHandle(
            uri=f"http://{HOST}:{port}",
            port=port,
            data_dir=root,
            log_path=log_path,
            process=proc,
            kind="milvus-2.3.5",
            supports_sparse=False,
            extra_ports={flag.lstrip("-"): p for flag, p in ports.items()},
            command=cmd,
            group=True,
            start_timeout_s=start_timeout_s,
            stop_grace_s=graceful_stop_s + 10,
            ready_check=standalone_ready,
            env=env,
        )
        try:
            handle.wait_ready()
            yield handle
        finally:
            handle.resume()
            stop_process(handle.process, group=True, grace_s=graceful_stop_s + 10)
