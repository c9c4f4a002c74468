"""The running top-c of a blocked GEMM: one fused pass over a score block (numba).

Each query row keeps its best ``c`` float32 scores sorted descending with
the stream position, id and float64 score (NaN until rescored) of each.
A block's scores are read once; a score above the row's current ``c``-th
enters by insertion (``O(c)``), which after the first blocks is rare, so the
pass costs about one read of the block.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def merge_block(S, q0, r0, r1, pos0, blk_ids, best_s, best_p, best_i, best_t):
    """Merge score rows ``S[r0:r1]`` (queries ``q0 + r``) into the running best.

    ``S[r, j]`` is query ``q0 + r`` against the document at stream position
    ``pos0 + j`` with id ``blk_ids[j]``. A score enters when it is strictly
    above the row's ``c``-th (an equal later score does not displace an
    earlier one); its float64 score is set to NaN, to be rescored.
    """
    c = best_s.shape[1]
    n = S.shape[1]
    for r in range(r0, r1):
        q = q0 + r
        thr = best_s[q, c - 1]
        for j in range(n):
            v = S[r, j]
            if v > thr:
                p = c - 1
                while p > 0 and best_s[q, p - 1] < v:
                    best_s[q, p] = best_s[q, p - 1]
                    best_p[q, p] = best_p[q, p - 1]
                    best_i[q, p] = best_i[q, p - 1]
                    best_t[q, p] = best_t[q, p - 1]
                    p -= 1
                best_s[q, p] = v
                best_p[q, p] = pos0 + j
                best_i[q, p] = blk_ids[j]
                best_t[q, p] = np.nan
                thr = best_s[q, c - 1]
