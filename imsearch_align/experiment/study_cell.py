"""The study cells the report reads besides experiment results: their fields, documented.

The collection-scale study, the concurrency runner and the filtered-search
study write one JSON per cell. The report reads any JSON object with a
``kind`` of :data:`CELL_KINDS`; dotted names below are nested keys
(``collection.size`` is ``{"collection": {"size": ...}}``).

Every kind:

* ``kind``: ``"collection_scale"``, ``"concurrency"`` or ``"filtered"``.
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

Per kind, required unless the cell failed:

* ``collection_scale``: ``collection.size``, ``queries_per_s``, ``metrics``.
* ``concurrency``: ``concurrency`` (concurrent clients, >= 1), ``queries_per_s``.
* ``filtered``: ``filter.selectivity`` (the share of the collection the
  filter keeps, in (0, 1]), ``metrics`` (ANN recall against the exact
  filtered truth as ``ann_recall@k``); ``filter.expression`` optional.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imsearch_align.experiment.provenance import Provenance
from imsearch_align.experiment.result import RunStatus

__all__ = ["CELL_KINDS", "EXACT_INDEX_TYPES", "CellError", "StudyCell", "is_cell", "read_cell"]

#: The kinds of study cell the report draws.
CELL_KINDS = ("collection_scale", "concurrency", "filtered")
#: Index types (lower case) that search exactly: the quality ceiling.
EXACT_INDEX_TYPES = frozenset({"flat", "exact", "brute_force", "bruteforce"})


class CellError(ValueError):
    """A JSON object that says it is a study cell but lacks a field or has a wrong one."""


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
        raise CellError(f"'kind' must be one of {list(CELL_KINDS)}, got {data.get('kind')!r}")
    kind = data["kind"]
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
        provenance=Provenance.from_dict(dict(data.get("provenance") or {})),
        command=_command(data),
        path=path,
    )
