"""One place scores a ranking.

:func:`score_ranking` (:mod:`.score`) searches a store through the
evaluator, rescores near-tie rows in float64 and closes tie groups
(:mod:`.tie_aware`), scores the tie-aware measures and returns the
:class:`RankingResult` (:mod:`.result`), the per-query table and the run.
"""

from __future__ import annotations

from imsearch_align.framework.ranking.result import RankingResult, SearchTimings
from imsearch_align.framework.ranking.score import RankingSettings, Scored, score_ranking

__all__ = ["RankingResult", "RankingSettings", "Scored", "SearchTimings", "score_ranking"]
