"""ServerHandle: a running test server, and how a fault test disturbs it.

The handle knows where the server listens and how it was started, and
drives its process: :meth:`ServerHandle.stop` (SIGTERM, a clean shutdown),
:meth:`ServerHandle.kill` (SIGKILL, a crash), :meth:`ServerHandle.pause` /
:meth:`ServerHandle.resume` (SIGSTOP/SIGCONT, a hang),
:meth:`ServerHandle.start` (the same command on the same data directory
and port, waiting until the server answers) and
:meth:`ServerHandle.restart`.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from imsearch_align.testing.servers.processes import (
    ETCD_PEER_PORT,
    ServerStartError,
    port_in_use,
    send_signal,
    spawn,
    stop_process,
    wait_group_gone,
)
from imsearch_align.testing.servers.readiness import lite_ready

__all__ = ["ServerHandle"]


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
        env: the process's environment (None: the test process's); :meth:`start`
            uses it again.
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
    env: dict[str, str] | None = field(default=None, repr=False)

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
        stop_process(
            self.process,
            group=self.group,
            grace_s=self.stop_grace_s if grace_s is None else grace_s,
        )
        return self.process.returncode

    def kill(self) -> None:
        """Crash the server: SIGKILL (no shutdown code runs), then reap it."""
        send_signal(self.process, signal.SIGKILL, group=self.group)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.group:
            wait_group_gone(self.process.pid, 10.0)

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): it keeps its sockets but answers nothing (a hang)."""
        send_signal(self.process, signal.SIGSTOP, group=self.group)

    def resume(self) -> None:
        """Unfreeze a paused server (SIGCONT)."""
        send_signal(self.process, signal.SIGCONT, group=self.group)

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
            self.process = spawn(self.command, log, group=self.group, env=self.env)
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
        check = self.ready_check or lite_ready
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
