"""The measured inputs of the cost model, derived from collection studies' cells.

:func:`inputs_from_cells` reads results folders of ``imsearch-align study`` (one JSON
per cell; :mod:`.cost_cells`) and returns the layout of
``imsearch_align/data/scale_out_inputs.json`` (:mod:`.cost_figures`). Only clean cells
of one store count; repeats of one measurement (the same setting in several folders,
a cell's counted passes) give each figure its median and its low-high band:

- ``search_qps[type].batched``: at the largest collection of the type, the deployable
  setting (:func:`~imsearch_align.experiment.deploy.deploy_index` on the repeats'
  median q/s), with the task quality it was measured at and what bounded it
  (:func:`~imsearch_align.collection.cost_cells.bound`);
- ``search_qps[type].single``: the plateau of the type's concurrency cells (the levels
  within 90 % of the highest) at its largest size: one query per request;
- ``build_rows_per_s[type]``: rows over the build without the load wait (``build_s -
  load_s``); ``load_rows_per_s[type]``: rows over ``load_s`` (a wait of 1 s or more);
- ``insert_rows_per_s``: the builds at the largest size, in rows/s of the median one's
  dimension (the others scaled by row bytes);
- ``concurrency``: one build's curve (the largest size, IVF_FLAT or HNSW first);
- ``server_memory_ratio``: per build at the largest size, the largest server RSS a cell
  read over the memory formula;
- ``core_scaling`` and ``segment_mb`` are not in cells: kept from ``previous``.

A figure the folders lack is kept from ``previous`` (source prefixed :data:`KEPT`)
when it was measured there; otherwise it is ``value: null`` with a source that starts
:data:`NOT_MEASURED` and names the command that measures it. No stand-ins.
"""

from __future__ import annotations

import shlex
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from imsearch_align.collection import cost_cells as cc
from imsearch_align.collection.cost_figures import DEFAULT_SEGMENT_MB, INDEX_TYPES, MODES
from imsearch_align.collection.cost_memory import memory_ratio, memory_ratios
from imsearch_align.experiment.deploy import deploy_index
from imsearch_align.framework.secrets import redact_uris

__all__ = ["KEPT", "NOT_MEASURED", "NoCellsError", "inputs_from_cells", "measure_command"]

KEPT = "kept from the previous inputs: "
NOT_MEASURED = "not measured: "
#: Each index type as the study's ``--index`` measures it, on which method, at what size
#: (HNSW at 1M, where its index, not the RPC path, bounds q/s; FLAT at 100k, the study's
#: exact ceiling). IVF_PQ's ``m`` must divide the aligned dimension: procrustes on the
#: shapes data has 381 = 3 x 127 (m 127 builds 1M rows in about an hour on 2 cores), so
#: IVF_PQ is measured on csa's 256 (m 32; ``benchmarks/studies/cost_pq.yaml``).
_INDEX = {
    "FLAT": ("milvus:FLAT", "procrustes", 100_000),
    "IVF_FLAT": ("milvus:IVF_FLAT:nlist=1024,nprobe=4,16,64", "procrustes", 1_000_000),
    "IVF_SQ8": ("milvus:IVF_SQ8:nlist=1024,nprobe=4,16,64", "procrustes", 1_000_000),
    "IVF_PQ": ("milvus:IVF_PQ:nlist=1024,m=32,nprobe=4,16,64", "csa", 1_000_000),
    "HNSW": ("milvus:HNSW:M=16,efConstruction=100,ef=16,64,128", "procrustes", 1_000_000),
}


class NoCellsError(ValueError):
    """The folder holds no clean cell of the store."""


def measure_command(kind: str, what: str) -> str:
    """The command that measures ``what`` of ``kind`` (``single``, ``batched``, ``build``,
    ``load``, ``cores``), then the one that stores it."""
    if what == "cores":
        return (f"python benchmarks/scale_out.py --measure-cores --index {kind} "
                "--server-cores 0 0,1 --client-cores 2,3 --write")  # fmt: skip
    index, method, rows = _INDEX[kind]
    conc = " --concurrency 1 2 4 8 16" if what == "single" else ""
    out = f"benchmarks/results/collection_{kind.lower()}"
    return (
        f"imsearch-align study --shapes 10000 --shapes-root DIR --methods {method} "
        f"--stores milvus --uri http://HOST:19530 --sizes {rows} --index {index}{conc} "
        f"--out {out}; then python benchmarks/scale_out.py FOLDERS... {out} --write"
    )


def _not_measured(kind: str, what: str, why: str) -> dict[str, Any]:
    return {"value": None, "source": f"{NOT_MEASURED}{why}; measure: {measure_command(kind, what)}"}


def _largest(cells: list[cc.Cell], kind: str, itype: str) -> list[cc.Cell]:
    """The cells of ``kind`` and index type at that type's largest collection."""
    of = [(n, c) for n, c in cells if c.get("kind") == kind and cc.itype(c) == itype]
    top = max((cc.size(c) for _, c in of), default=0)
    return [(n, c) for n, c in of if cc.size(c) == top and top]


def _groups(cells: list[cc.Cell], key: Any) -> dict[str, list[cc.Cell]]:
    out: dict[str, list[cc.Cell]] = {}
    for n, c in cells:
        out.setdefault(key(c), []).append((n, c))
    return out


def _batched(cells: list[cc.Cell], label: str) -> tuple[dict, dict[str, list[cc.Cell]]]:
    """``{type: figure}`` and ``{type: the repeats of the deployable setting}``."""
    search, chosen = {}, {}
    for itype in INDEX_TYPES:
        largest = [(n, c) for n, c in _largest(cells, "collection_scale", itype)
                   if cc.get(c, "truth.dim") and c.get("queries_per_s")]  # fmt: skip
        groups = list(_groups(largest, cc.setting_key).values())
        reps = [{**g[0][1], "queries_per_s": cc.qps_band([c for _, c in g])["value"]}
                for g in groups]  # fmt: skip
        i = deploy_index(reps) if reps else None
        if i is None:
            continue
        group = chosen[itype] = groups[i]
        name, cell = group[0]
        b = cc.qps_band([c for _, c in group])
        here = [c for n, c in cells if cc.folder_of(n) == cc.folder_of(name)]
        key = cc.build_key(cell)
        sweep = [c for c in here if c.get("kind") == "collection_scale" and cc.build_key(c) == key]
        bound, why = cc.bound(sweep)
        if bound is None:  # one setting (FLAT): did q/s fall with the rows, as the work does?
            bound, why = cc.size_bound([c for c in here if cc.same_but_size(c, cell)], cell)
        what = cc.setting(cell)
        reps_text = ", ".join(f"{float(c['queries_per_s']):,.0f}" for _, c in group)
        search[itype] = {
            **b, "n": cc.size(cell), "dim": cc.get(cell, "truth.dim"), "cores": cc.cores(cell),
            "bound": bound, "bound_why": why, "quality": cc.quality(cell, what),
            "source": (
                f"{cc.where(cell, label)} {what}, {cell.get('queries'):,} queries in batches of "
                f"{cell.get('batch')}, recall@{cc.get(cell, 'ann_recall.k')} "
                f"{cc.get(cell, 'ann_recall.mean'):.3f} (the deployable setting: the fastest "
                f"with recall >= 0.9, else the most accurate); q/s of {len(group)} repeat(s) "
                f"{reps_text}: {', '.join(n for n, _ in group)}"
            ),
        }  # fmt: skip
    return search, chosen


def _single(cells: list[cc.Cell], label: str) -> dict[str, Any]:
    """``{type: figure}``: the plateau of the type's concurrency cells at its largest size."""
    out = {}
    for itype in INDEX_TYPES:
        groups = _groups(_largest(cells, "concurrency", itype), cc.setting_key)
        if not groups:
            continue
        group = max(groups.values(), key=lambda g: (len({c["concurrency"] for _, c in g}), g[0][0]))
        levels: dict[int, list[float]] = {}
        for _, c in group:
            levels.setdefault(int(c["concurrency"]), []).append(float(c["queries_per_s"]))
        top = max(statistics.median(v) for v in levels.values())
        plateau = sorted(lv for lv, v in levels.items() if statistics.median(v) >= 0.9 * top)
        values = [q for lv in plateau for q in levels[lv]]
        first = group[0][1]
        scale = [c for _, c in cells if c.get("kind") == "collection_scale"
                 and cc.setting_key(c) == cc.setting_key(first)]  # fmt: skip
        dim = _dim_of(cells, first)
        what = cc.setting(first, dim=dim)
        q = cc.quality(scale[0], what) if scale else cc.quality(first, what + ", answered queries")
        mode, secs = cc.get(first, "run.mode"), cc.get(first, "run.duration_s")
        how = f" ({mode}, {secs:g} s a level)" if mode and secs else ""
        out[itype] = {
            **cc.band(values), "n": cc.size(first), "dim": dim, "cores": cc.cores(first),
            "quality": q, "clients": plateau,
            "source": (
                f"{cc.where(first, label)} {what}, one query a request from "
                f"{min(levels)}-{max(levels)} clients{how}; the plateau (levels within 90 % of "
                f"the highest) {', '.join(map(str, plateau))} clients: "
                f"{', '.join(f'{v:,.0f}' for v in values)} q/s: "
                f"{cc.files(sorted((n for n, _ in group), key=_level_order))}"
            ),
        }  # fmt: skip
    return out


def _dim_of(cells: list[cc.Cell], cell: dict[str, Any]) -> Any:
    """The dimension of a concurrency cell's build (its sweep cells record it)."""
    key = cc.build_key(cell)
    dims = (cc.get(c, "truth.dim") for _, c in cells
            if c.get("kind") == "collection_scale" and cc.build_key(c) == key)  # fmt: skip
    return next((d for d in dims if d), None)


def _level_order(name: str) -> tuple[str, int]:
    head, _, rest = name.partition("concurrency-c")
    digits = rest.split("_", 1)[0]
    return head, int(digits) if digits.isdigit() else 0


def _build_and_load(cells: list[cc.Cell], chosen: Mapping[str, list[cc.Cell]], label: str):
    """``build_rows_per_s`` and ``load_rows_per_s`` of the chosen settings' builds."""
    build, load = {}, {}
    for itype, group in chosen.items():
        builds = {}  # one per folder: the cells of one build share its timings
        for name, c in group:
            builds.setdefault(cc.folder_of(name), (name, c))
        b_rates, l_rates, parts = [], [], []
        for _, c in builds.values():
            t = c.get("timings") or {}
            total, wait = t.get("build_s"), t.get("load_s")
            if total and wait is not None and total > wait:
                b_rates.append(cc.size(c) / (total - wait))
                parts.append(f"{total - wait:,.1f} s ({total:,.1f} build_s - {wait:,.1f} load_s)")
            if wait is not None and wait >= 1.0:
                l_rates.append(cc.size(c) / wait)
        name, cell = group[0]
        head = {"n": cc.size(cell), "dim": cc.get(cell, "truth.dim"), "cores": cc.cores(cell)}
        files = ", ".join(n for n, _ in builds.values())
        what = f"{cc.where(cell, label)} {cc.setting(cell, search=False)}"
        if b_rates and itype != "FLAT":
            build[itype] = {**cc.band(b_rates), **head, "source": (
                f"{what}, built without the load wait in {'; '.join(parts)}: {files}")}  # fmt: skip
        if l_rates:
            rates = ", ".join(f"{r:,.0f}" for r in l_rates)
            load[itype] = {**cc.band(l_rates), **head,
                           "source": f"{what}, loaded at {rates} rows/s: {files}"}  # fmt: skip
    return build, load


def _insert(cells: list[cc.Cell], label: str) -> dict[str, Any] | None:
    """The builds at the largest size: the median one's rows/s, the band in its dimension."""
    timed = [(n, c) for n, c in cells if c.get("kind") == "collection_scale"
             and cc.get(c, "timings.insert_s") and cc.size(c)
             and cc.get(c, "truth.dim")]  # fmt: skip
    if not timed:
        return None
    top = max(cc.size(c) for _, c in timed)
    builds: dict[str, cc.Cell] = {}
    for n, c in timed:
        if cc.size(c) == top:
            builds.setdefault(cc.folder_of(n) + cc.build_key(c), (n, c))
    ranked = sorted(builds.values(), key=lambda nc: (float(nc[1]["timings"]["insert_s"]), nc[0]))
    name, cell = ranked[(len(ranked) - 1) // 2]
    dim = int(cell["truth"]["dim"])
    rates = [top / float(c["timings"]["insert_s"]) * (4 * c["truth"]["dim"] + 8) / (4 * dim + 8)
             for _, c in ranked]  # fmt: skip
    secs = float(cell["timings"]["insert_s"])
    return {
        **cc.band(rates), "value": top / secs, "n": top, "dim": dim, "cores": cc.cores(cell),
        "source": (
            f"{cc.where(cell, label)} insert of {top:,} rows in {secs:,.1f} s ({top / secs:,.0f} "
            f"rows/s), {cc.setting(cell, search=False)}; the median of {len(ranked)} build(s) at "
            f"that size, in rows/s of {dim} dimensions {', '.join(f'{r:,.0f}' for r in rates)}: "
            f"{name}"
        ),
    }  # fmt: skip


def _concurrency(cells: list[cc.Cell], label: str) -> dict[str, Any] | None:
    """The concurrency curve of one build: largest size, IVF_FLAT or HNSW first."""
    groups: dict[str, dict[int, cc.Cell]] = {}
    for n, c in cells:
        if c.get("kind") == "concurrency" and c.get("queries_per_s") and c.get("concurrency"):
            groups.setdefault(cc.setting_key(c), {}).setdefault(int(c["concurrency"]), (n, c))
    if not groups:
        return None

    def rank(g: dict[int, cc.Cell]) -> tuple:
        c = next(iter(g.values()))[1]
        return (cc.size(c), cc.itype(c) in ("IVF_FLAT", "HNSW"), len(g), cc.itype(c) == "IVF_FLAT")

    best = max(groups.values(), key=rank)
    levels = sorted(best)
    first = best[levels[0]][1]
    dim = _dim_of(cells, first)
    return {
        "clients": levels,
        "qps": [float(best[lv][1]["queries_per_s"]) for lv in levels],
        "cores": cc.cores(first),
        "source": (f"{cc.where(first, label)} {cc.setting(first, dim=dim)}, single queries from "
                   f"{levels[0]}-{levels[-1]} clients: {cc.files([best[lv][0] for lv in levels])}"),
    }  # fmt: skip


def _kept(fig: Any) -> dict[str, Any] | None:
    """A measured figure of the previous inputs, its source prefixed :data:`KEPT`."""
    if not isinstance(fig, Mapping) or fig.get("value", fig.get("count")) is None:
        return None
    src = str(fig.get("source", ""))
    if "stand-in" in src or not ("value" in fig or "seconds" in fig):
        return None
    return {**fig, "source": src if src.startswith(KEPT) else KEPT + src}


def _complete(out: dict[str, Any], previous: Mapping[str, Any] | None) -> None:
    """Every figure the folders lack: kept from ``previous`` when measured there, else null."""
    prev = previous or {}
    for itype in INDEX_TYPES:
        modes = out["search_qps"].setdefault(itype, {})
        for m in MODES:
            if m not in modes:
                old = _kept(cc.get(prev, f"search_qps.{itype}.{m}"))
                why = f"no clean cell of {itype} ({m}) in the folders read"
                modes[m] = old or _not_measured(itype, m, why)
        for key, what in (("build_rows_per_s", "build"), ("load_rows_per_s", "load")):
            if itype not in out[key] and not (itype == "FLAT" and what == "build"):
                old = _kept(cc.get(prev, f"{key}.{itype}"))
                why = f"no clean cell of {itype} with a {what} time in the folders read"
                out[key][itype] = old or _not_measured(itype, "build", why)
    out["core_scaling"] = prev.get("core_scaling") or {
        "about": "q/s (rows/s for build) of one server pinned to 1 and to 2 cores, clients on "
                 "other cores; null: not measured (the model then assumes linear scaling)",
        **{t: {"single": {"1": None, "2": None}, "batched": {"1": None, "2": None},
               "build": {"1": None, "2": None},
               "source": f"{NOT_MEASURED}no server pinned to 1 and 2 cores yet; measure: "
                         f"{measure_command(t, 'cores')}"}
           for t in INDEX_TYPES},
    }  # fmt: skip
    out["segment_mb"] = prev.get("segment_mb") or {
        "value": DEFAULT_SEGMENT_MB,
        "source": "Milvus 2.3.5 milvus.yaml dataCoord.segment.maxSize (a server setting, not a "
                  "measurement: set it to your cluster's)",
    }  # fmt: skip


def inputs_from_cells(
    folder: str | Path | Sequence[str | Path],
    *,
    store: str = "milvus",
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON layout of ``scale_out_inputs.json`` from the cells in ``folder`` (or several
    folders, read together; repeats across them give the bands).

    Raises:
        NoCellsError: the folders hold no clean cell of ``store``.
        ValueError: the insert rate is neither in the folders nor in ``previous``; a cell
            with a negative or non-finite figure (named).
    """
    folders = [folder] if isinstance(folder, str | Path) else list(folder)
    for f in folders:
        if not Path(f).is_dir():
            raise NoCellsError(f"{f} is not a folder (store {store!r})")
    where = ", ".join(str(f) for f in folders)
    cells = [c for f in folders for c in cc.read_cells(f, store)]
    if not cells:
        raise NoCellsError(f"{where} holds no clean cell of store {store!r}")
    label = cc.store_label(cells, store)
    batched, chosen = _batched(cells, label)
    single = _single(cells, label)
    build, load = _build_and_load(cells, chosen, label)
    search = {t: {**({"single": single[t]} if t in single else {}),
                  **({"batched": batched[t]} if t in batched else {})}
              for t in INDEX_TYPES if t in single or t in batched}  # fmt: skip
    out: dict[str, Any] = {"search_qps": search, "build_rows_per_s": build,
                           "load_rows_per_s": load}  # fmt: skip
    for key, derive in (("insert_rows_per_s", _insert), ("concurrency", _concurrency),
                        ("server_memory_ratio", memory_ratio)):  # fmt: skip
        fig = derive(cells, label) or _kept((previous or {}).get(key))
        if fig is None and key == "insert_rows_per_s":
            raise ValueError(f"{where} has no {key} of store {store!r}, nor the previous inputs")
        if fig is not None:
            out[key] = fig
    by_type = memory_ratios(cells, label)
    for itype, fig in ((previous or {}).get("server_memory_ratio_by_type") or {}).items():
        if itype not in by_type and (kept := _kept(fig)) is not None:
            by_type[itype] = kept
    if by_type:
        out["server_memory_ratio_by_type"] = by_type
    _complete(out, previous)
    study = sorted(cells, key=lambda nc: nc[1].get("kind") != "collection_scale")
    command = next((c.get("command") for _, c in study if c.get("command")), None)
    made = f" by `{shlex.join(map(str, command))}`" if command else ""
    about = (
        f"Measured inputs of imsearch_align.collection.cost_model (docs/scale-out.md), derived "
        f"by benchmarks/scale_out.py from the {label} cells of the collection study in {where}"
        f"{made}. A figure is value (null: not measured) within [low, high], the repeats' "
        "median and extremes; n and dim are the collection it was measured on, cores the "
        f"machine's. A source starting '{KEPT.strip()}' was not in those folders."
    )
    return {"about": redact_uris(about), **out}
