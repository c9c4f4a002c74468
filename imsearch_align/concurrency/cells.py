"""A concurrency run as the report's study cells: one JSON object per level.

The fields are those :mod:`imsearch_align.experiment.study_cell` documents
for ``kind: "concurrency"`` (``store``, ``method``, ``dataset``,
``direction``, ``index.type`` / ``.params`` / ``.search_params``,
``collection.size``, ``concurrency``, ``queries_per_s``, ``latency_ms.p50`` /
``.p95`` / ``.p99``, ``metrics`` by flat name, ``status``, ``provenance``,
``command``), so ``imsearch-align report`` charts them. One more key,
``run``, which the report does not read, keeps what checks the
measurement: sent, answered, failed, the wall time, the mean latency, the
mode, duration, warm-up, seed, the errors, the saturation point of the
run, and (when quality was scored) how many queries it covers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from imsearch_align.concurrency.quality import Quality
from imsearch_align.concurrency.result import PERCENTILES, ConcurrencyResult, LevelResult
from imsearch_align.experiment.study_cell import CELL_FORMAT, write_cell

__all__ = ["concurrency_cells", "write_cells"]


def _flat_metrics(metrics: Mapping[str, float], direction: str) -> dict[str, float]:
    """Flat names (``t2i/HitRate@10``); a NaN (nothing to score) is left out, as the report does."""
    return {
        (m if "/" in m else f"{direction}/{m}"): float(v)
        for m, v in metrics.items()
        if not math.isnan(float(v))
    }


def _status(lv: LevelResult) -> dict[str, Any]:
    st = lv.status
    return {"state": st.state, "reasons": list(st.reasons), "error": st.error}


def _run(res: ConcurrencyResult, lv: LevelResult, q: Quality | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sent": lv.sent,
        "answered": lv.answered,
        "failed": lv.failed,
        "warmup_sent": lv.warmup_sent,
        "wall_s": lv.wall_s,
        "latency_mean_ms": lv.latency_ms.get("mean"),
        "mode": res.mode,
        "k": res.k,
        "duration_s": res.duration_s,
        "warmup_s": res.warmup_s,
        "seed": res.seed,
        "saturation": res.saturation,
        "errors": dict(lv.errors),
    }
    if q is not None:
        out["quality"] = {
            "n_queries": q.n_queries,
            "n_answers": q.n_answers,
            "not_sent": q.not_sent,
            "failed_queries": len(q.failed_queries),
            "n_differing": q.n_differing,
        }
    return out


def concurrency_cells(
    result: ConcurrencyResult,
    *,
    store: str,
    method: str,
    dataset: str = "",
    direction: str = "t2i",
    index_type: str = "",
    index_params: Mapping[str, Any] | None = None,
    search_params: Mapping[str, Any] | None = None,
    collection_size: int | None = None,
    quality: Mapping[int, Quality] | None = None,
    provenance: Any = None,
    command: str | Sequence[str] = "",
) -> list[dict[str, Any]]:
    """One ``kind: "concurrency"`` cell per level of ``result``.

    Args:
        store, method, dataset, direction: what was measured (the report's labels).
        index_type, index_params, search_params: the index (default type: the store's name).
        collection_size: the items searched.
        quality: concurrency -> :class:`~imsearch_align.concurrency.quality.Quality`
            scored on that level's answers (levels left out carry no metrics).
        provenance: a :class:`~imsearch_align.experiment.provenance.Provenance`
            or its dict.
        command: the command line that made the run.
    """
    prov = provenance.to_dict() if hasattr(provenance, "to_dict") else dict(provenance or {})
    quality = dict(quality or {})
    cells = []
    for lv in result.levels:
        q = quality.get(lv.concurrency)
        cell: dict[str, Any] = {
            "format": CELL_FORMAT,
            "kind": "concurrency",
            "store": store,
            "method": method,
            "dataset": dataset,
            "direction": direction,
            "index": {
                "type": index_type or store,
                "params": dict(index_params or {}),
                "search_params": dict(search_params or {}),
            },
            "concurrency": lv.concurrency,
            "queries_per_s": lv.queries_per_s,
            "latency_ms": {p: lv.latency_ms[p] for p in PERCENTILES if p in lv.latency_ms},
            "metrics": _flat_metrics(q.metrics, direction) if q is not None else {},
            "intervals": {}
            if q is None
            else {f"{direction}/{m}": {"approximate": iv} for m, iv in q.intervals.items()},
            "status": _status(lv),
            "provenance": prov,
            "command": command if isinstance(command, str) else list(command),
            "run": _run(result, lv, q),
        }
        if collection_size is not None:
            cell["collection"] = {"size": int(collection_size)}
        cells.append(cell)
    return cells


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "cell"


def write_cells(cells: Sequence[Mapping[str, Any]], directory: str | Path) -> list[Path]:
    """Write each cell as ``concurrency-<store>-<index>-<method>-c<N>.json`` in ``directory``
    through the one writer of study cells (atomically; NaN written as null); the paths."""
    out = []
    for cell in cells:
        name = "-".join(
            _slug(str(p))
            for p in ("concurrency", cell["store"], cell["index"]["type"], cell["method"])
        )
        path = Path(directory) / f"{name}-c{_slug(str(cell['concurrency']))}.json"
        write_cell(path, cell)
        out.append(path)
    return out
