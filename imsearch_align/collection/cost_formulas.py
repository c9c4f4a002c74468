"""The cost model's formulas that need no measurement: the index memory of one replica,
query nodes by memory, the work of a query and of a row's build, and the specs and the
output type (:class:`Estimate`). The formulas are written out in
:mod:`~imsearch_align.collection.cost_model`'s docstring and ``docs/scale-out.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imsearch_align.collection.cost_figures import INDEX_TYPES

__all__ = [
    "DEFAULT_DIMS",
    "GIB",
    "ROW_BYTES",
    "SEGMENT_MB",
    "USABLE_MEMORY",
    "ClusterSpec",
    "Estimate",
    "IndexSpec",
    "index_bytes",
    "memory_per_replica",
    "positive",
    "query_nodes",
    "query_work",
    "row_work",
    "segment_rows",
]

#: Aligned dimension of the default study's methods with the default encoders (CSA keeps
#: min(256, 768, 384, N - 1) components; Procrustes PCAs both sides to 384).
DEFAULT_DIMS = {"csa": 256, "procrustes": 384}
#: Milvus 2.3.5 ``milvus.yaml``: dataCoord.segment.maxSize (MB).
SEGMENT_MB = 512
#: Bytes a row carries beside its vector in a query node: int64 pk + uint64 timestamp.
ROW_BYTES = 16
#: Milvus 2.3.5 ``milvus.yaml``: overloadedMemoryThresholdPercentage / 100.
USABLE_MEMORY = 0.9
GIB = 2**30


def positive(name: str, value: Any, *, optional: bool = False) -> None:
    """Refuse a count or size that is not a positive number, naming it."""
    if optional and value is None:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class IndexSpec:
    """An index type and its build parameters (``m`` None: ``d / 8``)."""

    kind: str
    M: int = 16
    nlist: int = 1024
    m: int | None = None
    nbits: int = 8

    def __post_init__(self) -> None:
        if self.kind not in INDEX_TYPES:
            raise ValueError(f"index must be one of {', '.join(INDEX_TYPES)}, got {self.kind!r}")
        for name in ("M", "nlist", "nbits", "m"):
            positive(f"IndexSpec.{name}", getattr(self, name), optional=name == "m")

    @classmethod
    def from_params(cls, kind: str, params: Mapping[str, Any] | None) -> IndexSpec:
        """The spec of a build's index parameters (a cell's ``index.params``): the fields
        that size the index; search-time and build-effort ones (``efConstruction``) left out."""
        fields = ("M", "nlist", "m", "nbits")
        return cls(kind, **{k: v for k, v in (params or {}).items() if k in fields})

    def label(self, dim: int) -> str:
        """The build parameters that matter to the cost, as text."""
        return {
            "FLAT": "",
            "IVF_FLAT": f"nlist {self.nlist}",
            "IVF_SQ8": f"nlist {self.nlist}",
            "IVF_PQ": f"nlist {self.nlist}, m {self.pq_m(dim)}, nbits {self.nbits}",
            "HNSW": f"M {self.M}",
        }[self.kind]

    def pq_m(self, dim: int) -> int:
        """PQ sub-vectors (a divisor of ``dim``)."""
        m = self.m if self.m is not None else max(1, dim // 8)
        if dim % m:
            raise ValueError(f"PQ m must divide the dimension {dim}, got {m}")
        return m


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster: replicas, query and index nodes (memory in GiB), DML shards;
    ``segment_mb`` None: the inputs' ``segment_mb``."""

    replicas: int = 2
    query_node_gib: float = 64.0
    query_node_cores: int = 16
    index_nodes: int = 4
    index_node_cores: int = 16
    shards: int = 1
    segment_mb: int | None = None

    def __post_init__(self) -> None:
        for f in ("replicas", "query_node_gib", "query_node_cores", "index_nodes",
                  "index_node_cores", "shards", "segment_mb"):  # fmt: skip
            positive(f"ClusterSpec.{f}", getattr(self, f), optional=f == "segment_mb")


@dataclass(frozen=True)
class Estimate:
    """An output: ``value`` in ``unit`` within ``[low, high]``, the ``formula``, the
    ``inputs`` it used, ``notes`` (extrapolations, assumptions) and its value at each
    corner of its inputs' bands (``by_corner``, in the order of the corners of its group:
    outputs computed together share it); ``value`` None: not measured, the notes say why."""

    name: str
    value: float | None
    unit: str
    formula: str
    inputs: Mapping[str, Any] = field(default_factory=dict)
    low: float | None = None
    high: float | None = None
    notes: tuple[str, ...] = ()
    by_corner: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.value is not None:
            object.__setattr__(self, "low", self.value if self.low is None else self.low)
            object.__setattr__(self, "high", self.value if self.high is None else self.high)


def segment_rows(dim: int, segment_mb: int = SEGMENT_MB) -> int:
    """Rows of a full sealed segment: ``floor(segment_mb * 2**20 / (4 d + 8))``."""
    return segment_mb * 2**20 // (4 * dim + 8)


def index_bytes(spec: IndexSpec, n: int, dim: int, segment_mb: int = SEGMENT_MB) -> Estimate:
    """Bytes of the index of ``n`` rows (formulas in the module docstring)."""
    d, k = dim, spec.kind
    S = math.ceil(n / segment_rows(d, segment_mb))
    inputs: dict[str, Any] = {"n": n, "d": d, "S": S}
    if k == "FLAT":
        f, v = "4 d n", 4 * d * n
    elif k == "IVF_FLAT":
        inputs["nlist"] = spec.nlist
        f, v = "n (4 d + 8) + S nlist 4 d", n * (4 * d + 8) + S * spec.nlist * 4 * d
    elif k == "IVF_SQ8":
        inputs["nlist"] = spec.nlist
        f, v = "n (d + 8) + S (nlist 4 d + 8 d)", n * (d + 8) + S * (spec.nlist * 4 * d + 8 * d)
    elif k == "IVF_PQ":
        m, nb = spec.pq_m(d), spec.nbits
        inputs.update(nlist=spec.nlist, m=m, nbits=nb)
        f = "n (ceil(m nbits / 8) + 8) + S (nlist 4 d + 2**nbits 4 d)"
        v = n * (math.ceil(m * nb / 8) + 8) + S * (spec.nlist * 4 * d + 2**nb * 4 * d)
    else:
        M = spec.M
        inputs["M"] = M
        f = "n (4 d + 8 M) + n (4 + 8 + 8 + 4) + n 4 (M + 1) / (M - 1)"
        v = n * (4 * d + 8 * M) + n * 24 + n * 4 * (M + 1) / (M - 1)
    return Estimate(f"{k} index", float(v), "bytes", f, inputs)


def memory_per_replica(spec: IndexSpec, n: int, dim: int, segment_mb: int = SEGMENT_MB) -> Estimate:
    """Query-node memory of one replica: the index plus 16 bytes a row (pk, timestamp)."""
    idx = index_bytes(spec, n, dim, segment_mb)
    return Estimate(
        "memory per replica",
        idx.value + ROW_BYTES * n,
        "bytes",
        f"[{idx.formula}] + 16 n",
        {**idx.inputs, "index_bytes": idx.value},
    )


def query_nodes(memory: Estimate, cluster: ClusterSpec, ratio: float = 1.0) -> Estimate:
    """Query nodes: ``ceil(memory ratio / (node_gib 2**30 0.9))`` a replica, x replicas."""
    per = math.ceil(memory.value * ratio / (cluster.query_node_gib * GIB * USABLE_MEMORY))
    return Estimate(
        "query nodes",
        float(per * cluster.replicas),
        "nodes",
        "ceil(memory ratio / (node_gib 2**30 0.9)) replicas",
        {"memory": memory.value, "ratio": ratio, "node_gib": cluster.query_node_gib,
         "per_replica": per, "replicas": cluster.replicas},
    )  # fmt: skip


def query_work(kind: str, n: int, dim: int, segment_mb: int) -> float:
    """Relative work of one query at ``n`` rows of ``dim``."""
    if kind != "HNSW":
        return float(dim * n)
    seg = segment_rows(dim, segment_mb)
    return dim * (math.log(n) if n <= seg else n / seg * math.log(seg))


def row_work(kind: str, seg: int, dim: int) -> float:
    """Relative build work of one row in a segment of ``seg`` rows (HNSW: ``d ln(seg)``)."""
    return dim * math.log(max(seg, 2)) if kind == "HNSW" else float(dim)
