"""Ranking metrics, vectorised over the sparse hits of an ``(n_queries, k)`` gain matrix.

The definitions are trec_eval's (``ndcg_cut``, ``P``, ``recall``,
``map_cut``), so ``evaluate`` agrees with ``pytrec_eval`` to floating-point
precision on tie-free runs. The measure names, their trec_eval and
CLIP_benchmark aliases, definitions and kernels are one table in
:mod:`imsearch_align.framework.measures`.

Rooms: :mod:`.ids` (id conversion and checks), :mod:`.qrels` (:class:`Qrels`),
:mod:`.run` (:class:`Run`, the canonical order), :mod:`.chunks` (row chunks
on two threads), :mod:`.hits` (where the relevant docs sit in a ranking),
:mod:`.result` (:class:`EvaluationResult`, :func:`bootstrap_ci`) and
:mod:`.evaluation` (:func:`evaluate`). Import from this package.

Semantics (documented in the README):

* Ranking is by score descending; ties are broken by doc id ascending
  (trec_eval breaks them by docno descending: a deliberate difference).
* A doc is relevant when its qrels relevance is ``> 0`` (or
  ``>= relevance_level`` when given); nDCG uses the graded relevance as the
  gain (only positive values count), a log2 discount and the ideal ranking
  from the qrels, as trec_eval does.
* Every query in the qrels is scored and counted in the mean. A qrels query
  absent from the run scores 0 (and is listed in ``missing_queries``); a
  query without relevant documents scores 0. A run query absent from the
  qrels is ignored (and listed in ``ignored_queries``).
* A qrels doc id of ``-1`` is rejected (it is the run's no-hit marker).
  String doc ids on one side and integer ids on the other can never match:
  :func:`evaluate` raises when no id type is shared and warns with counts
  when only some ids are of the other type.
"""

from __future__ import annotations

from imsearch_align.framework.measures import MAX_K, parse_measure, valid_measure_names
from imsearch_align.framework.metrics.chunks import _PARALLEL_MIN_CELLS as _PARALLEL_MIN_CELLS
from imsearch_align.framework.metrics.chunks import _map_row_chunks as _map_row_chunks
from imsearch_align.framework.metrics.evaluation import (
    check_relevance_level,
    compute_measures,
    evaluate,
    evaluate_lenient,
)
from imsearch_align.framework.metrics.ids import IdTypeWarning, py_scalar
from imsearch_align.framework.metrics.ids import _as_id_array as _as_id_array
from imsearch_align.framework.metrics.ids import _index_of as _index_of
from imsearch_align.framework.metrics.qrels import Qrels
from imsearch_align.framework.metrics.result import EvaluationResult, bootstrap_ci
from imsearch_align.framework.metrics.run import Run
from imsearch_align.framework.metrics.run import _unsorted_rows_serial as _unsorted_rows_serial

__all__ = [
    "MAX_K",
    "EvaluationResult",
    "IdTypeWarning",
    "Qrels",
    "Run",
    "bootstrap_ci",
    "check_relevance_level",
    "compute_measures",
    "evaluate",
    "evaluate_lenient",
    "parse_measure",
    "py_scalar",
    "valid_measure_names",
]
