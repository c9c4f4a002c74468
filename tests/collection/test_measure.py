"""The study's memory accounting: the harness's own memory and the memory it gives back."""

from __future__ import annotations

import ctypes
import ctypes.util
import gc

import numpy as np
import pytest

from imsearch_align.collection.measure import harness_memory
from imsearch_align.framework._heap import release_freed_memory


def test_freed_pages_go_back_to_the_system():
    psutil = pytest.importorskip("psutil")
    name = ctypes.util.find_library("c")
    if not name or not hasattr(ctypes.CDLL(name), "malloc_trim"):
        pytest.skip("no glibc malloc_trim here")
    p = psutil.Process()
    blocks = [np.ones(20_000) for _ in range(2_000)]  # 320 MB in malloc's arenas
    del blocks[::2]  # half freed, interleaved with live blocks: malloc keeps the pages
    gc.collect()
    before = p.memory_info().rss
    release_freed_memory()
    after = p.memory_info().rss
    assert before - after > 100 * 2**20, (before, after)
    del blocks


def test_harness_memory_is_this_process_now_and_at_its_peak():
    m = harness_memory()
    assert 0 < m["rss_bytes"] <= m["peak_rss_bytes"]
