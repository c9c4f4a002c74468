"""Scoring a searched run: the measures under the store's tie rule, once.

:func:`score` is shared by :meth:`BenchmarkEvaluator.evaluate` and
:func:`~imsearch_align.framework.ranking.score_ranking`: the measures of the
run (a ranking holding a relevant document twice fails its query), each
measure with ``per_extra_score`` again for every extra score column the
store returned, and the notes that say the numbers are not what they seem.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any

import numpy as np

from imsearch_align.framework.evaluator.batches import Searched
from imsearch_align.framework.interfaces import NO_HIT
from imsearch_align.framework.measures import MEASURES, lookup
from imsearch_align.framework.metrics import EvaluationResult, Qrels, Run, evaluate_lenient

__all__ = ["score"]

log = logging.getLogger("imsearch_align.framework.evaluator")

DUPLICATE_ERROR = "the ranking holds a relevant doc twice"


def score(
    searched: Searched,
    qrels: Qrels,
    measures: tuple[str, ...],
    *,
    relevance_level: float | None = None,
    plain: EvaluationResult | None = None,
) -> tuple[EvaluationResult, dict[Any, str], tuple[str, ...]]:
    """The run's measures (extra-score columns appended), the errors (a
    repeated relevant doc added) and the notes.

    ``plain``: the run's evaluation when the caller already has it (computed
    with the same measures and ``failed_queries=list(searched.errors)``, on
    a run where no document repeats): it is not computed again.
    """
    errors = dict(searched.errors)
    if plain is None:
        ev, dup_ids = evaluate_lenient(
            searched.run,
            qrels,
            measures,
            relevance_level=relevance_level,
            failed_queries=list(errors),
        )
        for qid in dup_ids.tolist():
            errors[qid] = DUPLICATE_ERROR
    else:
        ev = plain
    extra_values = _extra_score_values(searched, qrels, measures)
    if extra_values:
        ev = replace(
            ev, measures=ev.measures + tuple(extra_values), values={**ev.values, **extra_values}
        )
    return ev, errors, _notes(searched, qrels, len(searched.run.query_ids) + len(searched.errors))


def _notes(searched: Searched, qrels: Qrels, nq: int) -> tuple[str, ...]:
    """Unsorted rankings, relevant documents the collection does not hold."""
    notes = []
    if searched.n_unsorted:
        notes.append(
            f"{searched.n_unsorted} of {nq} rankings were not sorted by score (scored after "
            "re-sorting them by the store's scores)"
        )
    if searched.collection_ids is not None:
        unknown = qrels.unknown_docs(searched.collection_ids)
        if unknown:
            n_rel = len(qrels._positive[1])
            msg = (
                f"{unknown} of {n_rel} relevant judgements name a doc that is not in the "
                "collection (it can never be retrieved: recall and nDCG are capped)"
            )
            log.warning("collection %s: %s", searched.collection, msg)
            notes.append(msg)
    return tuple(notes)


def _extra_score_values(
    searched: Searched, qrels: Qrels, measures: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """``m[name]`` for every measure ``m`` with ``per_extra_score`` and every
    extra score column ``name`` the store returned, ranked by that column."""
    out: dict[str, np.ndarray] = {}
    order = {meas.name: i for i, meas in enumerate(MEASURES)}
    found = {
        (meas.name, k, meas.at(k)) for meas, k in map(lookup, measures) if meas.per_extra_score
    }
    # in table order, each family's cut-offs ascending
    again = [name for _, _, name in sorted(found, key=lambda f: (order[f[0]], f[1]))]
    if not again or not searched.extra_scores:
        return out
    run = searched.run
    for name, col in searched.extra_scores.items():
        sc = np.asarray(col, dtype=np.float64)
        sc = np.where(run.doc_ids == NO_HIT, -np.inf, sc)
        ranked = Run.from_arrays(run.query_ids, run.doc_ids, sc)
        ev, _ = evaluate_lenient(ranked, qrels, again)
        for m in again:
            out[f"{m}[{name}]"] = ev.values[m]
    return out
