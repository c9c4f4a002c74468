"""The server-memory ratios of the cost model's inputs: a standalone server's resident
memory over the memory formula, per build at the largest size its RSS was read at
(``server_memory_ratio`` and ``server_memory_ratio_by_type`` of
``imsearch_align/data/scale_out_inputs.json``)."""

from __future__ import annotations

from typing import Any

from imsearch_align.collection import cost_cells as cc
from imsearch_align.collection.cost_figures import INDEX_TYPES, REFERENCE_TYPE
from imsearch_align.collection.cost_formulas import IndexSpec, memory_per_replica

__all__ = ["memory_ratio", "memory_ratios"]

_GIB = 2**30


def memory_ratio(cells: list[cc.Cell], label: str) -> dict[str, Any] | None:
    """The ratio applied to a type without its own: :data:`REFERENCE_TYPE`'s builds, else
    every build's."""
    return _type_memory_ratio(cells, label, REFERENCE_TYPE) or _type_memory_ratio(cells, label)


def memory_ratios(cells: list[cc.Cell], label: str) -> dict[str, Any]:
    """``{type: figure}``: each index type's own server-memory ratio, of the types measured
    at the largest size any build's RSS was read at (the server's fixed memory is in every
    ratio: at 100k it dominates, FLAT's 100k builds read 4.7-7.8x the formula)."""
    ratios = {t: _type_memory_ratio(cells, label, t) for t in INDEX_TYPES}
    top = max((r["n"] for r in ratios.values() if r is not None), default=0)
    return {t: r for t, r in ratios.items() if r is not None and r["n"] == top}


def _type_memory_ratio(cells: list[cc.Cell], label: str,
                       itype: str | None = None) -> dict[str, Any] | None:  # fmt: skip
    """Per build at the largest size (of ``itype``'s builds; None: of every build), its
    largest server RSS over the memory formula."""
    rss = [(n, c) for n, c in cells if cc.get(c, "memory.kind") == "server_rss"
           and cc.get(c, "memory.bytes") and cc.get(c, "truth.dim") and cc.size(c)
           and itype in (None, cc.itype(c))]  # fmt: skip
    if not rss:
        return None
    top = max(cc.size(c) for _, c in rss)
    builds: dict[str, cc.Cell] = {}
    for n, c in rss:
        key = cc.folder_of(n) + cc.build_key(c)
        if cc.size(c) == top and (
            key not in builds or c["memory"]["bytes"] > builds[key][1]["memory"]["bytes"]
        ):
            builds[key] = (n, c)
    ratios, parts = [], []
    for n, c in builds.values():
        spec = IndexSpec.from_params(cc.itype(c), cc.get(c, "index.params"))
        formula = memory_per_replica(spec, top, int(c["truth"]["dim"])).value
        ratios.append(c["memory"]["bytes"] / formula)
        parts.append(f"{cc.setting(c, search=False)}: {c['memory']['bytes'] / _GIB:.2f} GiB / "
                     f"{formula / _GIB:.2f} GiB = {ratios[-1]:.2f} ({n})")  # fmt: skip
    first = next(iter(builds.values()))[1]
    return {
        **cc.band(ratios), "n": top, "dim": cc.get(first, "truth.dim"), "cores": cc.cores(first),
        "index_types": sorted({cc.itype(c) for _, c in builds.values()}),
        "source": (f"{cc.where(first, label)} server RSS (read once searchable: a lower bound on "
                   f"the peak) over the memory formula, per build at {top:,} rows: "
                   + "; ".join(parts)),
    }  # fmt: skip
