"""The cost model's inputs derived from a study's cells (``collection.cost_inputs``) and
``benchmarks/scale_out.py``: every figure checked by hand against synthetic cells
(the deployable setting, the largest size, the median insert, the RSS maximum),
figures kept from the previous inputs, and the script's --write and its error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imsearch_align.collection.cost_inputs import KEPT, NoCellsError, inputs_from_cells
from imsearch_align.collection.cost_model import (
    INPUTS,
    ClusterSpec,
    IndexSpec,
    MeasuredInputs,
    estimate,
    load_inputs,
    markdown_table,
    peak_note,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "scale-out.md"
M, K = 1_000_200, 100_200  # the two collection sizes
COMMAND = ["python", "benchmarks/collection.py", "--stores", "milvus", "--sizes", "1000000"]


def _cell(store: str, method: str, itype: str, build: dict, search: dict, size: int, *,
          qps: float, recall: float, insert_s: float = 10.0, build_s: float = 5.0,
          rss: int | None = None, state: str = "ok", dim: int = 384) -> dict[str, Any]:  # fmt: skip
    return {
        "format": "collection-cell/1",
        "kind": "collection_scale", "store": store, "method": method,
        "dataset": "shapes", "direction": "t2i",
        "index": {"type": itype, "params": build, "search_params": search},
        "collection": {"size": size}, "queries": 1000, "batch": 100,
        "queries_per_s": qps, "ann_recall": {"k": 10, "mean": recall},
        "metrics": {"t2i/ann_recall@10": recall},
        "timings": {"insert_s": insert_s, "build_s": build_s},
        "memory": {"kind": "server_rss" if store == "milvus" else "index_bytes", "bytes": rss},
        "truth": {"dim": dim}, "status": {"state": state},
        "provenance": {"cpu_count": 2, "store": {"server_version": "v2.3.5"}},
        "command": COMMAND,
    }  # fmt: skip


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
CELLS = {
    # IVF_FLAT, procrustes, at both sizes: at 1M the deployable is nprobe 16 (900 q/s)
    "a_ivf_np4_d100k.json": _cell("milvus", "procrustes", "IVF_FLAT", IVF, {"nprobe": 4}, K,
                                  qps=3000, recall=0.85, rss=1_000_000_000),
    "a_ivf_np16_d100k.json": _cell("milvus", "procrustes", "IVF_FLAT", IVF, {"nprobe": 16}, K,
                                   qps=2000, recall=0.95, rss=1_100_000_000),
    "b_ivf_np4_d1m.json": _cell("milvus", "procrustes", "IVF_FLAT", IVF, {"nprobe": 4}, M,
                                qps=1500, recall=0.80, insert_s=80, build_s=300,
                                rss=4_000_000_000),
    "b_ivf_np16_d1m.json": _cell("milvus", "procrustes", "IVF_FLAT", IVF, {"nprobe": 16}, M,
                                 qps=900, recall=0.93, insert_s=80, build_s=300,
                                 rss=4_500_000_000),
    "b_ivf_np64_d1m.json": _cell("milvus", "procrustes", "IVF_FLAT", IVF, {"nprobe": 64}, M,
                                 qps=300, recall=0.99, insert_s=80, build_s=300,
                                 rss=4_200_000_000),
    # failed: faster and more accurate, ignored (as is its RSS)
    "b_ivf_np8_d1m.json": _cell("milvus", "procrustes", "IVF_FLAT", IVF, {"nprobe": 8}, M,
                                qps=5000, recall=0.99, insert_s=1, rss=9_000_000_000,
                                state="failed"),
    # csa builds at 1M, for the median insert (70, 80, 90 s: 80 s)
    "c_ivf_np1_d1m.json": _cell("milvus", "csa", "IVF_FLAT", IVF, {"nprobe": 1}, M,
                                 qps=800, recall=0.5, insert_s=70, dim=256),
    "c_flat_d1m.json": _cell("milvus", "csa", "FLAT", {}, {}, M, qps=30, recall=1.0,
                             insert_s=90, build_s=0.5, dim=256),
    # HNSW at 100k only: no setting reaches 0.9, so the most accurate (ef 64)
    "d_hnsw_ef16_d100k.json": _cell("milvus", "procrustes", "HNSW", HNSW, {"ef": 16}, K,
                                    qps=4000, recall=0.70, build_s=60, rss=2_000_000_000),
    "d_hnsw_ef64_d100k.json": _cell("milvus", "procrustes", "HNSW", HNSW, {"ef": 64}, K,
                                    qps=2500, recall=0.85, build_s=60, rss=2_000_000_000),
    # another store: larger, faster, bigger, ignored
    "e_faiss_d2m.json": _cell("faiss", "procrustes", "IVF_FLAT", IVF, {"nprobe": 16}, 2 * M,
                              qps=99999, recall=0.99, insert_s=1, build_s=1, rss=10**10),
}  # fmt: skip
CURVE = {1: 300.0, 2: 550.0, 4: 800.0, 8: 900.0, 16: 880.0}
for _lv, _q in CURVE.items():
    CELLS[f"concurrency-c{_lv}_b_ivf_np16_d1m.json"] = _concurrency(
        "IVF_FLAT", IVF, {"nprobe": 16}, M, _lv, _q
    )
for _lv, _q in {1: 1000.0, 2: 1900.0}.items():  # a smaller build's curve: not taken
    CELLS[f"concurrency-c{_lv}_d_hnsw_ef64_d100k.json"] = _concurrency(
        "HNSW", HNSW, {"ef": 64}, K, _lv, _q
    )


def _folder(tmp_path: Path, cells: dict[str, dict] = CELLS) -> Path:
    out = tmp_path / "results"
    out.mkdir(parents=True)
    for name, cell in cells.items():
        (out / name).write_text(json.dumps(cell), encoding="utf-8")
    (out / "collection.csv").write_text("not a cell\n", encoding="utf-8")
    return out


def _previous() -> dict[str, Any]:
    """The stored inputs with every source as first written (no "kept" prefix yet)."""
    d = json.loads(INPUTS.read_text(encoding="utf-8"))

    def plain(fig: dict[str, Any]) -> dict[str, Any]:
        src = fig["source"]
        return {**fig, "source": src[len(KEPT) :] if src.startswith(KEPT) else src}

    for group in ("search_qps", "build_rows_per_s"):
        d[group] = {k: plain(v) for k, v in d[group].items()}
    for key in ("insert_rows_per_s", "concurrency", "standalone_peak_rss_bytes"):
        if key in d:
            d[key] = plain(d[key])
    return d


def test_each_figure_equals_the_cells_it_names(tmp_path: Path) -> None:
    d = inputs_from_cells(_folder(tmp_path), previous=_previous())
    ivf = d["search_qps"]["IVF_FLAT"]
    assert (ivf["value"], ivf["n"], ivf["dim"], ivf["cores"]) == (900, M, 384, 2)
    assert ivf["source"].endswith(": b_ivf_np16_d1m.json")
    assert "Milvus 2.3.5 IVF_FLAT nlist 1024 nprobe 16 at 1,000,200 x 384" in ivf["source"]
    assert "recall@10 0.930" in ivf["source"] and "batches of 100" in ivf["source"]
    hnsw = d["search_qps"]["HNSW"]
    assert (hnsw["value"], hnsw["n"]) == (2500, K)
    assert hnsw["source"].endswith(": d_hnsw_ef64_d100k.json")
    flat = d["search_qps"]["FLAT"]
    assert (flat["value"], flat["dim"]) == (30, 256)

    b = d["build_rows_per_s"]
    assert (b["IVF_FLAT"]["count"], b["IVF_FLAT"]["seconds"]) == (M, 300)
    assert (b["HNSW"]["count"], b["HNSW"]["seconds"]) == (K, 60)
    assert "FLAT" not in b

    ins = d["insert_rows_per_s"]
    assert (ins["count"], ins["seconds"], ins["dim"]) == (M, 80, 384)
    assert "median of 3 builds" in ins["source"] and ins["source"].endswith("_d1m.json")

    cc = d["concurrency"]
    assert cc["clients"] == [1, 2, 4, 8, 16] and cc["qps"] == list(CURVE.values())
    assert cc["cores"] == 2
    assert "IVF_FLAT nlist 1024 nprobe 16 at 1,000,200 x 384" in cc["source"]
    assert cc["source"].endswith(": concurrency-c{1,2,4,8,16}_b_ivf_np16_d1m.json")

    peak = d["standalone_peak_rss_bytes"]
    assert (peak["value"], peak["n"]) == (4_500_000_000, M)
    assert peak["source"].endswith(": b_ivf_np16_d1m.json")

    assert "benchmarks/collection.py --stores milvus" in d["about"]
    assert str(tmp_path / "results") in d["about"] and "Milvus 2.3.5" in d["about"]


def test_missing_figures_are_kept_from_the_previous_inputs(tmp_path: Path) -> None:
    prev = _previous()
    d = inputs_from_cells(_folder(tmp_path), previous=prev)
    for group in ("search_qps", "build_rows_per_s"):
        for kind in ("IVF_SQ8", "IVF_PQ"):
            fig, old = d[group][kind], prev[group][kind]
            assert fig["source"] == KEPT + old["source"]
            assert {k: v for k, v in fig.items() if k != "source"} == {
                k: v for k, v in old.items() if k != "source"
            }
    again = inputs_from_cells(tmp_path / "results", previous=d)
    assert again["search_qps"]["IVF_PQ"]["source"] == d["search_qps"]["IVF_PQ"]["source"]


def test_without_previous_a_missing_type_stands_in_with_the_nearest(tmp_path: Path) -> None:
    d = inputs_from_cells(_folder(tmp_path))
    for kind in ("IVF_SQ8", "IVF_PQ"):
        fig = d["search_qps"][kind]
        assert fig["value"] == 900
        assert fig["source"].startswith(f"stand-in: IVF_FLAT's figure ({kind} was not measured)")
    no_rss = {n: {**c, "memory": {}} for n, c in CELLS.items()}
    d = inputs_from_cells(_folder(tmp_path / "x", no_rss))
    assert "standalone_peak_rss_bytes" not in d
    assert MeasuredInputs.from_dict(d).standalone_peak_rss is None
    no_curve = {n: c for n, c in CELLS.items() if c["kind"] != "concurrency"}
    with pytest.raises(ValueError, match="no concurrency of store 'milvus'"):
        inputs_from_cells(_folder(tmp_path / "y", no_curve))


def test_the_result_loads_and_estimates(tmp_path: Path) -> None:
    m = MeasuredInputs.from_dict(inputs_from_cells(_folder(tmp_path), previous=_previous()))
    assert m.search_qps["IVF_FLAT"].value == 900
    assert m.build_rows_per_s["IVF_FLAT"].value == pytest.approx(M / 300)
    assert m.concurrency.saturation() == 8
    for kind in ("FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW"):
        out = estimate(IndexSpec(kind), 10_000_000, 384, m, ClusterSpec())
        assert out["qps"].value > 0 and out["insert"].value > 0
    assert "| procrustes (384) | 100M | HNSW" in markdown_table(m)


def test_no_cell_of_the_store_is_an_error(tmp_path: Path) -> None:
    folder = _folder(tmp_path, {"e.json": CELLS["e_faiss_d2m.json"]})
    with pytest.raises(NoCellsError, match=r"results holds no clean cell of store 'milvus'"):
        inputs_from_cells(folder)
    assert (
        inputs_from_cells(folder, store="faiss", previous=_previous())["search_qps"]["IVF_FLAT"][
            "value"
        ]
        == 99999
    )
    with pytest.raises(NoCellsError, match="is not a folder"):
        inputs_from_cells(tmp_path / "absent")


@pytest.fixture(scope="module")
def script(load_benchmark):
    return load_benchmark("scale_out", "scale_out_script")


def test_script_writes_the_inputs_and_the_doc_table(tmp_path, script, capsys) -> None:
    folder = _folder(tmp_path)
    inputs, doc = tmp_path / "inputs.json", tmp_path / "doc.md"
    inputs.write_bytes(INPUTS.read_bytes())
    doc.write_bytes(DOC.read_bytes())
    argv = [str(folder), "--inputs", str(inputs), "--doc", str(doc)]
    assert script.main(argv) == 0
    shown = capsys.readouterr().out
    assert "search_qps[IVF_FLAT]" in shown and "b_ivf_np16_d1m.json" in shown
    assert inputs.read_bytes() == INPUTS.read_bytes() and doc.read_bytes() == DOC.read_bytes()

    assert script.main([*argv, "--write"]) == 0
    stored = json.loads(inputs.read_text(encoding="utf-8"))
    assert stored == inputs_from_cells(folder, previous=_previous())
    m = load_inputs(inputs)
    text = doc.read_text(encoding="utf-8")
    assert markdown_table(m) in text and peak_note(m) in text
    assert markdown_table(load_inputs()) not in text
    before, after = DOC.read_text(encoding="utf-8"), text
    assert before.split(script.BEGIN)[0] == after.split(script.BEGIN)[0]
    assert before.split(script.END)[1] == after.split(script.END)[1]


def test_script_error_is_one_line_and_writes_nothing(tmp_path, script, capsys) -> None:
    folder = _folder(tmp_path, {"e.json": CELLS["e_faiss_d2m.json"]})
    inputs, doc = tmp_path / "inputs.json", tmp_path / "doc.md"
    inputs.write_text("{}", encoding="utf-8")
    doc.write_text("no markers\n", encoding="utf-8")
    argv = [str(folder), "--write", "--inputs", str(inputs), "--doc", str(doc)]
    assert script.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert str(folder) in err[0] and "'milvus'" in err[0]
    full = _folder(tmp_path / "full")  # every figure, but a document without the markers
    assert script.main([str(full), *argv[1:]]) == 2
    assert "has no '<!-- generated" in capsys.readouterr().err
    assert inputs.read_text(encoding="utf-8") == "{}"
    assert doc.read_text(encoding="utf-8") == "no markers\n"


def test_the_stored_doc_is_what_the_script_regenerates(script) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert script.replace_generated(text, load_inputs()) == text
