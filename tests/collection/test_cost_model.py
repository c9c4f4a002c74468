"""The scale-out cost model: its arithmetic against hand-computed values (memory formulas,
node counts by formula and by the measured ratio, q/s by single queries and by batches,
build without the load wait), every band against a direct formula, the rules for
figures that are not measured, the memory formulas against FAISS's own index sizes, and
docs/scale-out.md's table against the function that writes it."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.collection.cost_figures import ConcurrencyCurve, Figure, Quality
from imsearch_align.collection.cost_formulas import Estimate
from imsearch_align.collection.cost_model import (
    ClusterSpec,
    Corner,
    IndexSpec,
    MeasuredInputs,
    NotMeasuredError,
    build_seconds,
    estimate,
    index_bytes,
    insert_seconds,
    load_inputs,
    memory_per_replica,
    query_nodes,
    segment_rows,
)
from imsearch_align.collection.cost_rates import (
    BELOW_EXACT,
    amdahl,
    search_rate,
    serial_share,
    speed,
)
from imsearch_align.collection.cost_report import _codes, markdown_table, memory_note

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


def fig(v, n=1_000_000, low=None, high=None, **kw) -> Figure:
    return Figure(v, "hand", n=n, dim=256, cores=2, low=low, high=high, **kw)


def _measured(*, single=True, ratio=None, scaling=None) -> MeasuredInputs:
    """IVF_FLAT: batched 1,400 [1,000-1,800], single 400 [380-420] at 1M x 256 on 2 cores;
    HNSW batched only; no IVF_SQ8."""
    return MeasuredInputs(
        search_qps={
            "IVF_FLAT": {
                "batched": fig(1400.0, low=1000.0, high=1800.0),
                "single": fig(400.0, low=380.0, high=420.0)
                if single
                else Figure(None, "not measured: run the concurrency study"),
            },
            "HNSW": {
                "batched": fig(1000.0, n=100_000, bound="rpc"),
                "single": Figure(None, "not measured: no concurrency cell"),
            },
            "IVF_SQ8": {
                "batched": Figure(None, "not measured: no committed cell; measure: X"),
                "single": Figure(None, "not measured: no committed cell; measure: X"),
            },
        },
        build_rows_per_s={
            "IVF_FLAT": fig(1000.0, low=800.0, high=1250.0),
            "HNSW": fig(1000.0, n=100_000),
        },
        insert_rows_per_s=fig(12_500.0),
        concurrency=ConcurrencyCurve((1, 2, 4, 8), (380.0, 618.0, 967.0, 1091.0), 2, "hand"),
        server_memory_ratio=ratio,
        load_rows_per_s={"IVF_FLAT": fig(10_000.0)},
        core_scaling=scaling or {},
    )


@pytest.mark.parametrize("kind", list(HAND))
def test_memory_formulas_equal_hand_computed_values(kind: str) -> None:
    assert segment_rows(256) == 520_223
    est = index_bytes(IndexSpec(kind), 1_000_000, 256)
    assert est.value == pytest.approx(HAND[kind], rel=1e-12)
    assert est.inputs["n"] == 1_000_000 and est.inputs["S"] == 2 and est.formula
    rep = memory_per_replica(IndexSpec(kind), 1_000_000, 256)
    assert rep.value == pytest.approx(HAND[kind] + 16 * 1_000_000, rel=1e-12)


def test_query_nodes_round_up_under_the_load_threshold_with_the_measured_ratio() -> None:
    mem = memory_per_replica(IndexSpec("FLAT"), 1, 1)
    mem = type(mem)("m", 100 * GIB, "bytes", "", {})
    # 64 GiB x 0.9 = 57.6 GiB usable: 100 GiB needs 2 nodes a replica, 4 for 2 replicas
    assert query_nodes(mem, ClusterSpec(replicas=2, query_node_gib=64)).value == 4
    assert query_nodes(mem, ClusterSpec(replicas=3, query_node_gib=128)).value == 3
    # x 2.1: 210 GiB needs 4 a replica
    assert query_nodes(mem, ClusterSpec(replicas=2, query_node_gib=64), 2.1).value == 8


def test_the_measured_memory_ratio_sizes_and_the_formula_is_shown_beside() -> None:
    m = _measured(ratio=fig(2.1, low=1.8, high=2.2))
    e = estimate(IndexSpec("IVF_FLAT"), 100_000_000, 384, m, ClusterSpec())
    mem = memory_per_replica(IndexSpec("IVF_FLAT"), 100_000_000, 384).value
    usable = 64 * GIB * 0.9
    assert e["query_nodes_formula"].value == 2 * math.ceil(mem / usable) == 6
    assert e["query_nodes"].value == 2 * math.ceil(mem * 2.1 / usable) == 12
    assert (e["query_nodes"].low, e["query_nodes"].high) == (
        2 * math.ceil(mem * 1.8 / usable), 2 * math.ceil(mem * 2.2 / usable))  # fmt: skip
    assert e["memory_measured"].low == pytest.approx(mem * 1.8)
    assert any("applied to" in n for n in estimate(IndexSpec("HNSW"), 10**8, 384, m,
                                                   ClusterSpec())["query_nodes"].notes)  # fmt: skip


def test_build_without_the_load_wait_and_its_band() -> None:
    cl = ClusterSpec(index_nodes=4, index_node_cores=10)
    # 10M x 256: S = 20 segments of 520,223 rows, 5 rounds; 500 rows/s a core x 10 cores
    ivf = build_seconds(IndexSpec("IVF_FLAT"), 10_000_000, 256, _measured(), cl)
    assert ivf.value == pytest.approx(5 * 520_223 / 5000)
    assert ivf.inputs["S"] == 20 and ivf.inputs["w"] == 1.0
    assert any("assumed linear (not measured)" in n for n in ivf.notes)
    # HNSW's per-row work grows with ln(segment rows): measured at 100k
    w = math.log(520_223) / math.log(100_000)
    hnsw = build_seconds(IndexSpec("HNSW"), 10_000_000, 256, _measured(), cl)
    assert hnsw.value == pytest.approx(5 * 520_223 * w / 5000)
    assert build_seconds(IndexSpec("FLAT"), 10**8, 256, _measured(), cl).value == 0.0
    e = estimate(IndexSpec("IVF_FLAT"), 10_000_000, 256, _measured(), cl)["build"]
    # band: the rate's band 800-1,250 rows/s on 2 cores, directly
    assert (e.low, e.high) == pytest.approx((5 * 520_223 / 6250, 5 * 520_223 / 4000))
    low = build_seconds(IndexSpec("IVF_FLAT"), 10**7, 256, _measured(), cl,
                        Corner({"build.IVF_FLAT": "high"}))  # fmt: skip
    assert low.value == pytest.approx(e.low)


def test_insert_time_scales_with_row_bytes_and_shards() -> None:
    est = insert_seconds(10_000_000, 384, _measured(), ClusterSpec(shards=2))
    assert est.value == pytest.approx(10_000_000 / (12_500 * 1032 / 1544 * 2))


def test_qps_single_and_batched_and_their_bands_against_a_direct_formula() -> None:
    m, cl = _measured(), ClusterSpec(replicas=2, query_node_cores=16)
    e = estimate(IndexSpec("IVF_FLAT"), 10_000_000, 384, m, cl)
    # 10M x 384 IVF_FLAT: 14.6 GiB a replica, one 64 GiB node; 16 cores; 15x the work of 1M x 256
    per_core = {"single": (400, 380, 420), "batched": (1400, 1000, 1800)}
    for key, mode in (("qps", "single"), ("qps_batched", "batched")):
        want = [2 * 1 * 16 * q / 2 / 15 for q in per_core[mode]]
        got = e[key]
        assert (got.value, got.low, got.high) == pytest.approx(tuple(want)), key
        assert any("assumed linear (not measured)" in n for n in got.notes)
    assert e["qps"].inputs["efficiency"] == 1.0 and "hand" in e["qps"].inputs["source"]
    half = estimate(IndexSpec("IVF_FLAT"), 10_000_000, 384, m, cl, clients_per_core=1)
    assert half["qps"].value == pytest.approx(e["qps"].value * 618 / 1091)
    assert e["clients"].value == 2 * 16 * 8 / 2  # saturation: 8 clients on 2 cores


def test_the_single_query_figure_not_the_batched_one_decides_the_node_count() -> None:
    m, cl = _measured(), ClusterSpec(replicas=2, query_node_cores=16)
    # one node a replica serves 16 x 400 / 2 / 15 = 213 q/s single, 747 batched
    e = estimate(IndexSpec("IVF_FLAT"), 10_000_000, 384, m, cl, target_qps=2000)
    assert e["query_nodes"].value == math.ceil(2000 / (16 * 400 / 2 / 15)) == 10
    assert e["query_nodes_batched"].value == math.ceil(2000 / (16 * 1400 / 2 / 15)) == 3
    assert e["query_nodes"].inputs["by"] == "single"
    assert e["query_nodes"].high == math.ceil(2000 / (16 * 380 / 2 / 15))
    assert e["query_nodes"].low == math.ceil(2000 / (16 * 420 / 2 / 15))
    assert e["qps"].value >= 2000
    b = estimate(IndexSpec("IVF_FLAT"), 10_000_000, 384, m, cl, target_qps=2000, mode="batched")
    assert b["query_nodes"].value == 3 and b["query_nodes_single"].value == 10


def test_a_single_query_figure_not_measured_is_extrapolated_and_said() -> None:
    m, cl = _measured(), ClusterSpec()
    e = estimate(IndexSpec("HNSW"), 100_000, 256, m, cl)
    # HNSW batched 1,000 at 100k x IVF_FLAT's 400/1,400; one node of 16 cores, 2 replicas
    assert e["qps"].value == pytest.approx(2 * 16 * 1000 * 400 / 1400 / 2)
    assert e["qps"].low == pytest.approx(2 * 16 * 1000 * 380 / 1800 / 2)
    assert e["qps"].high == pytest.approx(2 * 16 * 1000 * 420 / 1000 / 2)
    notes = " ".join(e["qps"].notes)
    assert "extrapolated as its batched q/s x IVF_FLAT's single/batched ratio" in notes
    assert "RPC path, not the index" in notes  # HNSW's batched figure was RPC-bound
    with pytest.raises(NotMeasuredError, match="no index type has both"):
        estimate(IndexSpec("HNSW"), 100_000, 256, _measured(single=False), cl)


def test_a_batched_figure_not_measured_is_refused_naming_what_to_measure() -> None:
    with pytest.raises(NotMeasuredError, match=r"IVF_SQ8 single q/s: not measured.*measure: X"):
        estimate(IndexSpec("IVF_SQ8"), 10**7, 384, _measured(), ClusterSpec())
    with pytest.raises(NotMeasuredError, match="no single q/s of IVF_PQ in the inputs"):
        estimate(IndexSpec("IVF_PQ"), 10**7, 384, _measured(), ClusterSpec())


def test_measured_core_scaling_replaces_linear_by_amdahls_law() -> None:
    assert serial_share(2.0) == 0.0 and serial_share(1.6) == pytest.approx(0.25)
    assert serial_share(0.9) == 1.0 and serial_share(2.5) == 0.0
    assert amdahl(16, 1.6) == pytest.approx(1 / (0.25 + 0.75 / 16))
    one = Figure(250.0, "", n=1_000_000, dim=256, cores=1, low=240.0, high=260.0)
    two = Figure(400.0, "", n=1_000_000, dim=256, cores=2, low=380.0, high=420.0)
    scaling = {"IVF_FLAT": {"single": (one, two), "batched": (None, None), "build": (None, None)}}
    e = estimate(IndexSpec("IVF_FLAT"), 10_000_000, 256, _measured(scaling=scaling), ClusterSpec())
    node = lambda q1, q2: q2 * amdahl(16, q2 / q1) / amdahl(2, q2 / q1)  # noqa: E731
    assert e["qps"].value == pytest.approx(2 * node(250, 400) / 10)
    corners = [2 * node(a, b) / 10 for a in (240, 260) for b in (380, 420)]
    assert (e["qps"].low, e["qps"].high) == pytest.approx((min(corners), max(corners)))
    assert any("Amdahl" in n and "1.60" in n for n in e["qps"].notes)
    assert not any("assumed linear" in n for n in e["qps"].notes)
    assert any("assumed linear" in n for n in e["qps_batched"].notes)


def test_a_type_without_its_own_core_scaling_borrows_ivf_flats_speed_up_on_its_own_rate():
    one = Figure(1000.0, "", n=200_000, dim=256, cores=1)
    two = Figure(1600.0, "", n=200_000, dim=256, cores=2)
    none = (None, None)
    scaling = {"IVF_FLAT": {"single": none, "batched": (one, two), "build": none}}
    m = _measured(scaling=scaling)
    hnsw = m.qps("HNSW", "batched")  # 1,000 q/s at 100k on 2 cores
    q, n, _, notes = speed(m, "HNSW", "batched", hnsw, 16, Corner())
    assert q == pytest.approx(1000.0 * amdahl(16, 1.6) / amdahl(2, 1.6)) and n == 100_000
    assert "IVF_FLAT's measured 1->2-core speed-up 1.60" in notes[0]
    assert notes[0].endswith("core scaling measured on IVF_FLAT, not on HNSW")
    # its own scaling, once measured, wins
    own = (Figure(900.0, "", n=200_000, dim=256, cores=1),
           Figure(1800.0, "", n=200_000, dim=256, cores=2))  # fmt: skip
    m2 = _measured(scaling={**scaling, "HNSW": {"batched": own}})
    q2, _, _, notes2 = speed(m2, "HNSW", "batched", hnsw, 16, Corner())
    assert q2 == pytest.approx(1000.0 * 16 / 2) and "IVF_FLAT" not in notes2[0]
    # nothing measured for that kind: linear, said
    q3, _, _, notes3 = speed(m, "HNSW", "build", m.build_rows_per_s["HNSW"], 16, Corner())
    assert q3 == pytest.approx(1000.0 * 16 / 2) and "assumed linear" in notes3[0]


def test_every_output_carries_its_formula_band_and_sources() -> None:
    m = load_inputs()
    for kind in ("FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW"):
        out = estimate(IndexSpec(kind), 100_000_000, 384, m, ClusterSpec())
        for name, e in out.items():
            if e.value is None:
                assert e.notes and "not measured" in e.notes[0], name
                continue
            assert e.unit and e.low <= e.value <= e.high, (kind, name)
        for key in ("insert", "qps", "qps_batched") + (("build",) if kind != "FLAT" else ()):
            assert out[key].inputs["source"]
        assert "HitRate@10" in out["qps"].inputs["quality"]
        # IVF_PQ (m 32, csa) reached no task quality near exact's: its q/s says so
        below = [n for n in out["qps"].notes if BELOW_EXACT in n]
        assert bool(below) == (kind == "IVF_PQ"), (kind, out["qps"].notes)


def test_the_stored_inputs_say_what_was_measured_and_from_which_cells() -> None:
    m = load_inputs()
    cells = {f"{p.parent.name}/{p.name}" for p in RESULTS.rglob("*.json")}
    figures = [f for modes in m.search_qps.values() for f in modes.values()]
    figures += [*m.build_rows_per_s.values(), *m.load_rows_per_s.values()]
    figures += [m.insert_rows_per_s, m.server_memory_ratio]
    for f in figures:
        if not f.measured:
            assert f.source.startswith("not measured: ") and "measure: " in f.source, f.source
            continue
        assert "2-core machine" in f.source and f.low <= f.value <= f.high, f.source
        named = re.findall(r"collection_\w+/[\w.{},-]+\.json", f.source)
        files = [x for n in named for x in _expand(n)]
        assert files and all(x in cells for x in files), (f.source, files)
    # at 1M, single queries from 1-16 clients and batches: IVF_FLAT, IVF_SQ8, IVF_PQ (on csa's
    # 256 dimensions) and HNSW (index-bound)
    for itype in ("IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW"):
        single, batched = m.qps(itype, "single"), m.qps(itype, "batched")
        assert single.measured and batched.measured and single.n == batched.n == 1_002_000
        assert single.value < batched.value and m.build_rows_per_s[itype].measured
    assert m.qps("HNSW", "batched").bound == "index"
    assert m.qps("IVF_PQ", "batched").dim == 256 and m.memory_ratio_by_type["IVF_PQ"].measured
    # FLAT: both at 100k, its exact ceiling (cost_flat.yaml adds the single queries)
    assert m.qps("FLAT", "single").measured and m.qps("FLAT", "single").n == 102_000
    # core scaling: measured for IVF_FLAT only (1 and 2 pinned server cores), else none
    for kind, per in m.core_scaling.items():
        for one, two in per.values():
            assert (one is not None and two is not None) == (kind == "IVF_FLAT"), kind
            assert one is None or (one.cores, two.cores) == (1, 2)
    assert "IVF_FLAT" in m.core_sources


def _expand(name: str) -> list[str]:
    m = re.fullmatch(r"(.*)\{([\d,]+)\}(.*)", name)
    return [m[1] + x + m[3] for x in m[2].split(",")] if m else [name]


def test_doc_table_equals_the_function_on_the_stored_inputs() -> None:
    text = DOC.read_text(encoding="utf-8")
    m = load_inputs()
    assert markdown_table(m) in text, "docs/scale-out.md's table differs from markdown_table()"
    assert memory_note(m) in text


def test_quality_text_says_no_interval_or_the_interval() -> None:
    assert Quality("t2i/HitRate@10", 0.5).text() == "t2i/HitRate@10 0.500 (no interval)"
    q = Quality("t2i/HitRate@10", 0.5, 0.45, 0.55, 0.52, "IVF_FLAT nprobe 16")
    assert q.text() == "t2i/HitRate@10 0.500 [0.450-0.550], exact 0.520 (IVF_FLAT nprobe 16)"


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="index must be one of"):
        IndexSpec("DISKANN")
    with pytest.raises(ValueError, match="PQ m must divide the dimension 256"):
        index_bytes(IndexSpec("IVF_PQ", m=7), 1000, 256)
    with pytest.raises(ValueError, match="mode must be one of single, batched"):
        estimate(IndexSpec("IVF_FLAT"), 10, 8, _measured(), ClusterSpec(), mode="bulk")


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


@pytest.mark.parametrize(
    ("quality", "noted"),
    [
        (Quality("t2i/HitRate@10", 0.133, 0.126, 0.140, 0.629), True),  # IVF_PQ m 32 at 1M
        (Quality("t2i/HitRate@10", 0.612, 0.601, 0.621, 0.629), False),  # within 0.01 at the top
        (Quality("t2i/HitRate@10", 0.600, None, None, 0.629), True),  # no interval: the value
        (Quality("t2i/HitRate@10", 0.133), False),  # exact not known: nothing to say
        (None, False),
    ],
)
def test_a_q_s_measured_below_exact_quality_says_so(quality: Quality | None, noted: bool) -> None:
    """A type whose every swept setting stayed far below exact search (IVF_PQ with m 32 on the
    cone-shaped data) is still estimated, with the quality its q/s buys in a note (code Q)."""
    fig = Figure(1000.0, "hand", n=1_000_000, dim=256, cores=2, quality=quality)
    m = _measured()
    m = dataclasses.replace(
        m, search_qps={**m.search_qps, "IVF_FLAT": {"batched": fig, "single": fig}}
    )
    _, used, notes = search_rate(m, "IVF_FLAT", "batched", Corner())
    below = [n for n in notes if BELOW_EXACT in n]
    assert used is fig and bool(below) == noted
    if noted:
        assert "0.629" in below[0] and "more than 0.01" in below[0]
        assert "Q" in _codes([Estimate("", 1.0, "q/s", "", notes=tuple(notes))])
