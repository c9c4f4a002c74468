"""What a collection of 10M or 100M vectors costs on a Milvus cluster, from index
formulas and figures measured here.

Every output is an :class:`Estimate`: a value, its unit, the formula as a string
and the inputs it used, so each figure can be traced to a measurement (a
:class:`Figure`, which carries its ``source``) or to a formula from the
Milvus / FAISS documentation (cited where the formula is written below).

**Memory of one replica** (bytes; ``n`` rows of ``d`` float32 dimensions;
Milvus builds one index per sealed segment, so per-index constants are paid
``S = ceil(n / segment_rows)`` times; ``segment_rows = floor(segment_mb * 2**20
/ (4 d + 8))``, ``dataCoord.segment.maxSize`` = 512 MB in Milvus 2.3.5's
``milvus.yaml``)::

    FLAT      4 d n                               (FAISS wiki "Guidelines to choose an
                                                   index": Flat stores the vectors, no overhead)
    IVF_FLAT  n (4 d + 8) + S nlist 4 d           (4 d code + 8-byte id per vector in
                                                   FAISS's inverted lists; nlist centroids)
    IVF_SQ8   n (d + 8) + S (nlist 4 d + 8 d)     (one byte per dimension; per-dimension
                                                   min and range of the 8-bit quantizer)
    IVF_PQ    n (ceil(m nbits / 8) + 8)           (Milvus docs, IVF_PQ: m x nbits bits per
              + S (nlist 4 d + 2**nbits 4 d)       vector; m codebooks of 2**nbits centroids
                                                   of d/m dims = 2**nbits d floats)
    HNSW      n (4 d + 8 M)                       (FAISS wiki: "(d * 4 + M * 2 * 4) bytes per
              + n (4 + 8 + 8 + 4)                  vector", layer 0 has 2M links; hnswlib, which
              + n 4 (M + 1) / (M - 1)              Milvus's HNSW is: link count, label, level
                                                   pointer, level; upper layers hold M + 1 ints
                                                   on an expected 1 / (M - 1) levels per vector)

plus ``16 n`` for each row's int64 primary key and uint64 timestamp. The raw
vectors of an indexed field are not loaded beside the index.

**Query nodes**: ``ceil(memory / (node_memory * 0.9))`` a replica, times the
replicas (a query node refuses a load past ``overloadedMemoryThresholdPercentage``
= 90). **Build** with ``k`` index nodes, each building one segment at a time
(``indexNode.scheduler.buildParallel`` = 1): ``ceil(S / k)`` rounds of
``segment_rows * w / (rate_per_core * cores)``, ``w`` the measured row's work
scaled to ``d`` (and to ``ln(segment_rows)`` for HNSW). **Queries/s**: a query
searches every segment of one replica; its work is ``d n`` for FLAT and IVF
and ``d (n / segment_rows) ln(segment_rows)`` for HNSW (a graph a segment), so
``q/s = replicas * cores_per_replica * qps_measured / cores_measured *
work_measured / work(n, d) * efficiency``, the efficiency being the share of
the measured concurrency curve's plateau that ``clients_per_core`` clients a
core reach (1 at saturation).

``markdown_table(measured)`` writes the table of ``docs/scale-out.md`` from
:func:`load_inputs` (``imsearch_align/data/scale_out_inputs.json``, package data).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_DIMS",
    "INDEX_TYPES",
    "ClusterSpec",
    "ConcurrencyCurve",
    "Estimate",
    "Figure",
    "IndexSpec",
    "MeasuredInputs",
    "build_seconds",
    "cluster_qps",
    "estimate",
    "index_bytes",
    "insert_seconds",
    "load_inputs",
    "markdown_table",
    "memory_per_replica",
    "peak_note",
    "query_nodes",
    "segment_rows",
]

INDEX_TYPES = ("FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW")
#: Aligned dimension of the default study's methods with the default encoders
#: (DINOv2-base images, 768; all-MiniLM-L6-v2 texts, 384): CSA keeps
#: min(256, 768, 384, N - 1) canonical components (``csa.DEFAULT_SIM_DIM``),
#: Procrustes PCAs both sides to min(768, 384, N - 1) = 384.
DEFAULT_DIMS = {"csa": 256, "procrustes": 384}
#: Milvus 2.3.5 ``milvus.yaml``: dataCoord.segment.maxSize (MB).
SEGMENT_MB = 512
#: Bytes a row carries beside its vector in a query node: int64 pk + uint64 timestamp.
ROW_BYTES = 16
#: Milvus 2.3.5 ``milvus.yaml``: overloadedMemoryThresholdPercentage / 100.
USABLE_MEMORY = 0.9
GIB = 2**30
INPUTS = Path(__file__).resolve().parents[1] / "data" / "scale_out_inputs.json"


@dataclass(frozen=True)
class Figure:
    """One measured figure: ``value`` per ``unit``, measured at ``n`` rows of
    ``dim`` dimensions on ``cores`` cores, and where it comes from."""

    value: float
    source: str
    n: int | None = None
    dim: int | None = None
    cores: int | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Figure:
        """From JSON: ``value``, or ``count`` and ``seconds`` (value = count / seconds)."""
        value = d["value"] if "value" in d else d["count"] / d["seconds"]
        return cls(float(value), str(d["source"]), d.get("n"), d.get("dim"), d.get("cores"))


@dataclass(frozen=True)
class ConcurrencyCurve:
    """Queries/s at each number of concurrent single-query clients, on ``cores`` cores."""

    clients: tuple[int, ...]
    qps: tuple[float, ...]
    cores: int
    source: str

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


@dataclass(frozen=True)
class MeasuredInputs:
    """Figures measured on one machine, each with its source (see the JSON file)."""

    search_qps: Mapping[str, Figure]
    build_rows_per_s: Mapping[str, Figure]
    insert_rows_per_s: Figure
    concurrency: ConcurrencyCurve
    standalone_peak_rss: Figure | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MeasuredInputs:
        """From the JSON layout of ``imsearch_align/data/scale_out_inputs.json``."""
        cc = d["concurrency"]
        peak = d.get("standalone_peak_rss_bytes")
        return cls(
            {k: Figure.from_dict(v) for k, v in d["search_qps"].items()},
            {k: Figure.from_dict(v) for k, v in d["build_rows_per_s"].items()},
            Figure.from_dict(d["insert_rows_per_s"]),
            ConcurrencyCurve(tuple(cc["clients"]), tuple(cc["qps"]), cc["cores"], cc["source"]),
            None if peak is None else Figure.from_dict(peak),
        )


def load_inputs(path: str | Path = INPUTS) -> MeasuredInputs:
    """The measured inputs stored in ``path`` (default: the package's JSON); a file that
    cannot be read or is not the inputs' layout raises ``ValueError`` naming it."""
    try:
        return MeasuredInputs.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(
            f"cost-model inputs {str(path)!r} cannot be read: {type(exc).__name__}: {exc}"
        ) from None


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
            _positive(f"IndexSpec.{name}", getattr(self, name), optional=name == "m")

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
    """The cluster: replicas, query and index nodes (memory in GiB), DML shards."""

    replicas: int = 2
    query_node_gib: float = 64.0
    query_node_cores: int = 16
    index_nodes: int = 4
    index_node_cores: int = 16
    shards: int = 1
    segment_mb: int = SEGMENT_MB

    def __post_init__(self) -> None:
        for f in ("replicas", "query_node_gib", "query_node_cores", "index_nodes",
                  "index_node_cores", "shards", "segment_mb"):  # fmt: skip
            _positive(f"ClusterSpec.{f}", getattr(self, f))


def _positive(name: str, value: Any, *, optional: bool = False) -> None:
    """Refuse a count or size that is not a positive number, naming it."""
    if optional and value is None:
        return
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")


@dataclass(frozen=True)
class Estimate:
    """An output: ``value`` in ``unit``, the ``formula`` and the ``inputs`` it used."""

    name: str
    value: float
    unit: str
    formula: str
    inputs: Mapping[str, Any] = field(default_factory=dict)


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


def query_nodes(memory: Estimate, cluster: ClusterSpec) -> Estimate:
    """Query nodes: ``ceil(memory / (node_gib * 2**30 * 0.9))`` per replica, x replicas."""
    per = math.ceil(memory.value / (cluster.query_node_gib * GIB * USABLE_MEMORY))
    return Estimate(
        "query nodes",
        float(per * cluster.replicas),
        "nodes",
        "ceil(memory / (node_gib 2**30 0.9)) replicas",
        {"memory": memory.value, "node_gib": cluster.query_node_gib, "per_replica": per,
         "replicas": cluster.replicas},
    )  # fmt: skip


def _work(kind: str, n: int, dim: int, segment_mb: int) -> float:
    """Relative work of one query (or one row's build) at ``n`` rows of ``dim``."""
    if kind != "HNSW":
        return float(dim * n)
    seg = segment_rows(dim, segment_mb)
    return dim * (math.log(n) if n <= seg else n / seg * math.log(seg))


def _row_work(kind: str, seg: int, dim: int) -> float:
    """Relative build work of one row in a segment of ``seg`` rows: ``d`` (an HNSW
    insert searches the graph: ``d ln(seg)``)."""
    return dim * math.log(seg) if kind == "HNSW" else float(dim)


def _figure(table: Mapping[str, Figure], kind: str, what: str) -> Figure:
    if kind not in table:
        raise KeyError(f"no measured {what} for {kind} (have {', '.join(sorted(table))})")
    return table[kind]


def build_seconds(
    spec: IndexSpec, n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec
) -> Estimate:
    """Index build time with ``cluster.index_nodes`` nodes (0 for FLAT: nothing to build)."""
    if spec.kind == "FLAT":
        return Estimate("build", 0.0, "s", "FLAT has no index to build", {})
    fig = _figure(measured.build_rows_per_s, spec.kind, "build rate")
    seg = min(n, segment_rows(dim, cluster.segment_mb))
    S = math.ceil(n / seg)
    per_core = fig.value / fig.cores
    seg_measured = min(fig.n, segment_rows(fig.dim, cluster.segment_mb))
    w = _row_work(spec.kind, seg, dim) / _row_work(spec.kind, seg_measured, fig.dim)
    rounds = math.ceil(S / cluster.index_nodes)
    value = rounds * seg * w / (per_core * cluster.index_node_cores)
    return Estimate(
        "build",
        value,
        "s",
        "ceil(S / k) segment_rows w / (rate / cores_measured * cores_per_node)",
        {"S": S, "k": cluster.index_nodes, "segment_rows": seg, "w": w, "rate": fig.value,
         "cores_measured": fig.cores, "cores_per_node": cluster.index_node_cores,
         "source": fig.source},
    )  # fmt: skip


def insert_seconds(n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec) -> Estimate:
    """Insert time: the measured rate scaled by row bytes, one DML channel per shard."""
    fig = measured.insert_rows_per_s
    rate = fig.value * (4 * fig.dim + 8) / (4 * dim + 8) * cluster.shards
    return Estimate(
        "insert",
        n / rate,
        "s",
        "n / (rate (4 d_measured + 8) / (4 d + 8) shards)",
        {"n": n, "rate": fig.value, "d_measured": fig.dim, "d": dim, "shards": cluster.shards,
         "source": fig.source},
    )  # fmt: skip


def cluster_qps(
    spec: IndexSpec,
    n: int,
    dim: int,
    measured: MeasuredInputs,
    cluster: ClusterSpec,
    nodes_per_replica: int,
    clients_per_core: float | None = None,
) -> Estimate:
    """Queries/s of the cluster (module docstring); ``clients_per_core`` None: saturated."""
    fig = _figure(measured.search_qps, spec.kind, "search rate")
    curve = measured.concurrency
    if clients_per_core is None:
        clients_per_core = curve.saturation() / curve.cores
    eff = curve.efficiency(clients_per_core)
    scale = _work(spec.kind, fig.n, fig.dim, cluster.segment_mb) / _work(
        spec.kind, n, dim, cluster.segment_mb
    )
    cores = nodes_per_replica * cluster.query_node_cores
    value = cluster.replicas * cores * fig.value / fig.cores * scale * eff
    return Estimate(
        "queries/s",
        value,
        "q/s",
        "replicas cores_per_replica (qps / cores_measured) work_measured / work(n, d) efficiency",
        {"replicas": cluster.replicas, "cores_per_replica": cores, "qps": fig.value,
         "cores_measured": fig.cores, "work_ratio": scale, "efficiency": eff,
         "clients": clients_per_core * cores * cluster.replicas, "source": fig.source},
    )  # fmt: skip


def estimate(
    spec: IndexSpec, n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec
) -> dict[str, Estimate]:
    """Every output for one index at ``n`` rows of ``dim``: memory, nodes, build, insert, q/s."""
    _positive("n (rows)", n)
    _positive("dim", dim)
    mem = memory_per_replica(spec, n, dim, cluster.segment_mb)
    nodes = query_nodes(mem, cluster)
    per_replica = int(nodes.inputs["per_replica"])
    return {
        "memory": mem,
        "query_nodes": nodes,
        "build": build_seconds(spec, n, dim, measured, cluster),
        "insert": insert_seconds(n, dim, measured, cluster),
        "qps": cluster_qps(spec, n, dim, measured, cluster, per_replica),
    }


def peak_note(measured: MeasuredInputs, spec: IndexSpec = IndexSpec("IVF_FLAT")) -> str:
    """How the measured standalone peak RSS compares with the formula at its size."""
    peak = measured.standalone_peak_rss
    if peak is None:
        return "No standalone peak RSS was measured."
    steady = memory_per_replica(spec, peak.n, peak.dim)
    ratio = peak.value / steady.value
    return (
        f"A Milvus standalone building and loading {spec.kind} at {peak.n:,} x {peak.dim} "
        f"peaked at {peak.value / GIB:.1f} GiB, {ratio:.1f}x the formula's "
        f"{steady.value / GIB:.2f} GiB ({peak.source}): the formula is a query node's "
        "steady state; size index nodes and a standalone server by the measured ratio."
    )


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def markdown_table(
    measured: MeasuredInputs,
    *,
    sizes: Sequence[int] = (10_000_000, 100_000_000),
    dims: Mapping[str, int] = DEFAULT_DIMS,
    cluster: ClusterSpec | None = None,
    specs: Sequence[IndexSpec] = tuple(IndexSpec(k) for k in INDEX_TYPES),
) -> str:
    """The cost table of ``docs/scale-out.md``: one row per dimension, size and index."""
    cl = cluster or ClusterSpec()
    head = (
        f"| method (d) | vectors | index | memory / replica (GiB) | query nodes "
        f"({cl.replicas} replicas) | build, {cl.index_nodes} index nodes (min) | insert (min) "
        f"| q/s, saturated | clients to saturate |"
    )
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for method, d in dims.items():
        for n in sizes:
            for spec in specs:
                e = estimate(spec, n, d, measured, cl)
                params = spec.label(d)
                lines.append(
                    f"| {method} ({d}) | {n / 1e6:,.0f}M | {spec.kind}"
                    f"{f' ({params})' if params else ''} | {_num(e['memory'].value / GIB)} "
                    f"| {e['query_nodes'].value:.0f} | {_num(e['build'].value / 60)} "
                    f"| {_num(e['insert'].value / 60)} | {_num(e['qps'].value)} "
                    f"| {e['qps'].inputs['clients']:,.0f} |"
                )
    return "\n".join(lines)
