"""Merge result files into one table (CSV) and a Markdown leaderboard.

What ``clip_benchmark build`` does for CLIP_benchmark, for our results: one
row per result file (:meth:`ExperimentResult.flatten`): the config in
columns (``method``, ``method_params.sim_dim``...), the status, every metric
under its flat name (``t2i/HitRate@1``, ``t2i/R@1`` is IR recall), the
CLIP_benchmark aliases (``image_retrieval_recall@5``), per-ranking speed
(``t2i.queries_per_s``), timings (``fit_s``), intervals (``t2i/HitRate@1.ci_low``)
and provenance (``env.numpy``). Files that cannot be read (not JSON, not a
result, an unknown schema version) are skipped with a
:class:`LeaderboardWarning` that names them and says why.

The Markdown table leads with HitRate@k, labelled as in the console (see
:mod:`imsearch_align.experiment.report`); a degraded or failed row is marked
in a ``status`` column and is never bolded as best.

    df = load_results(["results/"])
    print(to_markdown(df))
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
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
from imsearch_align.experiment.result import ExperimentResult, ResultSchemaError

__all__ = [
    "LeaderboardWarning",
    "default_sort_metric",
    "find_result_files",
    "load_result_objects",
    "load_results",
    "metric_columns",
    "results_frame",
    "to_markdown",
]

#: Task metrics shown by default (those present), after the headline retrieval
#: columns (every HitRate@k of the results, nDCG at the largest k: see
#: :func:`imsearch_align.experiment.report.headline_columns`).
DEFAULT_METRICS = (
    "classification/acc1",
    "classification/acc5",
    "classification/mean_per_class_recall",
    "matching/accuracy",
    "multilabel/mAP",
    "linear_probe/raw_acc1",
    "linear_probe/aligned_acc1",
    "captioning/bleu4",
)
#: Speed columns shown by default (those present).
DEFAULT_SPEED = ("t2i.queries_per_s", "i2t.queries_per_s", "classification.queries_per_s", "fit_s")
#: Bound columns beside a metric: bootstrap interval, tie-order bounds, tie-rule value.
_CI_SUFFIXES = (".ci_low", ".ci_high", ".tie_low", ".tie_high", ".tie_rule")
_TAIL = ("status_reasons", "error", "key", "created", "path", "per_query_file")


class LeaderboardWarning(UserWarning):
    """A result file was skipped (unreadable, not JSON, not a result, unknown schema)."""


# ----------------------------------------------------------------------------- reading


def find_result_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """Result JSON files among ``paths``: files as given, directories searched
    recursively for ``*.json`` (hidden folders such as ``.checkpoints`` are
    skipped). Sorted within each directory; a missing path raises."""
    out: list[Path] = []
    seen: set[Path] = set()
    for p in paths:
        path = Path(p)
        if path.is_dir():
            found = sorted(
                f
                for f in path.rglob("*.json")
                if f.is_file()
                and not any(part.startswith(".") for part in f.relative_to(path).parts)
            )
        elif path.is_file():
            found = [path]
        else:
            raise FileNotFoundError(f"result path {str(path)!r} is neither a file nor a directory")
        for f in found:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append(f)
    return out


def load_result_objects(paths: Iterable[str | os.PathLike]) -> list[ExperimentResult]:
    """Every readable result under ``paths``; others skipped with a :class:`LeaderboardWarning`."""
    results = []
    for f in find_result_files(paths):
        try:
            results.append(ExperimentResult.load(f))
        except (OSError, UnicodeDecodeError) as exc:
            warnings.warn(
                f"skipping {str(f)!r}: cannot read it ({exc})", LeaderboardWarning, stacklevel=2
            )
        except ResultSchemaError as exc:
            warnings.warn(f"skipping {str(f)!r}: {exc}", LeaderboardWarning, stacklevel=2)
        except (TypeError, ValueError, KeyError) as exc:
            warnings.warn(
                f"skipping {str(f)!r}: not a readable imsearch-align result ({type(exc).__name__}: {exc})",
                LeaderboardWarning,
                stacklevel=2,
            )
    return results


def results_frame(results: Sequence[ExperimentResult]) -> pd.DataFrame:
    """One row per result (:meth:`ExperimentResult.flatten`), columns grouped:
    identity and config, metrics, intervals, timings, the rest."""
    df = pd.DataFrame([r.flatten() for r in results])
    if df.empty:
        return df
    metrics = metric_columns(df)
    cis = [c for c in df.columns if c.endswith(_CI_SUFFIXES)]
    timings = [c for c in df.columns if c.endswith(("_s", "_ms")) and c not in metrics]
    tail = [c for c in df.columns if c.startswith("env.") or c in _TAIL]
    head = [c for c in df.columns if c not in {*metrics, *cis, *timings, *tail}]
    return df[head + metrics + cis + timings + tail]


def load_results(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """:func:`results_frame` of every readable result under ``paths``."""
    return results_frame(load_result_objects(paths))


def metric_columns(df: pd.DataFrame) -> list[str]:
    """Metric columns: ``ranking/measure`` names (intervals excluded), then
    CLIP_benchmark aliases."""
    canon = [
        c
        for c in df.columns
        if "/" in str(c) and " " not in str(c) and not str(c).endswith(_CI_SUFFIXES)
    ]
    alias = [
        c
        for c in df.columns
        if str(c).startswith(("image_retrieval_recall@", "text_retrieval_recall@"))
    ]
    return canon + alias


def default_sort_metric(df: pd.DataFrame) -> str | None:
    """The first headline column present (``t2i/HitRate@1`` for retrieval), else
    the first default task metric present, else the first metric."""
    metrics = metric_columns(df)
    for m in [*headline_columns(metrics), *DEFAULT_METRICS]:
        if m in metrics and df[m].notna().any():
            return m
    return metrics[0] if metrics else None


# ----------------------------------------------------------------------------- rendering


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
    columns = list(columns)
    if max_rows is not None:
        df, ok = df.head(max_rows), ok.head(max_rows)
    metric_set = set(metric_columns(df))
    best: dict[str, float] = {}
    if bold_best and int(ok.sum()) > 1:
        for c in columns:
            if c in metric_set:
                vals = pd.to_numeric(df.loc[ok, c], errors="coerce")
                if vals.notna().any():
                    best[c] = float(vals.max())
    ranked = sort and sort_by is not None
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
    out = "\n".join(lines) + "\n"
    if legend and any("HitRate@" in c or "/R@" in c for c in columns):
        out += f"\n{HEADLINE_LEGEND}\n"
    return out
