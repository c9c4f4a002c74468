"""Milvus Lite in-process: start its server on a data directory, share it, release it.

``milvus-lite`` runs a gRPC server in threads of this process (on
127.0.0.1) for each data directory. The stores of this process that open
one directory share its server: :func:`open_lite` counts them and
:func:`release_lite` stops the server when the last one closes, which
releases the directory lock (Milvus Lite allows one process per directory).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from imsearch_align.adapters.milvus.errors import MilvusStoreError
from imsearch_align.adapters.milvus.logs import LITE_LOG_FILTER

__all__ = ["lite_address", "open_lite", "release_lite"]

# Milvus Lite data directories opened in this process -> number of open stores.
_LITE_REFS: dict[str, int] = {}
_LITE_LOCK = threading.Lock()


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
    with _LITE_LOCK:
        if server_manager_instance.start_and_get_uri(path) is None:
            raise MilvusStoreError(
                f"uri: Milvus Lite could not open {uri!r} (is another process "
                "using this data directory? Milvus Lite allows one process per directory)"
            )
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
