"""Learning curves for the page: the leaderboard's metric against support pairs, per dataset.

The lines, their labels and the jointly trained baselines are the ones
:func:`imsearch_align.plots.learning_curve` draws (the same grouping), here
as SVG: one chart per dataset and metric where some line has two support
sizes or more.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Sequence

from imsearch_align.experiment.result import ExperimentResult
from imsearch_align.leaderboard import default_sort_metric, results_frame
from imsearch_align.plots._results import interval, mean, metric_label, usable_results, value
from imsearch_align.plots.learning import _lines
from imsearch_align.report_html.commands import commands_for
from imsearch_align.report_html.svg import Chart, Figure, Series

__all__ = ["learning_figures"]


def _metrics(results: Sequence[ExperimentResult]) -> list[str]:
    """The leaderboard's sort metric and, for a retrieval direction, the other direction's."""
    first = default_sort_metric(results_frame(results))
    if first is None:
        return []
    out = [first]
    for a, b in (("t2i/", "i2t/"), ("i2t/", "t2i/")):
        other = first.replace(a, b, 1)
        if first.startswith(a) and any(value(r, other) is not None for r in results):
            out.append(other)
    return out


def _figure(results: Sequence[ExperimentResult], metric: str, dataset: str) -> Figure | None:
    used = [r for r in results if value(r, metric) is not None]
    points, baselines = _lines(used)
    if not any(len(by_n) > 1 for by_n in points.values()):
        return None
    series = []
    for name, by_n in sorted(points.items()):
        ns = sorted(by_n)
        ys = [mean(value(r, metric) for r in by_n[n]) for n in ns]
        bands = [[interval(r, metric) for r in by_n[n]] for n in ns]
        band = None
        if all(b and all(x is not None for x in b) for b in bands):
            band = [(mean(x[0] for x in b), mean(x[1] for x in b)) for b in bands]
        tips = [
            f"{name}: N={n:,.0f}, {metric} {y:.4f} ({len(by_n[n])} result(s))"
            for n, y in zip(ns, ys)
        ]
        series.append(Series(name, ns, ys, tips, band=band))
    ceilings = [
        (mean(value(r, metric) for r in rl), f"{name} (jointly trained, no support pairs)")
        for name, rl in sorted(baselines.items())
    ]
    chart = Chart(
        f"{metric_label(metric)} vs support pairs — {dataset}",
        "support pairs N",
        metric_label(metric),
        series,
        log_x=True,
        ceilings=ceilings,
    )
    caption = "Mean over seeds at each N; the band is the 95% bootstrap interval where recorded."
    return Figure(chart, caption, commands_for([r.config.to_dict() for r in used]))


def learning_figures(results: Sequence[ExperimentResult]) -> list[Figure]:
    """One learning curve per dataset and metric where a line has several support sizes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the leaderboard shows every status
        rs = usable_results(results)
    by_ds: dict[str, list[ExperimentResult]] = defaultdict(list)
    for r in rs:
        by_ds[str(r.config.dataset)].append(r)
    out = []
    for ds, group in sorted(by_ds.items()):
        for m in _metrics(group):
            fig = _figure(group, m, ds)
            if fig is not None:
                out.append(fig)
    return out
