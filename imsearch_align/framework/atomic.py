"""One way to write a file so that a reader never sees half of it.

``atomic_write`` writes to a unique temporary file in the target's folder,
flushes and fsyncs it, gives it the permissions a plain ``open(path, "w")``
would (``0o666`` minus the process umask: ``mkstemp`` alone makes ``0600``
files), and renames it over the target. A crash leaves either the old file
or the new one, never a torn mix; the temporary file is removed on failure.
Every module that writes results, checkpoints, caches or reports uses it.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

__all__ = ["atomic_write", "current_umask", "writable_folder_error"]

_UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    """The process umask, read without changing it where the OS allows."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:  # portable fallback: set and restore at once
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def atomic_write(
    path: str | os.PathLike,
    data: bytes | str | Callable[[IO[bytes]], None],
    *,
    mkdir: bool = True,
) -> Path:
    """Write ``data`` to ``path`` atomically; return the path.

    Args:
        path: the target file; its folder is created when ``mkdir``.
        data: bytes, text (written as UTF-8), or a callable that writes into
            the open binary file (for ``np.savez``, parquet writers...).
        mkdir: create missing parent folders.
    """
    target = Path(path)
    if mkdir:
        target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~current_umask())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def writable_folder_error(folder: str | os.PathLike) -> OSError | None:
    """Create ``folder`` if needed and prove a file can be written there: the
    error that stops it (None: writable)."""
    path = Path(folder)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return exc
    return None
