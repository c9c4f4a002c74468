"""The task's quality on the answers a concurrency level returned, not on a separate search.

Which answers are scored: the **first** answer of each query (in send
order). Clients cycle through the query set, so a query may be answered
several times at one level; for a given store and search setting the
answers should agree, and :class:`Quality` counts the queries whose later
answers differ from their first (``n_differing``, ids compared) so a store
that answers differently under load shows. Scoring every repeat would weigh
queries by how often the clock let them be sent; the first answer weighs
each query once, as a plain search does.

Which queries count: every query sent at the level (answered, or failed
every time it was sent). A failed query scores 0 and is listed (as in
:func:`~imsearch_align.framework.metrics.evaluate`). A query the level
never reached (a duration too short to cycle through the set) is not
scored and is counted in ``not_sent``: the quality is that of the queries
measured, and says how many it covers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.concurrency.result import Answers
from imsearch_align.framework.metrics import Qrels, Run, py_scalar
from imsearch_align.framework.ranking.runs import ReadTies, score_run
from imsearch_align.framework.ties import default_tolerance

__all__ = ["Quality", "quality"]


@dataclass(frozen=True)
class Quality:
    """Quality measured on one level's answers.

    Attributes:
        metrics: measure -> mean over the scored queries (tie-aware expected
            values when ``dim`` was given, else the tie rule's values).
        n_queries: queries scored (sent at the level and judged in the qrels).
        n_answers: answers the level returned (repeats included).
        not_sent: judged queries of the query set the level never sent (not scored).
        failed_queries: queries sent but never answered (scored 0).
        n_differing: answered queries whose repeated answers differ from the first.
        intervals: measure -> ``{"mean", "low", "high"}``, the 95 % bootstrap interval of
            its mean, queries resampled by cluster (the queries judged relevant to the
            same documents go together: :func:`~imsearch_align.collection.intervals.
            judged_clusters`).
    """

    metrics: dict[str, float]
    n_queries: int
    n_answers: int
    not_sent: int
    failed_queries: tuple
    n_differing: int
    intervals: dict[str, dict[str, float]] = field(default_factory=dict)


def _intervals(scored: Any, qrels: Qrels) -> dict[str, dict[str, float]]:
    """The clustered bootstrap interval of each measure's mean over the scored queries."""
    from imsearch_align.collection.intervals import clustered_bootstrap, judged_clusters

    names = list(scored.values)
    if not names or not len(scored.query_ids):
        return {}
    values = np.column_stack([np.asarray(scored.values[m], dtype=np.float64) for m in names])
    mean, low, high = clustered_bootstrap(values, judged_clusters(qrels, scored.query_ids))
    return {
        m: {"mean": float(mean[i]), "low": float(low[i]), "high": float(high[i])}
        for i, m in enumerate(names)
    }


def _differing(answers: Answers, first: np.ndarray) -> int:
    """How many queries have a repeated answer whose ids differ from the first answer's."""
    if len(first) == len(answers):
        return 0
    first_of = dict(zip(answers.query[first].tolist(), first.tolist()))
    differ = set()
    for row, q in enumerate(answers.query.tolist()):
        f = first_of[q]
        if row != f and not np.array_equal(answers.ids[row], answers.ids[f]):
            differ.add(q)
    return len(differ)


def _restrict(qrels: Qrels, keep_ids: Sequence) -> tuple[Qrels, int]:
    """``qrels`` of the queries in ``keep_ids`` only, and how many judged queries were dropped."""
    keep = pd.Series(qrels.query_ids).isin(pd.Series(list(keep_ids), dtype=object)).to_numpy()
    judged = len(qrels.queries)
    out = Qrels(qrels.query_ids[keep], qrels.doc_ids[keep], qrels.relevance[keep])
    return out, judged - len(out.queries)


def quality(
    answers: Answers,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    dim: int | None = None,
    relevance_level: float | None = None,
) -> Quality:
    """Score the first answer of each query sent at a level (see the module docstring).

    Args:
        answers: a level's :attr:`~imsearch_align.concurrency.result.LevelResult.answers`.
        qrels: the task's judgements (query ids as in the run's ``query_ids``).
        measures: canonical names (``"HitRate@10"``, ``"nDCG@10"``...).
        dim: the vectors' dimension: score tie-aware
            (:func:`~imsearch_align.framework.ties.tie_aware_evaluate` with its
            default tolerance); None: the tie rule
            (:func:`~imsearch_align.framework.metrics.evaluate`).
        relevance_level: as in :func:`~imsearch_align.framework.metrics.evaluate`.
    """
    if not isinstance(answers, Answers):
        raise TypeError(f"quality: answers must be a level's Answers, got {type(answers).__name__}")
    if not len(answers):
        raise ValueError("quality: the level answered no query; there is nothing to score")
    first = answers.first()
    qids = answers.query_ids
    answered = [py_scalar(q) for q in qids[answers.query[first]]]
    failed_pos = np.setdiff1d(answers.failed_query, answers.query)
    failed = tuple(py_scalar(q) for q in qids[failed_pos])
    sent_qrels, not_sent = _restrict(qrels, answered + list(failed))
    run = Run.from_arrays(answered, answers.ids[first], answers.scores[first])
    ties = None if dim is None else ReadTies(default_tolerance(dim))
    scored = score_run(
        run, sent_qrels, measures, ties=ties, relevance_level=relevance_level,
        failed_queries=failed,
    )  # fmt: skip
    return Quality(
        metrics=scored.mean(),
        intervals=_intervals(scored, sent_qrels),
        n_queries=len(sent_qrels.queries),
        n_answers=len(answers),
        not_sent=not_sent,
        failed_queries=failed,
        n_differing=_differing(answers, first),
    )
