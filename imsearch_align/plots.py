"""Figures from result dicts (or result files): PNG, matplotlib's Agg renderer.

* :func:`learning_curve`: a metric against the number of support pairs N
  (log x), one line per method (and per store / dataset / encoder pair when
  the results hold several), the 95% bootstrap interval as a band, and the
  jointly trained baseline (method ``identity``, e.g. CLIP) as a dashed line.
* :func:`recall_vs_qps`: quality (recall, or ANN fidelity against exact
  search) against queries per second (log x) for stores and index
  parameters, each point labelled.

Figures are built on :class:`matplotlib.figure.Figure` directly, never
through pyplot, so nothing changes matplotlib's global backend or state.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imsearch_align.experiment.report import NUMBER_NEUTRAL_FIELDS, SPEED_FIELDS

if TYPE_CHECKING:
    from imsearch_align.experiment.result import ExperimentResult

__all__ = ["learning_curve", "metric_label", "recall_vs_qps"]

_DIRECTION_NAMES = {
    "t2i": "text→image",
    "i2t": "image→text",
    "classification": "zero-shot classification",
}
#: Methods that fit nothing: a jointly trained space, drawn as a reference line.
BASELINE_METHODS = ("identity",)


def metric_label(metric: str) -> str:
    """Readable axis label: ``t2i/HitRate@1`` -> ``text→image HitRate@1``,
    ``t2i/R@10`` -> ``text→image IR R@10``."""
    if "/" in metric:
        d, m = metric.split("/", 1)
        m = "IR " + m if m.startswith("R@") else m
        return f"{_DIRECTION_NAMES.get(d, d)} {m}"
    return metric


def _as_results(results: Any) -> list[ExperimentResult]:
    """Typed results from results, or from result file / folder paths (non-ok dropped)."""
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


#: Config fields a learning curve's line does not split on: the x axis, the
#: seed (averaged), the free label, and what changes no number or only speed.
_NOT_A_LINE = frozenset({"n_support", "seed", "name"}) | NUMBER_NEUTRAL_FIELDS | SPEED_FIELDS


def _other_fields(
    results: Sequence[ExperimentResult], shown: set[str], ignore: frozenset[str] = _NOT_A_LINE
) -> dict[str, Any]:
    """Parts for every config field that differs between ``results`` and is not
    shown otherwise: results that differ in it are never one line or curve."""
    records = [r.config.to_dict() for r in results]
    fields = sorted({f for rec in records for f in rec} - ignore - shown)

    def part(f: str) -> Any:
        def text(r: ExperimentResult) -> str:
            v = r.config.to_dict().get(f)
            if isinstance(v, dict):
                return f"{f}: {_params_text(v)}" if v else ""
            return f"{f}={v}"

        return text

    return {
        f: part(f)
        for f in fields
        if len({json.dumps(rec.get(f), sort_keys=True, default=str) for rec in records}) > 1
    }


def _value(r: ExperimentResult, key: str) -> float | None:
    v = r.metrics.get(key)
    if v is None:
        v = r.clip_benchmark().get(key)
    if v is None or math.isnan(float(v)):
        return None
    return float(v)


def _interval(r: ExperimentResult, metric: str) -> tuple[float, float] | None:
    if "/" not in metric:
        return None
    d, m = metric.split("/", 1)
    ranking = r.rankings.get(d)
    return None if ranking is None else ranking.intervals.get(m)


def _qps(r: ExperimentResult, direction: str) -> float | None:
    ranking = r.rankings.get(direction)
    return None if ranking is None else ranking.timings.queries_per_s


def _n_support(r: ExperimentResult) -> float | None:
    n = r.dataset.n_support_pairs if r.dataset is not None else r.config.n_support
    return None if n is None else float(n)


def _cfg(r: ExperimentResult, key: str) -> Any:
    return getattr(r.config, key)


def _encoders(r: ExperimentResult) -> str:
    img, txt = _cfg(r, "image_encoder"), _cfg(r, "text_encoder")
    if img is None and txt is None:
        return "precomputed"
    return f"{img or 'precomputed'} + {txt or 'precomputed'}"


def _params_text(params: Mapping[str, Any] | None) -> str:
    return ", ".join(
        f"{k}={v}"
        for k, v in sorted((params or {}).items())
        if k not in ("uri", "token", "url", "api_key")
    )


def _available(results: Sequence[ExperimentResult]) -> list[str]:
    keys: dict[str, None] = {}
    for r in results:
        keys.update(dict.fromkeys(r.metrics))
    return list(keys)


def _missing_metric(metric: str, results: Sequence[Mapping[str, Any]], arg: str) -> ValueError:
    import difflib

    avail = _available(results)
    close = difflib.get_close_matches(metric, avail, n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    return ValueError(
        f"{arg} {metric!r} is in none of the {len(results)} results.{hint} "
        f"Available: {', '.join(avail[:30]) or '(none)'}"
    )


def _new_figure(figsize: tuple[float, float] = (7.5, 4.8)):
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=150, layout="constrained")
    return fig, fig.add_subplot()


def _save(fig: Any, out_path: str | os.PathLike) -> Path:
    from imsearch_align.framework.atomic import atomic_write

    return atomic_write(Path(out_path), lambda f: fig.savefig(f, format="png"))


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
    rs = _as_results(results)
    if not rs:
        raise ValueError("learning_curve needs at least one successful result, got none")
    with_metric = [r for r in rs if _value(r, metric) is not None]
    if not with_metric:
        raise _missing_metric(metric, rs, "metric")
    parts = {
        "store": lambda r: str(_cfg(r, "store")),
        "store_params": lambda r: _params_text(_cfg(r, "store_params")),
        "method_params": lambda r: _params_text(_cfg(r, "method_params")),
        "dataset": lambda r: str(_cfg(r, "dataset")),
        "encoders": _encoders,
        "task": lambda r: str(_cfg(r, "task")),
    }
    shown = {"method", "store", "store_params", "method_params", "dataset", "task"}
    shown |= {"image_encoder", "text_encoder"}
    parts.update(_other_fields(with_metric, shown))
    # A line is one configuration apart from N (and the seed, averaged);
    # its label names only what differs between the lines.
    varying = [name for name, f in parts.items() if len({f(r) for r in with_metric}) > 1]

    def label(r: ExperimentResult) -> str:
        bits = [str(_cfg(r, "method"))]
        for name in varying:
            text = parts[name](r)
            if name == "method_params" and text:
                bits[0] += f" ({text})"
            elif text:
                bits.append(text)
        return " · ".join(bits)

    points: dict[str, dict[float, list[ExperimentResult]]] = defaultdict(lambda: defaultdict(list))
    baselines: dict[str, list[ExperimentResult]] = defaultdict(list)
    for r in with_metric:
        if _cfg(r, "method") in BASELINE_METHODS:
            baselines[label(r)].append(r)
            continue
        n = _n_support(r)
        if n is not None and n > 0:
            points[label(r)][n].append(r)

    fig, ax = _new_figure()
    colors = _palette()
    for i, (name, by_n) in enumerate(sorted(points.items())):
        color = colors[i % len(colors)]
        ns = sorted(by_n)
        ys = [_mean(_value(r, metric) for r in by_n[n]) for n in ns]
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
        bands = [[_interval(r, metric) for r in by_n[n]] for n in ns]
        if all(b and all(x is not None for x in b) for b in bands):
            lo = [_mean(x[0] for x in b) for b in bands]
            hi = [_mean(x[1] for x in b) for b in bands]
            ax.fill_between(ns, lo, hi, color=color, alpha=0.18, linewidth=0)
    for j, (name, rlist) in enumerate(sorted(baselines.items())):
        y = _mean(_value(r, metric) for r in rlist)
        enc = _encoders(rlist[0])
        what = "jointly trained" if enc == "precomputed" else f"jointly trained: {enc}"
        ax.axhline(
            y,
            linestyle="--",
            linewidth=1.5,
            color=("0.25", "0.5", "0.65")[j % 3],
            label=f"{name} ({what})",
        )
        ivs = [_interval(r, metric) for r in rlist]
        if all(ivs):
            ax.axhspan(
                _mean(v[0] for v in ivs),
                _mean(v[1] for v in ivs),
                color="0.5",
                alpha=0.08,
                linewidth=0,
            )
    if points:
        ax.set_xscale("log")
    ax.set_xlabel("support pairs N (log scale)")
    ax.set_ylabel(metric_label(metric))
    ax.set_ylim(bottom=0)
    datasets = sorted({str(_cfg(r, "dataset")) for r in with_metric})
    ax.set_title(title or f"{metric_label(metric)} vs support pairs — {', '.join(datasets)}")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    ax.legend(loc="best", fontsize="small", frameon=True)
    return _save(fig, out_path)


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
    rs = _as_results(results)
    timed = [r for r in rs if _qps(r, direction) is not None]
    if not timed:
        raise ValueError(
            f"recall_vs_qps needs results with a timed {direction!r} ranking (queries/s), "
            f"got none of {len(rs)}"
        )
    if metric is None:
        metric = _default_quality(timed, direction)
    pts = [r for r in timed if _value(r, metric) is not None]
    if not pts:
        raise _missing_metric(metric, timed, "metric")

    # One curve per (store, index type, method, N, dataset, and every other
    # setting that differs: method parameters, encoders, ...): the points of a
    # curve differ only in the other store parameters (efSearch, nprobe...).
    # (the search settings, workers and batch size, change the queries/s)
    others = _other_fields(
        pts,
        {"store", "store_params", "method", "dataset"},
        frozenset({"n_support", "seed", "name"}) | NUMBER_NEUTRAL_FIELDS,
    )

    def curve(r: ExperimentResult) -> tuple[str, ...]:
        sp = _cfg(r, "store_params") or {}
        return (
            str(_cfg(r, "store")),
            str(sp.get("index", "")),
            str(_cfg(r, "method")),
            str(_n_support(r)),
            str(_cfg(r, "dataset")),
            *(f(r) for f in others.values()),
        )

    groups: dict[tuple[str, ...], list[ExperimentResult]] = defaultdict(list)
    for r in pts:
        groups[curve(r)].append(r)
    # Colour = store and index type, marker = method: two small legends
    # instead of one entry per curve.
    kinds = sorted({" ".join(x for x in (g[0], g[1]) if x) for g in groups})
    methods = sorted({g[2] for g in groups})
    colors = _palette()
    markers = ("o", "s", "^", "D", "v", "P", "X", "*")
    fig, ax = _new_figure((8, 5))
    for g, rlist in sorted(groups.items()):
        rlist = sorted(rlist, key=lambda r: _qps(r, direction))
        xs = [float(_qps(r, direction)) for r in rlist]
        ys = [_value(r, metric) for r in rlist]
        color = colors[kinds.index(" ".join(x for x in (g[0], g[1]) if x)) % len(colors)]
        ax.plot(
            xs,
            ys,
            marker=markers[methods.index(g[2]) % len(markers)],
            markersize=6,
            alpha=0.9,
            linestyle="-" if len(xs) > 1 else "none",
            linewidth=1.2,
            color=color,
        )
        for x, y, r in zip(xs, ys, rlist):
            sp = {k: v for k, v in (_cfg(r, "store_params") or {}).items() if k != "index"}
            text = _params_text(sp)
            if text:
                ax.annotate(
                    text,
                    (x, y),
                    textcoords="offset points",
                    xytext=(5, 4),
                    fontsize=6.5,
                    color=color,
                )
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=colors[i % len(colors)], marker="o", linestyle="-", label=k)
        for i, k in enumerate(kinds)
    ]
    if len(methods) > 1:
        handles += [
            Line2D([], [], color="0.3", marker=markers[i % len(markers)], linestyle="none", label=m)
            for i, m in enumerate(methods)
        ]
    ax.legend(handles=handles, loc="best", fontsize="small", frameon=True)
    ax.set_xscale("log")
    ax.set_xlabel(f"{_DIRECTION_NAMES.get(direction, direction)} queries per second (log scale)")
    ylabel = metric_label(metric)
    if "ann_recall" in metric:
        ylabel += " (vs exact search)"
    ax.set_ylabel(ylabel)
    datasets = sorted({str(_cfg(r, "dataset")) for r in pts})
    ax.set_title(title or f"{metric_label(metric)} vs throughput — {', '.join(datasets)}")
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
    return _save(fig, out_path)


def _default_quality(results: Sequence[ExperimentResult], direction: str) -> str:
    avail = _available(results)
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


def _mean(values: Iterable[float | None]) -> float:
    vals = [v for v in values if v is not None]
    return sum(vals) / len(vals) if vals else float("nan")


def _palette() -> list[str]:
    # Colour-blind-safe (Okabe-Ito), black last.
    return ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
