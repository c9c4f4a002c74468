"""What the collection study writes from its cells: the CSV and the leaderboard.

:func:`cells_frame` flattens the cells (one row each: method, direction,
store, index, search setting, collection size, quality exact and
approximate with its interval and its paired difference to exact, which
deploy rule picks the setting, ANN recall, queries/s with its range over
the timed passes, latency, insert rows/s, build and load seconds, memory,
disk, status). :func:`leaderboard` is that table in Markdown, best quality
first within each collection size. The figures are
:mod:`~imsearch_align.collection.study_figures`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from imsearch_align.experiment.deploy import DEFAULT_DELTA, deploy_marks

__all__ = ["cells_frame", "leaderboard"]

_MB = 1 / (1024 * 1024)


def _params(d: dict[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (d or {}).items())


def cells_frame(
    cells: Sequence[dict[str, Any]], ks: Sequence[int], delta: float = DEFAULT_DELTA
) -> pd.DataFrame:
    """One row per cell (see the module docstring), quality at cut-offs ``ks``; the
    interval of HitRate at the largest cut-off, its paired difference to exact, and which
    rule deploys the cell among its build's (:func:`~imsearch_align.experiment.deploy.
    deploy_marks`, task quality within ``delta`` of exact)."""
    rows = []
    kmax = max(ks)
    marks = deploy_marks(cells, f"HitRate@{kmax}", delta)
    for c, mark in zip(cells, marks, strict=True):
        d = c.get("direction", "t2i")
        idx, coll = c.get("index") or {}, c.get("collection") or {}
        m, ex = c.get("metrics") or {}, c.get("exact_metrics") or {}
        t, mem, lat = c.get("timings") or {}, c.get("memory") or {}, c.get("latency_ms") or {}
        row = {
            "method": c["method"],
            "direction": d,
            "store": c["store"],
            "index": idx.get("type", ""),
            "build": _params(idx.get("params")),
            "search": _params(idx.get("search_params")),
            "size": coll.get("size"),
            "distractors": coll.get("distractors"),
        }
        names = [f"HitRate@{k}" for k in ks] + [f"nDCG@{kmax}"]
        names += [  # every other measure the cell holds (a study's --measures)
            key.split("/", 1)[1] for key in m
            if key.startswith(f"{d}/") and "ann_recall" not in key
            and key.split("/", 1)[1] not in names
        ]  # fmt: skip
        for name in names:
            row[name] = m.get(f"{d}/{name}")
            row[f"{name} exact"] = ex.get(f"{d}/{name}")
        row.update(_interval_columns(c, f"{d}/HitRate@{kmax}", f"HitRate@{kmax}"))
        row["deploy"] = mark
        row[f"ann_recall@{kmax}"] = m.get(f"{d}/ann_recall@{kmax}")
        if c.get("control"):  # --control: the in-distribution queries' recall at this setting
            row[f"control ann_recall@{kmax}"] = (c["control"].get("ann_recall") or {}).get("mean")
        row["q/s"] = c.get("queries_per_s")
        span = c.get("queries_per_s_range") or [None, None]
        row["q/s min"], row["q/s max"] = span[0], span[1]
        row["passes"] = (c.get("timing") or {}).get("counted")
        row.update({f"{p} ms": lat.get(p) for p in ("p50", "p95", "p99")})
        row["insert rows/s"] = t.get("insert_rows_per_s")
        row["build s"] = t.get("build_s")
        row["load s"] = t.get("load_s")
        row["memory MiB"] = None if mem.get("bytes") is None else mem["bytes"] * _MB
        row["disk MiB"] = None if c.get("disk_bytes") is None else c["disk_bytes"] * _MB
        st = c.get("status") or {}
        row["status"] = st.get("state", "ok") + (f": {st['error']}" if st.get("error") else "")
        rows.append(row)
    return pd.DataFrame(rows)


def _interval_columns(cell: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    """The 95 % interval of ``name`` and its paired difference to exact (None: the cell has
    no intervals: a cell written before they were measured)."""
    iv = (cell.get("intervals") or {}).get(key) or {}
    a, diff = iv.get("approximate") or {}, iv.get("difference") or {}
    return {
        f"{name} low": a.get("low"),
        f"{name} high": a.get("high"),
        "vs exact": diff.get("mean"),
        "vs exact low": diff.get("low"),
        "vs exact high": diff.get("high"),
    }


def _fmt(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}"
    return str(v)


def leaderboard(df: pd.DataFrame, ks: Sequence[int]) -> str:
    """The cells as a Markdown table: by direction and size, best HitRate@k first."""
    if df.empty:
        return "_no cells_\n"
    key = f"HitRate@{max(ks)}"
    df = df.sort_values(["direction", "size", key], ascending=[True, True, False], kind="stable")
    cols = [c for c in df.columns if c != "distractors"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        lines.append("| " + " | ".join(_fmt(r[c]).replace("|", "/") for c in cols) + " |")
    return "\n".join(lines) + "\n" + LEADERBOARD_NOTES


#: What the leaderboard's cost columns measure (printed under it).
LEADERBOARD_NOTES = """
HitRate@k low / high: its 95 % percentile bootstrap interval (queries resampled by image:
the captions of one image together). vs exact: HitRate@k minus exact search's on the same
queries, with its 95 % interval from the same resamples. deploy: which rule deploys the
setting among its build's: "recall" the fastest with ANN recall@k >= 0.9, "quality" the
fastest whose "vs exact low" is >= -delta (--deploy-delta, 0.01 by default), "both".
q/s: the median of the cell's counted timed passes (--repeats, 3 by default, after a
warm-up pass, interleaved across a build's settings), q/s min / max their range; the
latencies are medians of the passes' percentiles (every pass is kept in the cell).
Build s: a server's wait from the last insert until every row is indexed, loaded and
counted (Milvus), plus FAISS's IVF k-means; FAISS builds as it adds, so its HNSW graph
and IVF list assignment are in insert rows/s. Memory: a server's resident memory
(Milvus), the bytes a FAISS index holds (counted from its structures).
"""
