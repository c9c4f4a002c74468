"""Money from a price sheet the user supplies: per node type, the query nodes a collection
needs, their monthly cost and the cost of a million queries, each with its band.

A sheet is YAML (``.yaml``/``.yml``, needs PyYAML) or JSON: ``{"about": ..., "node_types":
[...]}`` or a bare list, each node type ``{name, cores, memory_gib, hourly_price,
currency}`` (and an optional ``note``). :func:`load_prices` checks every entry before
anything is computed and refuses, in one line naming the file, the node type and the
field: a missing or unknown field, a price, core count or memory that is not a positive
number, a node whose usable memory (90 %) cannot hold one sealed segment, two types of
one name.

Only query nodes are priced (index nodes, coordinators, storage and traffic are not in
the sheet). A month is :data:`HOURS_PER_MONTH` hours. The cost of a million queries is
at the load given (``target_qps``), else at the cluster's capacity in the sizing mode.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imsearch_align.collection.cost_formulas import USABLE_MEMORY, ClusterSpec, Estimate, IndexSpec
from imsearch_align.collection.cost_model import MeasuredInputs, estimate

__all__ = ["HOURS_PER_MONTH", "NodeType", "PriceError", "PriceRow", "load_prices", "price_rows"]

#: Hours in a month (365 x 24 / 12).
HOURS_PER_MONTH = 730
FIELDS = ("name", "cores", "memory_gib", "hourly_price", "currency")
_OPTIONAL = ("note",)


class PriceError(ValueError):
    """A price sheet the model cannot use; the message names the file, node type and field."""


@dataclass(frozen=True)
class NodeType:
    """A node type of the sheet."""

    name: str
    cores: int
    memory_gib: float
    hourly_price: float
    currency: str
    note: str = ""


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() in (".yaml", ".yml"):
        try:
            import yaml
        except ImportError:
            raise PriceError(
                f"{path}: a YAML price sheet needs PyYAML (pip install 'imsearch-align[io]'), "
                "or give the sheet as JSON"
            ) from None
        return yaml.safe_load(text)
    return json.loads(text)


def _entry(path: Path, i: int, raw: Any, segment_mb: int) -> NodeType:
    """One node type, checked field by field."""
    label = f"node type {i + 1}"
    if not isinstance(raw, Mapping):
        raise PriceError(f"{path}: {label}: expected a mapping of {', '.join(FIELDS)}")
    if isinstance(raw.get("name"), str) and raw["name"].strip():
        label = f"node type {raw['name']!r}"

    def bad(field: str, why: str) -> PriceError:
        return PriceError(f"{path}: {label}: {field} {why}")

    for f in FIELDS:
        if f not in raw or raw[f] is None:
            raise bad(f, "is missing")
    unknown = sorted(set(raw) - set(FIELDS) - set(_OPTIONAL))
    if unknown:
        raise bad(unknown[0], f"is not a field (fields: {', '.join(FIELDS + _OPTIONAL)})")
    for f in ("name", "currency"):
        if not isinstance(raw[f], str) or not raw[f].strip():
            raise bad(f, f"must be non-empty text, got {raw[f]!r}")
    for f in ("cores", "memory_gib", "hourly_price"):
        v = raw[f]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
            raise bad(f, f"must be a positive number, got {v!r}")
    if not float(raw["cores"]).is_integer():
        raise bad("cores", f"must be a whole number, got {raw['cores']!r}")
    usable_mib = raw["memory_gib"] * 1024 * USABLE_MEMORY
    if usable_mib < segment_mb:
        raise bad("memory_gib", f"{raw['memory_gib']!r} is smaller than one segment: "
                  f"{USABLE_MEMORY:.0%} of it ({usable_mib:,.0f} MiB) cannot hold a "
                  f"{segment_mb} MB sealed segment")  # fmt: skip
    return NodeType(
        raw["name"].strip(),
        int(raw["cores"]),
        float(raw["memory_gib"]),
        float(raw["hourly_price"]),
        raw["currency"].strip(),
        str(raw.get("note", "")),
    )


def load_prices(path: str | Path, segment_mb: int) -> tuple[str, list[NodeType]]:
    """``(about, node types)`` of the sheet at ``path``, every entry checked (module
    docstring); anything wrong raises PriceError in one line naming it."""
    path = Path(path)
    try:
        data = _read(path)
    except PriceError:
        raise
    except (OSError, ValueError) as exc:  # yaml.YAMLError is not a ValueError
        raise PriceError(f"{path}: cannot be read: {type(exc).__name__}: {exc}") from None
    except Exception as exc:  # a YAML syntax error
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise PriceError(f"{path}: cannot be read: {type(exc).__name__}: {first}") from None
    about = ""
    if isinstance(data, Mapping):
        about = str(data.get("about", ""))
        data = data.get("node_types")
    if not isinstance(data, list) or not data:
        raise PriceError(f"{path}: node_types is missing or empty (a list of node types with "
                         f"{', '.join(FIELDS)})")  # fmt: skip
    types = [_entry(path, i, raw, segment_mb) for i, raw in enumerate(data)]
    seen: set[str] = set()
    for t in types:
        if t.name in seen:
            raise PriceError(f"{path}: node type {t.name!r}: name is given twice")
        seen.add(t.name)
    return " ".join(about.split()), types


@dataclass(frozen=True)
class PriceRow:
    """One node type's outputs: ``nodes`` and ``qps`` of the cluster sized on it (the
    estimate's, with bands), ``monthly`` and ``per_million`` as ``(value, low, high)``."""

    node: NodeType
    nodes: Estimate
    nodes_formula: Estimate
    qps: Estimate
    qps_other: Estimate
    monthly: tuple[float, float, float]
    per_million: tuple[float, float, float]
    load: str


def _span(values: Sequence[float], value: float) -> tuple[float, float, float]:
    return value, min(values), max(values)


def price_rows(
    types: Sequence[NodeType],
    spec: IndexSpec,
    n: int,
    dim: int,
    measured: MeasuredInputs,
    cluster: ClusterSpec,
    *,
    mode: str = "single",
    target_qps: float | None = None,
) -> list[PriceRow]:
    """Per node type: the estimate with query nodes of that type, ``monthly = nodes
    hourly_price 730`` and ``per_million = nodes hourly_price / (load 3600) 1e6`` (``load``
    ``target_qps``, else the cluster's q/s), each band from the corners of the inputs
    (nodes and q/s of one corner together). Raises NotMeasuredError as the estimate does."""
    rows = []
    for t in types:
        cl = dataclasses.replace(cluster, query_node_gib=t.memory_gib, query_node_cores=t.cores)
        e = estimate(spec, n, dim, measured, cl, mode=mode, target_qps=target_qps)
        nodes, qps = e["query_nodes"], e["qps"]
        p = t.hourly_price
        monthly = [k * p * HOURS_PER_MONTH for k in nodes.by_corner]
        loads = [target_qps] * len(nodes.by_corner) if target_qps else list(qps.by_corner)
        per = [k * p / (q * 3600) * 1e6 for k, q in zip(nodes.by_corner, loads)]
        load = target_qps or qps.value
        value = nodes.value * p / (load * 3600) * 1e6  # type: ignore[operator]
        other = "qps_batched" if mode == "single" else "qps_single"
        rows.append(PriceRow(
            t, nodes, e["query_nodes_formula"], qps, e[other],
            _span(monthly, nodes.value * p * HOURS_PER_MONTH),  # type: ignore[operator]
            _span(per, value),
            f"{target_qps:,.0f} q/s (the target)" if target_qps else f"the cluster's {mode} q/s",
        ))  # fmt: skip
    return rows
