"""``benchmarks/flickr.py``, the headline study, as a user runs it: arguments
checked before any work, one-line errors, the exit status of ``imsearch-align``,
Ctrl-C and ``--skip-existing``."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def flickr():
    spec = importlib.util.spec_from_file_location(
        "flickr_script", ROOT / "benchmarks" / "flickr.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def emb(tmp_path_factory) -> Path:
    """80 images x 12-d, two captions each x 8-d, sharing a latent (learnable)."""
    d = tmp_path_factory.mktemp("emb")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((80, 6))
    X = z @ rng.standard_normal((6, 12)) + 0.1 * rng.standard_normal((80, 12))
    ti = np.repeat(np.arange(80), 2)
    Y = z[ti] @ rng.standard_normal((6, 8)) + 0.1 * rng.standard_normal((160, 8))
    np.save(d / "image.npy", X.astype(np.float32))
    np.save(d / "text.npy", Y.astype(np.float32))
    np.save(d / "text_image.npy", ti.astype(np.int64))
    return d


def _argv(emb: Path, out: Path, *extra: str) -> list[str]:
    return ["--embeddings", str(emb), "--out", str(out), "--no-progress", *extra]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--stores", "faiss", "nosuch"], r"--stores: unknown store 'nosuch'; choose from faiss"),
        (["--stores", "faiss", "milvus"], r"--stores milvus needs --uri"),
        (
            ["--stores", "milvus-lite", "--uri", "http://127.0.0.1:1"],
            r"--uri is for --stores milvus .* no milvus store is asked for",
        ),
        (["--n", "20", "0"], r"--n must be positive integers, got 0"),
        (["--k", "1", "-5"], r"--k must be positive integers, got -5"),
        (["--text-encoder", "nope"], r"--text-encoder: unknown encoder 'nope'"),
        (["--clip", "openai/clip-vit-base-patch32"], r"--clip encodes the images .* --embeddings"),
        (
            ["--methods", "csa", "procrustez"],
            r"--methods: unknown method 'procrustez'.*Did you mean 'procrustes'",
        ),
    ],
)
def test_a_bad_argument_is_one_line_before_any_work(flickr, emb, tmp_path, capsys, extra, message):
    """Checked before the first cell (a late store check used to stop the study
    after the earlier cells, with no table): exit 2, nothing written."""
    import re

    out = tmp_path / "out"
    assert flickr.main(_argv(emb, out, "--methods", "procrustes", "--n", "20", *extra)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and re.search(message, err), err
    assert "Traceback" not in err and "running procrustes" not in err and err.count("\n") == 1
    assert not out.exists()


def test_missing_embeddings_and_unreadable_data_are_one_line_errors(flickr, emb, tmp_path, capsys):
    out = tmp_path / "out"
    assert flickr.main(_argv(tmp_path / "nowhere", out)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --embeddings") and "no image.npy there" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    np.save(bad / "image.npy", np.ones((10, 4), np.float32))
    np.save(bad / "text.npy", np.ones((7, 4), np.float32))  # 7 captions for 10 images, no pairing
    assert flickr.main(_argv(bad, out, "--methods", "procrustes", "--n", "5")) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot load the data: ") and "Traceback" not in err
    assert not out.exists()


def test_a_study_runs_with_repeated_cut_offs_shown_once(flickr, emb, tmp_path, capsys):
    out = tmp_path / "out"
    argv = _argv(emb, out, "--methods", "procrustes", "csa", "--n", "20", "40", "20")
    assert flickr.main([*argv, "--stores", "exact", "exact", "--k", "5", "1", "5"]) == 0
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("method"))
    assert header.count("t2i HitRate@5") == 1 and header.count("t2i HitRate@1") == 1
    assert "4/4 experiments ok" in text  # 2 methods x 2 N, repeats dropped
    assert len(list(out.glob("*.json"))) == 4 and (out / "leaderboard.md").exists()


def test_ctrl_c_shows_the_finished_cells_and_skip_existing_goes_on(
    flickr, emb, tmp_path, capsys, monkeypatch
):
    """Ctrl-C in the second cell: the first cell's table and reports, exit 130;
    the same command with --skip-existing reuses the first cell's file and runs
    the second."""
    out = tmp_path / "out"
    argv = _argv(emb, out, "--methods", "procrustes", "--n", "20", "40", "--stores", "exact")
    real = flickr.run_experiment
    calls = []

    def interrupted(cfg, **kw):
        calls.append(cfg.n_support)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(cfg, **kw)

    monkeypatch.setattr(flickr, "run_experiment", interrupted)
    assert flickr.main(argv) == 130
    cap = capsys.readouterr()
    assert "interrupted after 1 of 2 cells" in cap.err and "--skip-existing" in cap.err
    assert "1/1 experiments ok" in cap.out and (out / "leaderboard.md").exists()
    (first,) = out.glob("*.json")
    stamp = first.stat().st_mtime_ns
    monkeypatch.setattr(flickr, "run_experiment", real)
    assert flickr.main([*argv, "--skip-existing"]) == 0
    assert "2/2 experiments ok" in capsys.readouterr().out
    assert first.stat().st_mtime_ns == stamp and len(list(out.glob("*.json"))) == 2
    assert json.loads(first.read_text())["status"]["state"] == "ok"


def test_a_degraded_cell_exits_3_unless_failures_are_allowed(
    flickr, emb, tmp_path, capsys, monkeypatch
):
    """As imsearch-align: degraded (failed queries) is 3, --allow-failures makes it 0,
    a failed cell is 1."""
    from imsearch_align.experiment import RunStatus

    real = flickr.run_experiment
    state = {}

    def marked(cfg, **kw):
        res = real(cfg, **kw)
        st = (
            RunStatus("degraded", reasons=("3 queries failed",))
            if state["s"] == "degraded"
            else RunStatus("failed", error="boom")
        )
        return dataclasses.replace(res, status=st)

    monkeypatch.setattr(flickr, "run_experiment", marked)
    argv = _argv(emb, tmp_path / "out", "--methods", "procrustes", "--n", "20", "--stores", "exact")
    state["s"] = "degraded"
    assert flickr.main(argv) == 3
    assert flickr.main([*argv, "--allow-failures"]) == 0
    state["s"] = "failed"
    assert flickr.main([*argv, "--allow-failures"]) == 1
    capsys.readouterr()


def test_an_unreachable_store_is_tried_once_and_the_other_stores_run(
    flickr, emb, tmp_path, capsys, monkeypatch
):
    """A cell that fails with StoreUnavailableError marks its store down: the
    store's other cells are listed as not run (not each waiting out its own
    retries), the other stores' cells run, exit 1."""
    from imsearch_align.experiment import ExperimentError, ExperimentResult, RunStatus
    from imsearch_align.framework.interfaces import StoreUnavailableError

    real = flickr.run_experiment
    tried = []

    def unreachable(cfg, **kw):
        if cfg.store == "milvus":
            tried.append(cfg.n_support)
            res = ExperimentResult(config=cfg, status=RunStatus("failed", error="down"))
            raise ExperimentError("run failed", res) from StoreUnavailableError("Milvus down")
        return real(cfg, **kw)

    monkeypatch.setattr(flickr, "run_experiment", unreachable)
    argv = _argv(emb, tmp_path / "out", "--methods", "procrustes", "csa", "--n", "20", "40")
    argv += ["--stores", "milvus", "exact", "--uri", "http://127.0.0.1:1"]
    assert flickr.main(argv) == 1
    cap = capsys.readouterr()
    assert tried == [20]
    assert "milvus is unreachable: its 3 remaining cells are not run" in cap.err
    rows = [line.split() for line in cap.out.splitlines() if line.startswith(("csa", "procrustes"))]
    milvus = [r for r in rows if r[1] == "milvus"]
    assert len(milvus) == 4 and sum("not run" in " ".join(r) for r in milvus) == 3
    assert [r[2] for r in milvus] == ["20", "40", "20", "40"]  # the N asked for
    assert sum(r[-1] == "ok" for r in rows if r[1] == "exact") == 4
