"""Who owns what in an output folder: the folder's write lock and the run tokens.

Several runs may write into one output folder at once (two shells, a sweep
beside an ``eval``). Two things keep them apart:

* :func:`folder_lock`: an advisory lock (``flock`` of
  ``<output_dir>/.checkpoints/write.lock``) held while a run chooses its
  result's file name and writes it, and while run tokens are claimed or
  released, so no two runs ever decide on the same name;
* **run tokens**: each run of a config gets a token, recorded with its
  process id in ``<output_dir>/.checkpoints/<config key>/run_token`` (one
  ``token pid`` line a run), and holds the token's lock (``flock`` of
  ``<token>.lock`` beside it) while it runs. The token names the run's
  collections and keys its checkpoints, so a live run's checkpoints and
  collections belong to it alone. A run takes over the token of a run whose
  lock is free (its process is gone, on whichever host shares the folder):
  it resumes that run's checkpoints and drops the collections it left;
  while every recorded run is alive it gets a token of its own.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from imsearch_align.framework.atomic import atomic_write

__all__ = ["claim_run_token", "finish_clean", "folder_lock", "release_run_token"]

#: The lock file, inside the output folder's ``.checkpoints``.
LOCK_FILE = "write.lock"
#: The run records of one config, inside its checkpoint folder.
RUNS_FILE = "run_token"

#: Each token's liveness lock: ``<output_dir>/.checkpoints/<config key>/<token>.lock``.
LOCK_SUFFIX = ".lock"

#: (checkpoint folder, token) -> the open lock file of each run this process has under way.
_HELD: dict[tuple[str, str], int] = {}


@contextmanager
def folder_lock(checkpoints: Path) -> Iterator[None]:
    """Hold the output folder's write lock for the block.

    ``checkpoints`` is the folder's ``.checkpoints`` (created if needed); the
    lock is released when the block ends or the process dies.
    """
    checkpoints.mkdir(parents=True, exist_ok=True)
    fd = os.open(checkpoints / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the file releases the lock


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def _hold(root: Path, token: str) -> bool:
    """Take the liveness lock of ``token`` (``<root>/<token>.lock``) if no live run holds it."""
    fd = os.open(root / f"{token}{LOCK_SUFFIX}", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    _HELD[(str(root), token)] = fd
    return True


def _live(root: Path, token: str, pid: int) -> bool:
    """Whether the run that recorded ``token`` is still under way.

    A run holds its token's lock from :func:`claim_run_token` to
    :func:`release_run_token`; the kernel (or the NFS server) releases it
    when the process dies, whatever host or PID namespace it ran in. A
    record without a lock file (written by an older version) is judged by
    its process id.
    """
    if (str(root), token) in _HELD:
        return True
    try:
        fd = os.open(root / f"{token}{LOCK_SUFFIX}", os.O_RDWR)
    except FileNotFoundError:
        return pid != os.getpid() and _pid_alive(pid)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases a lock this check took
    return False


def _records(root: Path) -> list[tuple[str, int]]:
    """The ``(token, pid)`` lines of ``root``'s run file; malformed lines are dropped."""
    try:
        lines = (root / RUNS_FILE).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0].isalnum() and len(parts[0]) <= 32 and parts[1].isdigit():
            out.append((parts[0], int(parts[1])))
    return out


def _save(root: Path, records: list[tuple[str, int]]) -> None:
    atomic_write(root / RUNS_FILE, "".join(f"{t} {p}\n" for t, p in records))


def claim_run_token(root: Path | None) -> str:
    """A token for a run whose checkpoints go under ``root`` (None: a fresh one).

    The token of a run that is over (its lock free: its process is gone) is
    taken over, so its checkpoints are resumed and its collections found;
    otherwise a new token is recorded beside the live runs'. The run holds
    the token's lock until :func:`release_run_token` or its end.
    """
    token = uuid.uuid4().hex[:8]
    if root is None:
        return token
    with folder_lock(root.parent):
        root.mkdir(parents=True, exist_ok=True)
        records = _records(root)
        for i, (saved, pid) in enumerate(records):
            if _live(root, saved, pid) or not _hold(root, saved):
                continue
            token = saved
            records[i] = (saved, os.getpid())
            break
        else:
            _hold(root, token)
            records.append((token, os.getpid()))
        _save(root, records)
    return token


def release_run_token(root: Path | None, token: str) -> None:
    """The run of ``token`` is over in this process: its lock is released (its
    record stays until :func:`finish_clean`, for a later run to resume what it left)."""
    fd = None if root is None else _HELD.pop((str(root), token), None)
    if fd is not None:
        os.close(fd)


def finish_clean(root: Path) -> None:
    """A clean result of the config is on disk: remove its checkpoints.

    The records of this process's finished runs are dropped; while another
    run of the config is alive its checkpoints and records stay (the last
    clean run removes the folder).
    """
    with folder_lock(root.parent):
        records = _records(root)
        live = [(t, p) for t, p in records if _live(root, t, p)]
        if live:
            _save(root, [(t, p) for t, p in records if (t, p) in live or p != os.getpid()])
        else:
            shutil.rmtree(root, ignore_errors=True)
