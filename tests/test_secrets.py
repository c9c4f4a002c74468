"""No URI password reaches a file: results, the CSV and the leaderboard of a
run whose Milvus URI carries user info (issue 28 #5)."""

from __future__ import annotations

import socket

import pytest

from imsearch_align.cli import main
from imsearch_align.experiment.config import ExperimentConfig

PW = "S3cretPW"


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_recorded_config_drops_the_user_info_of_every_uri():
    cfg = ExperimentConfig(
        dataset="synthetic",
        store="milvus",
        store_params={"uri": f"http://root:{PW}@127.0.0.1:19530/db", "token": "t0k"},
        dataset_params={"source": f"https://user:{PW}@example.invalid/data"},
    )
    rec = cfg.to_dict() if hasattr(cfg, "to_dict") else cfg._record
    text = repr(rec)
    assert PW not in text and "t0k" not in text
    assert "http://127.0.0.1:19530/db" in text and "https://example.invalid/data" in text


@pytest.mark.slow
def test_a_failed_milvus_run_writes_no_password_anywhere(tmp_path, capsys):
    pytest.importorskip("pymilvus")
    out = tmp_path / "out"
    uri = f"http://root:{PW}@127.0.0.1:{_dead_port()}"
    argv = [
        "eval", "--dataset", "synthetic", "--dataset-param", "n_images=200",
        "--image-encoder", "none", "--text-encoder", "none", "--method", "csa",
        "--store", "milvus", "--store-param", f"uri={uri}",
        "--store-param", "retry_budget_s=1", "--n-support", "100",
        "--no-progress", "--output-dir", str(out),
    ]  # fmt: skip
    main(argv)
    assert any(out.glob("*.json")), "the failed run wrote no result"
    board = tmp_path / "board"
    rc = main(
        ["build", str(out), "--output", str(board / "b.csv"), "--markdown", str(board / "b.md")]
    )
    assert rc == 0
    printed = capsys.readouterr()
    assert PW not in printed.out and PW not in printed.err
    for f in [*out.rglob("*"), *board.rglob("*")]:
        if f.is_file():
            assert PW.encode() not in f.read_bytes(), f"{f.name} holds the password"
