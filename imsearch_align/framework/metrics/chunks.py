"""Row chunks on two threads: the one helper that splits a large row-wise scan.

numpy releases the GIL in element-wise kernels, so memory-bound scans of
``(nq, k)`` arrays run about twice as fast on two cores. Used by the
canonical-order check of :class:`~imsearch_align.framework.metrics.Run`, hit
finding and the truth check (:mod:`imsearch_align.framework.fidelity`).
"""

from __future__ import annotations

import itertools
import os

import numpy as np

#: Below this many cells a scan runs in the calling thread.
_PARALLEL_MIN_CELLS = 1_000_000
_POOL = None


def _map_row_chunks(fn, n_rows: int, n_cells: int) -> list:
    """``fn(lo, hi)`` over row ranges, on two threads for large inputs.

    numpy releases the GIL in element-wise kernels, so memory-bound scans of
    ``(nq, k)`` arrays run about twice as fast on two cores. Results come
    back in row order.
    """
    global _POOL
    workers = min(2, os.cpu_count() or 1)
    if n_cells < _PARALLEL_MIN_CELLS or workers < 2 or n_rows < 2:
        return [fn(0, n_rows)]
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="imsearch-metrics")
    bounds = np.linspace(0, n_rows, workers + 1).astype(int)
    futures = [_POOL.submit(fn, int(a), int(b)) for a, b in itertools.pairwise(bounds)]
    return [f.result() for f in futures]
