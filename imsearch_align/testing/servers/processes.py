"""Ports, processes and signals for the test servers on 127.0.0.1.

Free ports and port probes, the console scripts that start servers, and
the process control a fault test needs: start a server in its own process
group, send it a signal, stop it (SIGTERM, then SIGKILL after a grace
period) and wait until its whole group is gone. Also the data directory a
server runs on: the caller's, or a temporary one deleted afterwards.
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
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "ETCD_PEER_PORT",
    "HOST",
    "ServerStartError",
    "find_bin",
    "free_port",
    "port_in_use",
    "send_signal",
    "spawn",
    "stop_process",
    "temp_dir",
    "wait_group_gone",
]

HOST = "127.0.0.1"

#: Embedded etcd's peer port; Milvus 2.3.5 does not expose it.
ETCD_PEER_PORT = 2380


class ServerStartError(RuntimeError):
    """A server did not become ready; the message holds the log tail."""


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


def find_bin(name: str) -> str:
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


def spawn(
    cmd: list[str], log: IO[bytes], *, group: bool, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """Start ``cmd`` with stdout and stderr to ``log``; ``group``: in a new process group;
    ``env``: its environment (None: this process's)."""
    # A new session for a process group, so SIGTERM reaches the wrapper and
    # the milvus binary it spawns (the wrapper does not forward SIGTERM).
    return subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=group,
        env=env,
    )


def send_signal(proc: subprocess.Popen, sig: int, *, group: bool) -> None:
    """Send ``sig`` to ``proc`` (to its whole process group if ``group``); gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(proc.pid, sig)
        elif proc.poll() is None:
            proc.send_signal(sig)


def wait_group_gone(pgid: int, timeout_s: float) -> bool:
    """Wait until process group ``pgid`` is empty; False if it outlives ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def stop_process(proc: subprocess.Popen, *, group: bool, grace_s: float) -> None:
    """SIGTERM (to the process group if ``group``), wait, then SIGKILL."""
    if proc.poll() is not None and not group:
        return
    send_signal(proc, signal.SIGTERM, group=group)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        send_signal(proc, signal.SIGKILL, group=group)
        proc.wait(timeout=10)
    # The wrapper may exit before its child; wait until the group is empty.
    if group and not wait_group_gone(proc.pid, grace_s):
        send_signal(proc, signal.SIGKILL, group=group)
        wait_group_gone(proc.pid, 10.0)


@contextlib.contextmanager
def temp_dir(data_dir: str | os.PathLike | None, prefix: str) -> Iterator[Path]:
    """``data_dir`` (created if missing, kept), or a temporary directory deleted on exit."""
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
