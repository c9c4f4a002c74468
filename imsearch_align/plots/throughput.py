"""Quality against throughput: a metric against queries per second, per store and index."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imsearch_align.experiment.report import NUMBER_NEUTRAL_FIELDS
from imsearch_align.plots._figure import grid, new_figure, palette, save
from imsearch_align.plots._results import (
    DIRECTION_NAMES,
    available,
    cfg,
    metric_label,
    missing_metric,
    n_support,
    other_fields,
    params_text,
    qps,
    usable_results,
    value,
)

if TYPE_CHECKING:
    from imsearch_align.experiment.result import ExperimentResult

#: Markers of the methods, in order.
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def recall_vs_qps(
    results: Iterable[ExperimentResult] | Iterable[str | os.PathLike] | str | os.PathLike,
    out_path: str | os.PathLike = "recall_vs_qps.png",
    *,
    metric: str | None = None,
    direction: str = "t2i",
    title: str | None = None,
) -> Path:
    """Quality against throughput for stores and index parameters; save a PNG.

    x = the ranking's queries per second (log scale); y = ``metric``, by
    default the ANN fidelity ``{direction}/ann_recall@k`` when the results
    have it (recall of the store's top-k against exact search), else
    ``{direction}/HitRate@10`` (or the deepest ``HitRate@k`` present). Points of one
    (store, method) are joined in QPS order, and every point is labelled with
    its store parameters (``index=hnsw, ef_search=64``).

    Args:
        results: results, or paths of result files / directories.
        out_path: the PNG to write (folders are created).
        metric: the y metric (a flat key such as ``t2i/HitRate@10``).
        direction: ``t2i``, ``i2t`` or ``classification``: whose QPS.
        title: the figure title.

    Returns:
        The path written.
    """
    rs = usable_results(results)
    timed = [r for r in rs if qps(r, direction) is not None]
    if not timed:
        raise ValueError(
            f"recall_vs_qps needs results with a timed {direction!r} ranking (queries/s), "
            f"got none of {len(rs)}"
        )
    if metric is None:
        metric = _default_quality(timed, direction)
    pts = [r for r in timed if value(r, metric) is not None]
    if not pts:
        raise missing_metric(metric, timed, "metric")
    groups = _curves(pts)
    # Colour = store and index type, marker = method: two small legends
    # instead of one entry per curve.
    kinds = sorted({_kind(g) for g in groups})
    methods = sorted({g[2] for g in groups})
    fig, ax = new_figure((8, 5))
    _draw_curves(ax, groups, kinds, methods, metric, direction)
    _legend(ax, kinds, methods)
    ax.set_xscale("log")
    ax.set_xlabel(f"{DIRECTION_NAMES.get(direction, direction)} queries per second (log scale)")
    ylabel = metric_label(metric)
    if "ann_recall" in metric:
        ylabel += " (vs exact search)"
    ax.set_ylabel(ylabel)
    datasets = sorted({str(cfg(r, "dataset")) for r in pts})
    ax.set_title(title or f"{metric_label(metric)} vs throughput — {', '.join(datasets)}")
    grid(ax)
    return save(fig, out_path)


def _curves(pts: Sequence[ExperimentResult]) -> dict[tuple[str, ...], list[ExperimentResult]]:
    """The results of each curve, keyed ``(store, index type, method, N, dataset, *others)``.

    One curve per (store, index type, method, N, dataset, and every other
    setting that differs: method parameters, encoders, ...): the points of a
    curve differ only in the other store parameters (efSearch, nprobe...).
    (the search settings, workers and batch size, change the queries/s)
    """
    others = other_fields(
        pts,
        {"store", "store_params", "method", "dataset"},
        frozenset({"n_support", "seed", "name"}) | NUMBER_NEUTRAL_FIELDS,
    )

    def curve(r: ExperimentResult) -> tuple[str, ...]:
        sp = cfg(r, "store_params") or {}
        return (
            str(cfg(r, "store")),
            str(sp.get("index", "")),
            str(cfg(r, "method")),
            str(n_support(r)),
            str(cfg(r, "dataset")),
            *(f(r) for f in others.values()),
        )

    groups: dict[tuple[str, ...], list[ExperimentResult]] = defaultdict(list)
    for r in pts:
        groups[curve(r)].append(r)
    return groups


def _kind(curve: tuple[str, ...]) -> str:
    """A curve's store and index type (``faiss hnsw``): what its colour shows."""
    return " ".join(x for x in (curve[0], curve[1]) if x)


def _draw_curves(
    ax: Any,
    groups: dict[tuple[str, ...], list[ExperimentResult]],
    kinds: list[str],
    methods: list[str],
    metric: str,
    direction: str,
) -> None:
    """Each curve's points in QPS order, joined, each labelled with its store parameters."""
    colors = palette()
    for g, rlist in sorted(groups.items()):
        rlist = sorted(rlist, key=lambda r: qps(r, direction))
        xs = [float(qps(r, direction)) for r in rlist]
        ys = [value(r, metric) for r in rlist]
        color = colors[kinds.index(_kind(g)) % len(colors)]
        ax.plot(
            xs,
            ys,
            marker=_MARKERS[methods.index(g[2]) % len(_MARKERS)],
            markersize=6,
            alpha=0.9,
            linestyle="-" if len(xs) > 1 else "none",
            linewidth=1.2,
            color=color,
        )
        for x, y, r in zip(xs, ys, rlist):
            sp = {k: v for k, v in (cfg(r, "store_params") or {}).items() if k != "index"}
            text = params_text(sp)
            if text:
                ax.annotate(
                    text,
                    (x, y),
                    textcoords="offset points",
                    xytext=(5, 4),
                    fontsize=6.5,
                    color=color,
                )


def _legend(ax: Any, kinds: list[str], methods: list[str]) -> None:
    """One legend entry per colour (store and index type), and per marker (method) if several."""
    from matplotlib.lines import Line2D

    colors = palette()
    handles = [
        Line2D([], [], color=colors[i % len(colors)], marker="o", linestyle="-", label=k)
        for i, k in enumerate(kinds)
    ]
    if len(methods) > 1:
        handles += [
            Line2D(
                [], [], color="0.3", marker=_MARKERS[i % len(_MARKERS)], linestyle="none", label=m
            )
            for i, m in enumerate(methods)
        ]
    ax.legend(handles=handles, loc="best", fontsize="small", frameon=True)


def _default_quality(results: Sequence[ExperimentResult], direction: str) -> str:
    """The default y metric: ANN fidelity, else ``HitRate@10``, else the deepest ``HitRate@k``."""
    avail = available(results)
    fid = [m for m in avail if m.startswith(f"{direction}/ann_recall@")]
    if fid:
        return fid[0]
    if f"{direction}/HitRate@10" in avail:
        return f"{direction}/HitRate@10"
    recalls = [m for m in avail if m.startswith(f"{direction}/HitRate@")]
    if recalls:
        return max(recalls, key=lambda m: int(m.rsplit("@", 1)[1]))
    if avail:
        return avail[0]
    raise ValueError("recall_vs_qps: the results have no metrics")
