"""The cost model's measured inputs as types: each figure with its low-high band, its source,
and what it was measured on; a figure no committed cell holds is ``value: null`` ("not
measured"), never a stand-in.

The JSON layout (``imsearch_align/data/scale_out_inputs.json``, written by
:func:`~imsearch_align.collection.cost_inputs.inputs_from_cells`)::

    segment_mb            {value, source}: dataCoord.segment.maxSize, a server setting
    search_qps[TYPE]      {single: F, batched: F}: single queries from concurrent clients
                          (the plateau of the concurrency curve) and batches of 100
    build_rows_per_s[T]   F: rows over the index build, the load wait left out
    load_rows_per_s[T]    F: rows over the load wait
    insert_rows_per_s     F
    concurrency           {clients, qps, cores, source}: one build's curve
    server_memory_ratio   F: a standalone server's RSS over the memory formula
    core_scaling[TYPE]    {single, batched, build: {"1": B | null, "2": B | null}, source}:
                          q/s (rows/s) of a server pinned to 1 and to 2 cores

``F`` is ``{value, low, high, n, dim, cores, source, ...}`` (``value`` may also be
``count / seconds``); ``B`` is ``{value, low, high}``. ``low`` and ``high`` are the
least and the most the repeats gave (absent: one run, ``low = high = value``).
Every number is checked when read: a value that is not a finite number > 0, or a band
that does not hold its value, is refused naming the figure (:class:`InputsError`).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CORE_KINDS",
    "INDEX_TYPES",
    "INPUTS",
    "MODES",
    "REFERENCE_TYPE",
    "ConcurrencyCurve",
    "Figure",
    "InputsError",
    "MeasuredInputs",
    "NotMeasuredError",
    "Quality",
    "load_inputs",
]

INDEX_TYPES = ("FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW")
#: The type measured most fully; a type without its own memory ratio or core scaling
#: borrows this one's, said.
REFERENCE_TYPE = "IVF_FLAT"
#: How queries reach the server: one query per request from concurrent clients, or batches.
MODES = ("single", "batched")
#: What ``core_scaling`` measures at 1 and 2 cores.
CORE_KINDS = ("single", "batched", "build")
INPUTS = Path(__file__).resolve().parents[1] / "data" / "scale_out_inputs.json"
#: Milvus 2.3.5 ``milvus.yaml``: dataCoord.segment.maxSize (MB), when the inputs do not say.
DEFAULT_SEGMENT_MB = 512


class InputsError(ValueError):
    """A figure of the inputs that the model cannot stand on, named."""


class NotMeasuredError(ValueError):
    """An output rests on a figure no committed cell holds; the message says what to measure."""


def _number(where: str, value: Any, *, none: bool = False) -> float | None:
    """``value`` as a finite float > 0 (None allowed when ``none``), else InputsError."""
    if value is None and none:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise InputsError(f"{where} is {value!r}; expected a finite number > 0")
    return float(value)


@dataclass(frozen=True)
class Quality:
    """The task quality a q/s figure was measured at: ``measure`` (``t2i/HitRate@10``) of
    the cell's setting, its bootstrap interval when the cell has one, exact search's."""

    measure: str
    value: float
    low: float | None = None
    high: float | None = None
    exact: float | None = None
    setting: str = ""

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Quality:
        return cls(str(d["measure"]), float(d["value"]), d.get("low"), d.get("high"),
                   d.get("exact"), str(d.get("setting", "")))  # fmt: skip

    def text(self) -> str:
        """``t2i/HitRate@10 0.024 [0.021-0.027]`` or ``... 0.024 (no interval)``."""
        band = (
            f"[{self.low:.3f}-{self.high:.3f}]"
            if self.low is not None and self.high is not None
            else "(no interval)"
        )
        exact = "" if self.exact is None else f", exact {self.exact:.3f}"
        at = f" ({self.setting})" if self.setting else ""
        return f"{self.measure} {self.value:.3f} {band}{exact}{at}"


@dataclass(frozen=True)
class Figure:
    """One figure: ``value`` (None: not measured) within ``[low, high]``, measured at ``n``
    rows of ``dim`` on ``cores`` cores; ``bound`` says what limited a q/s figure
    (``"index"``, ``"rpc"``; None: not known); ``quality`` what a q/s figure was measured at."""

    value: float | None
    source: str
    n: int | None = None
    dim: int | None = None
    cores: int | None = None
    low: float | None = None
    high: float | None = None
    bound: str | None = None
    quality: Quality | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.value is not None:
            object.__setattr__(self, "low", self.value if self.low is None else self.low)
            object.__setattr__(self, "high", self.value if self.high is None else self.high)

    @property
    def measured(self) -> bool:
        return self.value is not None

    def at(self, side: str) -> float:
        """``low``, ``value`` or ``high``; a figure not measured raises NotMeasuredError."""
        if self.value is None:
            raise NotMeasuredError(self.source)
        return float({"low": self.low, "value": self.value, "high": self.high}[side])

    @classmethod
    def from_dict(cls, d: Any, where: str = "figure") -> Figure:
        """From JSON: ``value`` (null: not measured), or ``count`` and ``seconds``."""
        if not isinstance(d, Mapping):
            raise InputsError(f"{where} is {type(d).__name__}; expected an object")
        if "source" not in d:
            raise InputsError(f"{where} has no source")
        if "value" not in d and "count" in d:
            value = _number(f"{where}.count", d["count"]) / _number(
                f"{where}.seconds", d["seconds"]
            )
        else:
            value = _number(f"{where}.value", d.get("value"), none=True)
        low = _number(f"{where}.low", d.get("low"), none=True)
        high = _number(f"{where}.high", d.get("high"), none=True)
        if value is not None and not (low or value) <= value <= (high or value):
            raise InputsError(f"{where}: value {value!r} is outside [low {low!r}, high {high!r}]")
        q = d.get("quality")
        known = {"value", "count", "seconds", "low", "high", "source", "n", "dim", "cores",
                 "bound", "quality"}  # fmt: skip
        return cls(value, str(d["source"]), d.get("n"), d.get("dim"), d.get("cores"), low, high,
                   d.get("bound"), None if q is None else Quality.from_dict(q),
                   {k: v for k, v in d.items() if k not in known})  # fmt: skip


@dataclass(frozen=True)
class ConcurrencyCurve:
    """Queries/s at each number of concurrent single-query clients, on ``cores`` cores."""

    clients: tuple[int, ...]
    qps: tuple[float, ...]
    cores: int
    source: str

    @classmethod
    def from_dict(cls, d: Any, where: str = "concurrency") -> ConcurrencyCurve:
        """From JSON, checked: clients ascending integers >= 1, q/s finite > 0, as many."""
        if not isinstance(d, Mapping):
            raise InputsError(f"{where} is {type(d).__name__}; expected an object")
        clients, qps = list(d.get("clients") or []), list(d.get("qps") or [])
        if not clients or len(clients) != len(qps):
            raise InputsError(f"{where}: clients {clients!r} and qps {qps!r} must pair up")
        if any(not isinstance(c, int) or isinstance(c, bool) or c < 1 for c in clients) or any(
            b <= a for a, b in itertools.pairwise(clients)
        ):
            raise InputsError(f"{where}.clients {clients!r}: expected ascending integers >= 1")
        rates = tuple(_number(f"{where}.qps[{i}]", q) or 0.0 for i, q in enumerate(qps))
        cores = int(_number(f"{where}.cores", d.get("cores")) or 0)
        return cls(tuple(clients), rates, cores, str(d.get("source", "")))

    def saturation(self, share: float = 0.9) -> int:
        """The fewest clients that reach ``share`` of the curve's highest q/s."""
        top = max(self.qps)
        return next(c for c, q in zip(self.clients, self.qps) if q >= share * top)

    def efficiency(self, clients_per_core: float) -> float:
        """Share of the plateau reached with ``clients_per_core`` clients per core
        (linear between measured points, clipped at the ends)."""
        c, top = clients_per_core * self.cores, max(self.qps)
        pts = list(zip(self.clients, self.qps))
        if c <= pts[0][0]:
            return pts[0][1] / top
        for (c0, q0), (c1, q1) in itertools.pairwise(pts):
            if c <= c1:
                return (q0 + (q1 - q0) * (c - c0) / (c1 - c0)) / top
        return pts[-1][1] / top


#: ``core_scaling[type][kind]``: the figures at 1 and at 2 server cores (None: not measured).
CorePair = tuple[Figure | None, Figure | None]


def _core_scaling(d: Any) -> tuple[dict[str, dict[str, CorePair]], dict[str, str]]:
    """``core_scaling`` of the JSON: per index type and kind the (1-core, 2-core) figures."""
    if d is None:
        return {}, {}
    if not isinstance(d, Mapping):
        raise InputsError(f"core_scaling is {type(d).__name__}; expected an object")
    out: dict[str, dict[str, CorePair]] = {}
    sources: dict[str, str] = {}
    for itype, per in d.items():
        if itype == "about":
            continue
        if itype not in INDEX_TYPES or not isinstance(per, Mapping):
            raise InputsError(f"core_scaling[{itype}]: expected an index type's object")
        sources[itype] = str(per.get("source", ""))
        out[itype] = {}
        for kind in CORE_KINDS:
            at = per.get(kind) or {}
            if not isinstance(at, Mapping):
                raise InputsError(f"core_scaling[{itype}].{kind}: expected {{'1': ..., '2': ...}}")
            pair = []
            for cores in ("1", "2"):
                v = at.get(cores)
                where = f"core_scaling[{itype}].{kind}[{cores}]"
                pair.append(None if v is None else Figure.from_dict({"source": "", **v}, where))
            out[itype][kind] = (pair[0], pair[1])
    return out, sources


@dataclass(frozen=True)
class MeasuredInputs:
    """Figures measured on one machine, each with its band and source (module docstring)."""

    search_qps: Mapping[str, Mapping[str, Figure]]
    build_rows_per_s: Mapping[str, Figure]
    insert_rows_per_s: Figure
    concurrency: ConcurrencyCurve | None
    server_memory_ratio: Figure | None = None
    load_rows_per_s: Mapping[str, Figure] = field(default_factory=dict)
    core_scaling: Mapping[str, Mapping[str, CorePair]] = field(default_factory=dict)
    core_sources: Mapping[str, str] = field(default_factory=dict)
    segment_mb: int = DEFAULT_SEGMENT_MB
    #: Each index type's own ratio, where its builds were measured (else ``server_memory_ratio``).
    memory_ratio_by_type: Mapping[str, Figure] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> MeasuredInputs:
        """From the JSON layout (module docstring); a bad figure raises InputsError naming it."""
        if not isinstance(d, Mapping):
            raise InputsError(f"the inputs are {type(d).__name__}; expected an object")
        search: dict[str, dict[str, Figure]] = {}
        for itype, modes in (d.get("search_qps") or {}).items():
            if not isinstance(modes, Mapping) or set(MODES) - set(modes):
                raise InputsError(
                    f"search_qps[{itype}] needs 'single' and 'batched' (an inputs file of an "
                    "older layout: regenerate it with benchmarks/scale_out.py RESULTS... --write)"
                )
            search[itype] = {
                m: Figure.from_dict(modes[m], f"search_qps[{itype}].{m}") for m in MODES
            }
        table = {
            key: {t: Figure.from_dict(f, f"{key}[{t}]") for t, f in (d.get(key) or {}).items()}
            for key in ("build_rows_per_s", "load_rows_per_s")
        }
        if "insert_rows_per_s" not in d:
            raise InputsError("no insert_rows_per_s")
        cc, ratio = d.get("concurrency"), d.get("server_memory_ratio")
        scaling, sources = _core_scaling(d.get("core_scaling"))
        seg = d.get("segment_mb", DEFAULT_SEGMENT_MB)  # {value, source}, or a bare number
        seg = seg.get("value") if isinstance(seg, Mapping) else seg
        return cls(
            search,
            table["build_rows_per_s"],
            Figure.from_dict(d["insert_rows_per_s"], "insert_rows_per_s"),
            None if cc is None else ConcurrencyCurve.from_dict(cc),
            None if ratio is None else Figure.from_dict(ratio, "server_memory_ratio"),
            table["load_rows_per_s"],
            scaling,
            sources,
            int(_number("segment_mb.value", seg) or DEFAULT_SEGMENT_MB),
            {t: Figure.from_dict(f, f"server_memory_ratio_by_type[{t}]")
             for t, f in (d.get("server_memory_ratio_by_type") or {}).items()},
        )  # fmt: skip

    def memory_ratio(self, itype: str) -> Figure | None:
        """The server-memory ratio for ``itype``: its own, else ``server_memory_ratio``."""
        return self.memory_ratio_by_type.get(itype) or self.server_memory_ratio

    def qps(self, itype: str, mode: str) -> Figure | None:
        """``search_qps[itype][mode]`` (None: the type is not in the inputs at all)."""
        return (self.search_qps.get(itype) or {}).get(mode)

    def cores(self, itype: str, kind: str) -> CorePair:
        """The (1-core, 2-core) figures of ``core_scaling[itype][kind]``."""
        return (self.core_scaling.get(itype) or {}).get(kind, (None, None))


def load_inputs(path: str | Path = INPUTS) -> MeasuredInputs:
    """The measured inputs stored in ``path`` (default: the package's JSON); a file that
    cannot be read, is not the inputs' layout or holds a bad figure (NaN, negative, zero,
    outside its band) raises ``ValueError`` naming the file and the figure."""
    try:
        return MeasuredInputs.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(
            f"cost-model inputs {str(path)!r} cannot be read: {type(exc).__name__}: {exc}"
        ) from None
