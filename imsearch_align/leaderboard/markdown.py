"""Rendering the results table as a Markdown leaderboard: rows ranked, cells formatted.

:func:`to_markdown` ranks the rows (``ok`` rows first, by the sort metric),
picks the columns (identity, hidden settings folded into ``params``, the
headline metrics, speed), bolds the best value of each metric among ``ok``
rows and adds the HitRate@k legend.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.report import (
    HEADLINE_LEGEND,
    ID_COLUMNS,
    NUMBER_NEUTRAL_FIELDS,
    headline_columns,
    label,
)
from imsearch_align.leaderboard.frame import DEFAULT_METRICS, default_sort_metric, metric_columns

__all__ = ["DEFAULT_SPEED", "to_markdown"]

#: Speed columns shown by default (those present).
DEFAULT_SPEED = ("t2i.queries_per_s", "i2t.queries_per_s", "classification.queries_per_s", "fit_s")


def _is_number(v: Any) -> bool:
    return (
        isinstance(v, numbers.Real)
        and not isinstance(v, bool | np.bool_)
        and not math.isnan(float(v))
    )


def _missing(v: Any) -> bool:
    return v is None or (pd.api.types.is_scalar(v) and not isinstance(v, str) and bool(pd.isna(v)))


def _fmt(col: str, v: Any, digits: int) -> str:
    if _missing(v):
        return ""
    if isinstance(v, bool | np.bool_):
        return str(bool(v)).lower()
    if isinstance(v, numbers.Real):
        if col.endswith("queries_per_s"):
            return f"{v:,.0f}"
        if col.endswith("_s"):
            return f"{v:.3g}"
        if float(v).is_integer() and "/" not in col and "@" not in col:
            return str(int(v))
        return f"{v:.{digits}f}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def _header(col: str) -> str:
    if col.endswith(".queries_per_s"):
        return f"{col.split('.', 1)[0]} QPS"
    if col.endswith(".n_tie_dependent"):
        return f"{col.split('.', 1)[0]} tie-dependent queries"
    if col.endswith(" tie range"):
        return label(col[: -len(" tie range")]) + " range over tie orders"
    return {"image_encoder": "image enc", "text_encoder": "text enc"}.get(col, label(col))


#: Config fields a row's other columns already show, or that change no number.
_NOT_SETTINGS = (
    frozenset({*ID_COLUMNS, "n_support", "method_params", "store_params", "task_params"})
    | NUMBER_NEUTRAL_FIELDS
)


def _hidden_settings(df: pd.DataFrame) -> list[str]:
    """Config columns (``seed``, ``image_encoder_params.model``, ``dataset_params.root``,
    ``k_values``...) whose values differ between rows and that no other column
    shows: rows differing only there would look like one experiment twice."""
    from imsearch_align.experiment.config import ExperimentConfig

    fields = {f.name for f in dataclasses.fields(ExperimentConfig)} - _NOT_SETTINGS
    out = []
    for c in df.columns:
        if str(c).split(".", 1)[0] in fields:
            vals = df[c].map(lambda v: "" if _missing(v) else repr(v))
            if vals.nunique() > 1:
                out.append(c)
    return out


def _params_column(df: pd.DataFrame) -> pd.Series | None:
    own = [
        c for c in df.columns if c.startswith(("method_params.", "store_params.", "task_params."))
    ]
    hidden = _hidden_settings(df) if len(df) > 1 else []
    cols = own + hidden
    if not cols:
        return None

    def cell(row: pd.Series) -> str:
        parts = []
        for c in cols:
            v = row[c]
            if _missing(v):
                continue
            if isinstance(v, float) and v.is_integer():  # NaN elsewhere made the column float
                v = int(v)
            parts.append(f"{c.split('.', 1)[1] if c in own else c}={v}")
        return ", ".join(parts)

    s = df.apply(cell, axis=1)
    return s if (s != "").any() else None


def _tie_range_column(df: pd.DataFrame, sort_by: str | None) -> pd.Series | None:
    """``[low, high]`` of the sort metric over tie orders, when some row depends on them."""
    if not sort_by or f"{sort_by}.tie_low" not in df.columns:
        return None
    lo, hi = df[f"{sort_by}.tie_low"], df[f"{sort_by}.tie_high"]
    if not ((hi - lo).abs() > 0).any():
        return None
    cell = ["" if pd.isna(a) or a == b else f"[{a:.4f}, {b:.4f}]" for a, b in zip(lo, hi)]
    return pd.Series(cell, index=df.index, name=f"{sort_by} tie range")


def _check_column(df: pd.DataFrame, name: str, arg: str) -> None:
    if name not in df.columns:
        metrics = metric_columns(df)
        close = difflib.get_close_matches(name, list(map(str, df.columns)), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"{arg} {name!r} is not a column of the results.{hint} "
            f"Metrics available: {', '.join(metrics[:40]) or '(none)'}"
        )


def _default_columns(df: pd.DataFrame, sort_by: str | None, has_params: bool) -> list[str]:
    ident = [c for c in ID_COLUMNS if c in df.columns and df[c].notna().any()]
    if len(df) > 1:  # a constant column says nothing in a ranking
        keep = {"method", "store", "n_support_pairs"}
        ident = [c for c in ident if c in keep or df[c].astype(str).nunique() > 1]
    if has_params:
        ident.append("params")
    if "status" in df.columns and (df["status"] != "ok").any():
        ident.append("status")
    metrics = [sort_by] if sort_by else []
    wanted = [*headline_columns(list(df.columns)), *DEFAULT_METRICS]
    metrics += [m for m in wanted if m in df.columns and m not in metrics and df[m].notna().any()]
    if not metrics:
        metrics = metric_columns(df)[:8]
    speed = [c for c in DEFAULT_SPEED if c in df.columns and df[c].notna().any()]
    extra = [c for c in ("status_reasons", "error") if c in df.columns and df[c].notna().any()]
    return [*ident, *metrics, *speed, *extra]


def to_markdown(
    df: pd.DataFrame,
    *,
    sort_by: str | None = None,
    sort: bool = True,
    columns: Sequence[str] | None = None,
    max_rows: int | None = None,
    digits: int = 4,
    bold_best: bool = True,
    legend: bool = True,
) -> str:
    """A Markdown leaderboard of a :func:`load_results` frame.

    Args:
        df: the merged results.
        sort_by: metric to rank by, descending (default :func:`default_sort_metric`);
            rows without it, and rows not ``ok``, go last.
        sort: False keeps the rows in ``df``'s order (no rank column).
        columns: the columns to show; default the run's identity, its status
            when some row is not ok, the headline metrics present, QPS and fit time.
        max_rows: show only the first rows.
        digits: decimals of metric values.
        bold_best: bold the best value of each metric column among ``ok`` rows.
        legend: add the line saying what HitRate@k and IR R@k are.
    """
    if df.empty:
        return "_no results_\n"
    df, ok, sort_by = _ranked_rows(df, sort_by, sort)
    df, columns = _shown_columns(df, sort_by, columns)
    if max_rows is not None:
        df, ok = df.head(max_rows), ok.head(max_rows)
    best = _best_values(df, ok, columns) if bold_best and int(ok.sum()) > 1 else {}
    lines = _table_lines(df, ok, columns, best, sort and sort_by is not None, digits)
    out = "\n".join(lines) + "\n"
    if legend and any("HitRate@" in c or "/R@" in c for c in columns):
        out += f"\n{HEADLINE_LEGEND}\n"
    return out


def _ranked_rows(
    df: pd.DataFrame, sort_by: str | None, sort: bool
) -> tuple[pd.DataFrame, pd.Series, str | None]:
    """The rows in table order, which of them are ``ok``, and the sort metric.

    ``ok`` rows first, then by ``sort_by`` descending (missing values last);
    ``sort=False`` keeps ``df``'s order.
    """
    df = df.reset_index(drop=True)
    if sort_by is not None:
        _check_column(df, sort_by, "sort_by")
    elif sort:
        sort_by = default_sort_metric(df)
    ok = df["status"] == "ok" if "status" in df.columns else pd.Series(True, index=df.index)
    if sort and sort_by is not None:
        order = df.assign(_ok=ok).sort_values(
            ["_ok", sort_by], ascending=[False, False], na_position="last", kind="stable"
        )
        df, ok = (
            df.loc[order.index].reset_index(drop=True),
            ok.loc[order.index].reset_index(drop=True),
        )
    return df, ok, sort_by


def _shown_columns(
    df: pd.DataFrame, sort_by: str | None, columns: Sequence[str] | None
) -> tuple[pd.DataFrame, list[str]]:
    """The frame with its derived columns (``params``, the tie range) and the columns shown.

    Given ``columns`` are checked; by default the tie range (and the count
    of tie-dependent queries) follows the sort metric.
    """
    params = _params_column(df)
    if params is not None:
        df = df.assign(params=params)
    ties = _tie_range_column(df, sort_by)
    if ties is not None:
        df = df.assign(**{ties.name: ties})
    if columns is None:
        columns = _default_columns(df, sort_by, params is not None)
        if ties is not None:
            ranking = str(sort_by).split("/", 1)[0]
            columns[columns.index(sort_by) + 1 : columns.index(sort_by) + 1] = [ties.name]
            if f"{ranking}.n_tie_dependent" in df.columns:
                columns.insert(columns.index(ties.name) + 1, f"{ranking}.n_tie_dependent")
    else:
        for c in columns:
            _check_column(df, c, "columns entry")
    return df, list(columns)


def _best_values(df: pd.DataFrame, ok: pd.Series, columns: Sequence[str]) -> dict[str, float]:
    """The best (largest) value of each shown metric column among the ``ok`` rows."""
    metric_set = set(metric_columns(df))
    best: dict[str, float] = {}
    for c in columns:
        if c in metric_set:
            vals = pd.to_numeric(df.loc[ok, c], errors="coerce")
            if vals.notna().any():
                best[c] = float(vals.max())
    return best


def _table_lines(
    df: pd.DataFrame,
    ok: pd.Series,
    columns: Sequence[str],
    best: dict[str, float],
    ranked: bool,
    digits: int,
) -> list[str]:
    """The Markdown table: header, alignment row, one line per row (rank first if ranked)."""
    headers = (["#"] if ranked else []) + [_header(c) for c in columns]
    numeric = [
        pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])
        for c in columns
    ]
    lines = [
        "| " + " | ".join(headers) + " |",
        "|"
        + "|".join((["---:"] if ranked else []) + ["---:" if n else ":---" for n in numeric])
        + "|",
    ]
    for i, row in df.iterrows():
        cells = [str(i + 1)] if ranked else []
        for c in columns:
            text = _fmt(c, row[c], digits)
            if c in best and ok.iloc[i] and _is_number(row[c]) and float(row[c]) == best[c]:
                text = f"**{text}**"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return lines
