"""Milvus Lite in-process: start its server on a data directory, share it, release it.

``milvus-lite`` runs a gRPC server in threads of this process (on
127.0.0.1) for each data directory. The stores of this process that open
one directory share its server: :func:`open_lite` counts them and
:func:`release_lite` stops the server when the last one closes, which
releases the directory lock (Milvus Lite allows one process per directory).

A path Milvus Lite cannot open is explained by what is there:
:func:`check_lite_path` refuses an ordinary file (Milvus Lite 3 keeps a
database as a directory) with a ``ConfigError`` (exit status 2), and a failed start names its real cause (the lock
held by another process, or the error Milvus Lite met), which
``milvus-lite`` itself only logs.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from imsearch_align.adapters.milvus.errors import MilvusStoreError
from imsearch_align.adapters.milvus.logs import LITE_LOG_FILTER
from imsearch_align.framework.errors import ConfigError

__all__ = ["check_lite_path", "lite_address", "open_lite", "release_lite"]

# Milvus Lite data directories opened in this process -> number of open stores.
_LITE_REFS: dict[str, int] = {}
_LITE_LOCK = threading.Lock()


def _describe_file(path: Path) -> str:
    """What an ordinary file at ``path`` looks like: its kind and size, never its content."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as exc:
        return f"a file that cannot be read ({type(exc).__name__})"
    if size == 0:
        return "an empty file"
    if head.startswith(b"SQLite format 3\x00"):
        kind = "an SQLite database file"
    elif b"\x00" in head:
        kind = "a binary file"
    else:
        kind = "a text file"
    return f"{kind} of {size} bytes"


def _not_a_database(uri: str, found: str) -> ConfigError:
    return ConfigError(
        f"uri: {uri!r} is {found}, not a Milvus Lite database; expected a Milvus Lite "
        "database (Milvus Lite 3 keeps one as a directory, made on first use) or a new path"
    )


def check_lite_path(uri: str) -> None:
    """Refuse a Milvus Lite ``uri`` that is an ordinary file (not a database Milvus Lite made).

    Raises:
        ConfigError: (a ``ValueError``; exit status 2 on the command line)
            naming the path, what was expected and what was found.
    """
    path = Path(uri)
    if path.exists() and not path.is_dir():
        raise _not_a_database(uri, _describe_file(path))


class _StartFailure(logging.Filter):
    """Keeps (and drops) ``milvus-lite``'s log record of a failed start: its exception."""

    def __init__(self) -> None:
        super().__init__()
        self.exc: BaseException | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        """False (dropped: the store raises it) for a record carrying an exception."""
        if record.exc_info and record.exc_info[1] is not None:
            self.exc = record.exc_info[1]
            return False
        return True


def _open_error(uri: str, path: str, exc: BaseException | None) -> Exception:
    """The error for a data directory Milvus Lite failed to open, from the cause it logged."""
    if type(exc).__name__ == "DataDirLockedError":
        return MilvusStoreError(
            f"uri: Milvus Lite could not open {uri!r}: another process is using this data "
            f"directory (it holds {os.path.join(path, 'LOCK')}); Milvus Lite allows one "
            "process per directory"
        )
    if isinstance(exc, FileExistsError | NotADirectoryError):
        return _not_a_database(uri, _describe_file(Path(path)))
    cause = "see the milvus_lite log" if exc is None else f"{type(exc).__name__}: {exc}"
    return MilvusStoreError(f"uri: Milvus Lite could not open {uri!r} ({cause})")


def open_lite(uri: str) -> str:
    """Start (or share) the in-process server on data directory ``uri``; its absolute path.

    The store starts the server itself (pymilvus would do it for ``.db``
    only), so directories work too and :func:`release_lite` can stop it.
    """
    try:
        from milvus_lite.server_manager import server_manager_instance
    except ImportError as exc:
        raise ImportError(
            "a local Milvus Lite uri needs milvus-lite: pip install 'imsearch-align[milvus]'"
        ) from exc
    logging.getLogger("grpc._server").addFilter(LITE_LOG_FILTER)  # idempotent
    path = os.path.abspath(uri)
    if not Path(path).parent.is_dir():
        raise FileNotFoundError(f"uri: the parent directory of {uri!r} does not exist")
    check_lite_path(uri)
    manager_log = logging.getLogger("milvus_lite.server_manager")
    with _LITE_LOCK:
        failure = _StartFailure()
        manager_log.addFilter(failure)
        try:
            started = server_manager_instance.start_and_get_uri(path)
        finally:
            manager_log.removeFilter(failure)
        if started is None:
            raise _open_error(uri, path, failure.exc)
        _LITE_REFS[path] = _LITE_REFS.get(path, 0) + 1
    return path


def lite_address(path: str) -> str:
    """The address a client connects to for the in-process server of ``path``."""
    from milvus_lite.server_manager import server_manager_instance

    return server_manager_instance.start_and_get_uri(path)


def release_lite(path: str) -> None:
    """One store of ``path`` closed; the last one stops its in-process server."""
    with _LITE_LOCK:
        left = _LITE_REFS.get(path, 1) - 1
        if left <= 0:
            _LITE_REFS.pop(path, None)
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(path)
        else:
            _LITE_REFS[path] = left
