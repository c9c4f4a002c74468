"""One place scores a ranking.

:func:`score_ranking` (:mod:`.score`) searches a store through the
evaluator, rescores near-tie rows in float64 and closes tie groups
(:mod:`.tie_aware`), scores the tie-aware measures and returns the
:class:`RankingResult` (:mod:`.result`), the per-query table and the run.
:func:`score_run` and :func:`score_against_exact` (:mod:`.runs`) score a
run a store already answered: every cell of the collection study and every
concurrency level.
"""

from __future__ import annotations

from imsearch_align.framework.ranking.result import RankingResult, SearchTimings
from imsearch_align.framework.ranking.runs import (
    PairedScores,
    ReadTies,
    score_against_exact,
    score_run,
)
from imsearch_align.framework.ranking.score import RankingSettings, Scored, score_ranking

__all__ = [
    "PairedScores",
    "RankingResult",
    "RankingSettings",
    "ReadTies",
    "Scored",
    "SearchTimings",
    "score_against_exact",
    "score_ranking",
    "score_run",
]
