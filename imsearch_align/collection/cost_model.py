"""What a collection of 10M or 100M vectors costs on a Milvus cluster, from index formulas
and the figures measured here (:mod:`.cost_figures`), each output with a low-high band.

**Memory of one replica** (bytes; ``n`` rows of ``d`` float32 dimensions; one index per
sealed segment, so per-index constants are paid ``S = ceil(n / segment_rows)`` times;
``segment_rows = floor(segment_mb * 2**20 / (4 d + 8))``, ``segment_mb`` an input)::

    FLAT      4 d n                               (FAISS wiki: Flat adds no overhead)
    IVF_FLAT  n (4 d + 8) + S nlist 4 d           (4 d code + 8-byte id; nlist centroids)
    IVF_SQ8   n (d + 8) + S (nlist 4 d + 8 d)     (a byte a dimension; min and range)
    IVF_PQ    n (ceil(m nbits / 8) + 8)           (Milvus docs: m x nbits bits a vector;
              + S (nlist 4 d + 2**nbits 4 d)       m codebooks of 2**nbits centroids)
    HNSW      n (4 d + 8 M) + 24 n                (FAISS wiki: d 4 + M 2 4 bytes; hnswlib's
              + n 4 (M + 1) / (M - 1)              per-vector fields and upper layers)

plus ``16 n`` (int64 key, uint64 timestamp). The **measured memory** is that times
``server_memory_ratio`` (a standalone server's RSS over the formula at 1M); both node
counts are given: ``ceil(memory / (node_gib 2**30 0.9))`` a replica, times the replicas
(a query node refuses a load past 90 %).

**Queries/s of one replica** (``p`` nodes of ``c`` cores, each searching its share of
the segments): ``p * rate(c) * work_measured / work(n, d) * efficiency``; ``work`` is
``d n`` for FLAT and IVF, ``d (n / segment_rows) ln(segment_rows)`` for HNSW; the
efficiency is the concurrency curve's share of its plateau at ``clients_per_core``
(1 at saturation, the default). ``mode="single"`` (default: what a search service sees)
uses the single-query figure, ``"batched"`` the batch-of-100 one; both are reported.
A target q/s adds replicas: ``max(replicas, ceil(target / q/s of a replica))``.

**Cores** (``rate(c)``): with ``core_scaling`` measured (a server pinned to 1 and to 2
cores, clients elsewhere), ``rate(c) = q2 * A(c) / A(2)``, ``A`` Amdahl's law fitted to
the 1->2 speed-up ``r = q2 / q1``: serial share ``s = clip(2 / r - 1, 0, 1)``, ``A(c) =
1 / (s + (1 - s) / c)``. Without it, ``rate(c) = q * c / cores_measured`` and every
output that uses it says "assumed linear (not measured)".

**Not measured**: a single-query q/s with no concurrency cell is extrapolated as the
type's batched q/s times the single/batched ratio of a type with both measured (said in
the output's notes); a batched q/s or build rate no cell holds is refused
(:class:`NotMeasuredError`, naming what to measure); a load rate no cell holds leaves
that output ``None`` with the reason.

**Bands**: every input figure has ``[low, high]`` from its repeats. Each group of outputs
(serving: memory, nodes, q/s, clients; build; load; insert) is evaluated at every corner
of the bands of the figures it reads (each at its low or its high end: interval
arithmetic, exact for these outputs, which are monotone in each input), and an output's
band is the least and the most it takes there (``Estimate.by_corner``). When every
input moves the output the same way, that is the all-low and the all-high evaluation.

**Build** with ``k`` index nodes (one segment at a time each): ``ceil(S / k)`` rounds of
``segment_rows * w / rate(c)``, ``w`` the work per row relative to the measured one
(``d``; ``d ln(segment_rows)`` for HNSW), the rate from the build without the load wait.
**Load**: each query node loads its ``n / p`` rows in parallel at the measured rate
(scaled by row bytes, not by cores). **Insert**: the measured rows/s scaled by row bytes,
times the shards.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from imsearch_align.collection.cost_figures import (
    INDEX_TYPES,
    INPUTS,
    MODES,
    ConcurrencyCurve,
    Figure,
    InputsError,
    MeasuredInputs,
    NotMeasuredError,
    load_inputs,
)
from imsearch_align.collection.cost_formulas import (
    DEFAULT_DIMS,
    GIB,
    ClusterSpec,
    Estimate,
    IndexSpec,
    index_bytes,
    memory_per_replica,
    positive,
    query_nodes,
    query_work,
    row_work,
    segment_rows,
)
from imsearch_align.collection.cost_rates import Corner, search_rate, speed

__all__ = [
    "DEFAULT_DIMS",
    "GIB",
    "INDEX_TYPES",
    "INPUTS",
    "ClusterSpec",
    "ConcurrencyCurve",
    "Corner",
    "Estimate",
    "Figure",
    "IndexSpec",
    "InputsError",
    "MeasuredInputs",
    "NotMeasuredError",
    "build_seconds",
    "estimate",
    "index_bytes",
    "insert_seconds",
    "load_inputs",
    "memory_per_replica",
    "query_nodes",
    "segment_rows",
]


def _seg(measured: MeasuredInputs, cluster: ClusterSpec) -> int:
    return cluster.segment_mb or measured.segment_mb


def build_seconds(spec: IndexSpec, n: int, dim: int, measured: MeasuredInputs,
                  cluster: ClusterSpec, corner: Corner | None = None) -> Estimate:  # fmt: skip
    """Index build time with ``cluster.index_nodes`` nodes (0 for FLAT)."""
    if spec.kind == "FLAT":
        return Estimate("build", 0.0, "s", "FLAT has no index to build", {})
    fig = measured.build_rows_per_s.get(spec.kind)
    if fig is None or not fig.measured:
        why = fig.source if fig is not None else f"no build rate of {spec.kind} in the inputs"
        raise NotMeasuredError(f"{spec.kind} build rate: {why}")
    rate, m_n, m_dim, notes = speed(measured, spec.kind, "build", fig, cluster.index_node_cores,
                                    corner or Corner())  # fmt: skip
    seg_mb = _seg(measured, cluster)
    seg = min(n, segment_rows(dim, seg_mb))
    S = math.ceil(n / seg)
    w = row_work(spec.kind, seg, dim) / row_work(spec.kind, min(m_n, segment_rows(m_dim, seg_mb)),
                                                 m_dim)  # fmt: skip
    rounds = math.ceil(S / cluster.index_nodes)
    return Estimate(
        "build", rounds * seg * w / rate, "s", "ceil(S / k) segment_rows w / rate(cores)",
        {"S": S, "k": cluster.index_nodes, "segment_rows": seg, "w": w, "rate": rate,
         "cores_per_node": cluster.index_node_cores, "source": fig.source},
        notes=notes,
    )  # fmt: skip


def insert_seconds(n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec,
                   corner: Corner | None = None) -> Estimate:  # fmt: skip
    """Insert time: the measured rate scaled by row bytes, one DML channel per shard."""
    fig = measured.insert_rows_per_s
    measured_rate = (corner or Corner()).at("insert", fig)
    rate = measured_rate * (4 * fig.dim + 8) / (4 * dim + 8) * cluster.shards
    return Estimate(
        "insert", n / rate, "s", "n / (rate (4 d_measured + 8) / (4 d + 8) shards)",
        {"n": n, "rate": measured_rate, "d_measured": fig.dim, "d": dim,
         "shards": cluster.shards, "source": fig.source},
    )  # fmt: skip


def _memory(spec: IndexSpec, n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec,
            corner: Corner) -> tuple[Estimate, Estimate, tuple[str, ...]]:  # fmt: skip
    """The formula's memory of a replica, the measured one (x the server ratio), notes."""
    mem = memory_per_replica(spec, n, dim, _seg(measured, cluster))
    rfig = measured.memory_ratio(spec.kind)
    if rfig is None or not rfig.measured:
        ratio, notes = 1.0, ("server memory not measured: the formula alone",)
    else:
        ratio, notes = corner.at("ratio", rfig), ()
        types = rfig.extra.get("index_types") or ["IVF_FLAT"]
        if spec.kind not in types:
            notes = (f"server memory ratio measured on {', '.join(types)}, applied to {spec.kind}",)
    measured_mem = Estimate("memory measured", mem.value * ratio, "bytes",
                            "memory x server_memory_ratio", {"ratio": ratio},
                            notes=notes)  # fmt: skip
    return mem, measured_mem, notes


def _load(spec: IndexSpec, n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec,
          corner: Corner) -> dict[str, Estimate]:  # fmt: skip
    """Load time: each query node loads its ``n / p`` rows at the measured rate."""
    fig = measured.load_rows_per_s.get(spec.kind)
    if fig is None or not fig.measured:
        why = fig.source if fig is not None else f"no load rate of {spec.kind} in the inputs"
        return {"load": Estimate("load", None, "s", "", notes=(why,))}
    mem, measured_mem, _ = _memory(spec, n, dim, measured, cluster, corner)
    per = int(query_nodes(mem, cluster, measured_mem.inputs["ratio"]).inputs["per_replica"])
    rate = corner.at(f"load.{spec.kind}", fig) * (4 * fig.dim + 8) / (4 * dim + 8)
    return {"load": Estimate(
        "load", n / per / rate, "s", "n / p / (rate (4 d_measured + 8) / (4 d + 8))",
        {"n": n, "p": per, "rate": rate, "source": fig.source},
        notes=("each query node loads its rows at a standalone's measured rate, not scaled by "
               "cores",),
    )}  # fmt: skip


def _replica_qps(spec: IndexSpec, n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec,
                 per_replica: int, mode: str, corner: Corner, clients_per_core: float | None,
                 ) -> tuple[float, dict[str, Any], tuple[str, ...]]:  # fmt: skip
    """Queries/s of one replica of ``per_replica`` nodes in ``mode`` (module docstring)."""
    seg_mb = _seg(measured, cluster)
    q, fig, notes = search_rate(measured, spec.kind, mode, corner)
    rate, m_n, m_dim, more = speed(measured, spec.kind, mode, fig, cluster.query_node_cores,
                                   corner, value=q)  # fmt: skip
    work = query_work(spec.kind, m_n, m_dim, seg_mb) / query_work(spec.kind, n, dim, seg_mb)
    curve = measured.concurrency
    eff = 1.0
    if mode == "single" and clients_per_core is not None and curve is not None:
        eff = curve.efficiency(clients_per_core)
    inputs = {"nodes": per_replica, "node_rate": rate, "work_ratio": work, "efficiency": eff,
              "source": fig.source}  # fmt: skip
    if fig.quality is not None:
        inputs["quality"] = fig.quality.text()
    return per_replica * rate * work * eff, inputs, notes + more


def _serve(spec: IndexSpec, n: int, dim: int, measured: MeasuredInputs, cluster: ClusterSpec,
           corner: Corner, mode: str, target: float | None, cpc: float | None,
           ) -> dict[str, Estimate]:  # fmt: skip
    """Memory, node counts, q/s and clients at one corner."""
    mem, measured_mem, notes = _memory(spec, n, dim, measured, cluster, corner)
    ratio = measured_mem.inputs["ratio"]
    per = int(query_nodes(mem, cluster, ratio).inputs["per_replica"])
    out = {"memory": mem, "memory_measured": measured_mem,
           "query_nodes_formula": query_nodes(mem, cluster)}  # fmt: skip
    other = "batched" if mode == "single" else "single"
    rates = {m: _replica_qps(spec, n, dim, measured, cluster, per, m, corner, cpc) for m in MODES}
    reps = {m: max(cluster.replicas, math.ceil(target / rates[m][0])) if target
            else cluster.replicas for m in MODES}  # fmt: skip
    for m, key in ((mode, "query_nodes"), (other, f"query_nodes_{other}")):
        out[key] = Estimate(
            key, float(per * reps[m]), "nodes",
            "ceil(memory ratio / (node_gib 2**30 0.9)) max(replicas, ceil(target / replica q/s))",
            {"per_replica": per, "replicas": reps[m], "ratio": ratio, "target_qps": target,
             "by": m},
            notes=notes + (rates[m][2] if target else ()),
        )  # fmt: skip
    for m, key in ((mode, "qps"), (other, f"qps_{other}")):
        out[key] = Estimate(
            key, reps[mode] * rates[m][0], "q/s",
            "replicas p rate(cores) work_measured / work(n, d) efficiency",
            {**rates[m][1], "replicas": reps[mode], "mode": m}, notes=rates[m][2],
        )  # fmt: skip
    out["clients"] = _clients(measured.concurrency, per * reps[mode], cluster)
    return out


def _clients(curve: ConcurrencyCurve | None, nodes: int, cl: ClusterSpec) -> Estimate:
    """Clients sending single queries that saturate the cluster (the curve's clients a core)."""
    if curve is None:
        return Estimate("clients", None, "clients", "", notes=("no concurrency curve measured",))
    return Estimate(
        "clients to saturate", nodes * cl.query_node_cores * curve.saturation() / curve.cores,
        "clients", "nodes cores_per_node saturation_clients / cores_measured",
        {"saturation": curve.saturation(), "cores_measured": curve.cores, "source": curve.source},
    )  # fmt: skip


def _over_corners(group: Callable[[Corner], dict[str, Estimate]]) -> dict[str, Estimate]:
    """``group`` at the inputs' values, with each output's band over every corner of the
    bands of the figures it read (the corners in one order, ``by_corner``)."""
    seen: set[str] = set()
    base = group(Corner(seen=seen))
    keys = sorted(seen)
    runs = [group(Corner(dict(zip(keys, ends))))
            for ends in itertools.product(("low", "high"), repeat=len(keys))]  # fmt: skip
    out = {}
    for name, est in base.items():
        if est.value is None:
            out[name] = est
            continue
        by = tuple(float(r[name].value) for r in runs)  # type: ignore[arg-type]
        out[name] = Estimate(est.name, est.value, est.unit, est.formula, est.inputs,
                             min(by), max(by), est.notes, by)  # fmt: skip
    return out


def estimate(
    spec: IndexSpec,
    n: int,
    dim: int,
    measured: MeasuredInputs,
    cluster: ClusterSpec,
    *,
    mode: str = "single",
    target_qps: float | None = None,
    clients_per_core: float | None = None,
) -> dict[str, Estimate]:
    """Every output for one index at ``n`` rows of ``dim``, each with its band: ``memory``
    (formula) and ``memory_measured``, ``query_nodes_formula``, ``query_nodes`` (sized by
    ``mode``, default single queries, and ``target_qps``) and ``query_nodes_<other mode>``,
    ``qps`` and ``qps_<other mode>`` of that cluster, ``clients``, ``build``, ``load``,
    ``insert``. ``clients_per_core`` None: saturated.

    Raises:
        ValueError: a size, count or target that is not a positive number, an unknown mode.
        NotMeasuredError: a q/s or build rate the inputs do not hold (what to measure).
    """
    for name, value in (("n (rows)", n), ("dim", dim)):
        positive(name, value)
        if not float(value).is_integer():
            raise ValueError(f"{name} must be a whole number, got {value!r}")
    positive("target_qps", target_qps, optional=True)
    positive("clients_per_core", clients_per_core, optional=True)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    n, dim = int(n), int(dim)
    args = (spec, n, dim, measured, cluster)
    out = _over_corners(lambda c: _serve(*args, c, mode, target_qps, clients_per_core))
    out.update(_over_corners(lambda c: {"build": build_seconds(*args, c)}))
    out.update(_over_corners(lambda c: _load(*args, c)))
    out.update(_over_corners(lambda c: {"insert": insert_seconds(n, dim, measured, cluster, c)}))
    return out
