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

Rooms: :mod:`.postings` (the docs' posting lists and norms, built once),
:mod:`.topk` (:func:`pruned_topk`, the search), :mod:`.heaps` (the fixed-size
heaps it keeps) and :mod:`.prefetch` (the scatter's software prefetch).
"""

from __future__ import annotations

from imsearch_align.adapters._sparse_kernels.postings import (
    row_norms,
    split_postings,
    transpose_csr,
)
from imsearch_align.adapters._sparse_kernels.topk import pruned_topk

__all__ = ["pruned_topk", "row_norms", "split_postings", "transpose_csr"]
