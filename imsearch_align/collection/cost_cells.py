"""The study cells the cost model's inputs are read from: reading them (clean cells of one
store, figures checked), naming what they measured, pooling repeats of one measurement
into a value and a band, what bounded a q/s figure, and the task quality it was measured at.

A **repeat** is a cell of the same measurement (store, method, index type and build and
search parameters, collection size) in another results folder, or one counted pass of
the cell itself (``queries_per_s_range``). A figure's value is the median of its
repeats' values, its band the least and the most any of them gave.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from imsearch_align.experiment.study_cell import CellError, load_cell

__all__ = ["Cell", "band", "bound", "build_key", "get", "quality", "read_cells", "setting_key"]

Cell = tuple[str, dict[str, Any]]
_STORE_NAMES = {"milvus": "Milvus", "milvus-lite": "Milvus Lite", "faiss": "FAISS"}
#: q/s that falls less than this from the cheapest to the costliest search setting of one
#: build (or does not fall at every step) was bounded by the RPC path, not the index.
INDEX_BOUND_FALL = 1.5


def get(d: Mapping[str, Any] | None, path: str) -> Any:
    """``d["a"]["b"]`` for ``"a.b"``; None where a level is missing."""
    for key in path.split("."):
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


def read_cells(folder: str | Path, store: str) -> list[Cell]:
    """The clean ``collection_scale`` and ``concurrency`` cells of ``store`` in ``folder``,
    as ``("<folder name>/<file name>", cell)`` in file-name order; a cell with a negative or
    non-finite figure raises ValueError naming its file."""
    folder = Path(folder)
    out = []
    for path in sorted(folder.glob("*.json")):
        try:
            cell = load_cell(path)
        except CellError as exc:
            if '"kind"' in path.read_text(encoding="utf-8", errors="replace")[:4096]:
                raise ValueError(f"cell {path.name}: {exc}") from None  # a cell, unreadable
            continue  # not a cell (a CSV's sidecar, a result)
        data = dict(cell.record)
        if cell.ok and cell.kind in ("collection_scale", "concurrency") and cell.store == store:
            _check_figures(path, data)
            out.append((f"{folder.name}/{path.name}", data))
    return out


#: The figures of a cell the inputs are derived from: each a finite number >= 0 when given.
_FIGURES = ("queries_per_s", "queries_per_s_range", "timings.insert_s", "timings.build_s",
            "timings.load_s", "timings.ready.index_s", "memory.bytes", "collection.size",
            "concurrency")  # fmt: skip


def _check_figures(path: Path, cell: Mapping[str, Any]) -> None:
    """Refuse a cell whose timing, rate or size is negative or not finite, naming it."""
    for name in _FIGURES:
        v = get(cell, name)
        for x in v if isinstance(v, list) else [v]:
            if x is None:
                continue
            bad = isinstance(x, bool) or not isinstance(x, int | float) or not math.isfinite(x)
            if bad or x < 0:
                raise ValueError(
                    f"cell {path.name}: {name} is {v!r}; expected a finite number >= 0 (a "
                    "cell measured wrongly: run it again)"
                )


def itype(cell: Mapping[str, Any]) -> str:
    return str(get(cell, "index.type") or "").upper()


def size(cell: Mapping[str, Any]) -> int:
    return int(get(cell, "collection.size") or 0)


def build_key(cell: Mapping[str, Any]) -> str:
    """What one build shares: dataset, direction, method, index type and build parameters,
    collection size."""
    keys = ("dataset", "direction", "method", "index.params", "collection.size")
    return json.dumps([itype(cell), *(get(cell, k) for k in keys)], sort_keys=True, default=str)


def setting_key(cell: Mapping[str, Any]) -> str:
    """One measurement: the build and the search parameters."""
    return build_key(cell) + json.dumps(get(cell, "index.search_params"), sort_keys=True)


def folder_of(name: str) -> str:
    return name.split("/", 1)[0]


def params(d: Mapping[str, Any] | None) -> str:
    return " ".join(f"{k} {v}" for k, v in (d or {}).items())


def store_label(cells: list[Cell], store: str) -> str:
    """``Milvus 2.3.5``: the store and the server version its cells recorded."""
    versions = {get(c, "provenance.store.server_version") for _, c in cells} - {None}
    if not versions:
        return _STORE_NAMES.get(store, store)
    text = "/".join(sorted(re.sub(r"^v(?=\d)", "", str(v)) for v in versions))
    if text.startswith("milvus_lite"):
        return f"Milvus Lite ({text})"
    return f"{_STORE_NAMES.get(store, store)} {text}"


def cores(cell: Mapping[str, Any]) -> int | None:
    c = get(cell, "provenance.cpu_count")
    return None if c is None else int(c)


def where(cell: Mapping[str, Any], label: str) -> str:
    """``collection study, 2-core machine: Milvus 2.3.5``."""
    c = cores(cell)
    return f"collection study{f', {c}-core machine' if c else ''}: {label}"


def setting(cell: Mapping[str, Any], *, search: bool = True, dim: Any = None) -> str:
    """``IVF_FLAT nlist 1024 nprobe 16 at 1,009,535 x 384, procrustes``."""
    parts = [itype(cell), params(get(cell, "index.params"))]
    if search:
        parts.append(params(get(cell, "index.search_params")))
    head = " ".join(p for p in parts if p)
    d = dim if dim is not None else get(cell, "truth.dim")
    rows = f"{size(cell):,} x {d}" if d else f"{size(cell):,} rows"
    return f"{head} at {rows}, {cell.get('method')}"


def band(values: Sequence[float], spans: Sequence[Sequence[float]] = ()) -> dict[str, float]:
    """``{value, low, high}``: the median of ``values``; the least and the most of the
    values and of each repeat's own ``[min, max]`` in ``spans``."""
    every = [*values, *(x for s in spans for x in s)]
    return {"value": float(statistics.median(values)), "low": float(min(every)),
            "high": float(max(every))}  # fmt: skip


def qps_band(cells: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """The band of the q/s of repeats of one measurement (their passes' ranges too)."""
    spans = [c["queries_per_s_range"] for c in cells if c.get("queries_per_s_range")]
    return band([float(c["queries_per_s"]) for c in cells], spans)


def bound(sweep: Sequence[Mapping[str, Any]]) -> tuple[str | None, str]:
    """``("index" | "rpc" | None, why)`` for the cells of one build (its search settings,
    one folder): the index bounds q/s when q/s falls at every costlier setting and by at
    least :data:`INDEX_BOUND_FALL` from the cheapest to the costliest; one setting: None."""
    pts = []
    for c in sweep:
        sp = get(c, "index.search_params") or {}
        if len(sp) == 1 and c.get("queries_per_s"):
            (name, v), = sp.items()  # fmt: skip
            pts.append((float(v), name, float(c["queries_per_s"])))
    pts.sort()
    if len(pts) < 2:
        return None, "one search setting: what bounds its q/s is not known"
    falls = all(b[2] < a[2] for a, b in itertools.pairwise(pts))
    fall = pts[0][2] / pts[-1][2]
    name = pts[0][1]
    why = (f"{pts[0][2]:,.0f} q/s at {name} {pts[0][0]:g} and {pts[-1][2]:,.0f} at {name} "
           f"{pts[-1][0]:g}: " + ", ".join(f"{q:,.0f}" for _, _, q in pts))  # fmt: skip
    return ("index" if falls and fall >= INDEX_BOUND_FALL else "rpc"), why


def same_but_size(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether ``a`` and ``b`` measure the same setting at (maybe) another collection size."""
    keys = ("kind", "dataset", "direction", "method", "index.type", "index.params",
            "index.search_params", "truth.dim")  # fmt: skip
    return all(get(a, k) == get(b, k) for k in keys)


def size_bound(
    cells: Sequence[Mapping[str, Any]], cell: Mapping[str, Any]
) -> tuple[str | None, str]:
    """What bounded the q/s of ``cell``, whose build has one setting (FLAT), read from the
    same setting at the smallest other size: the index when q/s fell by at least
    :data:`INDEX_BOUND_FALL` as the rows grew at least 4x."""
    smaller = [c for c in cells if 0 < size(c) * 4 <= size(cell) and c.get("queries_per_s")]
    if not smaller or not cell.get("queries_per_s"):
        return None, "one search setting and no smaller collection: not known"
    low = min(smaller, key=size)
    fall = float(low["queries_per_s"]) / float(cell["queries_per_s"])
    why = (f"{float(low['queries_per_s']):,.0f} q/s at {size(low):,} rows and "
           f"{float(cell['queries_per_s']):,.0f} at {size(cell):,}")  # fmt: skip
    return ("index" if fall >= INDEX_BOUND_FALL else "rpc"), why


def quality(cell: Mapping[str, Any], what: str) -> dict[str, Any] | None:
    """The task quality the cell's q/s was measured at: its direction's HitRate@10 (else
    the largest HitRate@k), the cell's bootstrap interval of it when it has one."""
    metrics = cell.get("metrics") or {}
    d = cell.get("direction", "t2i")
    names = sorted((m for m in metrics if m.startswith(f"{d}/HitRate@")),
                   key=lambda m: (m != f"{d}/HitRate@10", -int(m.rsplit("@", 1)[1])))  # fmt: skip
    if not names:
        return None
    m = names[0]
    iv = get(cell.get("intervals"), m) or {}
    approx = iv.get("approximate") if isinstance(iv, Mapping) else None
    low, high = (approx or {}).get("low"), (approx or {}).get("high")
    return {
        "measure": m,
        "value": float(metrics[m]),
        "low": None if low is None else float(low),
        "high": None if high is None else float(high),
        "exact": (cell.get("exact_metrics") or {}).get(m),
        "setting": what,
    }


def files(names: list[str]) -> str:
    """``folder/concurrency-c{1,2,4}_REST.json`` when the names differ only by level."""
    found = [re.fullmatch(r"(.*/)?concurrency-c(\d+)_(.+)", n) for n in names]
    if all(found) and len({(m[1], m[3]) for m in found if m}) == 1 and len(names) > 1:
        levels = ",".join(m[2] for m in found if m)
        head = found[0][1] or ""  # type: ignore[index]
        return f"{head}concurrency-c{{{levels}}}_{found[0][3]}"  # type: ignore[index]
    return ", ".join(names)
