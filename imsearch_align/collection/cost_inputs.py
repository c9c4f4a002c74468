"""The measured inputs of the cost model, derived from a collection study's cells.

:func:`inputs_from_cells` reads a results folder of
``benchmarks/collection.py`` (one JSON per cell) and returns the layout of
``imsearch_align/data/scale_out_inputs.json``, which
:meth:`~imsearch_align.collection.cost_model.MeasuredInputs.from_dict` reads.
Only clean cells (``status.state`` ok) of one store count:

- ``search_qps[type]``: at the largest collection of that index type, the
  deployable setting (:func:`~imsearch_align.collection.deploy.deploy_index`:
  the fastest batched q/s with ANN recall@k >= 0.9, else the most accurate);
- ``build_rows_per_s[type]``: that cell's rows over its build seconds (FLAT
  builds nothing and has none);
- ``insert_rows_per_s``: the median insert of the builds at the largest size;
- ``concurrency``: the concurrency cells of one build (the largest size, an
  IVF_FLAT or HNSW index first), clients ascending;
- ``standalone_peak_rss_bytes``: the largest server RSS (``memory.kind``
  ``server_rss``) a cell recorded.

Each figure's ``source`` says what was measured and ends with the cell's
file name. A figure the folder lacks is kept from ``previous`` (the old
inputs) with its source prefixed :data:`KEPT`; an index type absent from
both stands in with the nearest measured type's figure, saying so.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from imsearch_align.collection.cost_model import INDEX_TYPES
from imsearch_align.collection.deploy import deploy_index
from imsearch_align.experiment.study_cell import CellError, load_cell

__all__ = ["KEPT", "NoCellsError", "inputs_from_cells", "read_cells"]

#: Prefix of the source of a figure kept from the previous inputs.
KEPT = "kept from the previous inputs: "
#: Index types a missing type stands in with, nearest first.
_NEAREST = {
    "FLAT": ("IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW"),
    "IVF_FLAT": ("IVF_SQ8", "IVF_PQ", "FLAT", "HNSW"),
    "IVF_SQ8": ("IVF_FLAT", "IVF_PQ", "FLAT", "HNSW"),
    "IVF_PQ": ("IVF_SQ8", "IVF_FLAT", "FLAT", "HNSW"),
    "HNSW": ("IVF_FLAT", "IVF_SQ8", "IVF_PQ", "FLAT"),
}
_STORE_NAMES = {"milvus": "Milvus", "milvus-lite": "Milvus Lite", "faiss": "FAISS"}
_GIB = 2**30

Cell = tuple[str, dict[str, Any]]


class NoCellsError(ValueError):
    """The folder holds no clean cell of the store."""


def _get(d: Mapping[str, Any] | None, path: str) -> Any:
    """``d["a"]["b"]`` for ``"a.b"``; None where a level is missing."""
    for key in path.split("."):
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def read_cells(folder: str | Path, store: str) -> list[Cell]:
    """The clean ``collection_scale`` and ``concurrency`` cells of ``store`` in
    ``folder``, as ``(file name, cell)`` in file-name order."""

    out = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            cell = load_cell(path)
        except CellError as exc:
            if '"kind"' in path.read_text(encoding="utf-8", errors="replace")[:4096]:
                raise ValueError(f"cell {path.name}: {exc}") from None  # a cell, unreadable
            continue  # not a cell (a CSV's sidecar, a result)
        data = dict(cell.record)
        if cell.ok and cell.kind in ("collection_scale", "concurrency") and cell.store == store:
            _check_figures(path, data)
            out.append((path.name, data))
    return out


#: The figures of a cell the inputs are derived from: each a finite number >= 0 when given.
_FIGURES = ("queries_per_s", "timings.insert_s", "timings.build_s", "timings.load_s",
            "memory.bytes", "collection.size", "concurrency")  # fmt: skip


def _check_figures(path: Path, cell: Mapping[str, Any]) -> None:
    """Refuse a cell whose timing, rate or size is negative or not finite, naming it."""
    for name in _FIGURES:
        v = _get(cell, name)
        if v is None:
            continue
        bad = isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v)
        if bad or v < 0:
            raise ValueError(
                f"cell {path.name}: {name} is {v!r}; expected a finite number >= 0 (a cell "
                "measured wrongly: run it again)"
            )


def _itype(cell: Mapping[str, Any]) -> str:
    return str(_get(cell, "index.type") or "").upper()


def _size(cell: Mapping[str, Any]) -> int:
    return int(_get(cell, "collection.size") or 0)


def _build_key(cell: Mapping[str, Any]) -> str:
    """What one build shares: dataset, direction, method, index type and build
    parameters, collection size."""
    keys = ("dataset", "direction", "method", "index.params", "collection.size")
    return json.dumps([_itype(cell), *(_get(cell, k) for k in keys)], sort_keys=True, default=str)


def _params(d: Mapping[str, Any] | None) -> str:
    return " ".join(f"{k} {v}" for k, v in (d or {}).items())


def _store_label(cells: list[Cell], store: str) -> str:
    """``Milvus 2.3.5``: the store and the server version its cells recorded."""
    versions = {_get(c, "provenance.store.server_version") for _, c in cells} - {None}
    if not versions:
        return _STORE_NAMES.get(store, store)
    text = "/".join(sorted(re.sub(r"^v(?=\d)", "", str(v)) for v in versions))
    if text.startswith("milvus_lite"):
        return f"Milvus Lite ({text})"
    return f"{_STORE_NAMES.get(store, store)} {text}"


def _cores(cell: Mapping[str, Any]) -> int | None:
    c = _get(cell, "provenance.cpu_count")
    return None if c is None else int(c)


def _where(cell: Mapping[str, Any], label: str) -> str:
    """``collection study, 2-core machine: Milvus 2.3.5``."""
    cores = _cores(cell)
    machine = f", {cores}-core machine" if cores else ""
    return f"collection study{machine}: {label}"


def _setting(cell: Mapping[str, Any], *, search: bool = True, dim: Any = None) -> str:
    """``IVF_FLAT nlist 1024 nprobe 16 at 1,009,535 x 384, procrustes``."""
    parts = [_itype(cell), _params(_get(cell, "index.params"))]
    if search:
        parts.append(_params(_get(cell, "index.search_params")))
    head = " ".join(p for p in parts if p)
    d = dim if dim is not None else _get(cell, "truth.dim")
    rows = f"{_size(cell):,} x {d}" if d else f"{_size(cell):,} rows"
    return f"{head} at {rows}, {cell.get('method')}"


def _num(x: Any) -> str:
    return "?" if x is None else f"{x:,}"


def _figure(cell: Mapping[str, Any], **value: float) -> dict[str, Any]:
    return {
        **value,
        "n": _size(cell),
        "dim": _get(cell, "truth.dim"),
        "cores": _cores(cell),
    }


def _search_and_build(cells: list[Cell], label: str) -> tuple[dict, dict]:
    """``search_qps`` and ``build_rows_per_s`` of each index type measured."""
    search: dict[str, Any] = {}
    build: dict[str, Any] = {}
    scale = [(n, c) for n, c in cells if c.get("kind") == "collection_scale"]
    for itype in INDEX_TYPES:
        of_type = [(n, c) for n, c in scale if _itype(c) == itype and _get(c, "truth.dim")]
        if not of_type:
            continue
        top = max(_size(c) for _, c in of_type)
        largest = [(n, c) for n, c in of_type if _size(c) == top]
        i = deploy_index([c for _, c in largest])
        if i is None:
            continue
        name, cell = largest[i]
        qps = cell.get("queries_per_s")
        if qps:
            recall = _get(cell, "ann_recall.mean")
            k = _get(cell, "ann_recall.k")
            search[itype] = {
                **_figure(cell, value=float(qps)),
                "source": (
                    f"{_where(cell, label)} {_setting(cell)}, {_num(cell.get('queries'))} queries "
                    f"in batches of {_num(cell.get('batch'))}, recall@{k} {recall:.3f}, "
                    f"{float(qps):,.0f} q/s (the deployable setting: the fastest with "
                    f"recall >= 0.9, else the most accurate): {name}"
                ),
            }
        build_s = _get(cell, "timings.build_s")
        if itype != "FLAT" and build_s:
            build[itype] = {
                **_figure(cell, count=_size(cell), seconds=float(build_s)),
                "source": (
                    f"{_where(cell, label)} {_setting(cell, search=False)}, "
                    f"built in {float(build_s):,.1f} s: {name}"
                ),
            }
    return search, build


def _insert(cells: list[Cell], label: str) -> dict[str, Any] | None:
    """The median insert among the builds at the largest collection size."""
    timed = [
        (n, c)
        for n, c in cells
        if c.get("kind") == "collection_scale" and _get(c, "timings.insert_s") and _size(c)
    ]
    if not timed:
        return None
    top = max(_size(c) for _, c in timed)
    builds: dict[str, Cell] = {}
    for n, c in timed:
        if _size(c) == top:
            builds.setdefault(_build_key(c), (n, c))
    ranked = sorted(builds.values(), key=lambda nc: (float(nc[1]["timings"]["insert_s"]), nc[0]))
    name, cell = ranked[(len(ranked) - 1) // 2]
    secs = float(cell["timings"]["insert_s"])
    return {
        **_figure(cell, count=top, seconds=secs),
        "source": (
            f"{_where(cell, label)} insert of {top:,} rows in {secs:,.1f} s "
            f"({top / secs:,.0f} rows/s), {_setting(cell, search=False)}; the median of "
            f"{len(ranked)} build{'s' if len(ranked) != 1 else ''} at that size: {name}"
        ),
    }


def _files(names: list[str]) -> str:
    """``concurrency-c{1,2,4}_REST.json`` when the names differ only by level."""
    found = [re.fullmatch(r"concurrency-c(\d+)_(.+)", n) for n in names]
    if all(found) and len({m[2] for m in found if m}) == 1 and len(names) > 1:
        levels = ",".join(m[1] for m in found if m)
        return f"concurrency-c{{{levels}}}_{found[0][2]}"  # type: ignore[index]
    return ", ".join(names)


def _concurrency(cells: list[Cell], label: str) -> dict[str, Any] | None:
    """The concurrency curve of one build: largest size, IVF_FLAT or HNSW first."""
    groups: dict[str, dict[int, Cell]] = {}
    for n, c in cells:
        if c.get("kind") == "concurrency" and c.get("queries_per_s") and c.get("concurrency"):
            key = _build_key(c) + json.dumps(_get(c, "index.search_params"), sort_keys=True)
            groups.setdefault(key, {}).setdefault(int(c["concurrency"]), (n, c))
    if not groups:
        return None

    def rank(g: dict[int, Cell]) -> tuple:
        c = next(iter(g.values()))[1]
        return (_size(c), _itype(c) in ("IVF_FLAT", "HNSW"), len(g), _itype(c) == "IVF_FLAT")

    best = max(groups.values(), key=rank)
    levels = sorted(best)
    first = best[levels[0]][1]
    dims = {
        _get(c, "truth.dim")
        for _, c in cells
        if c.get("kind") == "collection_scale" and _build_key(c) == _build_key(first)
    } - {None}
    dim = dims.pop() if len(dims) == 1 else None
    mode, secs = _get(first, "run.mode"), _get(first, "run.duration_s")
    how = f" ({mode}, {secs:g} s a level)" if mode and secs else ""
    return {
        "clients": levels,
        "qps": [float(best[lv][1]["queries_per_s"]) for lv in levels],
        "cores": _cores(first),
        "source": (
            f"{_where(first, label)} {_setting(first, dim=dim)}, "
            f"single queries from {levels[0]}-{levels[-1]} clients{how}: "
            f"{_files([best[lv][0] for lv in levels])}"
        ),
    }


def _peak(cells: list[Cell], label: str) -> dict[str, Any] | None:
    """The largest server RSS a cell recorded."""
    rss = [
        (int(_get(c, "memory.bytes")), n, c)
        for n, c in cells
        if _get(c, "memory.kind") == "server_rss" and _get(c, "memory.bytes")
    ]
    if not rss:
        return None
    value, name, cell = max(rss, key=lambda t: (t[0], t[1]))
    return {
        **_figure(cell, value=value),
        "source": (
            f"{_where(cell, label)} server RSS {value / _GIB:.1f} GiB once "
            f"{_setting(cell, search=False)} was built and loaded, the largest of "
            f"{len(rss)} cells (read when searchable, so a lower bound on the peak): {name}"
        ),
    }


def _kept(fig: Mapping[str, Any]) -> dict[str, Any]:
    src = str(fig["source"])
    return {**fig, "source": src if src.startswith(KEPT) else KEPT + src}


def _fill(table: dict[str, Any], previous: Mapping[str, Any] | None, what: str) -> None:
    """Types absent from ``table``: kept from ``previous``, else the nearest type's."""
    measured = dict(table)
    before = (previous or {}).get(what) or {}
    wanted = [t for t in INDEX_TYPES if not (what == "build_rows_per_s" and t == "FLAT")]
    for itype in wanted:
        if itype in table:
            continue
        if itype in before:
            table[itype] = _kept(before[itype])
            continue
        near = next((t for t in _NEAREST[itype] if t in measured), None)
        if near is not None:
            fig = measured[near]
            table[itype] = {
                **fig,
                "source": f"stand-in: {near}'s figure ({itype} was not measured); {fig['source']}",
            }
    for itype, fig in before.items():  # other types the previous inputs had
        table.setdefault(itype, _kept(fig))


def inputs_from_cells(
    folder: str | Path | Sequence[str | Path],
    *,
    store: str = "milvus",
    previous: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON layout of ``scale_out_inputs.json`` from the cells in ``folder``.

    Args:
        folder: a results folder of ``benchmarks/collection.py``, or several (their
            cells are read together: the default study and a production-conditions one).
        store: the store whose cells count (``milvus``, ``faiss``...).
        previous: the old inputs; figures the folder lacks are kept from it.

    Raises:
        NoCellsError: the folder holds no clean cell of ``store``.
        ValueError: the insert rate or the concurrency curve is neither in the
            folder nor in ``previous``.
    """
    folders = [folder] if isinstance(folder, str | Path) else list(folder)
    for f in folders:
        if not Path(f).is_dir():
            raise NoCellsError(f"{f} is not a folder (store {store!r})")
    folder = ", ".join(str(f) for f in folders)
    cells = [c for f in folders for c in read_cells(f, store)]
    if not cells:
        raise NoCellsError(f"{folder} holds no clean cell of store {store!r}")
    label = _store_label(cells, store)
    search, build = _search_and_build(cells, label)
    _fill(search, previous, "search_qps")
    _fill(build, previous, "build_rows_per_s")
    out: dict[str, Any] = {"search_qps": search, "build_rows_per_s": build}
    for key, derive in (
        ("insert_rows_per_s", _insert),
        ("concurrency", _concurrency),
        ("standalone_peak_rss_bytes", _peak),
    ):
        fig = derive(cells, label)
        if fig is None and previous is not None and previous.get(key) is not None:
            fig = _kept(previous[key])
        if fig is None and key != "standalone_peak_rss_bytes":
            raise ValueError(f"{folder} has no {key} of store {store!r}, nor the previous inputs")
        if fig is not None:
            out[key] = fig
    study = sorted(cells, key=lambda nc: nc[1].get("kind") != "collection_scale")
    command = next((c.get("command") for _, c in study if c.get("command")), None)
    made = f" by `{shlex.join(map(str, command))}`" if command else ""
    out = {
        "about": (
            f"Measured inputs of imsearch_align.collection.cost_model (docs/scale-out.md), "
            f"derived by benchmarks/scale_out.py from the {label} cells of the collection study "
            f"in {folder}{made}. A figure is value, or count / seconds; n and dim are the "
            "collection it was measured on, cores the machine's. A source starting "
            f"'{KEPT.strip()}' was not in that folder."
        ),
        **out,
    }
    return out
