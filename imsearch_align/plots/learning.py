"""The learning curve: a metric against the number of support pairs, one line per setting."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imsearch_align.plots._figure import grid, new_figure, palette, save
from imsearch_align.plots._results import (
    BASELINE_METHODS,
    cfg,
    encoders,
    interval,
    mean,
    metric_label,
    missing_metric,
    n_support,
    other_fields,
    params_text,
    usable_results,
    value,
)

if TYPE_CHECKING:
    from imsearch_align.experiment.result import ExperimentResult

#: Results of one line, by N.
_Points = dict[str, dict[float, list["ExperimentResult"]]]


def learning_curve(
    results: Iterable[ExperimentResult] | Iterable[str | os.PathLike] | str | os.PathLike,
    metric: str = "t2i/HitRate@1",
    out_path: str | os.PathLike = "learning_curve.png",
    *,
    title: str | None = None,
) -> Path:
    """Plot ``metric`` against the number of support pairs (log x) and save a PNG.

    One line per method; the label adds the store, dataset and encoder pair
    when the results hold more than one of them. Several results at the same
    (line, N), e.g. seeds, are averaged. The 95% interval of each point
    (the ranking's bootstrap interval of the measure) is drawn as a band
    where the results have it. Methods in :data:`BASELINE_METHODS`
    (``identity``: a jointly trained model such as CLIP needs no support
    pairs) are drawn as horizontal dashed lines at their mean value.

    Args:
        results: results, or paths of result files / directories.
        metric: a flat metric key such as ``t2i/HitRate@1`` or ``classification/acc1``.
        out_path: the PNG to write (folders are created).
        title: the figure title; default names the metric and dataset.

    Returns:
        The path written.
    """
    rs = usable_results(results)
    if not rs:
        raise ValueError("learning_curve needs at least one successful result, got none")
    with_metric = [r for r in rs if value(r, metric) is not None]
    if not with_metric:
        raise missing_metric(metric, rs, "metric")
    points, baselines = _lines(with_metric)

    fig, ax = new_figure()
    _draw_lines(ax, points, metric)
    _draw_baselines(ax, baselines, metric)
    if points:
        ax.set_xscale("log")
    ax.set_xlabel("support pairs N (log scale)")
    ax.set_ylabel(metric_label(metric))
    ax.set_ylim(bottom=0)
    datasets = sorted({str(cfg(r, "dataset")) for r in with_metric})
    ax.set_title(title or f"{metric_label(metric)} vs support pairs — {', '.join(datasets)}")
    grid(ax)
    ax.legend(loc="best", fontsize="small", frameon=True)
    return save(fig, out_path)


def _lines(
    results: Sequence[ExperimentResult],
) -> tuple[_Points, dict[str, list[ExperimentResult]]]:
    """The results of each labelled line by N, and those of each baseline.

    A line is one configuration apart from N (and the seed, averaged); its
    label names only what differs between the lines.
    """
    parts = {
        "store": lambda r: str(cfg(r, "store")),
        "store_params": lambda r: params_text(cfg(r, "store_params")),
        "method_params": lambda r: params_text(cfg(r, "method_params")),
        "dataset": lambda r: str(cfg(r, "dataset")),
        "encoders": encoders,
        "task": lambda r: str(cfg(r, "task")),
    }
    shown = {"method", "store", "store_params", "method_params", "dataset", "task"}
    shown |= {"image_encoder", "text_encoder"}
    parts.update(other_fields(results, shown))
    varying = [name for name, f in parts.items() if len({f(r) for r in results}) > 1]

    def label(r: ExperimentResult) -> str:
        bits = [str(cfg(r, "method"))]
        for name in varying:
            text = parts[name](r)
            if name == "method_params" and text:
                bits[0] += f" ({text})"
            elif text:
                bits.append(text)
        return " · ".join(bits)

    points: _Points = defaultdict(lambda: defaultdict(list))
    baselines: dict[str, list[ExperimentResult]] = defaultdict(list)
    for r in results:
        if cfg(r, "method") in BASELINE_METHODS:
            baselines[label(r)].append(r)
            continue
        n = n_support(r)
        if n is not None and n > 0:
            points[label(r)][n].append(r)
    return points, baselines


def _draw_lines(ax: Any, points: _Points, metric: str) -> None:
    """One line per label (mean over the results at each N), its interval as a band."""
    colors = palette()
    for i, (name, by_n) in enumerate(sorted(points.items())):
        color = colors[i % len(colors)]
        ns = sorted(by_n)
        ys = [mean(value(r, metric) for r in by_n[n]) for n in ns]
        cycle = i // len(colors)  # past the palette, vary marker and dash
        ax.plot(
            ns,
            ys,
            marker="osD^v"[cycle % 5],
            markersize=4,
            linewidth=1.8,
            color=color,
            linestyle=("-", "-.", ":")[cycle % 3],
            label=name,
        )
        bands = [[interval(r, metric) for r in by_n[n]] for n in ns]
        if all(b and all(x is not None for x in b) for b in bands):
            lo = [mean(x[0] for x in b) for b in bands]
            hi = [mean(x[1] for x in b) for b in bands]
            ax.fill_between(ns, lo, hi, color=color, alpha=0.18, linewidth=0)


def _draw_baselines(ax: Any, baselines: dict[str, list[ExperimentResult]], metric: str) -> None:
    """A dashed horizontal line per baseline at its mean value, its interval as a span."""
    for j, (name, rlist) in enumerate(sorted(baselines.items())):
        y = mean(value(r, metric) for r in rlist)
        enc = encoders(rlist[0])
        what = "jointly trained" if enc == "precomputed" else f"jointly trained: {enc}"
        ax.axhline(
            y,
            linestyle="--",
            linewidth=1.5,
            color=("0.25", "0.5", "0.65")[j % 3],
            label=f"{name} ({what})",
        )
        ivs = [interval(r, metric) for r in rlist]
        if all(ivs):
            ax.axhspan(
                mean(v[0] for v in ivs),
                mean(v[1] for v in ivs),
                color="0.5",
                alpha=0.08,
                linewidth=0,
            )
