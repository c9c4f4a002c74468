"""Scoring a run a store already answered: the path every study cell takes.

:func:`score_run` scores one run (tie-aware with a tolerance, else by the
tie rule), :func:`score_against_exact` an approximate run beside the exact
ranking of the same collection, both tie-aware, each with how its ties are
read (:class:`ReadTies`). The collection study's sweep, filtered and label
cells and the concurrency runner's levels all score through these, and so
through the one measure table (:mod:`imsearch_align.framework.measures`),
as :func:`~imsearch_align.framework.ranking.score.score_ranking` does for
an experiment that searches a store itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.framework.metrics import Qrels, Run, evaluate
from imsearch_align.framework.ties import tie_aware_evaluate

__all__ = ["PairedScores", "ReadTies", "score_against_exact", "score_run"]


@dataclass(frozen=True)
class ReadTies:
    """How a run's ties are read: scores within ``tol`` tie; ``groups_closed`` says whether
    a tie group at the cut-off holds every tied document (True, or per row) or only those
    returned (False: an approximate run's)."""

    tol: float
    groups_closed: bool | np.ndarray = False


@dataclass(frozen=True)
class PairedScores:
    """An approximate run's measures beside the exact ranking's (``TieAwareResult`` each)."""

    exact: Any
    approximate: Any

    def means(self) -> dict[str, dict[str, float]]:
        """``{measure: {"exact": mean, "approximate": mean}}``."""
        em, am = self.exact.mean(), self.approximate.mean()
        return {m: {"exact": em[m], "approximate": am[m]} for m in em}


def score_run(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    ties: ReadTies | None = None,
    relevance_level: float | None = None,
    failed_queries: Sequence[Any] = (),
) -> Any:
    """``run``'s measures: tie-aware where ``ties`` says how (a ``TieAwareResult``), else by
    the tie rule (an ``EvaluationResult``); failed queries score 0."""
    names = [measures] if isinstance(measures, str) else list(measures)
    failed = tuple(failed_queries) or None
    if ties is None:
        return evaluate(run, qrels, names, relevance_level=relevance_level, failed_queries=failed)
    return tie_aware_evaluate(
        run, qrels, names, tol=ties.tol, groups_closed=ties.groups_closed,
        relevance_level=relevance_level, failed_queries=failed,
    )  # fmt: skip


def score_against_exact(
    approximate: Run,
    exact: Run,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    approximate_ties: ReadTies,
    exact_ties: ReadTies,
    relevance_level: float | None = None,
) -> PairedScores:
    """The same measures on an approximate run and on the exact ranking, both tie-aware."""
    kw = {"relevance_level": relevance_level}
    return PairedScores(
        exact=score_run(exact, qrels, measures, ties=exact_ties, **kw),
        approximate=score_run(approximate, qrels, measures, ties=approximate_ties, **kw),
    )
