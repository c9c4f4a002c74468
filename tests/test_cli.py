"""The ``imsearch-align`` command line, run as a subprocess on synthetic data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SYN = [
    "--dataset", "synthetic",
    "--dataset-param", "n_images=300",
    "--dataset-param", "d_image=24",
    "--dataset-param", "d_text=20",
    "--dataset-param", "captions_per_image=2",
    "--image-encoder", "none",
    "--text-encoder", "none",
    "--cache-dir", "none",
    "--no-progress",
]  # fmt: skip


def cli(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``python -m imsearch_align.cli ARGS`` and return the finished process."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, "-m", "imsearch_align.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout,
    )  # fmt: skip


@pytest.fixture(scope="module")
def result_dir(tmp_path_factory) -> Path:
    """Six real result files: csa and procrustes x N in (50, 100, 200), exact store."""
    from imsearch_align.experiment import ExperimentConfig, sweep

    out = tmp_path_factory.mktemp("results")
    base = ExperimentConfig(
        dataset="synthetic", dataset_params={"n_images": 300, "d_image": 24, "d_text": 20},
        image_encoder=None, text_encoder=None, cache_dir=None, store="exact", ann_fidelity=True,
    )  # fmt: skip
    res = sweep(base, n_values=[50, 100, 200], methods=["csa", "procrustes"],
                method_params={"csa": {"sim_dim": 8}, "procrustes": {"dim": 8}},
                output_dir=out, progress=False)  # fmt: skip
    assert len(res) == 6 and not any("error" in r for r in res)
    return out


@pytest.fixture
def results_copy(result_dir, tmp_path) -> Path:
    import shutil

    return Path(shutil.copytree(result_dir, tmp_path / "results"))


def test_eval_writes_result_and_prints_summary(tmp_path):
    out = tmp_path / "res"
    p = cli("eval", *SYN, "--method", "procrustes", "--method-param", "dim=8", "--store", "exact",
            "--n-support", "100", "--k", "1", "5", "--output-dir", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr
    path = out / "synthetic_procrustes_exact_100.json"
    assert path.is_file()
    res = json.loads(path.read_text())
    assert res["config"]["method_params"] == {"dim": 8}  # JSON-parsed value: int, not "8"
    assert res["config"]["k_values"] == [1, 5] and res["dataset"]["n_support_pairs"] == 100
    assert "t2i/R@1" in res["metrics"] and "i2t/R@5" in res["metrics"]
    # The summary: a table per direction and where the JSON went.
    assert "t2i" in p.stdout and "i2t" in p.stdout and "R@5" in p.stdout
    assert str(path) in p.stdout
    # --skip-existing: no rerun, says so.
    again = cli("eval", *SYN, "--method", "procrustes", "--method-param", "dim=8", "--store", "exact",
                "--n-support", "100", "--k", "1", "5", "--output-dir", str(out), "--skip-existing")  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "skipped" in again.stdout


def test_eval_config_file_and_flag_override(tmp_path):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(
        "dataset: synthetic\n"
        "dataset_params: {n_images: 200, d_image: 16, d_text: 16}\n"
        "image_encoder: null\ntext_encoder: null\ncache_dir: null\n"
        "method: csa\nmethod_params: {sim_dim: 8}\nstore: faiss\nn_support: 80\n"
    )
    out = tmp_path / "res"
    p = cli("eval", "--config", str(cfg), "--store", "exact", "--directions", "t2i", "--no-progress",
            "--output-dir", str(out), "--output", "{method}-{store}-{n}-{seed}.json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    res = json.loads((out / "csa-exact-80-0.json").read_text())  # the flag beat the file's store
    assert res["config"]["store"] == "exact" and res["config"]["directions"] == ["t2i"]
    assert set(res["tasks"]) == {"t2i"}


def test_sweep_grid_and_table(tmp_path):
    out = tmp_path / "sweep"
    p = cli("sweep", *SYN, "--methods", "csa", "procrustes", "--method-param", "csa:sim_dim=8",
            "--method-param", "procrustes:dim=8", "--stores", "exact", "--n-support", "50", "all",
            "--k", "1", "--directions", "t2i", "--output-dir", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr
    names = sorted(f.name for f in out.glob("*.json"))
    assert names == [
        "synthetic_csa_exact_50.json",
        "synthetic_csa_exact_all.json",
        "synthetic_procrustes_exact_50.json",
        "synthetic_procrustes_exact_all.json",
    ]
    lines = [
        ln
        for ln in p.stdout.splitlines()
        if ln.startswith("| csa") or ln.startswith("| procrustes")
    ]
    assert len(lines) == 4 and all("| ok |" in ln for ln in lines)
    assert "4 runs (0 failed)" in p.stdout
    csa = json.loads((out / "synthetic_csa_exact_50.json").read_text())
    assert csa["config"]["method_params"] == {"sim_dim": 8}


def test_sweep_records_a_failed_cell_and_exits_1(tmp_path):
    # sim_dim=64 > d_text=20: that cell fails, the other runs, the table says so.
    p = cli("sweep", *SYN, "--methods", "csa", "procrustes", "--method-param", "csa:sim_dim=64",
            "--method-param", "procrustes:dim=8", "--n-support", "60", "--store", "exact",
            "--directions", "t2i", "--output-dir", str(tmp_path))  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert "2 runs (1 failed)" in p.stdout
    assert "| error |" in p.stdout and "sim_dim" in p.stdout


def test_unknown_name_exits_2_with_did_you_mean(tmp_path):
    p = cli("eval", *SYN, "--method", "csaa", "--output-dir", str(tmp_path))
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "unknown method 'csaa'. Did you mean 'csa'" in p.stderr
    assert "Traceback" not in p.stderr
    assert not list(tmp_path.glob("*.json"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["eval", *SYN, "--store", "fais"], "Did you mean 'faiss'"),
        (["sweep", *SYN, "--methods", "csa", "asiff"], "unknown method 'asiff'"),
        (["eval", *SYN, "--image-encoder", "clipp"], "unknown encoder 'clipp'"),
        (["eval", *SYN, "--method-param", "sim_dim"], "expected KEY=VALUE"),
        (["eval", *SYN, "--n-support", "0"], "positive integer or 'all'"),
        (["eval", *SYN, "--output", "{dataset}_{nope}.json"], "unknown field 'nope'"),
        (["eval", *SYN, "--method-param", "csa:sim_dim=8"], "scoping is for sweep"),
        (["sweep", *SYN, "--methods", "csa", "--method-param", "asif:k=8"], "scoped to ['asif']"),
        (["build", "does/not/exist"], "neither a file nor a directory"),
        (["list", "gizmos"], "invalid choice"),
        (["eval", *SYN, "--perturbations", "typoo"], "Did you mean 'typo'"),
        (
            ["eval", *SYN, "--perturbations", "typo", "--perturbation-param", "rate=0.2"],
            "expected NAME:KEY=VALUE",
        ),
    ],
)
def test_usage_errors_exit_2(args, needle, tmp_path, capsys):
    from imsearch_align.cli import main

    if args[0] in ("eval", "sweep"):
        args = [*args, "--output-dir", str(tmp_path)]
    assert main(args) == 2
    assert needle in capsys.readouterr().err


def test_config_with_unknown_key_exits_2(tmp_path):
    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps({"methd": "csa"}))
    p = cli("eval", "--config", str(cfg), *SYN, "--output-dir", str(tmp_path))
    assert p.returncode == 2
    assert "unknown key(s) 'methd'" in p.stderr and "did you mean 'method'" in p.stderr


def test_unwritable_output_dir_exits_2(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")  # a folder below a file cannot be made, even as root
    p = cli("eval", *SYN, "--output-dir", str(blocker / "sub"))
    assert p.returncode == 2
    assert "--output-dir" in p.stderr and "cannot be written" in p.stderr


def test_build_merges_files_into_csv_and_markdown(tmp_path, results_copy):
    result_dir = results_copy
    (result_dir / "broken.json").write_text("{not json")
    csv, md = tmp_path / "bench.csv", tmp_path / "lb.md"
    p = cli("build", str(result_dir), "--output", str(csv), "--markdown", str(md))
    assert p.returncode == 0, p.stderr
    assert "broken.json" in p.stderr  # skipped with a warning naming it
    import pandas as pd

    df = pd.read_csv(csv)
    assert len(df) == 6
    assert {"method", "store", "n_support_pairs", "t2i/R@1", "i2t/R@1", "fit_s", "key"} <= set(
        df.columns
    )
    text = md.read_text()
    assert text.startswith("| # |") and text.count("\n") == 8  # header, rule, 6 rows
    col = [c.strip() for c in text.splitlines()[0].split("|")].index("t2i/R@1")
    ranked = [float(r.split("|")[col].strip(" *")) for r in text.splitlines()[2:]]
    assert ranked == sorted(ranked, reverse=True)  # sorted by t2i/R@1


def test_plot_writes_pngs(tmp_path, result_dir):
    out = tmp_path / "plots"
    p = cli("plot", str(result_dir), "--output-dir", str(out))
    assert p.returncode == 0, p.stderr
    pngs = sorted(out.glob("*.png"))
    assert {f.name for f in pngs} >= {
        "learning_curve_synthetic_t2i-R@1.png",
        "recall_vs_qps_synthetic_t2i.png",
    }
    assert all(f.stat().st_size > 20_000 for f in pngs)


def test_list_shows_registries():
    p = cli("list")
    assert p.returncode == 0, p.stderr
    for name in ("synthetic", "csa", "asif", "procrustes", "identity", "faiss", "exact", "milvus",
                 "sentence-transformers", "ndcg_cut_k", "success_k", "image_retrieval_recall@k"):  # fmt: skip
        assert name in p.stdout, name
    one = cli("list", "methods")
    assert one.returncode == 0 and "csa" in one.stdout and "faiss" not in one.stdout


def test_doctor_reports_numpy_gflops():
    p = cli("doctor", "--gemm-size", "256")
    assert p.returncode == 0, p.stderr
    assert "numpy" in p.stdout and "GFLOP/s" in p.stdout
    line = next(
        ln for ln in p.stdout.splitlines() if ln.split()[:1] == ["numpy"] and ln.endswith("GFLOP/s")
    )
    assert float(line.split()[1]) > 0
    assert "GPU" in p.stdout


def test_doctor_reports_unreachable_milvus_without_token():
    p = cli("doctor", "--no-gemm", "--uri", "http://127.0.0.1:9", "--token", "s3cret-token")
    assert p.returncode == 1
    assert "error" in p.stdout and "s3cret-token" not in p.stdout + p.stderr


def test_embed_fills_the_cache(tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    np.save(tmp_path / "img.npy", rng.standard_normal((10, 4)).astype(np.float32))
    np.save(tmp_path / "txt.npy", rng.standard_normal((10, 3)).astype(np.float32))
    vecs = json.dumps(rng.standard_normal((10, 3)).round(3).tolist())
    cache = tmp_path / "cache"
    p = cli("embed", "--dataset", "precomputed", "--dataset-param", f"image_path={tmp_path / 'img.npy'}",
            "--dataset-param", f"text_path={tmp_path / 'txt.npy'}", "--text-encoder", "precomputed",
            "--text-encoder-param", f"ids={list(range(10))}", "--text-encoder-param", f"vectors={vecs}",
            "--cache-dir", str(cache), "--no-progress")  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert "x 3" in p.stdout and str(cache.resolve()) in p.stdout
    assert any(cache.rglob("*.npy"))
