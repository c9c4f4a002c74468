"""Fixed-size heaps of the sparse kernels, inlined into them: the best pairs, the largest values."""

from __future__ import annotations

from numba import njit

__all__ = ["heap_push_pair", "heap_push_value"]


@njit(nogil=True, cache=True, inline="always")
def heap_push_pair(hs, hc, n, k, s, c):
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
def heap_push_value(hv, n, k, v):
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
