"""Reading results into one table: result files found and loaded, one row per result.

:func:`load_results` (files) and :func:`results_frame` (typed results) give
the frame that :mod:`~imsearch_align.leaderboard.markdown` renders and the
CSV holds; :func:`metric_columns` and :func:`default_sort_metric` read it.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from imsearch_align.experiment.report import headline_columns
from imsearch_align.experiment.result import ExperimentResult, ResultSchemaError
from imsearch_align.experiment.study_cell import CellError, StudyCell, load_cell
from imsearch_align.framework.task_measures import default_metrics

__all__ = [
    "DEFAULT_METRICS",
    "LeaderboardWarning",
    "default_sort_metric",
    "find_result_files",
    "load_result_objects",
    "load_results",
    "load_study_cells",
    "metric_columns",
    "results_frame",
]

#: Task metrics shown by default (those present), after the headline retrieval
#: columns (every HitRate@k of the results, nDCG at the largest k: see
#: :func:`imsearch_align.experiment.report.headline_columns`): the headline measures
#: of the task-measure table (:func:`~imsearch_align.framework.task_measures.default_metrics`).
DEFAULT_METRICS = default_metrics()
#: Bound columns beside a metric: bootstrap interval, tie-order bounds, tie-rule value.
_CI_SUFFIXES = (".ci_low", ".ci_high", ".tie_low", ".tie_high", ".tie_rule")
_TAIL = ("status_reasons", "error", "key", "created", "path", "per_query_file")


class LeaderboardWarning(UserWarning):
    """A result file was skipped (unreadable, not JSON, not a result, unknown schema)."""


def find_result_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Result JSON files among ``paths``: files as given, directories searched
    recursively for ``*.json`` (hidden folders such as ``.checkpoints`` are
    skipped). Sorted within each directory; a missing path raises."""
    out: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(
                f
                for f in path.rglob("*.json")
                if f.is_file()
                and not any(part.startswith(".") for part in f.relative_to(path).parts)
            )
        elif path.is_file():
            found = [path]
        else:
            raise FileNotFoundError(f"result path {str(path)!r} is neither a file nor a directory")
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def _is_cell_file(f: Path) -> bool:
    """Whether ``f`` holds a readable study cell (read by :func:`load_study_cells` instead)."""
    try:
        load_cell(f)
    except CellError:
        return False
    return True


def load_study_cells(paths: Iterable[str | os.PathLike]) -> list[StudyCell]:
    """Every readable study cell under ``paths``, through the one reader of cells."""
    out = []
    for f in find_result_files(paths):
        try:
            out.append(load_cell(f))
        except CellError:
            continue
    return out


def load_result_objects(paths: Iterable[str | os.PathLike]) -> list[ExperimentResult]:
    """Every readable result under ``paths``; others skipped with a :class:`LeaderboardWarning`
    (study cells silently: :func:`load_study_cells` reads them)."""
    results = []
    for f in find_result_files(paths):
        if f.name.endswith(".json") and _is_cell_file(f):
            continue
        try:
            results.append(ExperimentResult.load(f))
        except (OSError, UnicodeDecodeError) as exc:
            warnings.warn(
                f"skipping {str(f)!r}: cannot read it ({exc})", LeaderboardWarning, stacklevel=2
            )
        except ResultSchemaError as exc:
            warnings.warn(f"skipping {str(f)!r}: {exc}", LeaderboardWarning, stacklevel=2)
        except (TypeError, ValueError, KeyError) as exc:
            warnings.warn(
                f"skipping {str(f)!r}: not a readable imsearch-align result ({type(exc).__name__}: {exc})",
                LeaderboardWarning,
                stacklevel=2,
            )
    return results


def results_frame(results: Sequence[ExperimentResult]) -> pd.DataFrame:
    """One row per result (:meth:`ExperimentResult.flatten`), columns grouped:
    identity and config, metrics, intervals, timings, the rest."""
    df = pd.DataFrame([r.flatten() for r in results])
    if df.empty:
        return df
    metrics = metric_columns(df)
    cis = [c for c in df.columns if c.endswith(_CI_SUFFIXES)]
    timings = [c for c in df.columns if c.endswith(("_s", "_ms")) and c not in metrics]
    tail = [c for c in df.columns if c.startswith("env.") or c in _TAIL]
    head = [c for c in df.columns if c not in {*metrics, *cis, *timings, *tail}]
    return df[head + metrics + cis + timings + tail]


def load_results(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """:func:`results_frame` of every readable result under ``paths``."""
    return results_frame(load_result_objects(paths))


def metric_columns(df: pd.DataFrame) -> list[str]:
    """Metric columns: ``ranking/measure`` names (intervals excluded), then
    CLIP_benchmark aliases."""
    canon = [
        c
        for c in df.columns
        if "/" in str(c) and " " not in str(c) and not str(c).endswith(_CI_SUFFIXES)
    ]
    alias = [
        c
        for c in df.columns
        if str(c).startswith(("image_retrieval_recall@", "text_retrieval_recall@"))
    ]
    return canon + alias


def default_sort_metric(df: pd.DataFrame) -> str | None:
    """The first headline column present (``t2i/HitRate@1`` for retrieval), else
    the first default task metric present, else the first metric."""
    metrics = metric_columns(df)
    for m in [*headline_columns(metrics), *DEFAULT_METRICS]:
        if m in metrics and df[m].notna().any():
            return m
    return metrics[0] if metrics else None
