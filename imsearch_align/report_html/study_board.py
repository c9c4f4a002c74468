"""The leaderboard of a collection-scale study: one row per ``collection_scale`` cell.

Each row is one searched index setting on one collection: method, store,
index type, build and search parameters, collection size, the headline
quality (the task's ``HitRate@10``, as the charts pick it, and the
same measure of exact search when the cell recorded it), ANN recall, q/s,
p50/p99 latency and the status with its reasons or error. Rows are sorted by
method, store, collection size (unknown last), then quality (best first; a
failed cell or one without a measured quality last). The best quality per
method and collection size among the ok cells is bold. The dataset and
direction columns are there only where the cells differ in them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from imsearch_align.experiment.study_cell import StudyCell
from imsearch_align.plots._results import params_text
from imsearch_align.report_html.quality import ann_recall, quality_metric
from imsearch_align.report_html.sections import commands_html, esc, table_html

__all__ = ["study_board_html"]

_MISSING = "-"
#: Columns shown only where the cells differ in them (the legend names a shared value).
_VARYING = ("dataset", "direction")


def _num(v: float | None, digits: int = 3) -> str:
    return _MISSING if v is None else f"{v:.{digits}f}"


def _qps(v: float | None) -> str:
    if v is None:
        return _MISSING
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _size(v: int | None) -> str:
    return _MISSING if v is None else f"{v:,}"


def _headline(cell: StudyCell) -> tuple[str | None, float | None, float | None]:
    """The cell's quality measure, its value, and the exact-search value of that measure."""
    key = quality_metric(cell.metrics, cell.direction)
    if key is None:
        return None, None, None
    value = cell.metrics[key]
    short = key.rsplit("/", 1)[-1]
    exact = cell.exact_metrics.get(key, cell.exact_metrics.get(short))
    if exact is None and cell.exact:
        exact = value
    return short, value, exact


def _sort_key(cell: StudyCell) -> tuple:
    _, value, _ = _headline(cell)
    return (
        cell.method,
        cell.store,
        float("inf") if cell.collection_size is None else cell.collection_size,
        cell.status.state == "failed",
        value is None,
        -(value or 0.0),
        cell.index_type,
        params_text(cell.index_params),
        params_text(cell.search_params),
    )


def _best(cells: Sequence[StudyCell]) -> set[int]:
    """Indices of the ok cells with the best quality per method, direction and size."""
    best: dict[tuple, tuple[float, list[int]]] = {}
    for i, c in enumerate(cells):
        _, value, _ = _headline(c)
        if value is None or not c.status.ok:
            continue
        group = (c.method, c.direction, c.collection_size)
        top, idx = best.get(group, (float("-inf"), []))
        if value > top:
            best[group] = (value, [i])
        elif value == top:
            idx.append(i)
    return {i for _, idx in best.values() for i in idx}


def _row(cell: StudyCell, metric: str | None, bold: bool) -> list[str]:
    name, value, exact = _headline(cell)
    quality = _num(value)
    if value is not None and metric is None:
        quality = f"{quality} ({name})"
    if bold:
        quality = f"**{quality}**"
    lat = cell.latency_ms
    return [
        cell.dataset,
        cell.method,
        cell.direction,
        cell.store,
        cell.index_type,
        params_text(cell.index_params),
        params_text(cell.search_params),
        _size(cell.collection_size),
        quality,
        _num(exact),
        _num(ann_recall(cell.metrics, cell.direction)),
        _qps(cell.queries_per_s),
        _num(lat.get("p50")),
        _num(lat.get("p99")),
        str(cell.status),
    ]


def study_board_html(cells: Sequence[StudyCell]) -> str:
    """The ``collection_scale`` cells among ``cells`` as a sorted HTML table, with a legend
    and the commands that made them ("" when there is none)."""
    rows = sorted((c for c in cells if c.kind == "collection_scale"), key=_sort_key)
    if not rows:
        return ""
    names = Counter(_headline(c)[0] for c in rows if _headline(c)[0] is not None)
    metric = next(iter(names)) if len(names) == 1 else None
    label = metric or "quality"
    header = [
        "dataset",
        "method",
        "direction",
        "store",
        "index",
        "build",
        "search",
        "size",
        label,
        f"{label} exact",
        "ANN recall",
        "q/s",
        "p50 ms",
        "p99 ms",
        "status",
    ]
    best = _best(rows)
    body = [_row(c, metric, i in best) for i, c in enumerate(rows)]
    # The dataset and direction columns only where the cells differ in them.
    keep = [i for i, h in enumerate(header) if h not in _VARYING or len({r[i] for r in body}) > 1]
    header = [header[i] for i in keep]
    body = [[r[i] for i in keep] for r in body]
    text = ("dataset", "method", "direction", "store", "index", "build", "search", "status")
    right = [h not in text for h in header]
    status = [h == "status" for h in header]
    shared = {c: getattr(rows[0], c) for c in _VARYING if c not in header}
    states = Counter(c.status.state for c in rows)
    legend = (
        f"{len(rows)} collection-scale cells"
        + "".join(f", {k} {v}" for k, v in shared.items() if v)
        + " ("
        + ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
        + f"). Sorted by method, store, collection size, then {label} (best first); "
        f"bold: the best ok {label} per method and size. "
        f"{label} exact: exact search over the same collection. "
        "ANN recall: the index's top-k against the exact top-k. "
        "Latency: per query, in milliseconds."
    )
    cmds = list(dict.fromkeys(c.command for c in rows if c.command))
    return "\n".join(
        [
            table_html(header, body, right, status, cls="board study"),
            f'<p class="legend-text">{esc(legend)}</p>',
            commands_html(cmds, "these cells"),
        ]
    )
