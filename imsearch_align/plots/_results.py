"""What a figure reads from results: the usable ones, their values, their labels.

Shared by every plot: :func:`usable_results` turns results or result files
into the successful typed results (degraded ones are left out with a
warning); the small readers below take one number or setting from a result;
:func:`other_fields` finds the settings that split lines or curves; and
:func:`metric_label` / :func:`missing_metric` word the axes and the errors.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from imsearch_align.experiment.report import NUMBER_NEUTRAL_FIELDS, SPEED_FIELDS

if TYPE_CHECKING:
    from imsearch_align.experiment.result import ExperimentResult

#: Readable names of the rankings, for axis labels.
DIRECTION_NAMES = {
    "t2i": "text→image",
    "i2t": "image→text",
    "classification": "zero-shot classification",
}
#: Methods that fit nothing: a jointly trained space, drawn as a reference line.
BASELINE_METHODS = ("identity",)

#: Config fields a learning curve's line does not split on: the x axis, the
#: seed (averaged), the free label, and what changes no number or only speed.
NOT_A_LINE = frozenset({"n_support", "seed", "name"}) | NUMBER_NEUTRAL_FIELDS | SPEED_FIELDS


def metric_label(metric: str) -> str:
    """Readable axis label: ``t2i/HitRate@1`` -> ``text→image HitRate@1``,
    ``t2i/R@10`` -> ``text→image IR R@10``."""
    if "/" in metric:
        d, m = metric.split("/", 1)
        m = "IR " + m if m.startswith("R@") else m
        return f"{DIRECTION_NAMES.get(d, d)} {m}"
    return metric


def usable_results(results: Any) -> list[ExperimentResult]:
    """Typed results from results, or from result file / folder paths (non-ok dropped).

    Called directly by each public plot function: the warning about
    degraded results points at that function's caller.
    """
    from imsearch_align.experiment.result import ExperimentResult

    if isinstance(results, str | os.PathLike):
        results = [results]
    items = list(results)
    if items and all(isinstance(r, str | os.PathLike) for r in items):
        from imsearch_align.leaderboard import load_result_objects

        items = load_result_objects(items)
    bad = [type(r).__name__ for r in items if not isinstance(r, ExperimentResult)]
    if bad:
        raise TypeError(
            f"results must be ExperimentResult objects or paths to result files, got {bad[0]}"
        )
    usable = [r for r in items if r.task is not None]
    degraded = [r for r in usable if r.status.state == "degraded"]
    if degraded:
        warnings.warn(
            f"{len(degraded)} degraded result(s) left out of the plot (their numbers are not "
            f"right: {degraded[0].status.reasons[0] if degraded[0].status.reasons else 'degraded'})",
            stacklevel=3,
        )
    return [r for r in usable if r.status.ok]


def other_fields(
    results: Sequence[ExperimentResult], shown: set[str], ignore: frozenset[str] = NOT_A_LINE
) -> dict[str, Any]:
    """Parts for every config field that differs between ``results`` and is not
    shown otherwise: results that differ in it are never one line or curve."""
    records = [r.config.to_dict() for r in results]
    fields = sorted({f for rec in records for f in rec} - ignore - shown)

    def part(f: str) -> Any:
        def text(r: ExperimentResult) -> str:
            v = r.config.to_dict().get(f)
            if isinstance(v, dict):
                return f"{f}: {params_text(v)}" if v else ""
            return f"{f}={v}"

        return text

    return {
        f: part(f)
        for f in fields
        if len({json.dumps(rec.get(f), sort_keys=True, default=str) for rec in records}) > 1
    }


def value(r: ExperimentResult, key: str) -> float | None:
    """The flat metric ``key`` of ``r`` (or its CLIP-benchmark name); None if absent or NaN."""
    v = r.metrics.get(key)
    if v is None:
        v = r.clip_benchmark().get(key)
    if v is None or math.isnan(float(v)):
        return None
    return float(v)


def interval(r: ExperimentResult, metric: str) -> tuple[float, float] | None:
    """The ranking's bootstrap interval of ``metric`` (``direction/measure``), if any."""
    if "/" not in metric:
        return None
    d, m = metric.split("/", 1)
    ranking = r.rankings.get(d)
    return None if ranking is None else ranking.intervals.get(m)


def qps(r: ExperimentResult, direction: str) -> float | None:
    """Queries per second of the ``direction`` ranking (None: untimed or absent)."""
    ranking = r.rankings.get(direction)
    return None if ranking is None else ranking.timings.queries_per_s


def n_support(r: ExperimentResult) -> float | None:
    """Support pairs the method was fitted on (the dataset's count, else the config's)."""
    n = r.dataset.n_support_pairs if r.dataset is not None else r.config.n_support
    return None if n is None else float(n)


def cfg(r: ExperimentResult, key: str) -> Any:
    """The config field ``key`` of ``r``."""
    return getattr(r.config, key)


def encoders(r: ExperimentResult) -> str:
    """``image + text`` encoder names, ``precomputed`` for embeddings given as input."""
    img, txt = cfg(r, "image_encoder"), cfg(r, "text_encoder")
    if img is None and txt is None:
        return "precomputed"
    return f"{img or 'precomputed'} + {txt or 'precomputed'}"


def params_text(params: Mapping[str, Any] | None) -> str:
    """``k=v, ...`` of parameters, sorted, without connection secrets."""
    return ", ".join(
        f"{k}={v}"
        for k, v in sorted((params or {}).items())
        if k not in ("uri", "token", "url", "api_key")
    )


def available(results: Sequence[ExperimentResult]) -> list[str]:
    """Every flat metric key of ``results``, in first-seen order."""
    keys: dict[str, None] = {}
    for r in results:
        keys.update(dict.fromkeys(r.metrics))
    return list(keys)


def missing_metric(metric: str, results: Sequence[Mapping[str, Any]], arg: str) -> ValueError:
    """The error for a metric none of ``results`` has, with close names and what is there."""
    import difflib

    avail = available(results)
    close = difflib.get_close_matches(metric, avail, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(
        f"{arg} {metric!r} is in none of the {len(results)} results.{hint} "
        f"Available: {', '.join(avail[:30]) or '(none)'}"
    )


def mean(values: Iterable[float | None]) -> float:
    """Mean of the values that are not None (NaN when there are none)."""
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else float("nan")
