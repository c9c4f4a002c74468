"""Inner products of given (query, document) pairs of CSR matrices, in float64
(the truth check and the rescoring of near ties, :mod:`imsearch_align.framework.fidelity`).

Gathering the documents' rows into a new CSR matrix, converting it to float64
and multiplying elementwise costs about 24 bytes per gathered non-zero: for
ASIF captions (800 non-zeros a row) and a few thousand rows of eleven
documents, over a gigabyte. Here each query is scattered once into a dense
float64 accumulator of the dimension, and each of its documents is summed
against it in its own storage order: no copy, and the products of float32
values are exact in float64.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(nogil=True, cache=True)
def sparse_pair_dots(q_indptr, q_indices, q_data, d_indptr, d_indices, d_data, qrows, pos, dim):
    """``out[i, j] = queries[qrows[i]] . docs[pos[i, j]]`` in float64; NaN where ``pos < 0``."""
    n, k = pos.shape
    out = np.empty((n, k), dtype=np.float64)
    acc = np.zeros(dim, dtype=np.float64)
    for i in range(n):
        qr = qrows[i]
        for p in range(q_indptr[qr], q_indptr[qr + 1]):
            acc[q_indices[p]] += np.float64(q_data[p])
        for j in range(k):
            r = pos[i, j]
            if r < 0:
                out[i, j] = np.nan
                continue
            s = 0.0
            for p in range(d_indptr[r], d_indptr[r + 1]):
                s += acc[d_indices[p]] * np.float64(d_data[p])
            out[i, j] = s
        for p in range(q_indptr[qr], q_indptr[qr + 1]):
            acc[q_indices[p]] = 0.0
    return out


@njit(nogil=True, cache=True)
def dense_pair_dots(queries, docs, qrows, pos):
    """``out[i, j] = queries[qrows[i]] . docs[pos[i, j]]`` in float64 (each
    product exact, summed in index order); NaN where ``pos < 0``. Reads the
    rows where they are: no gathered copy."""
    n, k = pos.shape
    d = queries.shape[1]
    out = np.empty((n, k), dtype=np.float64)
    q64 = np.empty(d, dtype=np.float64)
    for i in range(n):
        qr = qrows[i]
        for t in range(d):
            q64[t] = queries[qr, t]
        for j in range(k):
            r = pos[i, j]
            if r < 0:
                out[i, j] = np.nan
                continue
            s = 0.0
            for t in range(d):
                s += q64[t] * np.float64(docs[r, t])
            out[i, j] = s
    return out
