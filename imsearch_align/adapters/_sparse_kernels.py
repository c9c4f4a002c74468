"""Numba kernels of :mod:`imsearch_align.adapters.sparse_search` (imported lazily).

Every kernel is ``nogil`` and single-threaded: the caller runs several of them
on disjoint query rows from a Python thread pool, so concurrent searches from
several threads (the evaluator's workers) never meet numba's own threading
layer, which is not re-entrant in every configuration.

Definitions shared by the kernels (see the module docstring of
``sparse_search`` for the algorithm and its proof of exactness):

* the *score* of a (query, doc) pair is the float64 sum, in the doc row's
  column order, of the exact float64 products of their float32 values,
  rounded once to float32;
* a *hit* is a doc whose float32 score is not zero;
* a row's answer is its ``k`` best hits by (score desc, doc position asc).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic

from imsearch_align.framework._select import select_desc

try:  # llvmlite ships with numba; used only to emit llvm.prefetch
    from llvmlite import ir as _ir
except ImportError:  # pragma: no cover - numba always brings llvmlite
    _ir = None

#: Terms are grouped by magnitude in buckets a factor 2 apart; the last bucket
#: holds everything below 2**-(_N_BUCKETS - 1) of the largest term.
_N_BUCKETS = 24
#: Rounding guard, relative: 8 float32 ulps. A doc is dropped only when its
#: upper bound is this far below the k-th lower bound, so no dropped doc can
#: round to the same float32 score as a kept one.
_REL_GUARD = 8.0 * 2.0**-24
#: Bound on the relative error of the float64 partial sums (at most 2**31
#: exact products added in float64, far below this).
_F64_ERR = 1e-12


@intrinsic
def _prefetch_intrinsic(typingctx, arr, idx):
    """``llvm.prefetch`` of ``arr[idx]`` (read, keep in all cache levels)."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = _ir.IntType(8).as_pointer()
        i32 = _ir.IntType(32)
        fn = builder.module.declare_intrinsic(
            "llvm.prefetch", fnty=_ir.FunctionType(_ir.VoidType(), [i8p, i32, i32, i32])
        )
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        builder.call(fn, [ptr, _ir.Constant(i32, 0), _ir.Constant(i32, 3), _ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(nogil=True, cache=True, inline="always")
def _prefetch_noop(arr, idx):
    pass


def _pick_prefetch():
    """The prefetch intrinsic when this numba/llvmlite can compile it, else a no-op.

    Posting lists are short and scattered in memory, so the scatter waits on
    the first cache line of every list; prefetching a few terms ahead hides
    part of that latency (measured: about a third of the scatter time).
    """
    if _ir is None:
        return _prefetch_noop
    try:

        @njit(nogil=True)
        def probe(a):
            _prefetch_intrinsic(a, 0)

        probe(np.zeros(1, np.float32))
    except Exception:  # an llvmlite without this API: correctness does not need it
        return _prefetch_noop
    return _prefetch_intrinsic


_prefetch = _pick_prefetch()
#: Terms prefetched ahead of the one being scattered.
_PREFETCH_AHEAD = 8


@njit(nogil=True, cache=True, inline="always")
def _heap_push_pair(hs, hc, n, k, s, c):
    """Offer (score ``s``, position ``c``) to a size-``k`` heap of the best pairs.

    The heap root is the worst kept pair: the lowest score, and among equal
    scores the highest position. Returns the new fill count.
    """
    if n < k:
        i = n
        hs[i] = s
        hc[i] = c
        while i > 0:
            p = (i - 1) >> 1
            if hs[p] > hs[i] or (hs[p] == hs[i] and hc[p] < hc[i]):
                hs[p], hs[i] = hs[i], hs[p]
                hc[p], hc[i] = hc[i], hc[p]
                i = p
            else:
                break
        return n + 1
    if s < hs[0] or (s == hs[0] and c > hc[0]):
        return n
    hs[0] = s
    hc[0] = c
    i = 0
    while True:
        left = 2 * i + 1
        if left >= k:
            break
        m = left
        r = left + 1
        if r < k and (hs[r] < hs[left] or (hs[r] == hs[left] and hc[r] > hc[left])):
            m = r
        if hs[m] < hs[i] or (hs[m] == hs[i] and hc[m] > hc[i]):
            hs[m], hs[i] = hs[i], hs[m]
            hc[m], hc[i] = hc[i], hc[m]
            i = m
        else:
            break
    return n


@njit(nogil=True, cache=True, inline="always")
def _heap_push_value(hv, n, k, v):
    """Offer ``v`` to a size-``k`` min-heap of the largest values; returns the fill count."""
    if n < k:
        i = n
        hv[i] = v
        while i > 0:
            p = (i - 1) >> 1
            if hv[p] > hv[i]:
                hv[p], hv[i] = hv[i], hv[p]
                i = p
            else:
                break
        return n + 1
    if v <= hv[0]:
        return n
    hv[0] = v
    i = 0
    while True:
        left = 2 * i + 1
        if left >= k:
            break
        m = left
        if left + 1 < k and hv[left + 1] < hv[left]:
            m = left + 1
        if hv[m] < hv[i]:
            hv[m], hv[i] = hv[i], hv[m]
            i = m
        else:
            break
    return n


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
def _exact_select(
    q_indices, q_data, a0, a1, d_indptr, d_indices, d_data, cand, ncand, qd, k, hs, hc
):
    """Exact float32 scores of the candidate docs; the ``k`` best hits go into ``hs/hc``."""
    for a in range(a0, a1):
        qd[q_indices[a]] = q_data[a]
    n = 0
    for t in range(ncand):
        d = cand[t]
        s = 0.0
        for p in range(d_indptr[d], d_indptr[d + 1]):
            s += qd[d_indices[p]] * d_data[p]
        s32 = np.float32(s)
        if s32 != 0:
            n = _heap_push_pair(hs, hc, n, k, s32, d)
    for a in range(a0, a1):
        qd[q_indices[a]] = 0.0
    return n


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


@njit(nogil=True, cache=True)
def _scatter_terms(acc, q_indices, q_data, order, x0, x1, indptr, indices, data):
    """Scatter query terms ``order[x0:x1]`` through one set of posting lists into ``acc``."""
    n = 0
    for x in range(x0, x1):
        if x + _PREFETCH_AHEAD < x1:
            jn = q_indices[order[x + _PREFETCH_AHEAD]]
            _prefetch(indices, indptr[jn])
            _prefetch(data, indptr[jn])
        a = order[x]
        j = q_indices[a]
        v = np.float64(q_data[a])
        p0 = indptr[j]
        p1 = indptr[j + 1]
        for p in range(p0, p1):
            acc[indices[p]] += v * data[p]
        n += p1 - p0
    return n


@njit(nogil=True, cache=True, inline="always")
def _postings_len(q_indices, order, x0, x1, indptr):
    tot = 0
    for x in range(x0, x1):
        j = q_indices[order[x]]
        tot += indptr[j + 1] - indptr[j]
    return tot


@njit(nogil=True, cache=True)
def pruned_topk(
    q_indptr,
    q_indices,
    q_data,
    r0,
    r1,
    d_indptr,
    d_indices,
    d_data,
    h_indptr,
    h_indices,
    h_data,
    l_indptr,
    l_indices,
    l_data,
    h_norm,
    l_norm,
    k,
    lead,
    out_c,
    out_s,
    out_n,
    stats,
):
    """Exact top-``k`` hits of query rows ``r0..r1`` against the docs (see module docstring).

    ``h_*`` / ``l_*``: the docs' heavy and light posting lists
    (:func:`split_postings`); the query's heaviest terms are scattered
    through the heavy lists ``lead`` times further ahead than through the
    light ones. Writes ``out_c/out_s[i, :out_n[i]]`` (unsorted) for each row
    ``i``; ``stats`` accumulates [posting entries scattered, candidates
    rescored, rows that needed every term].
    """
    nd = d_indptr.shape[0] - 1
    n_cols = h_indptr.shape[0] - 1
    max_h = 0.0
    max_l = 0.0
    max_norm = 0.0
    for d in range(nd):
        max_h = max(max_h, h_norm[d])
        max_l = max(max_l, l_norm[d])
        max_norm = max(max_norm, np.sqrt(h_norm[d] ** 2 + l_norm[d] ** 2))
    acc = np.zeros(nd, np.float64)
    qd = np.zeros(n_cols, np.float64)
    cand = np.empty(nd, np.int32)
    mark = np.zeros(nd, np.uint8)
    hv = np.empty(k, np.float64)
    hs = np.empty(k, np.float32)
    hc = np.empty(k, np.int64)
    for i in range(r0, r1):
        a0 = q_indptr[i]
        a1 = q_indptr[i + 1]
        nt = a1 - a0
        out_n[i] = 0
        if nt == 0:
            continue
        # Counting sort of the terms into magnitude buckets, largest first: the
        # scatter then visits the heavy terms first and the bound on the
        # unvisited ones (their L2 norm) shrinks fast.
        vmax = 0.0
        for a in range(a0, a1):
            vmax = max(vmax, abs(np.float64(q_data[a])))
        if vmax == 0.0:
            continue
        bstart = np.zeros(_N_BUCKETS + 1, np.int64)
        bucket = np.empty(nt, np.int64)
        for x in range(nt):
            v = abs(np.float64(q_data[a0 + x]))
            b = _N_BUCKETS - 1
            if v > 0.0:
                b = min(_N_BUCKETS - 1, max(0, -math.frexp(v / vmax)[1]))
            bucket[x] = b
            bstart[b + 1] += 1
        for b in range(_N_BUCKETS):
            bstart[b + 1] += bstart[b]
        order = np.empty(nt, np.int64)
        for x in range(nt):
            b = bucket[x]
            order[bstart[b]] = a0 + x
            bstart[b] += 1
        # rest[x]: L2 norm of the terms from position x of `order` on
        rest = np.zeros(nt + 1, np.float64)
        for x in range(nt - 1, -1, -1):
            v = np.float64(q_data[order[x]])
            rest[x] = rest[x + 1] + v * v
        q_norm = np.sqrt(rest[0])
        for x in range(nt + 1):
            rest[x] = np.sqrt(rest[x])
        err = _F64_ERR * q_norm * max_norm  # bound on a float64 partial sum's error
        # Terms [0, th) have been scattered through the heavy postings,
        # [0, tl) through the light ones; a doc's unseen part is bounded by
        # Cauchy-Schwarz on each: rest[th] * |d_heavy| + rest[tl] * |d_light|.
        th = 0
        tl = 0
        target = min(8, nt)
        ncand = -1  # -1: not settled yet
        while ncand < 0:
            th_new = min(nt, lead * target)
            stats[0] += _scatter_terms(
                acc, q_indices, q_data, order, th, th_new, h_indptr, h_indices, h_data
            )
            stats[0] += _scatter_terms(
                acc, q_indices, q_data, order, tl, target, l_indptr, l_indices, l_data
            )
            th = th_new
            tl = target
            rh = rest[th]
            rl = rest[tl]
            # an unvisited doc has acc = 0: this bounds its score
            untouched = rh * max_h + rl * max_l + err
            # theta: the k-th largest lower bound among docs certain to score
            # more than any unvisited doc (hence > 0: certain hits)
            # Only docs whose lower bound beats every unvisited doc's upper
            # bound can make the k-th lower bound useful; count them first in
            # a loop the compiler vectorises (most evaluations stop here).
            floor = max(untouched, 0.0) + err
            npos = 0
            for d in range(nd):
                npos += acc[d] - rh * h_norm[d] - rl * l_norm[d] > floor
            nh = 0
            if npos >= k:
                for d in range(nd):
                    lo = acc[d] - rh * h_norm[d] - rl * l_norm[d]
                    if lo > floor:
                        nh = _heap_push_value(hv, nh, k, lo - err)
            if nh == k:
                theta = hv[0]
                cut = theta - _REL_GUARD * theta
                if untouched < cut:
                    ncand = 0
                    gather = 0
                    for d in range(nd):
                        if acc[d] + rh * h_norm[d] + rl * l_norm[d] + err >= cut:
                            cand[ncand] = d
                            ncand += 1
                            gather += d_indptr[d + 1] - d_indptr[d]
                    if tl < nt:
                        # stop when rescoring the candidates costs less than
                        # the next round of scatter would
                        nxt_t = min(2 * target, nt)
                        nxt = _postings_len(
                            q_indices, order, th, min(nt, lead * nxt_t), h_indptr
                        ) + _postings_len(q_indices, order, tl, nxt_t, l_indptr)
                        if gather > nxt:
                            ncand = -1
            if ncand < 0 and tl == nt:
                # Fewer than k docs are certain hits: every doc that shares a
                # term with the query is a candidate (found exactly, by walking
                # the postings again, so that no cancellation to 0.0 hides one).
                stats[2] += 1
                ncand = 0
                for x in range(nt):
                    j = q_indices[order[x]]
                    for p in range(h_indptr[j], h_indptr[j + 1]):
                        d = h_indices[p]
                        if mark[d] == 0:
                            mark[d] = 1
                            cand[ncand] = d
                            ncand += 1
                    for p in range(l_indptr[j], l_indptr[j + 1]):
                        d = l_indices[p]
                        if mark[d] == 0:
                            mark[d] = 1
                            cand[ncand] = d
                            ncand += 1
                for t in range(ncand):
                    mark[cand[t]] = 0
            target = min(2 * target, nt)
        stats[1] += ncand
        n = _exact_select(
            q_indices, q_data, a0, a1, d_indptr, d_indices, d_data, cand, ncand, qd, k, hs, hc
        )
        for x in range(n):
            out_s[i, x] = hs[x]
            out_c[i, x] = hc[x]
        out_n[i] = n
        acc[:] = 0.0
