"""The ``imsearch-align`` command line, run as a subprocess on synthetic data.

Every command runs in a real subprocess at least once; the checks of usage
errors that must stop before any work call ``main()`` in-process with the
run functions replaced by ones that fail the test if they are reached.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pandas as pd
import pytest

from imsearch_align.experiment import ExperimentConfig, ExperimentResult
from imsearch_align.experiment.result import RunStatus, status_from

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
#: One cheap eval (FAISS flat is exact and starts faster than the torch-based exact store).
EVAL = ["eval", *SYN, "--method", "procrustes", "--method-param", "dim=8", "--store", "faiss",
        "--n-support", "100"]  # fmt: skip

#: Stores for fault tests, loaded with --plugin from a module written at test time.
PLUGIN = textwrap.dedent(
    '''
    import os, time
    from imsearch_align.adapters.faiss_store import FaissStore
    from imsearch_align.framework.registry import STORES

    @STORES.register("flaky-faiss")
    class FlakyFaiss(FaissStore):
        """FAISS whose every 5th search call raises (a ValueError is never retried)."""

        def search(self, name, queries, k):
            self._calls = getattr(self, "_calls", 0) + 1
            if self._calls % 5 == 2:
                raise ValueError(f"flaky store: call {self._calls} refused")
            return super().search(name, queries, k)

    @STORES.register("slow-faiss")
    class SlowFaiss(FaissStore):
        """FAISS that sleeps SLOW_S seconds before each search and logs the call."""

        def search(self, name, queries, k):
            time.sleep(float(os.environ.get("SLOW_S", "0")))
            with open(os.environ["SLOW_LOG"], "a") as f:
                f.write(f"{queries.shape[0]}\\n")
            return super().search(name, queries, k)
    '''
)


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore", **(extra or {})}


def cli(
    *args: str, cwd: Path | None = None, timeout: float = 180, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m imsearch_align.cli ARGS`` and return the finished process."""
    return subprocess.run(
        [sys.executable, "-m", "imsearch_align.cli", *args],
        capture_output=True, text=True, cwd=cwd, env=_env(env), timeout=timeout,
    )  # fmt: skip


def _plugin_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    (tmp_path / "cli_test_stores.py").write_text(PLUGIN)
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {"PYTHONPATH": path, **extra}


# ----------------------------------------------------------------------------- table parsing


def console_table(stdout: str) -> dict[tuple[str, str], str]:
    """``(ranking, column) -> cell`` of the summary's ranking table."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("ranking "))
    headers = re.split(r"\s{2,}", lines[start].strip())
    cells = {}
    for ln in lines[start + 2 :]:
        if not ln.strip() or ln.startswith("HitRate@k ="):
            break
        row = re.split(r"\s{2,}", ln.strip())
        assert len(row) == len(headers), (headers, row)
        cells.update({(row[0], h): c for h, c in zip(headers[1:], row[1:])})
    return cells


def markdown_table(md: str) -> tuple[list[str], list[list[str]]]:
    """Header cells and body rows of the first Markdown table in ``md``."""
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return header, [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]


def assert_console_and_leaderboard_agree(summary: str, md: str, result: ExperimentResult) -> int:
    """Every HitRate@k (and nDCG@k) cell of the console shows in the leaderboard under the
    label '<ranking> <column>' with the same text, and both equal the stored metric."""
    console = console_table(summary)
    header, body = markdown_table(md)
    assert len(body) == 1
    compared = 0
    for (ranking, col), cell in console.items():
        if not col.startswith(("HitRate@", "nDCG@")):
            continue
        label = f"{ranking} {col}"
        assert label in header, (label, header)
        assert body[0][header.index(label)].strip("*") == cell, label
        assert cell == f"{result.metric(f'{ranking}/{col}'):.4f}", label
        compared += 1
    # Both say what HitRate@k is, in CLIP_benchmark's words, and label IR recall apart.
    for text in (summary, md):
        assert "image_retrieval_recall@k (t2i)" in text and "IR R@k" in text
    # IR recall is never shown under a bare "R@k" that reads like CLIP_benchmark's recall.
    assert not any(re.fullmatch(r"\S+ R@\d+", h) for h in header), header
    return compared


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def result_dir(tmp_path_factory) -> Path:
    """Six real result files: csa and procrustes x N in (50, 100, 200), exact store."""
    from imsearch_align.experiment import sweep

    out = tmp_path_factory.mktemp("results")
    base = ExperimentConfig(
        dataset="synthetic", dataset_params={"n_images": 300, "d_image": 24, "d_text": 20},
        image_encoder=None, text_encoder=None, cache_dir=None, store="exact",
    )  # fmt: skip
    res = sweep(base, n_values=[50, 100, 200], methods=["csa", "procrustes"],
                method_params={"csa": {"sim_dim": 8}, "procrustes": {"dim": 8}},
                output_dir=out, progress=False)  # fmt: skip
    assert len(res) == 6 and all(r.status.ok for r in res)
    return out


@pytest.fixture
def results_copy(result_dir, tmp_path) -> Path:
    return Path(shutil.copytree(result_dir, tmp_path / "results"))


@pytest.fixture(scope="module")
def one_eval(tmp_path_factory):
    """One ``eval`` (k = 1 5 10) and its output folder; the folder is not modified by tests."""
    out = tmp_path_factory.mktemp("one_eval")
    p = cli(*EVAL, "--output-dir", str(out))
    return p, out


# ----------------------------------------------------------------------------- eval


def test_eval_writes_result_and_prints_summary(one_eval):
    p, out = one_eval
    assert p.returncode == 0, p.stderr
    path = out / "synthetic_procrustes_faiss_100.json"
    assert path.is_file() and path.with_suffix(".per_query.parquet").is_file()
    res = json.loads(path.read_text())
    assert res["config"]["method_params"] == {"dim": 8}  # JSON-parsed value: int, not "8"
    assert res["config"]["k_values"] == [1, 5, 10] and res["dataset"]["n_support_pairs"] == 100
    assert res["status"]["state"] == "ok"
    r = ExperimentResult.load(path)
    assert {"t2i/HitRate@1", "t2i/R@1", "i2t/HitRate@5", "i2t/R@5"} <= set(r.metrics)
    # The summary: a ranking table with both directions and where the JSON went.
    table = console_table(p.stdout)
    assert {("t2i", "HitRate@1"), ("i2t", "HitRate@10"), ("t2i", "IR R@10")} <= set(table)
    assert table[("t2i", "failed")] == "0"
    assert f"result: {path}" in p.stdout and "status ok" in p.stdout
    assert "CLIP_benchmark: image_retrieval_recall@1 = " in p.stdout


def test_console_and_leaderboard_show_the_same_headline_numbers(one_eval, tmp_path):
    p, out = one_eval
    assert p.returncode == 0, p.stderr
    md, csv = tmp_path / "leaderboard.md", tmp_path / "bench.csv"
    b = cli("build", str(out), "--output", str(csv), "--markdown", str(md))
    assert b.returncode == 0, b.stderr
    (result,) = [ExperimentResult.load(f) for f in out.glob("*.json")]
    n = assert_console_and_leaderboard_agree(p.stdout, md.read_text(), result)
    assert n == 2 * 3 + 2  # HitRate@1/5/10 and nDCG@10, both directions
    # build prints the same table it writes.
    assert md.read_text().strip() in b.stdout


def test_console_and_leaderboard_agree_for_other_cutoffs(tmp_path):
    from imsearch_align.experiment import run_experiment
    from imsearch_align.leaderboard import load_results, to_markdown

    cfg = ExperimentConfig(
        dataset="synthetic", dataset_params={"n_images": 300, "d_image": 24, "d_text": 20},
        image_encoder=None, text_encoder=None, cache_dir=None, store="faiss", method="procrustes",
        method_params={"dim": 8}, k_values=(1, 20),
    )  # fmt: skip
    r = run_experiment(cfg, output_dir=tmp_path, progress=False)
    md = to_markdown(load_results([tmp_path]))
    assert assert_console_and_leaderboard_agree(r.summary(), md, r) == 2 * 3


def test_skip_existing_keeps_a_clean_result(one_eval, tmp_path):
    p, out = one_eval
    assert p.returncode == 0, p.stderr
    out = Path(shutil.copytree(out, tmp_path / "out"))
    path = out / "synthetic_procrustes_faiss_100.json"
    mtime = path.stat().st_mtime_ns
    again = cli(*EVAL, "--output-dir", str(out), "--skip-existing")
    assert again.returncode == 0, again.stderr
    assert f"skipped: {path} holds this config's clean result" in again.stdout
    assert path.stat().st_mtime_ns == mtime
    # The kept result's numbers are printed as they were measured.
    assert console_table(again.stdout) == console_table(p.stdout)


@pytest.mark.parametrize("state", ["degraded", "failed"])
def test_skip_existing_runs_a_degraded_or_failed_result_again(one_eval, tmp_path, state):
    _, out = one_eval
    out = Path(shutil.copytree(out, tmp_path / "out"))
    path = out / "synthetic_procrustes_faiss_100.json"
    r = ExperimentResult.load(path)
    bad = RunStatus(state, ("t2i: 16 of 180 queries failed",) if state == "degraded" else (), "E")
    path.write_text(r.with_(status=bad).to_json())
    p = cli(*EVAL, "--output-dir", str(out), "--skip-existing")
    assert p.returncode == 0, p.stderr
    assert "skipped" not in p.stdout and "status ok" in p.stdout
    assert f"is {state}" in p.stderr and "running it again" in p.stderr
    again = ExperimentResult.load(path)
    assert again.status.ok and again.metrics == r.metrics


def test_another_configs_file_is_kept_and_this_result_written_beside_it(one_eval, tmp_path):
    _, out = one_eval
    out = Path(shutil.copytree(out, tmp_path / "out"))
    path = out / "synthetic_procrustes_faiss_100.json"
    first = ExperimentResult.load(path)
    # Same output name (dataset, method, store, n), another experiment (seed 7).
    p = cli(*EVAL, "--seed", "7", "--output-dir", str(out), "--skip-existing")
    assert p.returncode == 0, p.stderr
    assert "skipped" not in p.stdout
    assert "holds another experiment" in p.stderr and "both are kept" in p.stderr
    assert "{key}" in p.stderr  # says how to name files by config
    assert ExperimentResult.load(path).key == first.key  # not overwritten
    (beside,) = [f for f in out.glob("synthetic_procrustes_faiss_100-*.json")]
    seven = ExperimentResult.load(beside)
    assert seven.config.seed == 7 and beside.name.endswith(f"-{seven.key}.json")
    # running the seed-7 experiment again finds its own file and skips it
    p = cli(*EVAL, "--seed", "7", "--output-dir", str(out), "--skip-existing")
    assert p.returncode == 0 and "skipped" in p.stdout, p.stdout


def test_output_template_with_folders(tmp_path):
    out = tmp_path / "res"
    p = cli(*EVAL, "--directions", "t2i", "--output-dir", str(out),
            "--output", "sub/{dataset}/{method}.json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    folder = out / "sub" / "synthetic"
    r = ExperimentResult.load(folder / "procrustes.json")
    pq = pd.read_parquet(folder / "procrustes.per_query.parquet")
    assert (
        len(pq) == r.rankings["t2i"].n_queries
        and r.per_query_file == "procrustes.per_query.parquet"
    )


@pytest.mark.parametrize(
    ("template", "needle"),
    [
        ("{}.json", "positional field {}"),
        ("{0}.json", "positional field {0}"),
        ("{dataset.x}.json", "unknown field {dataset.x}"),
        ("{dataset}_{method}", "must end in '.json'"),
        ("{datset}.json", "did you mean {dataset}"),
    ],
)
@pytest.mark.parametrize("command", ["eval", "sweep"])
def test_bad_output_template_exits_2_before_any_work(
    template, needle, command, tmp_path, capsys, monkeypatch
):
    import imsearch_align.experiment as experiment
    from imsearch_align.cli import main

    def no_work(*a, **kw):
        raise AssertionError("work started before the output template was checked")

    monkeypatch.setattr(experiment, "run_experiment", no_work)
    monkeypatch.setattr(experiment, "sweep", no_work)
    args = [command, *SYN, "--output-dir", str(tmp_path / "o"), "--output", template]
    if command == "sweep":
        args += ["--n-support", "50", "100"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("*"))


def test_eval_config_file_and_flag_override(tmp_path):
    cfg = tmp_path / "exp.yaml"
    cfg.write_text(
        "dataset: synthetic\n"
        "dataset_params: {n_images: 200, d_image: 16, d_text: 16}\n"
        "image_encoder: null\ntext_encoder: null\ncache_dir: null\n"
        "method: csa\nmethod_params: {sim_dim: 8}\nstore: exact\nn_support: 80\n"
    )
    out = tmp_path / "res"
    p = cli("eval", "--config", str(cfg), "--store", "faiss", "--directions", "t2i", "--no-progress",
            "--output-dir", str(out), "--output", "{method}-{store}-{n}-{seed}.json")  # fmt: skip
    assert p.returncode == 0, p.stderr
    r = ExperimentResult.load(out / "csa-faiss-80-0.json")  # the flag beat the file's store
    assert r.config.store == "faiss" and r.config.directions == ("t2i",)
    assert r.config.method_params == {"sim_dim": 8} and r.dataset.n_support_pairs == 80
    assert set(r.rankings) == {"t2i"}


# ----------------------------------------------------------------------------- exit statuses


def test_failed_run_exits_1_and_writes_its_failed_result(tmp_path):
    # sim_dim=64 > d_text=20: fitting fails after the data was loaded.
    p = cli("eval", *SYN, "--method", "csa", "--method-param", "sim_dim=64", "--store", "faiss",
            "--n-support", "60", "--output-dir", str(tmp_path))  # fmt: skip
    assert p.returncode == 1, (p.stdout, p.stderr)
    assert "STATUS FAILED" in p.stdout and "sim_dim" in p.stdout
    path = tmp_path / "synthetic_csa_faiss_60.json"
    assert (
        "error: retrieval run failed" in p.stderr and f"result: {path} (status failed)" in p.stderr
    )
    assert "Traceback" not in p.stderr
    r = ExperimentResult.load(path)
    assert r.status.state == "failed" and "sim_dim" in r.status.error and r.metrics == {}


def test_degraded_run_exits_3_unless_failures_are_allowed(tmp_path):
    env = _plugin_env(tmp_path)
    args = [*EVAL[:-4], "--store", "flaky-faiss", "--n-support", "100", "--directions", "t2i",
            "--batch-size", "16", "--workers", "1", "--output-dir", str(tmp_path / "out"),
            "--plugin", "cli_test_stores"]  # fmt: skip
    p = cli(*args, env=env)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "STATUS DEGRADED" in p.stdout and "queries failed" in p.stdout
    assert "the run is degraded" in p.stderr and "--allow-failures" in p.stderr
    (path,) = (tmp_path / "out").glob("*.json")
    r = ExperimentResult.load(path)
    assert r.status.state == "degraded"
    assert r.rankings["t2i"].n_failed > 0
    assert console_table(p.stdout)[("t2i", "failed")] == str(r.rankings["t2i"].n_failed)
    # --allow-failures: the same degraded outcome (the plug-in fails again) exits 0.
    again = cli(*args, "--allow-failures", env=env)
    assert again.returncode == 0, again.stderr
    assert ExperimentResult.load(path).status.state == "degraded"


def test_ctrl_c_exits_130_and_the_same_command_resumes(tmp_path):
    log = tmp_path / "calls.txt"
    out = tmp_path / "out"
    args = [*EVAL[:-4], "--store", "slow-faiss", "--n-support", "100", "--directions", "t2i",
            "--batch-size", "16", "--workers", "1", "--output-dir", str(out),
            "--plugin", "cli_test_stores"]  # fmt: skip
    env = _env(_plugin_env(tmp_path, SLOW_S="0.3", SLOW_LOG=str(log)))
    proc = subprocess.Popen([sys.executable, "-m", "imsearch_align.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        # The untimed warm-up query, then two batches.
        if log.exists() and len(log.read_text().split()) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (stdout, stderr)
    assert "interrupted" in stderr and "run the same command to resume" in stderr
    assert not list(out.glob("*.json"))
    n_calls = len(log.read_text().split())
    p = cli(*args, env=_plugin_env(tmp_path, SLOW_S="0", SLOW_LOG=str(log)))
    assert p.returncode == 0, p.stderr
    (path,) = out.glob("*.json")
    t2i = ExperimentResult.load(path).rankings["t2i"]
    assert n_calls < t2i.timings.n_batches  # queued batches were cancelled
    assert t2i.timings.n_batches_resumed >= 1
    assert t2i.timings.n_batches_resumed + t2i.timings.n_batches_searched == t2i.timings.n_batches


def test_sigterm_exits_143_with_one_line_and_the_same_command_resumes(tmp_path):
    """Issue 28, unclear: SIGTERM mid-run says what Ctrl-C says (finished batches are
    checkpointed; run the same command to resume) and exits 143."""
    log = tmp_path / "calls.txt"
    out = tmp_path / "out"
    args = [*EVAL[:-4], "--store", "slow-faiss", "--n-support", "100", "--directions", "t2i",
            "--batch-size", "16", "--workers", "1", "--output-dir", str(out),
            "--plugin", "cli_test_stores"]  # fmt: skip
    env = _env(_plugin_env(tmp_path, SLOW_S="0.3", SLOW_LOG=str(log)))
    proc = subprocess.Popen([sys.executable, "-m", "imsearch_align.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None:
            # The untimed warm-up query, then two batches.
            if log.exists() and len(log.read_text().split()) >= 3:
                break
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == 143, (stdout, stderr)
    assert stderr.strip() == (
        "terminated (SIGTERM): finished search batches are checkpointed; "
        "run the same command to resume"
    ), stderr
    assert not list(out.glob("*.json"))
    p = cli(*args, env=_plugin_env(tmp_path, SLOW_S="0", SLOW_LOG=str(log)))
    assert p.returncode == 0, p.stderr
    (path,) = out.glob("*.json")
    t2i = ExperimentResult.load(path).rankings["t2i"]
    assert t2i.timings.n_batches_resumed >= 1
    assert t2i.timings.n_batches_resumed + t2i.timings.n_batches_searched == t2i.timings.n_batches


@pytest.mark.parametrize("command", ["eval", "sweep"])
def test_sigterm_in_eval_and_sweep_says_so_and_exits_143(command, tmp_path, capsys, monkeypatch):
    """SIGTERM while ``eval`` or ``sweep`` works: one line, exit 143; the handler is the
    previous one again once the command returns."""
    import imsearch_align.experiment as experiment
    from imsearch_align.cli import main

    def terminated(*a, **kw):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the signal interrupts this
        raise AssertionError("SIGTERM did not stop the run")

    monkeypatch.setattr(experiment, "run_experiment", terminated)
    monkeypatch.setattr(experiment, "sweep", terminated)
    before = signal.getsignal(signal.SIGTERM)
    args = [command, *SYN, "--output-dir", str(tmp_path)]
    assert main(args + (["--n-support", "50"] if command == "sweep" else [])) == 143
    assert capsys.readouterr().err.strip() == (
        "terminated (SIGTERM): finished search batches are checkpointed; "
        "run the same command to resume"
    )
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("failing", [".per_query.parquet", ".json"])
def test_a_full_disk_prints_the_finished_table_then_names_the_file(
    failing, tmp_path, capsys, monkeypatch
):
    """Issue 28, unclear: the result cannot be written (ENOSPC): the finished run's table
    is printed, then one line naming the file, exit 1; nothing half-written is left."""
    import errno

    from imsearch_align.cli import main
    from imsearch_align.experiment import output

    real = output.atomic_write

    def full(path, data, **kw):
        if str(path).endswith(failing):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data, **kw)

    monkeypatch.setattr(output, "atomic_write", full)
    out = tmp_path / "out"
    assert main([*EVAL, "--directions", "t2i", "--output-dir", str(out)]) == 1
    stdout, stderr = capsys.readouterr()
    assert console_table(stdout)[("t2i", "failed")] == "0"  # the finished run's numbers
    target = out / f"synthetic_procrustes_faiss_100{failing}"
    assert stderr.strip().splitlines() == [
        f"error: cannot write the result to {target}: No space left on device"
    ]
    assert not [p for p in out.iterdir() if not p.name.startswith(".")]


# ----------------------------------------------------------------------------- sweep


def test_sweep_grid_and_table(tmp_path):
    out = tmp_path / "sweep"
    p = cli("sweep", *SYN, "--methods", "csa", "procrustes", "--method-param", "csa:sim_dim=8",
            "--method-param", "procrustes:dim=8", "--stores", "faiss", "--n-support", "50", "all",
            "--k", "1", "--directions", "t2i", "--output-dir", str(out))  # fmt: skip
    assert p.returncode == 0, p.stderr
    names = sorted(f.name for f in out.glob("*.json"))
    assert names == [
        "synthetic_csa_faiss_50.json",
        "synthetic_csa_faiss_all.json",
        "synthetic_procrustes_faiss_50.json",
        "synthetic_procrustes_faiss_all.json",
    ]
    header, body = markdown_table(p.stdout[p.stdout.index("| method") :])
    assert header[:3] == ["method", "store", "N"] and "t2i HitRate@1" in header
    assert len(body) == 4 and all(r[header.index("status")] == "ok" for r in body)
    stored = [ExperimentResult.load(f) for f in out.glob("*.json")]
    by_cell = {(r.config.method, str(r.dataset.n_support_pairs)): r for r in stored}
    for row in body:
        r = by_cell[(row[0], row[2])]
        assert row[header.index("t2i HitRate@1")] == f"{r.metric('t2i/HitRate@1'):.4f}"
    assert "4 runs (0 failed, 0 degraded, 0 skipped)" in p.stdout
    csa = ExperimentResult.load(out / "synthetic_csa_faiss_50.json")
    assert csa.config.method_params == {"sim_dim": 8}


def test_sweep_records_a_failed_cell_and_exits_1(tmp_path):
    # sim_dim=64 > d_text=20: that cell fails, the other runs, the table says so.
    p = cli("sweep", *SYN, "--methods", "csa", "procrustes", "--method-param", "csa:sim_dim=64",
            "--method-param", "procrustes:dim=8", "--n-support", "60", "--store", "faiss",
            "--directions", "t2i", "--output-dir", str(tmp_path))  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert "2 runs (1 failed, 0 degraded" in p.stdout
    header, body = markdown_table(p.stdout[p.stdout.index("| method") :])
    by_method = {r[0]: r for r in body}
    assert by_method["csa"][header.index("status")] == "failed"
    assert "sim_dim" in by_method["csa"][header.index("error")]
    assert by_method["procrustes"][header.index("status")] == "ok"
    failed = ExperimentResult.load(tmp_path / "synthetic_csa_faiss_60.json")
    assert failed.status.state == "failed" and "sim_dim" in failed.status.error


# ----------------------------------------------------------------------------- usage errors


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
        (["eval", *SYN, "--task", "retreival"], "Did you mean 'retrieval'"),
        (["eval", *SYN, "--method-param", "sim_dim"], "expected KEY=VALUE"),
        (["eval", *SYN, "--method-param", "sim_dimm=8"], "did you mean 'sim_dim'"),
        (["eval", *SYN, "--store-param", "urii=x"], "store 'faiss' takes no parameter 'urii'"),
        (["eval", *SYN, "--n-support", "0"], "positive integer or 'all'"),
        (["eval", *SYN, "--output", "{dataset}_{nope}.json"], "unknown field {nope}"),
        (["eval", *SYN, "--method-param", "csa:sim_dim=8"], "scoping is for sweep"),
        (["sweep", *SYN, "--methods", "csa", "--method-param", "asif:k=8"], "scoped to ['asif']"),
        (["build", "does/not/exist"], "neither a file nor a directory"),
        (["plot", "does/not/exist"], "neither a file nor a directory"),
        (["list", "gizmos"], "invalid choice"),
        (["eval", *SYN, "--perturbations", "typoo"], "Did you mean 'typo'"),
        (
            ["eval", *SYN, "--perturbations", "typo", "--perturbation-param", "rate=0.2"],
            "expected NAME:KEY=VALUE",
        ),
        (["eval", *SYN, "--plugin", "no_such_module_xyz"], "no_such_module_xyz"),
    ],
)
def test_usage_errors_exit_2(args, needle, tmp_path, capsys, monkeypatch):
    import imsearch_align.experiment as experiment
    from imsearch_align.cli import main

    def no_work(*a, **kw):
        raise AssertionError("a usage error must be found before any work")

    monkeypatch.setattr(experiment, "run_experiment", no_work)
    monkeypatch.setattr(experiment, "sweep", no_work)
    if args[0] in ("eval", "sweep"):
        args = [*args, "--output-dir", str(tmp_path)]
    assert main(args) == 2
    assert needle in capsys.readouterr().err


def test_config_with_unknown_key_or_wrong_type_exits_2(tmp_path, capsys):
    from imsearch_align.cli import main

    cfg = tmp_path / "bad.json"
    cfg.write_text(json.dumps({"methd": "csa"}))
    assert main(["eval", "--config", str(cfg), *SYN, "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown key(s) 'methd'" in err and "did you mean 'method'" in err
    cfg.write_text(json.dumps({"k_values": "15"}))
    assert main(["eval", "--config", str(cfg), *SYN, "--output-dir", str(tmp_path)]) == 2
    assert "'k_values' must be a list of int" in capsys.readouterr().err
    assert [f.name for f in tmp_path.glob("*.json")] == ["bad.json"]


def test_unwritable_output_dir_exits_2(tmp_path, capsys):
    from imsearch_align.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("not a folder")  # a folder below a file cannot be made, even as root
    assert main(["eval", *SYN, "--output-dir", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert "--output-dir" in err and "cannot be written" in err


# ----------------------------------------------------------------------------- build and plot


def test_build_merges_files_into_csv_and_markdown(tmp_path, results_copy):
    result_dir = results_copy
    (result_dir / "broken.json").write_text("{not json")
    csv, md = tmp_path / "bench.csv", tmp_path / "lb.md"
    p = cli("build", str(result_dir), "--output", str(csv), "--markdown", str(md))
    assert p.returncode == 0, p.stderr
    assert "broken.json" in p.stderr  # skipped with a warning naming it
    df = pd.read_csv(csv)
    assert len(df) == 6
    assert {"method", "store", "n_support_pairs", "status", "t2i/HitRate@1", "t2i/R@1", "i2t/R@1",
            "image_retrieval_recall@1", "fit_s", "t2i.queries_per_s", "key"} <= set(df.columns)  # fmt: skip
    assert (df["image_retrieval_recall@1"] == df["t2i/HitRate@1"]).all()
    text = md.read_text()
    header, body = markdown_table(text)
    assert text.startswith("| # |") and len(body) == 6 and "status" not in header
    col = header.index("t2i HitRate@1")
    ranked = [float(r[col].strip("*")) for r in body]
    assert ranked == sorted(ranked, reverse=True)  # sorted by t2i HitRate@1
    assert body[0][col].startswith("**") and not body[1][col].startswith("**")
    assert f"{df['t2i/HitRate@1'].max():.4f}" == body[0][col].strip("*")


def test_build_shows_status_and_never_bolds_a_degraded_row(tmp_path, results_copy):
    files = sorted(results_copy.glob("*.json"))
    results = {f: ExperimentResult.load(f) for f in files}
    # The weakest run, degraded, with numbers that would be the best of the table.
    worst = min(files, key=lambda f: results[f].metric("t2i/HitRate@1"))
    r = results[worst]
    t2i = dataclasses.replace(
        r.rankings["t2i"], metrics={**r.rankings["t2i"].metrics, "HitRate@1": 0.999}, n_failed=7,
        errors=("TimeoutError: slow server",),
    )  # fmt: skip
    rankings = {**r.rankings, "t2i": t2i}
    worst.write_text(
        r.with_(
            task=dataclasses.replace(r.task, rankings=rankings),
            status=status_from(list(rankings.values())),
        ).to_json()
    )
    failed = ExperimentResult(
        config=r.config.replace(method="asif", method_params={}),
        status=RunStatus("failed", error="MemoryError: too big"),
    )
    (results_copy / "failed.json").write_text(failed.to_json())
    md = tmp_path / "lb.md"
    p = cli("build", str(results_copy), "--output", str(tmp_path / "b.csv"), "--markdown", str(md))
    assert p.returncode == 0, p.stderr
    assert "2 of 7 results are not ok" in p.stderr
    header, body = markdown_table(md.read_text())
    col, st = header.index("t2i HitRate@1"), header.index("status")
    assert [row[st] for row in body] == ["ok"] * 5 + ["degraded", "failed"]
    assert body[5][col] == "0.9990" and not any("**" in c for c in body[5])
    best_ok = max(res.metric("t2i/HitRate@1") for f, res in results.items() if f != worst)
    assert body[0][col] == f"**{best_ok:.4f}**"
    assert "7 of" in md.read_text() and "TimeoutError: slow server" in md.read_text()
    assert "MemoryError: too big" in md.read_text()


def test_plot_writes_pngs(tmp_path, result_dir):
    out = tmp_path / "plots"
    p = cli("plot", str(result_dir), "--output-dir", str(out))
    assert p.returncode == 0, p.stderr
    pngs = sorted(out.glob("*.png"))
    assert {f.name for f in pngs} == {
        "learning_curve_synthetic_t2i-HitRate@1.png",
        "learning_curve_synthetic_i2t-HitRate@1.png",
        "recall_vs_qps_synthetic_t2i.png",
    }
    assert all(f.stat().st_size > 20_000 for f in pngs)
    assert all(str(f) in p.stdout for f in pngs)


# ----------------------------------------------------------------------------- list, doctor, embed


def test_list_shows_registries():
    p = cli("list")
    assert p.returncode == 0, p.stderr
    for name in ("synthetic", "csa", "asif", "procrustes", "identity", "faiss", "exact", "milvus",
                 "sentence-transformers", "retrieval", "matching", "captioning", "ndcg_cut_k",
                 "success_k", "image_retrieval_recall@k", "typo"):  # fmt: skip
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
    assert "x 3" in p.stdout and f"cache: {cache}" in p.stdout
    new = [ln.strip() for ln in p.stdout.splitlines() if ln.startswith("  ")]
    assert new and all(Path(f).is_file() for f in new)
    assert any(cache.rglob("*.npy"))


@pytest.mark.parametrize(
    "name", ["coco", "flickr30k", "imagenet", "hf", "precomputed", "synthetic"]
)
def test_list_datasets_name_prints_every_parameter(name):
    from imsearch_align.datasets import describe

    p = cli("list", "datasets", name)
    assert p.returncode == 0, p.stderr
    for param in describe(name):
        assert param.name in p.stdout and param.default_text() in p.stdout
    assert f"--dataset {name}" in p.stdout
    bad = cli("list", "stores", "faiss")
    assert bad.returncode == 2 and "only taken after 'datasets'" in bad.stderr


def test_python_spelled_literals_in_params_are_literals():
    """--method-param equal_weights=False must not be the truthy string "False"."""
    from imsearch_align.cli.common import key_value as _key_value

    assert _key_value("equal_weights=False") == ("equal_weights", False)
    assert _key_value("normalize=True") == ("normalize", True)
    assert _key_value("eps=None") == ("eps", None)
    assert _key_value("eps=1e-3") == ("eps", 1e-3) and _key_value("k=10") == ("k", 10)
    assert _key_value("name=Falsey") == ("name", "Falsey")
