"""What every sweep cell of the study starts with, and the progress line it prints."""

from __future__ import annotations

from typing import Any

from imsearch_align.collection.cell_files import FORMAT, CellBase
from imsearch_align.collection.settings import IndexSetting

__all__ = ["cell_head", "cell_label"]


def cell_label(cell: dict[str, Any]) -> str:
    """One progress line: setting, size, quality, speed."""
    idx = cell.get("index") or {}
    sp = ",".join(f"{k}={v}" for k, v in (idx.get("search_params") or {}).items())
    head = f"{cell['method']:<10} {cell['store']:<11} {idx.get('type', ''):<8} {sp:<12}"
    size = (cell.get("collection") or {}).get("size") or 0
    m = cell.get("metrics") or {}
    hit = next((v for k, v in m.items() if k.endswith("HitRate@10")), None)
    rec = next((v for k, v in m.items() if "ann_recall" in k), None)
    qps = cell.get("queries_per_s")
    tail = "" if hit is None else f" HitRate@10 {hit:.3f}"
    tail += "" if rec is None else f" recall {rec:.3f}"
    tail += "" if qps is None else f" {qps:,.0f} q/s"
    return f"{head} size={size:,}{tail}"


def cell_head(base: CellBase, s: IndexSetting) -> dict[str, Any]:
    """The fields every cell of one collection and index setting starts with."""
    return {
        "format": FORMAT,
        "kind": "collection_scale",
        "store": s.store,
        "method": base.method,
        "dataset": base.dataset,
        "direction": base.direction,
    }
