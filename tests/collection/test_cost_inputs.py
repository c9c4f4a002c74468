"""The cost model's inputs derived from study cells (``collection.cost_inputs``) and
``benchmarks/scale_out.py``'s derive mode: every figure checked by hand against synthetic
cells in two folders (repeats give the bands; the deployable setting; single queries from
the concurrency plateau; the build without the load wait; the median insert; the memory
ratio), "not measured" instead of stand-ins, figures kept from the previous inputs, no
password in what is written, and the script's --write (both files or neither)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imsearch_align.collection.cost_formulas import IndexSpec, memory_per_replica
from imsearch_align.collection.cost_inputs import (
    KEPT,
    NOT_MEASURED,
    NoCellsError,
    inputs_from_cells,
)
from imsearch_align.collection.cost_model import INPUTS, MeasuredInputs, estimate, load_inputs
from imsearch_align.collection.cost_model import ClusterSpec as CS
from imsearch_align.collection.cost_report import markdown_table, memory_note

DOC = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
M, K = 1_000_200, 100_200  # the two collection sizes
SECRET = "hunter2pw"
COMMAND = ["python", "benchmarks/collection.py", "--stores", "milvus", "--uri",
           f"http://root:{SECRET}@db.example:19530", "--sizes", "1000000"]  # fmt: skip


def _cell(method: str, itype: str, build: dict, search: dict, size: int, *, qps: float,
          recall: float, insert_s: float = 10.0, build_s: float = 5.0, load_s: float = 2.0,
          rss: int | None = None, state: str = "ok", dim: int = 384, store: str = "milvus",
          hit: float = 0.5, interval: tuple | None = None) -> dict[str, Any]:  # fmt: skip
    cell = {
        "format": "collection-cell/1",
        "kind": "collection_scale", "store": store, "method": method,
        "dataset": "shapes", "direction": "t2i",
        "index": {"type": itype, "params": build, "search_params": search},
        "collection": {"size": size}, "queries": 1000, "batch": 100,
        "queries_per_s": qps, "ann_recall": {"k": 10, "mean": recall},
        "metrics": {"t2i/ann_recall@10": recall, "t2i/HitRate@10": hit, "t2i/HitRate@1": 0.1},
        "exact_metrics": {"t2i/HitRate@10": hit + 0.01},
        "timings": {"insert_s": insert_s, "build_s": build_s, "load_s": load_s},
        "memory": {"kind": "server_rss" if store == "milvus" else "index_bytes", "bytes": rss},
        "truth": {"dim": dim}, "status": {"state": state},
        "provenance": {"cpu_count": 2, "store": {"server_version": "v2.3.5"}},
        "command": COMMAND,
    }  # fmt: skip
    if interval:
        cell["intervals"] = {"t2i/HitRate@10": {"approximate": {"low": interval[0],
                                                                "high": interval[1]}}}  # fmt: skip
    return cell


def _concurrency(itype: str, build: dict, search: dict, size: int, level: int, qps: float):
    return {
        "kind": "concurrency", "store": "milvus", "method": "procrustes",
        "dataset": "shapes", "direction": "t2i",
        "index": {"type": itype, "params": build, "search_params": search},
        "collection": {"size": size}, "concurrency": level, "queries_per_s": qps,
        "run": {"mode": "processes", "duration_s": 5.0}, "status": {"state": "ok"},
        "provenance": {"cpu_count": 2}, "command": ["python", "other.py"],
    }  # fmt: skip


IVF, HNSW = {"nlist": 1024}, {"M": 16, "efConstruction": 100}
A = {  # the first folder
    "a_ivf_np4_d100k.json": _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": 4}, K, qps=3000,
                                  recall=0.85, rss=1_000_000_000),
    "a_ivf_np16_d100k.json": _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": 16}, K, qps=2000,
                                   recall=0.95, rss=1_100_000_000),
    # at 1M the deployable is nprobe 16 (recall >= 0.9, fastest): 900 here, 700 in B
    "b_ivf_np4_d1m.json": _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": 4}, M, qps=1500,
                                recall=0.80, insert_s=80, build_s=300, load_s=100,
                                rss=4_000_000_000),
    "b_ivf_np16_d1m.json": _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": 16}, M, qps=900,
                                 recall=0.93, insert_s=80, build_s=300, load_s=100,
                                 rss=4_500_000_000, interval=(0.45, 0.55)),
    "b_ivf_np64_d1m.json": _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": 64}, M, qps=300,
                                 recall=0.99, insert_s=80, build_s=300, load_s=100,
                                 rss=4_200_000_000),
    # failed: faster and more accurate, ignored (as is its RSS)
    "b_ivf_np8_d1m.json": _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": 8}, M, qps=5000,
                                recall=0.99, insert_s=1, rss=9_000_000_000, state="failed"),
    # csa builds at 1M, for the median insert (70, 80, 90 s: 80 s)
    "c_ivf_np1_d1m.json": _cell("csa", "IVF_FLAT", IVF, {"nprobe": 1}, M, qps=800,
                                recall=0.5, insert_s=70, dim=256),
    "c_flat_d1m.json": _cell("csa", "FLAT", {}, {}, M, qps=30, recall=1.0, insert_s=90,
                             build_s=0.5, load_s=0.001, dim=256),
    # HNSW at 100k only: q/s does not fall with ef (RPC-bound); none reaches 0.9: ef 64
    "d_hnsw_ef16_d100k.json": _cell("procrustes", "HNSW", HNSW, {"ef": 16}, K, qps=2400,
                                    recall=0.70, build_s=60, load_s=10),
    "d_hnsw_ef64_d100k.json": _cell("procrustes", "HNSW", HNSW, {"ef": 64}, K, qps=2500,
                                    recall=0.85, build_s=60, load_s=10),
    # another store: larger, faster, bigger, ignored
    "e_faiss_d2m.json": _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": 16}, 2 * M, qps=99999,
                              recall=0.99, insert_s=1, build_s=1, rss=10**10, store="faiss"),
}  # fmt: skip
CURVE = {1: 300.0, 2: 550.0, 4: 800.0, 8: 900.0, 16: 880.0}
for _lv, _q in CURVE.items():
    A[f"concurrency-c{_lv}_b_ivf_np16_d1m.json"] = _concurrency(
        "IVF_FLAT", IVF, {"nprobe": 16}, M, _lv, _q
    )
B = {  # the second folder: a repeat of the 1M nprobe 16 build (700 q/s; built in 250 s)
    name: _cell("procrustes", "IVF_FLAT", IVF, {"nprobe": p}, M, qps=q, recall=r, insert_s=100,
                build_s=250, load_s=90, rss=3_000_000_000)
    for name, p, q, r in (("b_ivf_np16_d1m.json", 16, 700, 0.93), ("b_ivf_np64_d1m.json", 64,
                                                                   250, 0.99))
}  # fmt: skip


def _folder(where: Path, cells: dict[str, dict]) -> Path:
    where.mkdir(parents=True)
    for name, cell in cells.items():
        (where / name).write_text(json.dumps(cell), encoding="utf-8")
    (where / "collection.csv").write_text("not a cell\n", encoding="utf-8")
    return where


@pytest.fixture
def folders(tmp_path: Path) -> list[Path]:
    return [_folder(tmp_path / "study_a", A), _folder(tmp_path / "study_b", B)]


def test_each_figure_equals_the_cells_it_names(folders) -> None:
    d = inputs_from_cells(folders)
    b = d["search_qps"]["IVF_FLAT"]["batched"]
    assert (b["value"], b["low"], b["high"]) == (800, 700, 900)  # median of the two repeats
    assert (b["n"], b["dim"], b["cores"], b["bound"]) == (M, 384, 2, "index")
    assert b["source"].endswith(": study_a/b_ivf_np16_d1m.json, study_b/b_ivf_np16_d1m.json")
    assert "Milvus 2.3.5 IVF_FLAT nlist 1024 nprobe 16 at 1,000,200 x 384" in b["source"]
    q = {k: v for k, v in b["quality"].items() if k != "setting"}
    assert q == {"measure": "t2i/HitRate@10", "value": 0.5, "low": 0.45, "high": 0.55,
                 "exact": 0.51}  # fmt: skip
    s = d["search_qps"]["IVF_FLAT"]["single"]  # the plateau: 900, 880 (>= 0.9 x 900)
    assert (s["value"], s["low"], s["high"], s["clients"]) == (890, 880, 900, [8, 16])
    assert s["dim"] == 384 and s["quality"]["value"] == 0.5
    assert s["source"].endswith(": study_a/concurrency-c{1,2,4,8,16}_b_ivf_np16_d1m.json")
    h = d["search_qps"]["HNSW"]["batched"]
    assert (h["value"], h["n"], h["bound"]) == (2500, K, "rpc")
    assert "2,400 q/s at ef 16 and 2,500 at ef 64" in h["bound_why"]
    assert d["search_qps"]["FLAT"]["batched"]["value"] == 30

    build = d["build_rows_per_s"]["IVF_FLAT"]  # without the load wait: 200 s and 160 s
    assert (build["value"], build["low"], build["high"]) == pytest.approx(
        (statistics_median(M / 200, M / 160), M / 200, M / 160))  # fmt: skip
    assert "200.0 s (300.0 build_s - 100.0 load_s)" in build["source"]
    assert d["build_rows_per_s"]["HNSW"]["value"] == K / 50 and "FLAT" not in d["build_rows_per_s"]
    load = d["load_rows_per_s"]
    assert (load["IVF_FLAT"]["low"], load["IVF_FLAT"]["high"]) == (M / 100, M / 90)
    assert load["FLAT"]["value"] is None  # a wait under 1 s: nothing to read

    ins = d["insert_rows_per_s"]  # builds at 1M: 70 s (csa, 256), 80 s, 90 s (FLAT, 256), 100 s
    assert (ins["n"], ins["dim"], ins["value"]) == (M, 384, M / 80)
    assert ins["low"] == pytest.approx(M / 90 * 1032 / 1544)  # in rows/s of 384 dimensions
    assert ins["high"] == pytest.approx(M / 80) and "median of 4 build(s)" in ins["source"]

    r = d["server_memory_ratio"]
    formula = memory_per_replica(IndexSpec("IVF_FLAT"), M, 384).value
    assert (r["low"], r["high"]) == pytest.approx((3e9 / formula, 4.5e9 / formula))
    assert r["index_types"] == ["IVF_FLAT"] and "study_b/b_ivf_np16_d1m.json" in r["source"]
    assert d["concurrency"]["qps"] == list(CURVE.values())


def statistics_median(a: float, b: float) -> float:
    return (a + b) / 2


def test_figures_no_cell_holds_are_not_measured_never_stand_ins(folders) -> None:
    d = inputs_from_cells(folders)
    for kind in ("IVF_SQ8", "IVF_PQ"):
        for mode in ("single", "batched"):
            fig = d["search_qps"][kind][mode]
            assert fig["value"] is None and fig["source"].startswith(NOT_MEASURED)
            assert f"--index milvus:{kind}:" in fig["source"] and "--write" in fig["source"]
        assert d["build_rows_per_s"][kind]["value"] is None
    assert d["search_qps"]["HNSW"]["single"]["value"] is None
    assert "--concurrency 1 2 4 8 16" in d["search_qps"]["HNSW"]["single"]["source"]
    assert all(v is None for t in ("IVF_FLAT", "HNSW") for k in ("single", "batched", "build")
               for v in d["core_scaling"][t][k].values())  # fmt: skip
    assert d["segment_mb"]["value"] == 512
    m = MeasuredInputs.from_dict(d)
    assert not m.qps("IVF_SQ8", "batched").measured


def test_measured_figures_are_kept_from_the_previous_inputs_stand_ins_are_not(folders) -> None:
    prev = inputs_from_cells(folders)
    sq8 = {"value": 1234.0, "low": 1000.0, "high": 1500.0, "n": M, "dim": 384, "cores": 2}
    prev["search_qps"]["IVF_SQ8"]["batched"] = {**sq8, "source": "S8"}
    prev["build_rows_per_s"]["IVF_PQ"] = {"value": 1400, "source": "stand-in: IVF_FLAT's"}
    prev["core_scaling"]["HNSW"]["single"]["1"] = {"value": 100.0, "n": K, "dim": 384}
    d = inputs_from_cells(folders, previous=prev)
    kept = d["search_qps"]["IVF_SQ8"]["batched"]
    assert kept["source"] == KEPT + "S8" and kept["value"] == 1234.0
    assert d["build_rows_per_s"]["IVF_PQ"]["value"] is None
    assert d["core_scaling"] == prev["core_scaling"]
    again = inputs_from_cells(folders, previous=d)
    assert again["search_qps"]["IVF_SQ8"]["batched"]["source"] == KEPT + "S8"


def test_no_password_in_what_is_written(folders, tmp_path, script) -> None:
    d = inputs_from_cells(folders)
    assert SECRET not in json.dumps(d) and "http://db.example:19530" in d["about"]
    inputs, doc = tmp_path / "inputs.json", tmp_path / "doc.md"
    doc.write_bytes(DOC.read_bytes())
    assert script.main([*map(str, folders), "--inputs", str(inputs), "--doc", str(doc),
                        "--write"]) == 0  # fmt: skip
    assert SECRET not in inputs.read_text() and SECRET not in doc.read_text()


def test_the_result_loads_and_estimates(folders) -> None:
    m = MeasuredInputs.from_dict(inputs_from_cells(folders))
    assert m.qps("IVF_FLAT", "batched").value == 800 and m.concurrency.saturation() == 8
    for kind in ("FLAT", "IVF_FLAT", "HNSW"):
        out = estimate(IndexSpec(kind), 10_000_000, 384, m, CS())
        assert out["qps"].value > 0 and out["insert"].value > 0
    assert "| procrustes (384) | 100M | HNSW" in markdown_table(m)


def test_no_cell_of_the_store_is_an_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path / "results", {"e.json": A["e_faiss_d2m.json"]})
    with pytest.raises(NoCellsError, match=r"results holds no clean cell of store 'milvus'"):
        inputs_from_cells(folder)
    d = inputs_from_cells(folder, store="faiss")
    assert d["search_qps"]["IVF_FLAT"]["batched"]["value"] == 99999
    with pytest.raises(NoCellsError, match="is not a folder"):
        inputs_from_cells(tmp_path / "absent")


@pytest.fixture(scope="module")
def script(load_benchmark):
    return load_benchmark("scale_out", "scale_out_script")


def test_script_writes_the_inputs_and_the_doc_table(folders, tmp_path, script, capsys) -> None:
    inputs, doc = tmp_path / "inputs.json", tmp_path / "doc.md"
    inputs.write_bytes(INPUTS.read_bytes())
    doc.write_bytes(DOC.read_bytes())
    argv = [*map(str, folders), "--inputs", str(inputs), "--doc", str(doc)]
    assert script.main(argv) == 0
    shown = capsys.readouterr().out
    assert "search_qps[IVF_FLAT].single" in shown and "800 [700-900]" in shown
    assert "not measured" in shown
    assert inputs.read_bytes() == INPUTS.read_bytes() and doc.read_bytes() == DOC.read_bytes()

    assert script.main([*argv, "--write"]) == 0
    stored = json.loads(inputs.read_text(encoding="utf-8"))
    assert stored == inputs_from_cells(folders, previous=json.loads(INPUTS.read_text()))
    m = load_inputs(inputs)
    text = doc.read_text(encoding="utf-8")
    assert markdown_table(m) in text and memory_note(m) in text
    assert markdown_table(load_inputs()) not in text
    before, after = DOC.read_text(encoding="utf-8"), text
    assert before.split(script.BEGIN)[0] == after.split(script.BEGIN)[0]
    assert before.split(script.END)[1] == after.split(script.END)[1]


def test_script_error_is_one_line_and_writes_nothing(tmp_path, script, capsys) -> None:
    folder = _folder(tmp_path / "faiss_only", {"e.json": A["e_faiss_d2m.json"]})
    inputs, doc = tmp_path / "inputs.json", tmp_path / "doc.md"
    inputs.write_text("{}", encoding="utf-8")
    doc.write_text("no markers\n", encoding="utf-8")
    argv = [str(folder), "--write", "--inputs", str(inputs), "--doc", str(doc)]
    assert script.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert str(folder) in err[0] and "'milvus'" in err[0]
    full = _folder(tmp_path / "full", A)  # every figure, but a document without the markers
    assert script.main([str(full), *argv[1:]]) == 2
    assert "has no '<!-- generated" in capsys.readouterr().err
    assert inputs.read_text(encoding="utf-8") == "{}"
    assert doc.read_text(encoding="utf-8") == "no markers\n"


def test_a_malformed_inputs_file_is_named(folders, tmp_path, script, capsys) -> None:
    inputs = tmp_path / "inputs.json"
    inputs.write_text('{"search_qps": ', encoding="utf-8")
    assert script.main([*map(str, folders), "--inputs", str(inputs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"cost-model inputs '{inputs}' cannot be read" in err[0]
    assert script.main(["--estimate", "--inputs", str(inputs)]) == 2
    assert f"'{inputs}' cannot be read" in capsys.readouterr().err


def test_write_is_both_or_neither(folders, tmp_path, script, capsys, monkeypatch) -> None:
    inputs, doc = tmp_path / "inputs.json", tmp_path / "doc.md"
    inputs.write_bytes(INPUTS.read_bytes())
    doc.write_bytes(DOC.read_bytes())
    argv = [*map(str, folders), "--inputs", str(inputs), "--doc", str(doc), "--write"]
    real = script.atomic_write

    def failing(path, text):  # the doc is written first; the inputs' write fails
        if Path(path) == inputs:
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(script, "atomic_write", failing)
    assert script.main(argv) == 2
    assert "No space left on device; nothing was written" in capsys.readouterr().err
    assert inputs.read_bytes() == INPUTS.read_bytes() and doc.read_bytes() == DOC.read_bytes()
    monkeypatch.setattr(script, "atomic_write", real)
    # an unwritable doc (its folder is a file): the inputs are not replaced first
    blocked = tmp_path / "a_file"
    blocked.write_text("x")
    bad = [*map(str, folders), "--inputs", str(inputs), "--doc", str(blocked / "doc.md"),
           "--write"]  # fmt: skip
    assert script.main(bad) == 2
    assert inputs.read_bytes() == INPUTS.read_bytes()


def test_each_type_measured_at_the_largest_size_gets_its_own_memory_ratio(tmp_path) -> None:
    """IVF_SQ8 and HNSW builds at 1M get their own ratio; FLAT's at 100k does not (the
    server's fixed memory dominates there); the model applies a type's own, else the first."""
    sq8, hnsw = {"nlist": 1024}, {"M": 16, "efConstruction": 100}
    cells = {**A, "f_sq8_np16_d1m.json": _cell("procrustes", "IVF_SQ8", sq8, {"nprobe": 16}, M,
                                                qps=300, recall=0.92, rss=1_600_000_000),
             "g_hnsw_ef64_d1m.json": _cell("procrustes", "HNSW", hnsw, {"ef": 64}, M, qps=2000,
                                           recall=0.91, rss=2_400_000_000),
             "h_flat_d100k.json": _cell("csa", "FLAT", {}, {}, K, qps=400, recall=1.0,
                                        rss=900_000_000)}  # fmt: skip
    d = inputs_from_cells([_folder(tmp_path / "s", cells)])
    own = d["server_memory_ratio_by_type"]
    assert set(own) == {"IVF_FLAT", "IVF_SQ8", "HNSW"}
    for kind, rss, params in (("IVF_SQ8", 1.6e9, sq8), ("HNSW", 2.4e9, hnsw)):
        formula = memory_per_replica(IndexSpec.from_params(kind, params), M, 384).value
        assert own[kind]["value"] == pytest.approx(rss / formula) and own[kind]["n"] == M
    assert d["server_memory_ratio"]["index_types"] == ["IVF_FLAT"]
    m = MeasuredInputs.from_dict(d)
    for kind in ("IVF_SQ8", "HNSW"):
        mem = memory_per_replica(IndexSpec(kind), 10**8, 384).value
        e = estimate(IndexSpec(kind), 10**8, 384, m, CS())["memory_measured"]
        assert e.value == pytest.approx(mem * own[kind]["value"]) and not e.notes
    assert m.memory_ratio("IVF_PQ") is m.server_memory_ratio  # no build of its own
    assert "IVF_SQ8's own builds" in memory_note(m)
