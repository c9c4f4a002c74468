"""A study cell: the one result type of the collection study, its one writer and its one reader.

The collection study (:mod:`imsearch_align.study`), its filtered searches and
the concurrency runner write one JSON object per cell through
:func:`write_cell`, which stamps :data:`CELL_FORMAT` on every kind and
refuses a cell its own reader would refuse. :func:`read_cell` (a JSON
object) and :func:`load_cell` (a file) give a typed :class:`StudyCell`;
the report, the leaderboards, the cost model's inputs, ``--skip-existing``
and the deploy rule all read cells through them. ``StudyCell.record`` keeps
the whole object (timings, memory, truth, the run's checks), so nothing a
writer adds is lost to a reader. A cell without ``format`` (concurrency
cells written before every kind had one, cells written by hand) reads as
``collection-cell/1``; another format is refused.
Dotted names below are nested keys (``collection.size`` is
``{"collection": {"size": ...}}``).

Every kind:

* ``format``: :data:`CELL_FORMAT`.
* ``kind``: ``"collection_scale"`` (a sweep cell), ``"concurrency"`` or ``"filtered"``.
* ``store``, ``method`` (str, required); ``dataset``, ``direction``
  (``t2i`` by default), optional.
* ``index.type`` (``HNSW``, ``IVF_FLAT``, ``FLAT``...; default the store's
  name), ``index.params`` (build-time settings), ``index.search_params``
  (search-time settings: ``ef``, ``nprobe``...). A ``FLAT`` index (or the
  ``exact`` store) is exact search: the ceiling of the quality charts.
* ``collection.size``: the items searched (test items plus distractors).
* ``metrics``: quality by flat name, as :attr:`ExperimentResult.metrics`
  spells them (``t2i/HitRate@10``, ``t2i/nDCG@10``, ``t2i/ann_recall@10``;
  the direction prefix may be left out); ``exact_metrics``, optional: the
  same measures of exact search over the same collection (the ceiling the
  approximate index is held against).
* ``queries_per_s`` (float); ``latency_ms.p50`` / ``.p95`` / ``.p99``.
* ``status``: ``{"state": "ok"|"degraded"|"failed", "reasons": [...],
  "error": ...}`` (default ok); ``provenance``: as a result's;
  ``command``: the command line that made the cell (a string or a list of
  words).

No cell holds an absolute path of the machine that wrote it (:func:`portable_paths`):
one inside the study folder is written relative to it (``.``, ``.stores/x``), any
other as ``<outside>/`` and its last component; one it cannot rewrite (a key) is
refused (:class:`CellPathError`).

Per kind, required unless the cell failed:

* ``collection_scale``: ``collection.size``, ``queries_per_s``, ``metrics``.
* ``concurrency``: ``concurrency`` (concurrent clients, >= 1), ``queries_per_s``.
* ``filtered``: ``filter.selectivity`` (the share of the collection the
  filter keeps, in (0, 1]), ``metrics`` (ANN recall against the exact
  filtered truth as ``ann_recall@k``); ``filter.expression`` optional;
  ``filter.returned_ids`` and ``filter.outside_filter``, optional: every id the
  store returned was checked against the ids the filter keeps, and a cell with
  any outside it is ``degraded``.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from types import MappingProxyType
from typing import Any

import numpy as np

from imsearch_align.experiment.provenance import Provenance
from imsearch_align.experiment.result import RunStatus
from imsearch_align.framework.atomic import atomic_write

__all__ = [
    "CELL_FORMAT",
    "CELL_KINDS",
    "EXACT_INDEX_TYPES",
    "MANIFEST_DIR",
    "OUTSIDE",
    "CellError",
    "CellPathError",
    "StudyCell",
    "absolute_paths",
    "is_cell",
    "load_cell",
    "portable_paths",
    "read_cell",
    "status_record",
    "write_cell",
]

#: The folder inside a study folder that holds its run manifests
#: (:mod:`imsearch_align.study.manifest`).
MANIFEST_DIR = ".manifests"

#: The ``format`` of every study cell.
CELL_FORMAT = "collection-cell/1"
#: The kinds of study cell.
CELL_KINDS = ("collection_scale", "concurrency", "filtered")
#: Index types (lower case) that search exactly: the quality ceiling.
EXACT_INDEX_TYPES = frozenset({"flat", "exact", "brute_force", "bruteforce"})


class CellError(ValueError):
    """A JSON object that says it is a study cell but lacks a field or has a wrong one."""


class CellPathError(CellError):
    """A record that would write an absolute path of this machine (the field is named)."""


@dataclass(frozen=True)
class StudyCell:
    """One study cell, read from its JSON (see the module docstring for the fields)."""

    kind: str
    store: str
    method: str
    dataset: str = ""
    direction: str = "t2i"
    index_type: str = ""
    index_params: dict[str, Any] = field(default_factory=dict)
    search_params: dict[str, Any] = field(default_factory=dict)
    collection_size: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    exact_metrics: dict[str, float] = field(default_factory=dict)
    queries_per_s: float | None = None
    latency_ms: dict[str, float] = field(default_factory=dict)
    concurrency: int | None = None
    selectivity: float | None = None
    filter_expression: str = ""
    status: RunStatus = field(default_factory=RunStatus)
    provenance: Provenance = field(default_factory=Provenance)
    command: str = ""
    path: str = ""
    format: str = CELL_FORMAT
    record: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """Whether the cell finished ok."""
        return self.status.ok

    @property
    def exact(self) -> bool:
        """Whether the cell searched exactly (a flat index or the exact store)."""
        return self.store == "exact" or self.index_type.lower() in EXACT_INDEX_TYPES

    @property
    def setting(self) -> str:
        """``store index-type`` (``milvus HNSW``; the store alone when they are one word)."""
        if not self.index_type or self.index_type == self.store:
            return self.store
        return f"{self.store} {self.index_type}"


def is_cell(data: Any) -> bool:
    """Whether a JSON value claims to be a study cell (a mapping with a known ``kind``)."""
    return isinstance(data, Mapping) and data.get("kind") in CELL_KINDS


def _get(d: Mapping[str, Any], dotted: str, default: Any = None) -> Any:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return default
        cur = cur[part]
    return cur


def _number(d: Mapping[str, Any], dotted: str, *, required: bool) -> float | None:
    v = _get(d, dotted)
    if v is None:
        if required:
            raise CellError(f"field {dotted!r} is missing")
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(float(v)):
        raise CellError(f"field {dotted!r} must be a number, got {v!r}")
    return float(v)


def _mapping(d: Mapping[str, Any], dotted: str) -> dict[str, Any]:
    v = _get(d, dotted, {})
    if not isinstance(v, Mapping):
        raise CellError(f"field {dotted!r} must be a mapping, got {type(v).__name__}")
    return dict(v)


def _metrics(d: Mapping[str, Any], *, required: bool, key: str = "metrics") -> dict[str, float]:
    raw = _mapping(d, key)
    out = {}
    for k, v in raw.items():
        if v is None:  # NaN as JSON writes it: nothing to score
            continue
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CellError(f"{key}[{k!r}] must be a number, got {v!r}")
        if not math.isnan(float(v)):
            out[str(k)] = float(v)
    if required and not out:
        raise CellError(f"field {key!r} holds no measured value")
    return out


def _command(d: Mapping[str, Any]) -> str:
    c = d.get("command") or ""
    if isinstance(c, list | tuple):
        return shlex.join(str(w) for w in c)
    return str(c)


def _status(d: Mapping[str, Any]) -> RunStatus:
    raw = d.get("status") or {}
    if isinstance(raw, str):
        raw = {"state": raw}
    try:
        return RunStatus(**raw)
    except TypeError as exc:
        raise CellError(f"field 'status': {exc}") from None


def read_cell(data: Mapping[str, Any], path: str = "") -> StudyCell:
    """The :class:`StudyCell` of a cell's JSON object; a missing or wrong field raises
    :class:`CellError` naming it."""
    if not is_cell(data):
        kind = data.get("kind") if isinstance(data, Mapping) else None
        raise CellError(f"'kind' must be one of {list(CELL_KINDS)}, got {kind!r}")
    kind = data["kind"]
    fmt = data.get("format", CELL_FORMAT)  # cells written before every kind had one: v1
    if fmt != CELL_FORMAT:
        raise CellError(f"'format' must be {CELL_FORMAT!r}, got {fmt!r}")
    for name in ("store", "method"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise CellError(f"field {name!r} must be a non-empty string")
    status = _status(data)
    need = status.state != "failed"
    size = _number(data, "collection.size", required=need and kind == "collection_scale")
    clients = _number(data, "concurrency", required=need and kind == "concurrency")
    if clients is not None and (clients < 1 or not float(clients).is_integer()):
        raise CellError(f"field 'concurrency' must be an integer >= 1, got {clients:g}")
    sel = _number(data, "filter.selectivity", required=need and kind == "filtered")
    if sel is not None and not 0 < sel <= 1:
        raise CellError(f"field 'filter.selectivity' must be in (0, 1], got {sel:g}")
    qps = _number(data, "queries_per_s", required=need and kind != "filtered")
    latency = {k: float(v) for k, v in _mapping(data, "latency_ms").items() if v is not None}
    return StudyCell(
        kind=kind,
        store=data["store"],
        method=data["method"],
        dataset=str(data.get("dataset") or ""),
        direction=str(data.get("direction") or "t2i"),
        index_type=str(_get(data, "index.type") or data["store"]),
        index_params=_mapping(data, "index.params"),
        search_params=_mapping(data, "index.search_params"),
        collection_size=None if size is None else int(size),
        metrics=_metrics(data, required=need and kind != "concurrency"),
        exact_metrics=_metrics(data, required=False, key="exact_metrics"),
        queries_per_s=qps,
        latency_ms=latency,
        concurrency=None if clients is None else int(clients),
        selectivity=sel,
        filter_expression=str(_get(data, "filter.expression") or ""),
        status=status,
        provenance=_provenance(data),
        command=_command(data),
        path=path,
        format=fmt,
        record=MappingProxyType(dict(data)),
    )


def _provenance(data: Mapping[str, Any]) -> Provenance:
    raw = data.get("provenance") or {}
    if not isinstance(raw, Mapping):
        raise CellError(f"field 'provenance' must be a mapping, got {type(raw).__name__}")
    try:
        return Provenance.from_dict(dict(raw))
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise CellError(f"field 'provenance': {type(exc).__name__}: {exc}") from None


def load_cell(path: str | Path) -> StudyCell:
    """The cell stored at ``path``; an unreadable file or a bad field raises
    :class:`CellError` naming the file."""
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise CellError(f"{str(p)!r}: cannot read a cell: {type(exc).__name__}: {exc}") from None
    try:
        return read_cell(data, str(p))
    except CellError as exc:
        raise CellError(f"{str(p)!r}: {exc}") from None


def status_record(state: str = "ok", *, error: BaseException | str | None = None,
                  reasons: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """A cell's ``status`` (a :class:`RunStatus`, checked): ``error`` an exception or text."""
    if isinstance(error, BaseException):
        error = f"{type(error).__name__}: {error}"
    st = RunStatus(state, tuple(reasons), error)
    return {"state": st.state, "reasons": list(st.reasons), "error": st.error}


def write_cell(path: str | Path, record: Mapping[str, Any]) -> StudyCell:
    """Write ``record`` as the cell at ``path`` (atomically; ``format`` stamped; numpy
    scalars as numbers; NaN as null; absolute paths as :func:`portable_paths` writes
    them for the study folder, ``path``'s) and return it read back: a record the
    reader refuses is not written (:class:`CellError`), nor one still holding an
    absolute path (:class:`CellPathError`, naming the field)."""
    data = portable_paths(_plain({**record, "format": CELL_FORMAT}), Path(path).parent)
    cell = read_cell(data, str(path))
    if bad := absolute_paths(data):
        raise CellPathError(f"{str(path)!r}: field {bad[0]!r} holds an absolute path of this "
                            "machine; a cell records paths relative to its study folder")  # fmt: skip
    atomic_write(Path(path), json.dumps(data, indent=2) + "\n")
    return cell


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars as Python numbers, NaN as None, tuples as lists."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return str(value)


#: What an absolute path outside the study folder is written as, before its last component.
OUTSIDE = "<outside>"
_WINDOWS = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")
_FLAG = re.compile(r"^(--?[A-Za-z0-9][\w.-]*=)(.+)$", re.S)
#: An absolute path inside text: at the start or after a space, quote, ``=``, bracket...
_IN_TEXT = re.compile(
    r"(?:^|(?<=[\s'\"=(\[{,;]))(?:[A-Za-z]:[\\/]|~[\\/]|/(?=[^\s/]))[^\s'\"<>|,;)\]}]*"
)


def _is_absolute(s: str) -> bool:  # POSIX, home, Windows drive or share; not a URL
    return bool(_WINDOWS.match(s)) or s == "~" or s.startswith(("/", "~/", "~\\"))


def _inside(p: str, folder: Path) -> str | None:
    """``p`` relative to ``folder`` (POSIX, ``.`` for the folder), or None outside it."""
    for a, b in ((os.path.abspath, os.path.abspath), (os.path.realpath, os.path.realpath)):
        try:
            rel = Path(a(p)).relative_to(b(folder))
        except (ValueError, OSError):
            continue
        return rel.as_posix() if rel.parts else "."
    return None


def _portable_path(p: str, folder: Path | None) -> str:
    windows = bool(_WINDOWS.match(p))
    if folder is not None and (os.name == "nt" or not windows):
        rel = _inside(os.path.expanduser(p), folder)
        if rel is not None:
            return rel
    name = (PureWindowsPath(p) if windows else PurePosixPath(p.replace("\\", "/"))).name
    return f"{OUTSIDE}/{name}" if name else OUTSIDE


def portable_paths(value: Any, folder: str | Path | None) -> Any:
    """``value`` (JSON-ready) with every string that is or holds an absolute path rewritten:
    inside ``folder`` relative to it, else ``<outside>/LAST-COMPONENT`` (keys are kept)."""
    root = None if folder is None else Path(folder)
    if isinstance(value, Mapping):
        return {k: portable_paths(v, root) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [portable_paths(v, root) for v in value]
    if not isinstance(value, str):
        return value
    if _is_absolute(value):
        return _portable_path(value, root)
    if (flag := _FLAG.match(value)) and _is_absolute(flag[2]):  # --out=/abs/path
        return flag[1] + _portable_path(flag[2], root)
    return _IN_TEXT.sub(lambda m: _portable_path(m[0], root), value)


def absolute_paths(value: Any, at: str = "") -> list[str]:
    """The fields (``a.b[2]``) of ``value`` whose key or string holds an absolute path."""
    if isinstance(value, str):
        return [at or "(the value)"] if _is_absolute(value) or _IN_TEXT.search(value) else []
    out: list[str] = []
    if isinstance(value, Mapping):
        for k, v in value.items():
            name = f"{at}.{k}" if at else str(k)
            out += [name] if absolute_paths(str(k)) else absolute_paths(v, name)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            out += absolute_paths(v, f"{at}[{i}]")
    return out
