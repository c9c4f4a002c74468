"""One numba quickselect shared by the sparse search kernels
(:mod:`imsearch_align.adapters._sparse_kernels`) and the ASIF transform kernels
(:mod:`imsearch_align.methods._asif_kernels`)."""

from __future__ import annotations

from numba import njit


@njit(nogil=True, cache=True)
def select_desc(a, n, r):
    """The ``r``-th largest (0-based) of ``a[:n]``; reorders ``a[:n]`` (Hoare quickselect)."""
    lo = 0
    hi = n - 1
    while hi > lo:
        mid = (lo + hi) >> 1
        # median of three as the pivot
        x, y, z = a[lo], a[mid], a[hi]
        if x < y:
            x, y = y, x
        if y < z:
            y = z
            if x < y:
                y = x
        pivot = y
        i = lo
        j = hi
        while i <= j:
            while a[i] > pivot:
                i += 1
            while a[j] < pivot:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if r <= j:
            hi = j
        elif r >= i:
            lo = i
        else:
            return a[r]
    return a[r]
