"""Merge result files into one table (CSV) and a Markdown leaderboard.

What ``clip_benchmark build`` does for CLIP_benchmark, for our results: one
row per result file (:meth:`ExperimentResult.flatten`): the config in
columns (``method``, ``method_params.sim_dim``...), the status, every metric
under its flat name (``t2i/HitRate@1``, ``t2i/R@1`` is IR recall), the
CLIP_benchmark aliases (``image_retrieval_recall@5``), per-ranking speed
(``t2i.queries_per_s``), timings (``fit_s``), intervals (``t2i/HitRate@1.ci_low``)
and provenance (``env.numpy``). Files that cannot be read (not JSON, not a
result, an unknown schema version) are skipped with a
:class:`LeaderboardWarning` that names them and says why.

The Markdown table leads with HitRate@k, labelled as in the console (see
:mod:`imsearch_align.experiment.report`); a degraded or failed row is marked
in a ``status`` column and is never bolded as best.

    df = load_results(["results/"])
    print(to_markdown(df))

Rooms: :mod:`~imsearch_align.leaderboard.frame` finds and reads the result
files into the frame; :mod:`~imsearch_align.leaderboard.markdown` renders it.
"""

from __future__ import annotations

from imsearch_align.leaderboard.frame import (
    DEFAULT_METRICS,
    LeaderboardWarning,
    default_sort_metric,
    find_result_files,
    load_result_objects,
    load_results,
    load_study_cells,
    metric_columns,
    results_frame,
)
from imsearch_align.leaderboard.markdown import DEFAULT_SPEED, to_markdown

__all__ = [
    "DEFAULT_METRICS",
    "DEFAULT_SPEED",
    "LeaderboardWarning",
    "default_sort_metric",
    "find_result_files",
    "load_result_objects",
    "load_results",
    "load_study_cells",
    "metric_columns",
    "results_frame",
    "to_markdown",
]
