"""Query side of the sparse kernels: the exact pruned top-k of query rows against the docs.

Scatter the query's terms, heaviest first, through the docs' heavy and light
posting lists (:mod:`~imsearch_align.adapters._sparse_kernels.postings`)
until the bounds settle the candidates, then rescore those exactly.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from imsearch_align.adapters._sparse_kernels.heaps import heap_push_pair, heap_push_value
from imsearch_align.adapters._sparse_kernels.prefetch import PREFETCH_AHEAD, prefetch

__all__ = ["pruned_topk"]

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
            n = heap_push_pair(hs, hc, n, k, s32, d)
    for a in range(a0, a1):
        qd[q_indices[a]] = 0.0
    return n


@njit(nogil=True, cache=True)
def _scatter_terms(acc, q_indices, q_data, order, x0, x1, indptr, indices, data):
    """Scatter query terms ``order[x0:x1]`` through one set of posting lists into ``acc``."""
    n = 0
    for x in range(x0, x1):
        if x + PREFETCH_AHEAD < x1:
            jn = q_indices[order[x + PREFETCH_AHEAD]]
            prefetch(indices, indptr[jn])
            prefetch(data, indptr[jn])
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
# shape: long numba kernel — its hot per-row loop keeps ~20 locals live across the scatter, bound and fallback phases; splitting it would pass them through calls every round
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
                        nh = heap_push_value(hv, nh, k, lo - err)
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
