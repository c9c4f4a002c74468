"""Numba kernels of the ASIF transform (imported lazily by :mod:`imsearch_align.methods.asif`).

One kernel call handles a range of rows of a block of float32 cosines
``C = Q @ A.T`` (a BLAS product). Per row it

1. finds the float32 k-th largest cosine ``t`` (a threshold from a strided
   sample, one pass that collects the values above it, a quickselect);
2. with ``margin`` twice the worst-case rounding error of a float32 dot
   product of unit vectors, keeps every anchor above ``t + margin`` (it is
   in the true top k), drops every anchor below ``t - margin`` (it is not),
   and decides the few in between by their cosines recomputed in float64
   with a fixed summation order (exact products of float32 values), ties
   to the lower anchor index.

The selected anchors therefore depend only on the float32 inputs, never on
the BLAS, the block shape, the thread count or the CPU; the weights are
computed from the float32 cosines (a last-bit difference between BLAS
kernels changes a weight by about one float32 ulp).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from imsearch_align.framework._select import select_desc


@njit(nogil=True, cache=True, inline="always")
def _dot64(x, y):
    """Float64 dot product of two float32 vectors in one fixed order."""
    n = x.shape[0]
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    i = 0
    while i + 8 <= n:
        s0 += np.float64(x[i]) * y[i]
        s1 += np.float64(x[i + 1]) * y[i + 1]
        s2 += np.float64(x[i + 2]) * y[i + 2]
        s3 += np.float64(x[i + 3]) * y[i + 3]
        s4 += np.float64(x[i + 4]) * y[i + 4]
        s5 += np.float64(x[i + 5]) * y[i + 5]
        s6 += np.float64(x[i + 6]) * y[i + 6]
        s7 += np.float64(x[i + 7]) * y[i + 7]
        i += 8
    while i < n:
        s0 += np.float64(x[i]) * y[i]
        i += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@njit(nogil=True, cache=True)
# shape: long numba kernel — per-row steps share 6 scratch buffers and the row's state; a split into inline helpers gave the same output but perf.py's cold ASIF transform ran ~2x slower
def select_rows(C, Q, A, r0, r1, k, margin, exponent, weights, out_idx, out_val, out_n, stats):
    """Rows ``r0..r1`` of the cosine block ``C`` (rows of ``Q`` against anchors ``A``).

    ``weights=True``: writes the ASIF weights (positive cosines ** exponent,
    L2-normalised, from the float32 cosines; clipped entries dropped) by
    anchor index ascending. ``weights=False``: writes the k float64 cosines
    and their anchor indices, by cosine descending then index ascending.
    ``out_n[i]`` = entries written for row ``i``; ``stats`` accumulates
    [cosines recomputed in float64].

    The selection is exact for the float64 cosines: with ``t`` the float32
    k-th largest and ``margin`` twice the float32 error bound, an anchor
    above ``t + margin`` is certainly in the top k, one below
    ``t - margin`` certainly out, and the few in between are decided by
    their float64 cosines (ties to the lower index).
    """
    n = C.shape[1]
    vbuf = np.empty(n, np.float32)
    ibuf = np.empty(n, np.int64)
    sbuf = np.empty(n, np.float32)
    cos = np.empty(n, np.float64)
    keep = np.empty(n, np.uint8)
    amb = np.empty(n, np.int64)
    stride = max(1, n // (4 * k))
    int_exp = int(exponent) if exponent == np.floor(exponent) and 1 <= exponent <= 64 else 0
    for i in range(r0, r1):
        row = C[i]
        # 1. a threshold at or below the k-th largest, from a strided sample
        t_est = -np.inf
        if k < n:
            ns = 0
            for x in range(0, n, stride):
                sbuf[ns] = row[x]
                ns += 1
            want = (k // stride) + (k // (2 * stride)) + 8
            if want < ns:
                t_est = select_desc(sbuf, ns, want - 1)
        # 2. collect the values at or above it (ascending anchor index); the
        # exact float32 k-th largest t among them; again lower if t - margin < t_est
        while True:
            m = 0
            for x in range(n):
                if row[x] >= t_est:
                    vbuf[m] = row[x]
                    ibuf[m] = x
                    m += 1
            if m < k:
                t_est = -np.inf
                continue
            for x in range(m):
                sbuf[x] = vbuf[x]
            t = select_desc(sbuf, m, k - 1)
            if t - margin >= t_est:
                break
            t_est = t - margin
        # 3. certain members, and the ambiguous ones decided in float64
        n_cert = 0
        n_amb = 0
        for x in range(m):
            v = vbuf[x]
            if v > t + margin:
                keep[x] = 1
                n_cert += 1
            elif v >= t - margin:
                keep[x] = 0
                amb[n_amb] = x
                n_amb += 1
            else:
                keep[x] = 0
        need = k - n_cert
        q = Q[i]
        for a in range(n_amb):
            cos[a] = _dot64(q, A[ibuf[amb[a]]])
        stats[0] += n_amb
        if need >= n_amb:
            for a in range(n_amb):
                keep[amb[a]] = 1
        elif n_amb - need <= 64:
            # drop the worst (lowest cosine, then highest index) one at a time
            alive = np.ones(n_amb, np.uint8)
            for _ in range(n_amb - need):
                w = -1
                for a in range(n_amb):
                    if alive[a] and (
                        w < 0
                        or cos[a] < cos[w]
                        or (cos[a] == cos[w] and ibuf[amb[a]] > ibuf[amb[w]])
                    ):
                        w = a
                alive[w] = 0
            for a in range(n_amb):
                if alive[a]:
                    keep[amb[a]] = 1
        else:
            # many exact ties: a stable sort keeps equal cosines in index order
            order = np.argsort(-cos[:n_amb], kind="mergesort")
            for a in range(need):
                keep[amb[order[a]]] = 1
        # 4. output
        n_out = 0
        if weights:
            ss = 0.0
            for x in range(m):
                if keep[x]:
                    c = np.float64(vbuf[x])
                    if c > 0.0:
                        if int_exp > 0:  # repeated squaring: a few multiplies, not pow()
                            w64 = 1.0
                            b = c
                            e = int_exp
                            while e:
                                if e & 1:
                                    w64 *= b
                                b *= b
                                e >>= 1
                        else:
                            w64 = c**exponent
                        cos[x] = w64
                        ss += w64 * w64
                    else:
                        keep[x] = 0
            norm = np.sqrt(ss)
            for x in range(m):
                if keep[x]:
                    v32 = np.float32(cos[x] / norm)
                    if v32 != 0:
                        out_idx[i, n_out] = ibuf[x]
                        out_val[i, n_out] = v32
                        n_out += 1
        else:
            sel = np.empty(k, np.int64)
            for x in range(m):
                if keep[x]:
                    sel[n_out] = ibuf[x]
                    cos[n_out] = _dot64(q, A[ibuf[x]])
                    n_out += 1
            order = np.argsort(-cos[:n_out], kind="mergesort")
            for x in range(n_out):
                out_idx[i, x] = sel[order[x]]
                out_val[i, x] = cos[order[x]]
        out_n[i] = n_out
