"""Quality against speed and against collection size: the points, the Pareto frontier, the charts.

A point is one searched index setting: its quality (the task's
``HitRate@10``, else its deepest ``HitRate@k``), queries/s and collection
size, from an experiment result (the searched ranking's documents are the
collection) or a ``collection_scale`` study cell. Per collection size one
chart of quality against queries/s per method marks the method's Pareto
frontier, where exact search was measured its quality as the ceiling, and
(study cells) the setting each deploy rule picks per build
(:func:`~imsearch_align.experiment.deploy.deploy_marks`: ANN recall@10 >= 0.9,
and the task measure within ``delta`` of exact at 95 %); one chart follows
each setting's best quality as the collection grows.
"""

from __future__ import annotations

import inspect
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imsearch_align.experiment.deploy import DEFAULT_DELTA, deploy_marks
from imsearch_align.experiment.result import ExperimentResult
from imsearch_align.experiment.study_cell import EXACT_INDEX_TYPES, StudyCell
from imsearch_align.plots._results import metric_label, params_text, qps, usable_results, value
from imsearch_align.plots.throughput import _curves, _kind
from imsearch_align.report_html.commands import commands_for
from imsearch_align.report_html.svg import Chart, Figure, Series

__all__ = [
    "QualityPoint",
    "ann_recall",
    "pareto_frontier",
    "points_from_cells",
    "points_from_results",
    "qps_figures",
    "quality_metric",
    "size_figures",
]


@dataclass(frozen=True)
class QualityPoint:
    """One index setting's quality and speed on a collection of ``size`` items.

    ``source`` is the result's recorded config (a mapping) or the cell's
    command line ("" when the cell recorded none).
    """

    size: int | None
    series: str
    method: str
    qps: float
    quality: float
    metric: str
    exact: bool
    params: str
    ann_recall: float | None
    source: Mapping[str, Any] | str
    deploy: str = ""


def pareto_frontier(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices (ascending) of the points no other point dominates, both axes maximised:
    a point is dominated when another is at least as good on both and better on one."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
    keep: list[int] = []
    best = float("-inf")
    for i in order:
        x, y = points[i]
        if y > best or (keep and points[keep[-1]] == (x, y)):
            keep.append(i)
            best = max(best, y)
    return sorted(keep)


def quality_metric(keys: Iterable[str], direction: str) -> str | None:
    """The quality a chart shows: ``HitRate@10`` of ``direction``, else its deepest
    ``HitRate@k``, else its first measure that is not ANN recall."""
    own = [k for k in keys if k.startswith(f"{direction}/") or "/" not in k]
    hits = [k for k in own if k.rsplit("/", 1)[-1].startswith("HitRate@")]
    for k in hits:
        if k.endswith("HitRate@10"):
            return k
    if hits:
        return max(hits, key=lambda k: int(k.rsplit("@", 1)[1]))
    rest = [k for k in own if "ann_recall@" not in k]
    return rest[0] if rest else None


def ann_recall(metrics: Mapping[str, float], direction: str) -> float | None:
    """The ANN recall (``ann_recall@k``) of ``direction`` in ``metrics``; None when not measured."""
    keys = [
        k for k in metrics if "ann_recall@" in k and (k.startswith(f"{direction}/") or "/" not in k)
    ]
    return metrics[keys[0]] if keys else None


def _index_type(store: str, params: Mapping[str, Any]) -> str:
    """The store's ``index`` parameter, or its default (every store here defaults to flat)."""
    if params.get("index"):
        return str(params["index"])
    from imsearch_align.framework.registry import STORES

    try:
        p = inspect.signature(STORES.get(store)).parameters.get("index")
    except Exception:  # a store that cannot be imported here: its index is unknown
        return ""
    return "" if p is None or p.default is inspect.Parameter.empty else str(p.default)


def _curve_part(key: tuple[str, ...], i: int) -> str:
    """Part ``i`` of a curve key for a label (``N=1000`` for the support size)."""
    if i == 3:
        return "N=all" if key[3] == "None" else f"N={float(key[3]):g}"
    return key[i]


def points_from_results(results: Sequence[ExperimentResult]) -> list[QualityPoint]:
    """A point per ok result with a timed ranking (``t2i`` first) and a quality measure."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the leaderboard shows every status
        rs = usable_results(results)
    picked = []
    for r in rs:
        d = next((d for d in ("t2i", "i2t", *r.rankings) if qps(r, d)), None)
        metric = quality_metric(r.metrics, d) if d else None
        if metric is not None and value(r, metric) is not None:
            picked.append((r, d, metric))
    curves = _curves([r for r, _, _ in picked]) if picked else {}
    key_of = {id(r): k for k, rl in curves.items() for r in rl}
    varying = [
        i for i in range(2, max(map(len, curves), default=0)) if len({k[i] for k in curves}) > 1
    ]
    out = []
    for r, d, metric in picked:
        key, sp = key_of[id(r)], dict(r.config.store_params or {})
        index = _index_type(r.config.store, sp)
        parts = [_kind((key[0], index)), r.config.method]
        parts += [_curve_part(key, i) for i in varying if i != 2]
        out.append(
            QualityPoint(
                size=r.rankings[d].n_docs or None,
                series=" · ".join(p for p in parts if p),
                method=r.config.method,
                qps=float(qps(r, d)),
                quality=float(value(r, metric)),
                metric=metric,
                exact=r.config.store == "exact" or index.lower() in EXACT_INDEX_TYPES,
                params=params_text({k: v for k, v in sp.items() if k != "index"}),
                ann_recall=ann_recall(r.metrics, d),
                source=r.config.to_dict(),
            )
        )
    return out


def _deploy(cells: Sequence[StudyCell], metrics: Sequence[str], delta: float) -> list[str]:
    """Which deploy rule picks each cell among its build's (``metrics``: each cell's
    quality measure; the rules read one measure at a time)."""
    out = [""] * len(cells)
    for m in set(metrics):
        at = [i for i, x in enumerate(metrics) if x == m]
        marks = deploy_marks([dict(cells[i].record) for i in at], m.split("/", 1)[-1], delta)
        for i, mark in zip(at, marks, strict=True):
            out[i] = mark
    return out


def points_from_cells(
    cells: Sequence[StudyCell], delta: float = DEFAULT_DELTA
) -> list[QualityPoint]:
    """A point per ok ``collection_scale`` cell with queries/s and a quality measure, with
    the deploy rule that picks it among its build's cells (``delta``: the quality rule's)."""
    kept = []
    for c in cells:
        metric = quality_metric(c.metrics, c.direction)
        if c.kind != "collection_scale" or not c.status.ok or metric is None or not c.queries_per_s:
            continue
        kept.append((c, metric))
    marks = _deploy([c for c, _ in kept], [m for _, m in kept], delta)
    out = []
    for (c, metric), mark in zip(kept, marks, strict=True):
        out.append(
            QualityPoint(
                size=c.collection_size,
                series=" · ".join(x for x in (c.setting, c.method, c.dataset) if x),
                method=c.method,
                qps=c.queries_per_s,
                quality=c.metrics[metric],
                metric=metric if "/" in metric else f"{c.direction}/{metric}",
                exact=c.exact,
                params=params_text(c.search_params),
                ann_recall=ann_recall(c.metrics, c.direction),
                source=c.command,
                deploy=mark,
            )
        )
    return out


def point_commands(points: Sequence[QualityPoint]) -> tuple[list[str], list[str]]:
    """The commands that made the points, and a note for cells that recorded none."""
    configs = [p.source for p in points if isinstance(p.source, Mapping)]
    lines = commands_for(configs) if configs else []
    lines += list(dict.fromkeys(p.source for p in points if isinstance(p.source, str) and p.source))
    missing = sum(1 for p in points if p.source == "")
    notes = [f"{missing} study cell(s) recorded no command"] if missing else []
    return lines, notes


def _y_label(points: Sequence[QualityPoint]) -> str:
    metrics = sorted({p.metric for p in points})
    return metric_label(metrics[0]) if len(metrics) == 1 else "quality (" + ", ".join(metrics) + ")"


def _tip(p: QualityPoint) -> str:
    ann = "" if p.ann_recall is None else f", ANN recall {p.ann_recall:.4f}"
    what = f"{p.series} ({p.params})" if p.params else p.series
    return f"{what}: {p.metric} {p.quality:.4f}, {p.qps:,.0f} queries/s{ann}"


#: A deploy mark's ring label and its words in the caption.
_RULES = {"recall": ("R", "ANN recall rule"), "quality": ("Q", "quality rule"),
          "both": ("R+Q", "both rules")}  # fmt: skip


def _size_text(size: int | None) -> str:
    return "a collection of unknown size" if size is None else f"a collection of {size:,} items"


def qps_figures(points: Sequence[QualityPoint], delta: float = DEFAULT_DELTA) -> list[Figure]:
    """Per collection size and method: quality against queries/s, the method's own Pareto
    frontier and its exact ceiling (a frontier pooled over methods would put a method's
    setting "on the frontier" or off it by another method's points)."""
    by_size: dict[tuple[int | None, str], list[QualityPoint]] = defaultdict(list)
    for p in points:
        by_size[(p.size, p.method)].append(p)
    figures = []
    for size, method in sorted(by_size, key=lambda k: (k[0] is None, k[0] or 0, k[1])):
        pts = by_size[(size, method)]
        series = []
        for name in sorted({p.series for p in pts}):
            mine = sorted((p for p in pts if p.series == name), key=lambda p: p.qps)
            series.append(
                Series(
                    name,
                    [p.qps for p in mine],
                    [p.quality for p in mine],
                    [_tip(p) for p in mine],
                    [p.params for p in mine],
                )
            )
        front = [pts[i] for i in pareto_frontier([(p.qps, p.quality) for p in pts])]
        ceilings = [
            (
                max(p.quality for p in pts if p.exact and p.method == m),
                f"exact search · {m} (ceiling)",
            )
            for m in sorted({p.method for p in pts if p.exact})
        ]
        title = f"Quality vs queries/s on {_size_text(size)}" + (f" · {method}" if method else "")
        chart = Chart(
            title,
            "queries per second",
            _y_label(pts),
            series,
            log_x=True,
            y_from_zero=False,
            ceilings=ceilings,
            frontier=[(p.qps, p.quality) for p in front],
        )
        chart.marks = [(p.qps, p.quality, _RULES[p.deploy][0]) for p in pts if p.deploy]
        lines, notes = point_commands(pts)
        on = ", ".join(f"{p.series} ({p.params})" if p.params else p.series for p in front)
        caption = f"{len(pts)} settings; on {method or 'the'}'s Pareto frontier: {on}."
        if chart.marks:
            picked = "; ".join(f"{_RULES[p.deploy][1]}: {p.series} ({p.params or 'its one setting'})"
                               for p in pts if p.deploy)  # fmt: skip
            caption += (" Ringed, per build, the setting each deploy rule picks (R: the fastest "
                        "with ANN recall@10 >= 0.9; Q: the fastest whose task measure is not "
                        f"below exact by more than {delta:g} at 95 % on the paired difference): "
                        f"{picked}.")  # fmt: skip
        figures.append(Figure(chart, caption, lines, notes))
    return figures


def size_figures(points: Sequence[QualityPoint]) -> list[Figure]:
    """Each setting's best quality against the collection size, when some setting has two sizes."""
    best: dict[str, dict[int, QualityPoint]] = defaultdict(dict)
    for p in points:
        if p.size is not None:
            cur = best[p.series].get(p.size)
            if cur is None or p.quality > cur.quality:
                best[p.series][p.size] = p
    best = {name: by for name, by in best.items() if len(by) > 1}
    if not best:
        return []
    series = [
        Series(
            name, sorted(by), [by[s].quality for s in sorted(by)], [_tip(by[s]) for s in sorted(by)]
        )
        for name, by in sorted(best.items())
    ]
    sizes = sorted({s for by in best.values() for s in by})
    chart = Chart(
        "Quality vs collection size (best setting per size)",
        "items in the collection",
        _y_label(points),
        series,
        log_x=sizes[-1] >= 10 * sizes[0],
        x_ticks=sizes,
        y_from_zero=False,
    )
    used = [p for by in best.values() for p in by.values()]
    lines, notes = point_commands(used)
    caption = "How each setting's quality changes as the collection grows (distractors added)."
    return [Figure(chart, caption, lines, notes)]
