"""The scale-out cost model: its arithmetic against hand-computed values, its
memory formulas against FAISS's own index sizes, and docs/scale-out.md's
table against the function that writes it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.collection.cost_model import (
    INPUTS,
    ClusterSpec,
    ConcurrencyCurve,
    Figure,
    IndexSpec,
    MeasuredInputs,
    build_seconds,
    cluster_qps,
    estimate,
    index_bytes,
    insert_seconds,
    load_inputs,
    markdown_table,
    memory_per_replica,
    peak_note,
    query_nodes,
    segment_rows,
)

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"

DOC = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
GIB = 2**30

# 1M x 256: a segment holds floor(512 * 2**20 / (4 * 256 + 8)) = 520,223 rows, so S = 2.
HAND = {
    "FLAT": 4 * 256 * 1_000_000,
    "IVF_FLAT": 1_000_000 * 1032 + 2 * 1024 * 1024,  # 1,034,097,152
    "IVF_SQ8": 1_000_000 * 264 + 2 * (1024 * 1024 + 2048),  # 266,101,248
    "IVF_PQ": 1_000_000 * (32 + 8) + 2 * (1024 * 1024 + 256 * 1024),  # 42,621,440
    "HNSW": 1_000_000 * (1024 + 128) + 24_000_000 + 1_000_000 * 4 * 17 / 15,
}


def _measured(rate: float = 1000.0) -> MeasuredInputs:
    fig = lambda v, n: Figure(v, "hand", n=n, dim=256, cores=2)  # noqa: E731
    return MeasuredInputs(
        search_qps={"IVF_FLAT": fig(1400.0, 1_000_000), "HNSW": fig(1000.0, 100_000)},
        build_rows_per_s={"IVF_FLAT": fig(rate, 1_000_000), "HNSW": fig(rate, 100_000)},
        insert_rows_per_s=fig(12_500.0, 1_000_000),
        concurrency=ConcurrencyCurve((1, 2, 4, 8), (380.0, 618.0, 967.0, 1091.0), 2, "hand"),
    )


@pytest.mark.parametrize("kind", list(HAND))
def test_memory_formulas_equal_hand_computed_values(kind: str) -> None:
    assert segment_rows(256) == 520_223
    est = index_bytes(IndexSpec(kind), 1_000_000, 256)
    assert est.value == pytest.approx(HAND[kind], rel=1e-12)
    assert est.inputs["n"] == 1_000_000 and est.inputs["S"] == 2 and est.formula
    rep = memory_per_replica(IndexSpec(kind), 1_000_000, 256)
    assert rep.value == pytest.approx(HAND[kind] + 16 * 1_000_000, rel=1e-12)


def test_query_nodes_round_up_under_the_load_threshold() -> None:
    mem = memory_per_replica(IndexSpec("FLAT"), 1, 1)
    mem = type(mem)("m", 100 * GIB, "bytes", "", {})
    # 64 GiB x 0.9 = 57.6 GiB usable: 100 GiB needs 2 nodes a replica, 4 for 2 replicas
    assert query_nodes(mem, ClusterSpec(replicas=2, query_node_gib=64)).value == 4
    assert query_nodes(mem, ClusterSpec(replicas=3, query_node_gib=128)).value == 3


def test_build_time_with_index_nodes() -> None:
    cl = ClusterSpec(index_nodes=4, index_node_cores=10)
    # 10M x 256: S = 20 segments of 520,223 rows, 5 rounds; 500 rows/s a core x 10 cores
    ivf = build_seconds(IndexSpec("IVF_FLAT"), 10_000_000, 256, _measured(), cl)
    assert ivf.value == pytest.approx(5 * 520_223 / 5000)
    assert ivf.inputs["S"] == 20 and ivf.inputs["w"] == 1.0
    # HNSW's per-row work grows with ln(segment rows): measured at 100k
    w = math.log(520_223) / math.log(100_000)
    hnsw = build_seconds(IndexSpec("HNSW"), 10_000_000, 256, _measured(), cl)
    assert hnsw.value == pytest.approx(5 * 520_223 * w / 5000)
    # d = 384: IVF work x 1.5; 8 index nodes and 3 segments: one round
    seg384 = segment_rows(384)
    one = build_seconds(IndexSpec("IVF_FLAT"), 3 * seg384, 384, _measured(), ClusterSpec())
    assert one.value == pytest.approx(seg384 * 1.5 / (500 * 16))
    assert build_seconds(IndexSpec("FLAT"), 10**8, 256, _measured(), cl).value == 0.0


def test_insert_time_scales_with_row_bytes_and_shards() -> None:
    est = insert_seconds(10_000_000, 384, _measured(), ClusterSpec(shards=2))
    assert est.value == pytest.approx(10_000_000 / (12_500 * 1032 / 1544 * 2))


def test_queries_per_second_from_per_core_rate_and_concurrency_curve() -> None:
    m, cl = _measured(), ClusterSpec(replicas=2, query_node_cores=16)
    # IVF_FLAT 1,400 q/s on 2 cores at 1M x 256 -> 700 a core; 10M x 384 is 15x the work
    sat = cluster_qps(IndexSpec("IVF_FLAT"), 10_000_000, 384, m, cl, nodes_per_replica=3)
    assert sat.value == pytest.approx(2 * 48 * 700 / 15)
    assert sat.inputs["efficiency"] == 1.0 and sat.inputs["clients"] == 4 * 48 * 2
    one = cluster_qps(IndexSpec("IVF_FLAT"), 10_000_000, 384, m, cl, 3, clients_per_core=1)
    assert one.value == pytest.approx(sat.value * 618 / 1091)
    curve = m.concurrency
    assert curve.efficiency(1.5) == pytest.approx((618 + (967 - 618) * 0.5) / 1091)
    assert curve.efficiency(0.1) == pytest.approx(380 / 1091) and curve.efficiency(99) == 1.0
    assert curve.saturation() == 8 and curve.saturation(0.85) == 4
    # HNSW: a graph per segment, ln of its rows: 100k measured in one segment
    h = cluster_qps(IndexSpec("HNSW"), 10_000_000, 256, m, cl, nodes_per_replica=1)
    work = (10_000_000 / 520_223) * math.log(520_223) / math.log(100_000)
    assert h.value == pytest.approx(2 * 16 * 500 / work)


def test_every_output_carries_its_formula_inputs_and_sources() -> None:
    m = load_inputs()
    for kind in ("FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW"):
        out = estimate(IndexSpec(kind), 100_000_000, 384, m, ClusterSpec())
        for e in out.values():
            assert e.formula and e.unit and e.value >= 0
        for key in ("insert", "qps") + (("build",) if kind != "FLAT" else ()):
            assert out[key].inputs["source"]


def test_the_stored_inputs_name_their_source() -> None:
    raw = json.loads(INPUTS.read_text(encoding="utf-8"))
    figures = [*raw["search_qps"].values(), *raw["build_rows_per_s"].values()]
    figures += [raw["insert_rows_per_s"], raw["standalone_peak_rss_bytes"], raw["concurrency"]]
    cells = {p.name for p in RESULTS.rglob("*.json")}
    for f in figures:
        src = f["source"]
        assert "2-core machine" in src, src
        if src.startswith("kept from the previous inputs"):
            assert "issue 29" in src, src  # the measured table the study did not replace
            continue
        # a figure of the study ends with the cell file(s) it was read from, all stored
        named = src.rsplit(": ", 1)[1]
        m = re.fullmatch(r"(.*)\{([\d,]+)\}(.*)", named)
        files = [m[1] + x + m[3] for x in m[2].split(",")] if m else [named]
        assert all(n in cells for n in files), (src, files)


def test_doc_table_equals_the_function_on_the_stored_inputs() -> None:
    text = DOC.read_text(encoding="utf-8")
    m = load_inputs()
    assert markdown_table(m) in text, "docs/scale-out.md's table differs from markdown_table()"
    assert peak_note(m) in text


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="index must be one of"):
        IndexSpec("DISKANN")
    with pytest.raises(ValueError, match="PQ m must divide the dimension 256"):
        index_bytes(IndexSpec("IVF_PQ", m=7), 1000, 256)
    with pytest.raises(KeyError, match="no measured search rate for FLAT"):
        cluster_qps(IndexSpec("FLAT"), 10, 8, _measured(), ClusterSpec(), 1)


@pytest.mark.parametrize(
    ("factory", "spec"),
    [
        ("Flat", IndexSpec("FLAT")),
        ("IVF64,Flat", IndexSpec("IVF_FLAT", nlist=64)),
        ("IVF64,SQ8", IndexSpec("IVF_SQ8", nlist=64)),
        ("IVF64,PQ8", IndexSpec("IVF_PQ", nlist=64, m=8)),
    ],
)
def test_memory_formulas_match_faiss_index_sizes(factory: str, spec: IndexSpec) -> None:
    faiss = pytest.importorskip("faiss")
    n, d = 20_000, 64
    x = np.random.default_rng(0).standard_normal((n, d)).astype(np.float32)
    index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    got = faiss.serialize_index(index).size  # what the index holds, plus headers
    assert got == pytest.approx(index_bytes(spec, n, d).value, rel=5e-3)
