"""Merge result JSONs into one table (CSV) and a Markdown leaderboard.

What ``clip_benchmark build`` does for CLIP_benchmark, for our result files:
one row per JSON; the config flattened into columns (``method``,
``method_params.sim_dim``...), every metric a column under its canonical
name (``t2i/R@1``), the CLIP_benchmark aliases (``image_retrieval_recall@5``),
timings (``fit_s``, ``t2i_queries_per_s``) and the 95% intervals
(``t2i/R@1.ci_low``). Files that cannot be read are skipped with a
:class:`LeaderboardWarning` that names them.

    df = load_results(["results/"])
    print(to_markdown(df, sort_by="t2i/R@1"))
"""

from __future__ import annotations

import difflib
import json
import math
import numbers
import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

__all__ = [
    "LeaderboardWarning",
    "default_sort_metric",
    "find_result_files",
    "flatten_result",
    "load_result_dicts",
    "load_results",
    "metric_columns",
    "to_markdown",
]

#: Columns that identify a run, in leaderboard order.
ID_COLUMNS = ("dataset", "image_encoder", "text_encoder", "method", "store", "n_support_pairs")
#: Metrics shown by default (those present), after the sort metric.
DEFAULT_METRICS = (
    "t2i/R@1",
    "t2i/R@5",
    "t2i/R@10",
    "t2i/nDCG@10",
    "i2t/R@1",
    "i2t/R@5",
    "i2t/R@10",
    "i2t/nDCG@10",
    "classification/acc1",
    "classification/acc5",
    "classification/mean_per_class_recall",
)
#: Speed columns shown by default (those present).
DEFAULT_SPEED = ("t2i_queries_per_s", "i2t_queries_per_s", "classification_queries_per_s", "fit_s")
_CI_SUFFIXES = (".ci_low", ".ci_high")


class LeaderboardWarning(UserWarning):
    """A result file was skipped (unreadable, not JSON, or not a result)."""


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


def _is_result(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and isinstance(obj.get("config"), Mapping)
        and (isinstance(obj.get("metrics"), Mapping) or "error" in obj)
    )


def load_result_dicts(paths: Iterable[str | os.PathLike]) -> list[dict[str, Any]]:
    """Read every result JSON under ``paths`` (see :func:`find_result_files`).

    Each dict gets ``"path"`` set to the file it came from. A file that is not
    valid JSON, or not a result (no ``config`` mapping and ``metrics``), is
    skipped with a :class:`LeaderboardWarning` naming it.
    """
    results = []
    for f in find_result_files(paths):
        try:
            obj = json.loads(f.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            warnings.warn(
                f"skipping {str(f)!r}: cannot read it as JSON ({exc})",
                LeaderboardWarning,
                stacklevel=2,
            )
            continue
        if not _is_result(obj):
            warnings.warn(
                f"skipping {str(f)!r}: not an imsearch-align result (expected keys 'config' and 'metrics')",
                LeaderboardWarning,
                stacklevel=2,
            )
            continue
        obj["path"] = str(f)
        results.append(obj)
    return results


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        if not value and prefix:
            return
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list | tuple):
        out[prefix] = ",".join(str(v) for v in value)
    else:
        out[prefix] = value


def flatten_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """One leaderboard row from one result dict (column names: module docstring).

    Config fields keep their names (parameter dicts become ``method_params.x``);
    ``n_support_pairs`` is the number of pairs actually used (``n_support=None``
    means all); metrics and CLIP_benchmark aliases keep their names; timings
    keep theirs (``fit_s``); intervals become ``<metric>.ci_low/.ci_high``.
    """
    row: dict[str, Any] = {}
    cfg = result.get("config") or {}
    _flat("", dict(cfg), row)
    ds = result.get("dataset") or {}
    row["n_support_pairs"] = ds.get("n_support_pairs", cfg.get("n_support"))
    for k in ("n_support_available", "n_test_images", "n_test_texts"):
        if k in ds:
            row[k] = ds[k]
    meth = result.get("method") or {}
    for k in ("output_dim", "sparse"):
        if k in meth:
            row[f"method_{k}"] = meth[k]
    enc = result.get("encoders") or {}
    for side in ("image", "text"):
        if side in enc:
            row[f"{side}_encoder_id"] = enc[side]
    for k, v in (result.get("metrics") or {}).items():
        row[k] = v
    for k, v in (result.get("clip_benchmark") or {}).items():
        row[k] = v
    for task, d in (result.get("tasks") or {}).items():
        if not isinstance(d, Mapping):
            continue
        for measure, iv in (d.get("intervals") or {}).items():
            if isinstance(iv, list | tuple) and len(iv) == 2:
                row[f"{task}/{measure}.ci_low"], row[f"{task}/{measure}.ci_high"] = iv
        for k in ("n_queries", "n_failed", "n_missing"):
            if k in d:
                row[f"{task}_{k}"] = d[k]
    for k, v in (result.get("timings") or {}).items():
        row[k] = v
    env = result.get("environment") or {}
    for k in ("git_commit", "python", "cpu", "gpu"):
        if k in env:
            row[f"env.{k}"] = env[k]
    for pkg, ver in (env.get("versions") or {}).items():
        row[f"env.{pkg}"] = ver
    for k in ("key", "created", "error", "path", "per_query_file"):
        if k in result:
            row[k] = result[k]
    return row


def load_results(paths: Iterable[str | os.PathLike]) -> pd.DataFrame:
    """Merge result JSONs (files, or directories searched recursively) into a
    DataFrame, one row per file; unreadable files are skipped with a warning.

    Columns are the union over files, grouped: config, metrics, intervals,
    timings, the rest.
    """
    rows = [flatten_result(r) for r in load_result_dicts(paths)]
    return _ordered_frame(rows)


def _ordered_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(list(rows))
    if df.empty:
        return df
    metrics = metric_columns(df)
    cis = [c for c in df.columns if c.endswith(_CI_SUFFIXES)]
    timings = [c for c in df.columns if c.endswith(("_s", "_ms")) and c not in metrics]
    tail = [
        c
        for c in df.columns
        if c.startswith("env.") or c in ("key", "created", "error", "path", "per_query_file")
    ]
    head = [c for c in df.columns if c not in {*metrics, *cis, *timings, *tail}]
    return df[head + metrics + cis + timings + tail]


def metric_columns(df: pd.DataFrame) -> list[str]:
    """Metric columns of a leaderboard frame: ``direction/measure`` names
    (intervals excluded), then CLIP_benchmark aliases."""
    canon = [c for c in df.columns if "/" in str(c) and not str(c).endswith(_CI_SUFFIXES)]
    alias = [
        c
        for c in df.columns
        if str(c).startswith(("image_retrieval_recall@", "text_retrieval_recall@"))
    ]
    return canon + alias


def default_sort_metric(df: pd.DataFrame) -> str | None:
    """``t2i/R@1`` if present, else the first metric column, else None."""
    metrics = metric_columns(df)
    if "t2i/R@1" in metrics:
        return "t2i/R@1"
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


_HEADERS = {
    "n_support_pairs": "N",
    "t2i_queries_per_s": "t2i QPS",
    "i2t_queries_per_s": "i2t QPS",
    "classification_queries_per_s": "cls QPS",
    "image_encoder": "image enc",
    "text_encoder": "text enc",
}


def _params_column(df: pd.DataFrame) -> pd.Series | None:
    cols = [c for c in df.columns if c.startswith(("method_params.", "store_params."))]
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
            parts.append(f"{c.split('.', 1)[1]}={v}")
        return ", ".join(parts)

    s = df.apply(cell, axis=1)
    return s if (s != "").any() else None


def _check_column(df: pd.DataFrame, name: str, arg: str) -> None:
    if name not in df.columns:
        metrics = metric_columns(df)
        close = difflib.get_close_matches(name, list(map(str, df.columns)), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"{arg} {name!r} is not a column of the results.{hint} "
            f"Metrics available: {', '.join(metrics[:40]) or '(none)'}"
        )


def to_markdown(
    df: pd.DataFrame,
    *,
    sort_by: str | None = None,
    sort: bool = True,
    columns: Sequence[str] | None = None,
    max_rows: int | None = None,
    digits: int = 4,
    bold_best: bool = True,
) -> str:
    """A Markdown leaderboard of a :func:`load_results` frame.

    Args:
        df: the merged results.
        sort_by: metric to rank by, descending (higher is better); default
            :func:`default_sort_metric`. Rows without it go last.
        sort: False keeps the rows in ``df``'s order (no rank column).
        columns: the columns to show; default the run's identity (dataset,
            encoders, method, store, N, non-default parameters), the sort
            metric, the main retrieval/classification metrics present, QPS
            and fit time. Identity columns equal in every row are left out
            (when there are several rows).
        max_rows: show only the first rows.
        digits: decimals of metric values.
        bold_best: bold the best value of each metric column.

    Returns:
        The table as a string (GitHub-flavoured Markdown).
    """
    if df.empty:
        return "_no results_\n"
    df = df.reset_index(drop=True)
    if sort_by is not None:
        _check_column(df, sort_by, "sort_by")
    elif sort:
        sort_by = default_sort_metric(df)
    if sort and sort_by is not None:
        df = df.sort_values(
            sort_by, ascending=False, na_position="last", kind="stable"
        ).reset_index(drop=True)
    params = _params_column(df)
    if params is not None:
        df = df.assign(params=params)
    if columns is None:
        ident = [c for c in ID_COLUMNS if c in df.columns and df[c].notna().any()]
        if len(df) > 1:  # a constant column says nothing in a ranking
            keep = {"method", "store", "n_support_pairs"}
            ident = [c for c in ident if c in keep or df[c].astype(str).nunique() > 1]
        if params is not None:
            ident.append("params")
        metrics = [sort_by] if sort_by else []
        metrics += [
            m
            for m in DEFAULT_METRICS
            if m in df.columns and m not in metrics and df[m].notna().any()
        ]
        if not metrics:
            metrics = metric_columns(df)[:8]
        speed = [c for c in DEFAULT_SPEED if c in df.columns and df[c].notna().any()]
        extra = ["error"] if "error" in df.columns and df["error"].notna().any() else []
        columns = [*ident, *metrics, *speed, *extra]
    else:
        for c in columns:
            _check_column(df, c, "columns entry")
    columns = list(columns)
    if max_rows is not None:
        df = df.head(max_rows)
    metric_set = set(metric_columns(df))
    best: dict[str, float] = {}
    if bold_best and len(df) > 1:
        for c in columns:
            if c in metric_set:
                vals = pd.to_numeric(df[c], errors="coerce")
                if vals.notna().any():
                    best[c] = float(vals.max())
    ranked = sort and sort_by is not None
    headers = (["#"] if ranked else []) + [_HEADERS.get(c, c) for c in columns]
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
            v = row[c]
            if c in best and _is_number(v) and float(v) == best[c]:
                text = f"**{text}**"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
