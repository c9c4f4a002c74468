"""Give freed heap memory back to the operating system between the phases of a cell.

glibc keeps freed memory in the process heap, and after a large block has
been freed it serves blocks up to 32 MiB from the heap rather than from
their own mappings (its dynamic mmap threshold), so a study's resident
memory would carry what earlier cells freed into later ones. ``malloc_trim``
returns the free pages. Elsewhere (another C library, another OS) this does
nothing. pyarrow (the per-query parquet files) allocates from its own pool
(jemalloc or mimalloc), which keeps freed pages too (about 20 MiB after a
Flickr30k cell's file): when pyarrow is loaded, its pool releases them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from functools import cache
from typing import Any

__all__ = ["release_freed_memory"]


@cache
def _trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # musl and others: no malloc_trim
        return None


def release_freed_memory() -> None:
    """Hand free heap pages back (glibc ``malloc_trim(0)``). No garbage
    collection: arrays are freed by reference counting, and a full collection
    costs tenths of a second in a large process."""
    trim = _trim()
    if trim is not None:
        trim(0)
    pa = sys.modules.get("pyarrow")
    if pa is not None and hasattr(pa, "default_memory_pool"):
        pool = pa.default_memory_pool()
        if hasattr(pool, "release_unused"):  # pyarrow >= 9
            pool.release_unused()
