"""The collection study's figures (PNG, the helpers of :mod:`imsearch_align.plots`, no pyplot
state), one call each, None when the cells hold nothing to draw.

* :func:`quality_vs_qps`: task quality against batched queries/s (log x), a panel
  per collection size; a colour per method, a marker per store and index type;
  each point with its 95 % interval (vertical) and the range of its timed passes
  (horizontal); **each method's own** Pareto frontier (a frontier pooled over
  methods would put a method "on it" by another's points) and exact search as
  its ceiling (dotted); the setting each deploy rule picks per build ringed:
  a square for ANN recall >= 0.9, a circle for "as good as exact" within delta.
* :func:`recall_vs_qps`: ANN recall@k against queries/s, the same panels.
* :func:`quality_vs_size`: each method's exact quality against collection size,
  with its best approximate setting beside it (how methods decay with distractors).
* :func:`cost_vs_size`: memory and build seconds against collection size, one line
  per store and index type (the builds' own figures, not extrapolated).
* :func:`control_vs_qps` (``--control``): ANN recall against queries/s of the
  cross-modal and the in-distribution control queries on the same builds.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from imsearch_align.experiment.deploy import DEFAULT_DELTA, deploy_marks
from imsearch_align.experiment.study_cell import EXACT_INDEX_TYPES

__all__ = ["control_vs_qps", "cost_vs_size", "quality_vs_qps", "quality_vs_size", "recall_vs_qps"]

_MB = 1 / 2**20


def _ok(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in cells if (c.get("status") or {}).get("state", "ok") == "ok"]


def _panels(n: int) -> tuple[Any, Any]:
    from imsearch_align.plots._figure import new_figure

    fig, _ = new_figure((5.2 * n, 4.4))
    fig.clear()
    return fig, fig.subplots(1, n, squeeze=False)[0]


def _log_x(ax: Any, label: str) -> None:
    from matplotlib.ticker import NullFormatter

    from imsearch_align.plots._figure import grid

    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(label)
    grid(ax)


def _effort(cell: dict[str, Any]) -> tuple:
    """A cell's place in its build's sweep: its search parameters' values, in order."""
    params = (cell.get("index") or {}).get("search_params") or {}
    return tuple(sorted((k, v) for k, v in params.items() if isinstance(v, int | float)))


def _bars(c: dict[str, Any], metric: str, x: float, y: float) -> tuple[Any, Any]:
    """Error bars of one point: the passes' q/s range and the measure's interval."""
    span = c.get("queries_per_s_range")
    xerr = None if not span else [[max(x - span[0], 0.0)], [max(span[1] - x, 0.0)]]
    iv = ((c.get("intervals") or {}).get(metric) or {}).get("approximate") or {}
    yerr = None
    if iv.get("low") is not None and iv.get("high") is not None:
        yerr = [[max(y - iv["low"], 0.0)], [max(iv["high"] - y, 0.0)]]
    return xerr, yerr


def quality_vs_qps(
    cells: Sequence[dict[str, Any]],
    metric: str,
    out_path: str | os.PathLike,
    *,
    title: str = "",
    delta: float = DEFAULT_DELTA,
) -> Path | None:
    """Quality ``metric`` (``t2i/HitRate@10``) against queries/s, a panel per collection
    size (the module docstring)."""
    from imsearch_align.plots._figure import palette, save
    from imsearch_align.report_html.quality import pareto_frontier

    cells = [c for c in _ok(cells) if c.get("metrics", {}).get(metric) is not None]
    sizes = sorted({c["collection"]["size"] for c in cells})
    if not sizes:
        return None
    marks = dict(zip(map(id, cells), deploy_marks(cells, metric.split("/", 1)[1], delta),
                     strict=True))  # fmt: skip
    fig, axes = _panels(len(sizes))
    kinds = sorted({(c["store"], c["index"]["type"]) for c in cells})
    methods = sorted({c["method"] for c in cells})
    colours = dict(zip(methods, palette() * 4, strict=False))
    markers = dict(zip(kinds, "osD^v<>ph*" * 3, strict=False))
    for ax, size in zip(axes, sizes, strict=True):
        here = [c for c in cells if c["collection"]["size"] == size]
        for method in methods:
            pts = [c for c in here if c["method"] == method]
            xy = [(c["queries_per_s"], c["metrics"][metric]) for c in pts]
            for c, (x, y) in zip(pts, xy, strict=True):
                col = colours[method]
                xerr, yerr = _bars(c, metric, x, y)
                if xerr or yerr:
                    ax.errorbar(x, y, xerr=xerr, yerr=yerr, color=col, lw=0.7, alpha=0.6)
                ax.scatter(x, y, color=col, marker=markers[(c["store"], c["index"]["type"])],
                           s=28, alpha=0.85, zorder=3)  # fmt: skip
                mark = marks[id(c)]
                if mark in ("recall", "both"):
                    ax.scatter(x, y, s=150, marker="s", facecolors="none", edgecolors=col)
                if mark in ("quality", "both"):
                    ax.scatter(x, y, s=260, marker="o", facecolors="none", edgecolors=col)
            front = sorted(xy[i] for i in pareto_frontier(xy))
            if front:
                ax.plot(*zip(*front, strict=True), color=colours[method], lw=1.2)
            ceiling = max((c["exact_metrics"].get(metric, float("nan")) for c in pts), default=None)
            if ceiling is not None and ceiling == ceiling:
                ax.axhline(ceiling, color=colours[method], ls=":", lw=1)
        _log_x(ax, "queries/s (batched, log; bars: passes' range)")
        ax.set_title(f"{size:,} items")
    axes[0].set_ylabel(f"{metric} (bars: 95 % interval; dotted: exact)")
    handles = [axes[0].scatter([], [], color=colours[m], marker="o", label=m) for m in methods]
    handles += [axes[0].scatter([], [], color="grey", marker=markers[k], label=" ".join(k))
                for k in kinds]  # fmt: skip
    handles += [
        axes[0].scatter([], [], s=150, marker="s", facecolors="none", edgecolors="grey",
                        label="deploy: ANN recall >= 0.9"),
        axes[0].scatter([], [], s=260, marker="o", facecolors="none", edgecolors="grey",
                        label=f"deploy: within {delta:g} of exact"),
    ]  # fmt: skip
    axes[-1].legend(handles=handles, fontsize=7, loc="lower left")
    if title:
        fig.suptitle(title)
    return save(fig, out_path)


def _sweeps(
    cells: Sequence[dict[str, Any]], metric: str, *, control: bool = False
) -> tuple[Any, ...] | None:
    """The approximate ok cells holding ``metric`` (and a control block when ``control``),
    a figure with a panel per collection size, the (method, store, index type) lines and
    their colours; None when there is nothing to draw."""
    from imsearch_align.plots._figure import palette

    cells = [c for c in _ok(cells) if (c.get("metrics") or {}).get(metric) is not None]
    cells = [c for c in cells if c["index"]["type"].lower() not in EXACT_INDEX_TYPES
             and (c.get("control") or not control)]  # fmt: skip
    sizes = sorted({c["collection"]["size"] for c in cells})
    if not sizes:
        return None
    fig, axes = _panels(len(sizes))
    keys = sorted({(c["method"], c["store"], c["index"]["type"]) for c in cells})
    colours = dict(zip(keys, palette() * 6, strict=False))
    return cells, sizes, fig, axes, keys, colours


def _line(cells: list[dict[str, Any]], size: int, key: tuple) -> list[dict[str, Any]]:
    """The cells of one line of one panel, in sweep order (q/s is noisy, effort is not)."""
    mine = [c for c in cells if c["collection"]["size"] == size
            and (c["method"], c["store"], c["index"]["type"]) == key]  # fmt: skip
    return sorted(mine, key=_effort)


def recall_vs_qps(
    cells: Sequence[dict[str, Any]], metric: str, out_path: str | os.PathLike, *, title: str = ""
) -> Path | None:
    """ANN recall ``metric`` (``t2i/ann_recall@10``) against queries/s, a panel per size,
    a line per method, store and index type (its settings in sweep order)."""
    from imsearch_align.plots._figure import save

    found = _sweeps(cells, metric)
    if found is None:
        return None
    cells, sizes, fig, axes, keys, colours = found
    for ax, size in zip(axes, sizes, strict=True):
        for key in keys:
            pts = [(c["queries_per_s"], c["metrics"][metric]) for c in _line(cells, size, key)]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o", ms=3, color=colours[key],
                        label=" ".join(key))  # fmt: skip
        ax.axhline(0.9, color="grey", ls=":", lw=1)
        _log_x(ax, "queries/s (batched, log)")
        ax.set_title(f"{size:,} items")
    axes[0].set_ylabel(f"{metric} (dotted: 0.9)")
    axes[-1].legend(fontsize=7, loc="lower left")
    if title:
        fig.suptitle(title)
    return save(fig, out_path)


def quality_vs_size(
    cells: Sequence[dict[str, Any]], metric: str, out_path: str | os.PathLike, *, title: str = ""
) -> Path | None:
    """Each method's exact ``metric`` against collection size (solid) and its best ANN
    setting at each size (dashed)."""
    from imsearch_align.plots._figure import grid, new_figure, palette, save

    cells = [c for c in _ok(cells) if c.get("metrics", {}).get(metric) is not None]
    if not cells:
        return None
    fig, ax = new_figure()
    for colour, method in zip(palette() * 4, sorted({c["method"] for c in cells}), strict=False):
        mine = [c for c in cells if c["method"] == method]
        sizes = sorted({c["collection"]["size"] for c in mine})
        exact = [max(c["exact_metrics"][metric] for c in mine if c["collection"]["size"] == s)
                 for s in sizes]  # fmt: skip
        approx = [c for c in mine if c["index"]["type"].lower() not in EXACT_INDEX_TYPES]
        ann = [(s, max(c["metrics"][metric] for c in approx if c["collection"]["size"] == s))
               for s in sizes if any(c["collection"]["size"] == s for c in approx)]  # fmt: skip
        ax.plot(sizes, exact, marker="o", color=colour, label=f"{method} exact")
        if ann:
            ax.plot(*zip(*ann, strict=True), marker="x", ls="--", color=colour,
                    label=f"{method} best ANN setting")  # fmt: skip
    _log_x(ax, "collection size (items searched)")
    grid(ax)
    ax.set_ylabel(metric)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    return save(fig, out_path)


def cost_vs_size(
    cells: Sequence[dict[str, Any]], out_path: str | os.PathLike, *, title: str = ""
) -> Path | None:
    """Memory (MiB) and build seconds against collection size, a line per store and index
    type (one build's figures: the largest of its cells, which share them)."""
    from imsearch_align.plots._figure import palette, save

    cells = _ok(cells)
    kinds = sorted({(c["store"], c["index"]["type"]) for c in cells})
    if not kinds or len({c["collection"]["size"] for c in cells}) < 2:
        return None
    fig, axes = _panels(2)
    colours = dict(zip(kinds, palette() * 4, strict=False))
    for ax, label, read in (
        (axes[0], "memory (MiB)", lambda c: (c.get("memory") or {}).get("bytes")),
        (axes[1], "build seconds", lambda c: (c.get("timings") or {}).get("build_s")),
    ):
        for kind in kinds:
            by: dict[int, float] = {}
            for c in cells:
                v = read(c)
                if (c["store"], c["index"]["type"]) == kind and v is not None:
                    size = c["collection"]["size"]
                    by[size] = max(by.get(size, 0.0), float(v) * (_MB if "MiB" in label else 1))
            if by:
                ax.plot(*zip(*sorted(by.items()), strict=True), marker="o", color=colours[kind],
                        label=" ".join(kind))  # fmt: skip
        _log_x(ax, "collection size (items, log)")
        ax.set_yscale("log")
        ax.set_ylabel(label)
    axes[-1].legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title)
    return save(fig, out_path)


def control_vs_qps(
    cells: Sequence[dict[str, Any]], metric: str, out_path: str | os.PathLike, *, title: str = ""
) -> Path | None:
    """``--control``: ANN recall ``metric`` against queries/s of the cross-modal queries
    (solid) and of the in-distribution control queries (dashed) on the same builds, a
    panel per collection size, a line pair per method, store and index type: the gap
    between a pair is what the modality gap costs the index."""
    from imsearch_align.plots._figure import save

    found = _sweeps(cells, metric, control=True)
    if found is None:
        return None
    cells, sizes, fig, axes, keys, colours = found
    for ax, size in zip(axes, sizes, strict=True):
        for key in keys:
            mine = _line(cells, size, key)
            cross = [(c["queries_per_s"], c["metrics"][metric]) for c in mine]
            ctl = [(c["control"]["queries_per_s"], c["control"]["ann_recall"]["mean"])
                   for c in mine]  # fmt: skip
            if cross:
                ax.plot(*zip(*cross, strict=True), marker="o", ms=3, color=colours[key],
                        label=" ".join(key) + " (cross-modal)")  # fmt: skip
                ax.plot(*zip(*ctl, strict=True), marker="x", ms=3, ls="--",
                        color=colours[key], label=" ".join(key) + " (control)")  # fmt: skip
        ax.axhline(0.9, color="grey", ls=":", lw=1)
        _log_x(ax, "queries/s (batched, log)")
        ax.set_title(f"{size:,} items")
    axes[0].set_ylabel(f"{metric} (dashed: control queries)")
    axes[-1].legend(fontsize=6, loc="lower left")
    if title:
        fig.suptitle(title)
    return save(fig, out_path)
