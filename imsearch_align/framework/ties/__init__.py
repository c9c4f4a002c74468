"""Tie-aware ranking measures: the expected value over every order of tied documents.

Exact stores compute the same inner products with different summation
orders, so two documents whose scores agree to a few ulps can come back in
either order, and a tie-rule metric (:func:`~imsearch_align.framework.metrics.evaluate`,
ties broken by doc id) then depends on the store. This package scores a
:class:`~imsearch_align.framework.metrics.Run` so that the result does not
depend on that order:

* **Tie groups** (:mod:`.groups`: :func:`tie_groups`, :func:`ambiguous_rows`,
  :func:`open_tie_groups`, :func:`default_tolerance`). In each ranked row,
  neighbours whose scores differ by at most ``tol * max(1, |s_i|, |s_{i+1}|)``
  are linked (compared in float64), and a tie group is a maximal chain of
  links. No-hit cells are never in a group.
* **Expected measures** (:mod:`.expected`, :mod:`.judgements`). Each measure
  is averaged over all orderings of the members of every tie group, each
  ordering equally likely and groups independent (McSherry and Najork,
  ECIR 2008). The closed form of each measure is its entry's ``tie_kernel``
  in :mod:`imsearch_align.framework.measures`
  (:mod:`imsearch_align.framework.tie_kernels` holds them and their
  formulas); a measure without one is refused. Everything else is
  :mod:`~imsearch_align.framework.metrics`' semantics exactly (trec_eval
  definitions, relevance ``> 0`` or ``>= relevance_level``, graded nDCG
  gains, qrels queries absent from the run and queries without relevant
  docs score 0). A row without ties keeps the tie-rule value unchanged (bit
  for bit): the closed forms are evaluated only for rows that hold a tie
  group reaching a cut-off.
* **Bounds** (:mod:`.expected`). Per query, ``low`` and ``high`` are the
  values with ties broken against and for the relevant documents; a query
  is *tie-dependent* for a measure when ``high - low > 1e-12``.
* **Evaluation** (:mod:`.evaluation`: :func:`tie_aware_evaluate`, into
  :class:`TieAwareResult` of :mod:`.result`), including groups cut by the end
  of the run (``truncated``, ``groups_closed``).

Import from this package.
"""

from __future__ import annotations

from imsearch_align.framework.ties.evaluation import DEPENDENCE_EPS, tie_aware_evaluate
from imsearch_align.framework.ties.expected import _group_values as _group_values
from imsearch_align.framework.ties.groups import (
    EPS_F32,
    TOL_LAMBDA,
    ambiguous_rows,
    default_tolerance,
    open_tie_groups,
    tie_groups,
)
from imsearch_align.framework.ties.groups import _is_link as _is_link
from imsearch_align.framework.ties.groups import _link_matrix as _link_matrix
from imsearch_align.framework.ties.groups import _sparse_links as _sparse_links
from imsearch_align.framework.ties.judgements import _Judgements as _Judgements
from imsearch_align.framework.ties.result import TieAwareResult

__all__ = [
    "DEPENDENCE_EPS",
    "EPS_F32",
    "TOL_LAMBDA",
    "TieAwareResult",
    "ambiguous_rows",
    "default_tolerance",
    "open_tie_groups",
    "tie_aware_evaluate",
    "tie_groups",
]
