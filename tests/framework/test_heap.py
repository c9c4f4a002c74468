"""release_freed_memory hands freed heap pages back to the OS (glibc)."""

from __future__ import annotations

import platform
import sys

import numpy as np
import pytest

from imsearch_align.framework._heap import _trim, release_freed_memory


def _rss_anon_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon in /proc/self/status")


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="malloc_trim is glibc's",
)
def test_freed_heap_blocks_are_returned():
    assert _trim() is not None
    big = np.ones(30 << 20, dtype=np.uint8)  # freeing it raises glibc's mmap threshold
    del big
    blocks = [np.ones(2 << 20, dtype=np.uint8) for _ in range(100)]  # now heap blocks
    pin = np.ones(1 << 20, dtype=np.uint8)  # above them: keeps the heap top in use
    del blocks
    before = _rss_anon_mib()
    release_freed_memory()
    after = _rss_anon_mib()
    assert before - after > 100, (before, after)
    assert pin.sum() == 1 << 20


def test_release_is_harmless_anywhere():
    release_freed_memory()
    release_freed_memory()
