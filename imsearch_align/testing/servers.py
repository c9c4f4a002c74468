"""Start and stop real Milvus servers on 127.0.0.1, for tests and benchmarks.

Two servers, both without Docker, both reachable with
``MilvusStore(uri=server.uri)``:

* :func:`milvus_lite_server` runs ``milvus-lite server --data-dir D --host
  127.0.0.1 --port P`` (Milvus Lite 3.x over gRPC; dense and sparse vectors).
* :func:`milvus_standalone_server` runs ``milvus-server`` from the PyPI
  package ``milvus`` 2.3.5: a real Milvus standalone (embedded etcd, rocksmq,
  local storage) in one process; dense vectors only.

Both are context managers that pick free ports, wait until the server
answers, and on exit stop it with SIGTERM (the Lite server ignores SIGINT
when started in the background; the ``milvus-server`` wrapper only traps
SIGINT, so the whole process group gets SIGTERM), escalate to SIGKILL only
after a grace period, and delete the data directory they created::

    with milvus_lite_server() as srv:
        store = MilvusStore(uri=srv.uri)

For fault tests the handle drives the process: :meth:`ServerHandle.stop`
(SIGTERM, a clean shutdown), :meth:`ServerHandle.kill` (SIGKILL, a crash),
:meth:`ServerHandle.pause` / :meth:`ServerHandle.resume` (SIGSTOP/SIGCONT, a hang),
:meth:`ServerHandle.start` (the same command on the same data directory and
port, waiting until the server answers) and :meth:`ServerHandle.restart`.
Whatever state a test leaves the process in, the context manager stops it.

Listening sockets: the Lite server binds only 127.0.0.1. Milvus 2.3.5 binds
its proxy, metrics and component ports on all interfaces (the binary has no
option to bind them to loopback; every ``*.ip`` is set to 127.0.0.1 so all
traffic stays on loopback); its embedded etcd binds 127.0.0.1:2379/2380 by
default, so :func:`milvus_standalone_server` gives etcd a free client port
and refuses to start while another process holds the etcd peer port 2380,
which the binary does not let us move.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

__all__ = [
    "ServerHandle",
    "ServerStartError",
    "free_port",
    "milvus_lite_server",
    "milvus_standalone_server",
    "port_in_use",
]

HOST = "127.0.0.1"

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

#: Embedded etcd's peer port; Milvus 2.3.5 does not expose it.
ETCD_PEER_PORT = 2380


class ServerStartError(RuntimeError):
    """A server did not become ready; the message holds the log tail."""


@dataclass
class ServerHandle:
    """A running server: where to reach it, how it was started, how to disturb it.

    Attributes:
        uri: ``http://127.0.0.1:<port>``, the value for ``MilvusStore(uri=...)``.
        port: the gRPC port.
        data_dir: the server's data directory.
        log_path: file with the server's stdout and stderr (appended to on
            every start).
        process: the current server process.
        kind: ``"milvus-lite"`` or ``"milvus-2.3.5"``.
        supports_sparse: whether the server has SPARSE_FLOAT_VECTOR.
        extra_ports: other ports the server was given (Milvus 2.3.5).
        command: the command line; :meth:`start` runs it again.
        group: signals go to the whole process group (Milvus 2.3.5's
            ``milvus-server`` wrapper does not forward SIGTERM to its child).
        start_timeout_s: how long :meth:`start` waits for the server to answer.
        stop_grace_s: how long SIGTERM may take before SIGKILL.
        starts: how many times the process was started.
    """

    uri: str
    port: int
    data_dir: Path
    log_path: Path
    process: subprocess.Popen
    kind: str
    supports_sparse: bool
    extra_ports: dict[str, int] = field(default_factory=dict)
    command: list[str] = field(default_factory=list)
    group: bool = False
    start_timeout_s: float = 60.0
    stop_grace_s: float = 10.0
    starts: int = 1
    ready_check: Callable[[ServerHandle], bool] | None = field(default=None, repr=False)

    @property
    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self.process.poll() is None

    def log_tail(self, n_chars: int = 3000) -> str:
        """The last characters of the server log (for error messages)."""
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return "(no log)"

    def stop(self, grace_s: float | None = None) -> int | None:
        """Stop the server cleanly: SIGTERM, wait, SIGKILL after the grace period.

        Returns the exit code (None if the process could not be reaped).
        """
        _stop(
            self.process,
            group=self.group,
            grace_s=self.stop_grace_s if grace_s is None else grace_s,
        )
        return self.process.returncode

    def kill(self) -> None:
        """Crash the server: SIGKILL (no shutdown code runs), then reap it."""
        _signal(self.process, signal.SIGKILL, group=self.group)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.group:
            _wait_group_gone(self.process.pid, 10.0)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): it keeps its sockets but answers nothing (a hang)."""
        _signal(self.process, signal.SIGSTOP, group=self.group)

    def resume(self) -> None:
        """Unfreeze a paused server (SIGCONT)."""
        _signal(self.process, signal.SIGCONT, group=self.group)

    def start(self, timeout_s: float | None = None) -> float:
        """Start the server again: same command, data directory and port.

        Waits until it answers and returns how long that took (seconds).
        Raises :class:`ServerStartError` (with the log tail) if it exits or
        does not answer within ``timeout_s`` (default ``start_timeout_s``).
        """
        if self.alive:
            raise RuntimeError(f"{self.kind} on {self.uri} is running; stop() or kill() it first")
        t0 = time.monotonic()
        # A port of the old process can linger for a moment; wait (bounded).
        while port_in_use(self.port) and time.monotonic() - t0 < 5.0:
            time.sleep(0.1)
        if self.kind == "milvus-2.3.5" and port_in_use(ETCD_PEER_PORT):
            raise ServerStartError(
                f"port {ETCD_PEER_PORT} on 127.0.0.1 was taken while {self.kind} was stopped "
                "(another Milvus 2.3.5 or etcd?); its embedded etcd cannot start without it"
            )
        with open(self.log_path, "ab") as log:
            log.write(f"\n--- start {self.starts + 1} ---\n".encode())
            log.flush()
            self.process = _spawn(self.command, log, group=self.group)
        self.starts += 1
        self.wait_ready(timeout_s)
        return time.monotonic() - t0

    def restart(self, *, kill: bool = False, timeout_s: float | None = None) -> float:
        """Stop (SIGTERM, or SIGKILL with ``kill=True``) and :meth:`start` again.

        Returns the seconds from the stop signal until the server answers.
        """
        t0 = time.monotonic()
        if kill:
            self.kill()
        else:
            self.stop()
        self.start(timeout_s)
        return time.monotonic() - t0

    def wait_ready(self, timeout_s: float | None = None) -> None:
        """Block until the server answers an RPC; raise if it dies or times out."""
        timeout_s = self.start_timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + timeout_s
        check = self.ready_check or _lite_ready
        while not check(self):
            if self.process.poll() is not None:
                raise ServerStartError(
                    f"{self.kind} server exited with code {self.process.returncode} before it "
                    f"was ready ({' '.join(self.command)}); log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise ServerStartError(
                    f"{self.kind} server not ready on {self.uri} after {timeout_s} s; "
                    f"log:\n{self.log_tail()}"
                )
            time.sleep(0.2)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = HOST) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def _bin(name: str) -> str:
    """The console script ``name`` next to this interpreter, else from PATH."""
    cand = Path(sys.executable).parent / name
    if cand.exists():
        return str(cand)
    found = shutil.which(name)
    if found is None:
        raise ServerStartError(
            f"{name!r} not found next to {sys.executable} or on PATH; "
            "install it with: pip install 'imsearch-align[milvus]'"
        )
    return found


def _grpc_ready(uri: str) -> bool:
    """One cheap RPC that only succeeds when the server serves requests."""
    try:
        from pymilvus import MilvusClient
    except ImportError as exc:  # pragma: no cover - the milvus extra is installed in tests
        raise ServerStartError(
            "pymilvus is required to talk to Milvus: pip install 'imsearch-align[milvus]'"
        ) from exc
    from imsearch_align.adapters.milvus_store import quiet_pymilvus_logs

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


def _lite_ready(handle: ServerHandle) -> bool:
    return port_in_use(handle.port) and _grpc_ready(handle.uri)


def _standalone_ready(handle: ServerHandle) -> bool:
    """Milvus's own ``/healthz`` (when psutil finds its port) plus one gRPC call."""
    metrics = _metrics_port(handle.process)
    if metrics is not None:
        handle.extra_ports["metrics-port"] = metrics
        healthy = _http_ok(f"http://{HOST}:{metrics}/healthz")
    else:
        healthy = not _have_psutil()
    return healthy and _grpc_ready(handle.uri)


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return b"OK" in resp.read()
    except (urllib.error.URLError, OSError):
        return False


def _spawn(cmd: list[str], log: IO[bytes], *, group: bool) -> subprocess.Popen:
    # A new session for a process group, so SIGTERM reaches the wrapper and
    # the milvus binary it spawns (the wrapper does not forward SIGTERM).
    return subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=group,
    )


def _signal(proc: subprocess.Popen, sig: int, *, group: bool) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)


def _wait_group_gone(pgid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen, *, group: bool, grace_s: float) -> None:
    """SIGTERM (to the process group if ``group``), wait, then SIGKILL."""
    if proc.poll() is not None and not group:
        return
    _signal(proc, signal.SIGTERM, group=group)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL, group=group)
        proc.wait(timeout=10)
    # The wrapper may exit before its child; wait until the group is empty.
    if group and not _wait_group_gone(proc.pid, grace_s):
        _signal(proc, signal.SIGKILL, group=group)
        _wait_group_gone(proc.pid, 10.0)


@contextlib.contextmanager
def _temp_dir(data_dir: str | os.PathLike | None, prefix: str) -> Iterator[Path]:
    if data_dir is not None:
        path = Path(data_dir)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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
    with _temp_dir(data_dir, "milvus-lite-") as root:
        log_path = root.parent / f"{root.name}.milvus-lite.log"
        cmd = [
            _bin("milvus-lite"),
            "server",
            "--data-dir",
            str(root / "data"),
            "--host",
            HOST,
            "--port",
            str(port),
        ]
        with open(log_path, "wb") as log:
            proc = _spawn(cmd, log, group=False)
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
            ready_check=_lite_ready,
        )
        try:
            handle.wait_ready()
            yield handle
        finally:
            # handle.process: a test may have restarted it (or paused it).
            handle.resume()
            _stop(handle.process, group=False, grace_s=stop_grace_s)
            with contextlib.suppress(OSError):
                log_path.unlink()


@contextlib.contextmanager
def milvus_standalone_server(
    data_dir: str | os.PathLike | None = None,
    *,
    port: int | None = None,
    start_timeout_s: float = 120.0,
    graceful_stop_s: int = 5,
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
    with _temp_dir(data_dir, "milvus-2.3.5-") as root:
        cmd = [_bin("milvus-server"), "--data", str(root), "--proxy-port", str(port)]
        for flag, p in ports.items():
            cmd += [flag, str(p)]
        for comp in _MILVUS_COMPONENTS:
            cmd += ["--extra-config", f"{comp}.ip={HOST}"]
        cmd += ["--extra-config", f"common.gracefulStopTimeout={int(graceful_stop_s)}"]
        log_path = root / "milvus-server-wrapper.log"
        with open(log_path, "wb") as log:
            proc = _spawn(cmd, log, group=True)
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
            ready_check=_standalone_ready,
        )
        try:
            handle.wait_ready()
            yield handle
        finally:
            handle.resume()
            _stop(handle.process, group=True, grace_s=graceful_stop_s + 10)


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
