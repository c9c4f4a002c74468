"""Index side of the sparse kernels: posting lists (the transpose) and row norms of the docs.

:func:`split_postings` builds the heavy and light posting lists that
:func:`~imsearch_align.adapters._sparse_kernels.topk.pruned_topk` scatters through.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from imsearch_align.framework._select import select_desc

__all__ = ["row_norms", "split_postings", "transpose_csr"]


@njit(nogil=True, cache=True)
def transpose_csr(indptr, indices, data, n_cols):
    """The CSR arrays of the transpose (``n_cols`` rows), row indices ascending in each row."""
    n_rows = indptr.shape[0] - 1
    t_indptr = np.zeros(n_cols + 1, np.int64)
    for p in range(indptr[n_rows]):
        t_indptr[indices[p] + 1] += 1
    for j in range(n_cols):
        t_indptr[j + 1] += t_indptr[j]
    fill = t_indptr[:-1].copy()
    t_indices = np.empty(indptr[n_rows], np.int32)
    t_data = np.empty(indptr[n_rows], np.float32)
    for i in range(n_rows):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            t_indices[fill[j]] = i
            t_data[fill[j]] = data[p]
            fill[j] += 1
    return t_indptr, t_indices, t_data


@njit(nogil=True, cache=True)
def row_norms(indptr, data):
    """Float64 L2 norm of every CSR row."""
    n = indptr.shape[0] - 1
    out = np.zeros(n, np.float64)
    for i in range(n):
        s = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            v = np.float64(data[p])
            s += v * v
        out[i] = np.sqrt(s)
    return out


@njit(nogil=True, cache=True)
def split_postings(indptr, indices, data, n_cols, heavy_fraction):
    """Posting lists of the docs, split in a heavy and a light part, and the parts' norms.

    A doc's heavy entries are its ``ceil(heavy_fraction * nnz)`` largest by
    magnitude (ties to the lower column); the rest are light. Returns
    ``(h_indptr, h_indices, h_data, l_indptr, l_indices, l_data, h_norm,
    l_norm)``: per column, the docs (ascending) holding it as a heavy
    (light) entry, and per doc the float64 L2 norm of each part.
    """
    n_rows = indptr.shape[0] - 1
    # Per doc, the heavy part is "magnitude above thr[i], then the first
    # n_eq[i] entries equal to it in column order": two numbers a doc, not a
    # mark per non-zero (which cost 1 byte x nnz during the build).
    thr = np.full(n_rows, np.inf, np.float32)
    n_eq = np.zeros(n_rows, np.int64)
    mag = np.empty(n_cols, np.float32)
    h_norm = np.zeros(n_rows, np.float64)
    l_norm = np.zeros(n_rows, np.float64)
    h_indptr = np.zeros(n_cols + 1, np.int64)
    l_indptr = np.zeros(n_cols + 1, np.int64)
    for i in range(n_rows):
        p0 = indptr[i]
        p1 = indptr[i + 1]
        nnz = p1 - p0
        if nnz == 0:
            continue
        nh = min(nnz, int(np.ceil(heavy_fraction * nnz)))
        # the nh-th largest magnitude t: entries above it are heavy, then
        # entries equal to it in column order until nh are taken
        for x in range(nnz):
            mag[x] = abs(data[p0 + x])
        t = select_desc(mag, nnz, nh - 1)
        n_above = 0
        for p in range(p0, p1):
            if abs(data[p]) > t:
                n_above += 1
        thr[i] = t
        n_eq[i] = nh - n_above
        left = nh - n_above
        sh = 0.0
        sl = 0.0
        for p in range(p0, p1):
            a = abs(data[p])
            v = np.float64(data[p])
            if a > t or (a == t and left > 0):
                if a == t:
                    left -= 1
                sh += v * v
                h_indptr[indices[p] + 1] += 1
            else:
                sl += v * v
                l_indptr[indices[p] + 1] += 1
        h_norm[i] = np.sqrt(sh)
        l_norm[i] = np.sqrt(sl)
    for j in range(n_cols):
        h_indptr[j + 1] += h_indptr[j]
        l_indptr[j + 1] += l_indptr[j]
    h_fill = h_indptr[:-1].copy()
    l_fill = l_indptr[:-1].copy()
    h_indices = np.empty(h_indptr[n_cols], np.int32)
    h_data = np.empty(h_indptr[n_cols], np.float32)
    l_indices = np.empty(l_indptr[n_cols], np.int32)
    l_data = np.empty(l_indptr[n_cols], np.float32)
    for i in range(n_rows):
        t = thr[i]
        left = n_eq[i]
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            a = abs(data[p])
            if a > t or (a == t and left > 0):
                if a == t:
                    left -= 1
                h_indices[h_fill[j]] = i
                h_data[h_fill[j]] = data[p]
                h_fill[j] += 1
            else:
                l_indices[l_fill[j]] = i
                l_data[l_fill[j]] = data[p]
                l_fill[j] += 1
    return h_indptr, h_indices, h_data, l_indptr, l_indices, l_data, h_norm, l_norm
