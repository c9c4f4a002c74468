"""Production conditions: throughput and latency under concurrent clients, search under filters.

From ``concurrency`` cells: queries/s against concurrent clients (the
saturation point marked: the level beyond which queries/s grows by less
than :data:`SATURATION_GAIN`) and latency p50/p99 against clients. From
``filtered`` cells: quality, ANN recall against the exact filtered truth,
and queries/s against the share of the collection the filter keeps.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from imsearch_align.experiment.study_cell import StudyCell
from imsearch_align.plots._results import metric_label, params_text
from imsearch_align.report_html.quality import quality_metric
from imsearch_align.report_html.svg import Chart, Figure, Series

__all__ = ["SATURATION_GAIN", "concurrency_figures", "filter_figures", "saturation"]

#: The smallest relative gain in queries/s that still counts as growing.
SATURATION_GAIN = 0.05


def _group(cells: Sequence[StudyCell]) -> dict[str, list[StudyCell]]:
    """Cells of one store setting, method, dataset, size and search settings, by label."""
    out: dict[str, list[StudyCell]] = defaultdict(list)
    for c in cells:
        parts = [c.setting, c.method, c.dataset, params_text(c.search_params)]
        if c.collection_size:
            parts.append(f"{c.collection_size:,} items")
        out[" · ".join(p for p in parts if p)].append(c)
    return dict(sorted(out.items()))


def _commands(cells: Sequence[StudyCell]) -> tuple[list[str], list[str]]:
    lines = list(dict.fromkeys(c.command for c in cells if c.command))
    missing = sum(1 for c in cells if not c.command)
    return lines, [f"{missing} study cell(s) recorded no command"] if missing else []


def _left_out(cells: Sequence[StudyCell]) -> list[str]:
    return [f"left out ({c.status}): {c.path}" for c in cells if not c.status.ok]


def saturation(levels: Sequence[tuple[int, float]]) -> int | None:
    """The concurrency beyond which queries/s stops growing (by less than
    :data:`SATURATION_GAIN` at every higher level); None if it grows up to the last level."""
    pts = sorted(levels)
    for i, (c, q) in enumerate(pts[:-1]):
        if all(q2 < q * (1 + SATURATION_GAIN) for _, q2 in pts[i + 1 :]):
            return c
    return None


def concurrency_figures(cells: Sequence[StudyCell]) -> list[Figure]:
    """Queries/s and latency against concurrent clients, one line per setting."""
    ok = [c for c in cells if c.status.ok and c.queries_per_s and c.concurrency]
    if not ok:
        return []
    groups = _group(ok)
    clients = sorted({c.concurrency for c in ok})
    qps_series, lat_series, marks, notes = [], [], [], []
    for g, (name, group) in enumerate(groups.items()):
        by = {c.concurrency: c for c in group}
        xs = sorted(by)
        ys = [by[x].queries_per_s for x in xs]
        qps_series.append(
            Series(
                name, xs, ys, [f"{name}: {x} clients, {y:,.0f} queries/s" for x, y in zip(xs, ys)]
            )
        )
        sat = saturation(list(zip(xs, ys)))
        if sat is None:
            notes.append(f"{name}: queries/s still grows at {xs[-1]} clients (no saturation)")
        else:
            marks.append((sat, by[sat].queries_per_s, f"saturates at {sat}"))
            notes.append(
                f"{name}: saturates at {sat} clients ({by[sat].queries_per_s:,.0f} queries/s)"
            )
        for pct, dashed in (("p50", False), ("p99", True)):
            lx = [x for x in xs if pct in by[x].latency_ms]
            if lx:
                ly = [by[x].latency_ms[pct] for x in lx]
                lat_series.append(Series(f"{name} {pct}", lx, ly, dashed=dashed, color=g))
    lines, missing = _commands(ok)
    log = clients[-1] >= 4 * clients[0]
    out = [
        Figure(
            Chart(
                "Queries/s vs concurrent clients",
                "concurrent clients",
                "queries per second",
                qps_series,
                log_x=log,
                x_ticks=clients,
                marks=marks,
            ),
            "Each client sends single queries for a fixed duration.",
            lines,
            notes + missing + _left_out(cells),
        )
    ]
    if lat_series:
        chart = Chart(
            "Latency vs concurrent clients",
            "concurrent clients",
            "latency per query (ms)",
            lat_series,
            log_x=log,
            x_ticks=clients,
        )
        out.append(Figure(chart, "Solid: median (p50); dashed: p99.", lines, missing))
    return out


def _filter_chart(
    groups: dict[str, list[StudyCell]],
    title: str,
    y_label: str,
    get: Callable[[StudyCell], float | None],
) -> Chart | None:
    series = []
    for name, group in groups.items():
        pts = sorted((c.selectivity, get(c)) for c in group if get(c) is not None)
        if pts:
            xs, ys = [p[0] for p in pts], [p[1] for p in pts]
            tips = [f"{name}: filter keeps {x:.3g} of the collection, {y:.4g}" for x, y in pts]
            series.append(Series(name, xs, ys, tips))
    if not series:
        return None
    ticks = sorted({x for s in series for x in s.xs})
    return Chart(
        title,
        "share of the collection the filter keeps",
        y_label,
        series,
        log_x=ticks[-1] >= 10 * ticks[0],
        x_ticks=ticks,
        x_format="percent",
    )


def filter_figures(cells: Sequence[StudyCell]) -> list[Figure]:
    """Quality, ANN recall against the exact filtered truth, and queries/s per selectivity."""
    ok = [c for c in cells if c.status.ok and c.selectivity]
    if not ok:
        return []
    groups = _group(ok)
    metric = quality_metric({k for c in ok for k in c.metrics}, ok[0].direction) or ""

    def ann(c: StudyCell) -> float | None:
        keys = [k for k in c.metrics if "ann_recall@" in k]
        return c.metrics[keys[0]] if keys else None

    lines, missing = _commands(ok)
    exprs = sorted({c.filter_expression for c in ok if c.filter_expression})
    notes = missing + _left_out(cells) + [f"filter: {e}" for e in exprs[:10]]
    specs = [
        (
            f"{metric_label(metric)} vs filter selectivity",
            metric_label(metric),
            lambda c: c.metrics.get(metric),
        ),
        ("ANN recall vs filter selectivity (against the exact filtered truth)", "ANN recall", ann),
        ("Queries/s vs filter selectivity", "queries per second", lambda c: c.queries_per_s),
    ]
    out = []
    for title, y_label, get in specs:
        chart = _filter_chart(groups, title, y_label, get)
        if chart is not None:
            out.append(Figure(chart, "Relevant items are kept by every filter.", lines, notes))
            notes = []
    return out
