"""Where a result goes (issue 28.2): a file at the output path is replaced only when it is
provably this config's own result; anything else (a user's JSON, a file that is not a
parquet at the per-query name, a result of a newer schema) is kept and the result is
written beside it, with a warning."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from imsearch_align.experiment import ExperimentConfig, ExperimentResult, run_experiment

NAME = "synthetic_csa_exact_100.json"
PER_QUERY = "synthetic_csa_exact_100.per_query.parquet"


def _config(seed: int = 0) -> ExperimentConfig:
    return ExperimentConfig(
        dataset="synthetic",
        dataset_params={"n_images": 200},
        image_encoder=None,
        text_encoder=None,
        cache_dir=None,
        method="csa",
        store="exact",
        n_support=100,
        seed=seed,
    )


def _run(out: Path, seed: int = 0) -> ExperimentResult:
    return run_experiment(_config(seed), output_dir=out, progress=False)


def _beside(cfg: ExperimentConfig) -> str:
    return f"synthetic_csa_exact_100-{cfg.key()}.json"


def test_a_users_json_at_the_templated_name_is_kept(tmp_path, caplog):
    notes = tmp_path / NAME
    notes.write_text(json.dumps({"my": "notes"}))
    with caplog.at_level(logging.WARNING):
        res = _run(tmp_path)
    assert json.loads(notes.read_text()) == {"my": "notes"}
    assert Path(res.path).name == _beside(res.config)
    assert ExperimentResult.load(res.path).key == res.key
    assert NAME in caplog.text and "not a result of this config" in caplog.text


def test_a_file_that_is_not_a_parquet_at_the_per_query_name_is_kept(tmp_path, caplog):
    mine = tmp_path / PER_QUERY
    mine.write_text("my own table, not a parquet")
    with caplog.at_level(logging.WARNING):
        res = _run(tmp_path)
    assert mine.read_text() == "my own table, not a parquet"
    path = Path(res.path)
    assert path.name == _beside(res.config)
    assert res.per_query_file == path.with_suffix(".per_query.parquet").name
    assert (tmp_path / res.per_query_file).read_bytes()[:4] == b"PAR1"
    assert PER_QUERY in caplog.text


def test_a_newer_schemas_result_of_another_config_is_kept(tmp_path):
    other = _run(tmp_path, seed=1)
    assert Path(other.path).name == NAME
    future = json.loads(Path(other.path).read_text())
    future["schema_version"] = 3
    (tmp_path / NAME).write_text(json.dumps(future))
    res = _run(tmp_path, seed=2)
    assert json.loads((tmp_path / NAME).read_text()) == future
    assert Path(res.path).name == _beside(res.config)


def test_this_configs_own_result_is_replaced(tmp_path):
    first = _run(tmp_path)
    again = _run(tmp_path)
    assert again.path == first.path and Path(first.path).name == NAME
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        NAME,
        PER_QUERY,
    ]


def test_a_name_taken_twice_goes_further_beside(tmp_path):
    (tmp_path / NAME).write_text(json.dumps({"my": "notes"}))
    cfg = _config()
    (tmp_path / _beside(cfg)).write_text("also mine")
    res = _run(tmp_path)
    assert (tmp_path / _beside(cfg)).read_text() == "also mine"
    assert Path(res.path).name == f"synthetic_csa_exact_100-{cfg.key()}-2.json"
    assert ExperimentResult.load(res.path).key == cfg.key()


@pytest.mark.parametrize("first_seed", [1])
def test_another_configs_result_is_kept_and_this_one_goes_beside(tmp_path, first_seed):
    other = _run(tmp_path, seed=first_seed)
    res = _run(tmp_path, seed=first_seed + 1)
    assert Path(other.path).name == NAME and ExperimentResult.load(other.path).key == other.key
    assert Path(res.path).name == _beside(res.config)


def test_a_run_token_is_taken_over_only_once_its_run_is_over(tmp_path):
    """Issue 28.7: a live run's token (and so its checkpoints and collections) is never
    taken; a finished or dead run's is. Liveness is the token's lock, so a run on another
    host sharing the folder (a pid this host does not have) is alive while it holds it."""
    import subprocess
    import sys

    from imsearch_align.experiment import runs

    root = tmp_path / ".checkpoints" / "key"
    a = runs.claim_run_token(root)
    b = runs.claim_run_token(root)
    assert a != b  # a is under way in this process
    runs.release_run_token(root, a)
    assert runs.claim_run_token(root) == a  # a's run is over: its token is taken over
    for token in (a, b):
        runs.release_run_token(root, token)
    other = "feed0001"
    (root / "run_token").write_text(f"{other} 999999999\n")  # a pid this host lacks
    hold = (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(root / (other + '.lock'))!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", hold], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        mine = runs.claim_run_token(root)
        assert mine != other
        runs.release_run_token(root, mine)
    finally:
        child.kill()
        child.wait(timeout=30)
    taken = runs.claim_run_token(root)
    assert taken == other  # the first record whose run is over
    runs.release_run_token(root, taken)
    runs.finish_clean(root)
    assert not root.exists()  # no run left alive: the checkpoints go


@pytest.mark.parametrize("damage", ["missing", "torn"])
def test_skip_existing_runs_again_when_the_per_query_file_is_missing_or_unreadable(
    tmp_path, caplog, damage
):
    """Issue 28, unclear: a clean result whose per-query parquet is gone (or torn) is not
    done: ``--skip-existing`` runs it again, with one warning naming the file."""
    first = _run(tmp_path)
    table = tmp_path / PER_QUERY
    if damage == "missing":
        table.unlink()
    else:  # parquet's magic at both ends, nothing readable between
        table.write_bytes(b"PAR1" + b"\0" * 64 + b"PAR1")
    with caplog.at_level(logging.WARNING):
        res = run_experiment(_config(), output_dir=tmp_path, progress=False, skip_existing=True)
    assert not res.skipped and res.path == first.path
    warned = [r.getMessage() for r in caplog.records if PER_QUERY in r.getMessage()]
    assert len(warned) == 1 and "running again" in warned[0], caplog.text
    assert "\n" not in warned[0]
    assert res.per_query_file == PER_QUERY and table.read_bytes()[:4] == b"PAR1"
    import pandas as pd

    assert len(pd.read_parquet(table)) > 0
    # Whole again: the next --skip-existing keeps it.
    kept = run_experiment(_config(), output_dir=tmp_path, progress=False, skip_existing=True)
    assert kept.skipped


def test_a_full_disk_names_the_file_and_keeps_the_finished_result(tmp_path, monkeypatch):
    """Issue 28, unclear: writing the result fails (ENOSPC): the error names the file it
    could not write and carries the finished result, whose numbers are still there."""
    import errno
    import os

    from imsearch_align.experiment import output
    from imsearch_align.experiment.output import ResultWriteError

    real = output.atomic_write

    def full(path, data, **kw):
        if str(path).endswith(".json"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data, **kw)

    monkeypatch.setattr(output, "atomic_write", full)
    with pytest.raises(ResultWriteError) as info:
        _run(tmp_path)
    exc = info.value
    assert isinstance(exc, OSError) and exc.errno == errno.ENOSPC
    assert str(exc) == f"cannot write the result to {tmp_path / NAME}: No space left on device"
    assert exc.result.status.ok and exc.result.metrics
    # Nothing half-written is left: no result, no per-query table without its result;
    # the checkpoints stay, so running again resumes.
    assert not (tmp_path / NAME).exists() and not (tmp_path / PER_QUERY).exists()
    assert list((tmp_path / ".checkpoints").rglob("batch_*.npz"))
