"""The end-to-end fault suite of issue 11: the CLI in a subprocess, as a user runs it, against a
real ``milvus-lite server`` on 127.0.0.1 that is restarted, killed and shared while it works.

Every test reproduces its fault for real and asserts one of two outcomes: the metrics equal
those of an undisturbed run of the same experiment (to 1e-9), with status ok and exit 0; or a
non-zero exit with one clear message and a result file marked degraded or failed.

* restart mid-run and between indexing and searching (issue 11.1);
* a server killed for good mid-run, then the same command once it is back (11.2, "a dead
  server" of "Unclear today");
* a collection dropped by another client mid-search ("Unclear today");
* two runs of one config on one server at the same time (11.3);
* changed documents under an old checkpoint (11.4);
* a re-run into the same folder, with and without ``--skip-existing``;
* stores that lie about scores or ids (11.6), in ``eval``, ``build`` and ``sweep``;
* an unreachable server, reported before any fitting ("Unclear today").

Ctrl-C is tested in ``tests/test_cli.py::test_ctrl_c_exits_130_and_the_same_command_resumes``,
SIGTERM in ``tests/test_cli.py::test_sigterm_exits_143_with_one_line_and_the_same_command_resumes``.
The restarts run on Milvus Lite only: a Milvus 2.3.5 standalone (PyPI ``milvus``) stopped with
SIGTERM after an insert often does not answer again within minutes (the server, not the
harness; see ``tests/adapters/test_milvus_faults.py::test_milvus_235_standalone_restart``).

The faults are timed with the ``fault-milvus`` plug-in store of ``fault_suite_stores.py`` (the
real MilvusStore with a sleep before each search, a call log and a hold after indexing); the
lying stores are FAISS with one bug each, in the same module.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.experiment import ExperimentResult
from imsearch_align.testing.servers import (
    ServerHandle,
    ServerStartError,
    milvus_lite_server,
)

HERE = Path(__file__).parent
PLUGIN = "fault_suite_stores"

#: 300 synthetic images, 2 captions each; N=100 support pairs leave 90 test images and 180
#: test texts: 23 t2i batches and 12 i2t batches of 8 queries.
SYN = [
    "--dataset", "synthetic",
    "--dataset-param", "n_images=300",
    "--dataset-param", "d_image=24",
    "--dataset-param", "d_text=20",
    "--dataset-param", "captions_per_image=2",
    "--image-encoder", "none",
    "--text-encoder", "none",
    "--cache-dir", "none",
]  # fmt: skip
METHOD = ["--method", "procrustes", "--method-param", "dim=8", "--n-support", "100"]
BATCH = 8
RUN = ["--batch-size", str(BATCH), "--workers", "2", "--no-progress"]


def _have(name: str) -> bool:
    return (Path(sys.executable).parent / name).exists() or shutil.which(name) is not None


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "HF_HUB_OFFLINE": "1",
        "PYTHONWARNINGS": "ignore",
        **extra,
    }


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "imsearch_align.cli", "--plugin", PLUGIN, *args]


def cli(*args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run ``imsearch-align ARGS`` (with the fault plug-in) to the end."""
    return subprocess.run(
        _cmd(*args), capture_output=True, text=True, env=_env(**env), timeout=timeout
    )


def start(*args: str, **env: str) -> subprocess.Popen:
    """Start ``imsearch-align ARGS`` (with the fault plug-in) in the background."""
    return subprocess.Popen(
        _cmd(*args),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
    )


@contextlib.contextmanager
def running(proc: subprocess.Popen) -> Iterator[subprocess.Popen]:
    """Whatever happens in the block, the CLI process does not outlive the test."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def wait_for(what: str, cond, *procs: subprocess.Popen, timeout: float = 60) -> None:
    """Poll ``cond()`` until true; fail if one of ``procs`` exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while not cond():
        for proc in procs:
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"a run exited ({proc.returncode}) before {what}:\n{out}\n{err}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def checkpoints(out: Path, ranking: str = "t2i") -> list[Path]:
    """The finished-batch files of ``ranking`` under ``out/.checkpoints``."""
    return sorted(out.glob(f".checkpoints/*/{ranking}/*/batch_*.npz"))


def result_in(out: Path) -> ExperimentResult:
    """The one result file in ``out``."""
    (path,) = out.glob("*.json")
    return ExperimentResult.load(path)


def assert_metrics_equal(got: ExperimentResult, want: ExperimentResult) -> None:
    """Same measures, each within 1e-9 (the same store answers: the same rankings)."""
    assert got.metrics.keys() == want.metrics.keys()
    for m, v in want.metrics.items():
        assert got.metrics[m] == pytest.approx(v, abs=1e-9), m


@dataclass(frozen=True)
class Call:
    """One search call of ``fault-milvus`` (``FAULT_LOG``)."""

    pid: int
    start: float
    end: float
    n: int


def calls(log: Path) -> list[Call]:
    """The calls logged in ``log`` (none if it does not exist)."""
    if not log.exists():
        return []
    return [
        Call(int(p), float(s), float(e), int(n))
        for p, s, e, n in (ln.split() for ln in log.read_text().splitlines() if ln.strip())
    ]


# ----------------------------------------------------------------------------- servers


@contextlib.contextmanager
def _lite(root: Path) -> Iterator[ServerHandle]:
    if not _have("milvus-lite"):
        pytest.skip("milvus-lite is not installed (pip install 'imsearch-align[milvus]')")
    with contextlib.ExitStack() as stack:
        try:
            srv = stack.enter_context(milvus_lite_server(root))
        except ServerStartError as exc:
            pytest.skip(f"milvus-lite server did not start: {exc}")
        yield srv


@pytest.fixture(scope="module")
def lite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One ``milvus-lite server`` for the module's undisturbed runs."""
    with _lite(tmp_path_factory.mktemp("fault-lite")) as srv:
        yield srv


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[ServerHandle]:
    """A server of the test's own, which it restarts or kills."""
    with _lite(tmp_path / "server") as srv:
        yield srv


def milvus_args(srv: ServerHandle, store: str = "fault-milvus", budget_s: float = 30) -> list[str]:
    """``eval`` of the synthetic experiment on ``srv`` with ``store``."""
    return [
        "eval", *SYN, *METHOD, *RUN,
        "--store", store,
        "--store-param", f"uri={srv.uri}",
        "--store-param", f"retry_budget_s={budget_s}",
    ]  # fmt: skip


@pytest.fixture(scope="module")
def undisturbed(lite_server: ServerHandle, tmp_path_factory: pytest.TempPathFactory):
    """The truth: the same experiment on a server nobody disturbs (plain ``milvus`` store)."""
    out = tmp_path_factory.mktemp("undisturbed")
    p = cli(*milvus_args(lite_server, "milvus"), "--output-dir", str(out))
    assert p.returncode == 0, p.stderr
    res = result_in(out)
    assert res.status.ok and res.n_failed == 0
    # Worth comparing with: the aligned space finds the pairs far above chance (1/90).
    assert res.metric("t2i/HitRate@1") > 5 / 90 and res.metric("i2t/HitRate@1") > 5 / 90
    return res, out, p


# ----------------------------------------------------------------------------- 11.1 restarts


def restart_mid_search(
    srv: ServerHandle, want: ExperimentResult, tmp_path: Path, *, budget_s: float = 30
) -> None:
    """Run the experiment on ``srv``, restart the server (SIGTERM, same data dir and port)
    once two t2i batches are checkpointed, and check the run comes out undisturbed."""
    out, log = tmp_path / "out", tmp_path / "calls.log"
    starts = srv.starts
    proc = start(
        *milvus_args(srv, budget_s=budget_s), "--output-dir", str(out),
        FAULT_SLEEP_S="0.1", FAULT_LOG=str(log),
    )  # fmt: skip
    with running(proc):
        wait_for("two t2i batches were checkpointed", lambda: len(checkpoints(out)) >= 2, proc)
        t_stop = time.time()
        srv.restart(timeout_s=120)
        t_up = time.time()
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, (stdout, stderr)
    assert srv.starts == starts + 1
    log_calls = calls(log)
    # The fault landed mid-run: searches finished before the stop, one was in flight across
    # the restart, and searching went on after it.
    assert any(c.end < t_stop for c in log_calls)
    assert any(c.start < t_stop and c.end > t_up for c in log_calls), (t_stop, t_up, log_calls)
    assert any(c.start > t_up for c in log_calls)
    got = result_in(out)
    assert got.status.ok and got.status.reasons == () and got.n_failed == 0
    for ranking in got.rankings.values():
        assert ranking.errors == () and ranking.timings.n_batches_resumed == 0
    assert_metrics_equal(got, want)
    assert "status ok" in stdout


def restart_after_indexing(
    srv: ServerHandle, want: ExperimentResult, tmp_path: Path, *, budget_s: float = 30
) -> None:
    """Run the experiment on ``srv``, restart the server once the t2i documents are indexed
    and before the first search, and check the run comes out undisturbed."""
    out, log, hold = tmp_path / "out", tmp_path / "calls.log", tmp_path / "hold"
    hold.mkdir(parents=True)
    proc = start(
        *milvus_args(srv, budget_s=budget_s), "--output-dir", str(out),
        FAULT_HOLD_DIR=str(hold), FAULT_LOG=str(log), FAULT_HOLD_MAX_S="300",
    )  # fmt: skip
    with running(proc):
        wait_for("the t2i documents were indexed", lambda: any(hold.glob("indexed.*")), proc)
        assert not calls(log), "the run searched before the hold"
        srv.restart(timeout_s=180)
        t_up = time.time()
        (hold / "go").touch()
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, (stdout, stderr)
    # Every search of the t2i index came after the restart (its collection was 'released').
    assert calls(log) and min(c.start for c in calls(log)) > t_up
    got = result_in(out)
    assert got.status.ok and got.n_failed == 0
    assert_metrics_equal(got, want)


@pytest.mark.integration
def test_server_restarted_mid_search_gives_the_undisturbed_metrics(
    own_server: ServerHandle, undisturbed, tmp_path: Path
) -> None:
    restart_mid_search(own_server, undisturbed[0], tmp_path)


@pytest.mark.integration
def test_server_restarted_between_indexing_and_searching(
    own_server: ServerHandle, undisturbed, tmp_path: Path
) -> None:
    restart_after_indexing(own_server, undisturbed[0], tmp_path)


# ----------------------------------------------------------------------------- a dead server


@pytest.mark.integration
def test_server_killed_for_good_fails_fast_then_the_same_command_resumes(
    own_server: ServerHandle, undisturbed, tmp_path: Path
) -> None:
    want, _, _ = undisturbed
    budget = 2.0
    out = tmp_path / "out"
    args = [*milvus_args(own_server, budget_s=budget), "--output-dir", str(out)]
    proc = start(*args, FAULT_SLEEP_S="0.1")
    with running(proc):
        wait_for("three t2i batches were checkpointed", lambda: len(checkpoints(out)) >= 3, proc)
        own_server.kill()  # SIGKILL, and it stays dead
        t_kill = time.monotonic()
        stdout, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - t_kill
    assert proc.returncode == 1, (stdout, stderr)
    # One retry budget for the run, then stop: not batches x attempts x budgets.
    assert took < budget + 15, took
    # One clear message that names the server, no tracebacks.
    assert "Traceback" not in stderr and len(stderr.splitlines()) <= 8, stderr
    errors = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, stderr
    assert own_server.uri in errors[0] and "unavailable" in errors[0], errors[0]
    assert "STATUS FAILED" in stdout
    # The failed result keeps the finished batches' partial ranking.
    failed = result_in(out)
    assert failed.status.state == "failed" and own_server.uri in failed.status.error
    assert set(failed.rankings) == {"t2i"}
    part = failed.rankings["t2i"]
    kept = checkpoints(out)
    assert len(kept) >= 3 and part.timings.n_batches_searched >= len(kept)
    assert 0 < part.n_failed < part.n_queries
    assert part.n_queries - part.n_failed >= BATCH * len(kept) - (BATCH - 4)  # last batch: 4
    assert f"result: {out / 'synthetic_procrustes_fault-milvus_100.json'} (status failed)" in stderr
    # The server is back: the same command searches only what is missing.
    own_server.start()
    again = cli(*args)
    assert again.returncode == 0, again.stderr
    got = result_in(out)
    assert got.status.ok and got.n_failed == 0
    assert got.rankings["t2i"].timings.n_batches_resumed == len(kept)
    assert got.rankings["t2i"].timings.n_batches_searched == (
        got.rankings["t2i"].timings.n_batches - len(kept)
    )
    assert_metrics_equal(got, want)
    assert not checkpoints(out)  # a clean result removes them
    # The resumed run took the interrupted run's token: the collection the dead
    # server kept was found, owned and dropped, not leaked.
    from pymilvus import MilvusClient

    client = MilvusClient(uri=own_server.uri)
    try:
        assert not [n for n in client.list_collections() if n.startswith("ia_")]
    finally:
        client.close()


@pytest.mark.integration
def test_collection_dropped_by_another_client_mid_search_fails_fast_then_resumes(
    lite_server: ServerHandle, undisturbed, tmp_path: Path
) -> None:
    """Unclear today (11): an error that cannot heal is not retried batch after batch."""
    from imsearch_align.adapters.milvus import MilvusStore

    want, _, _ = undisturbed
    out, hold = tmp_path / "out", tmp_path / "hold"
    hold.mkdir()
    (hold / "go").touch()  # no hold: the marker only names the collection
    args = [*milvus_args(lite_server), "--output-dir", str(out)]
    proc = start(*args, FAULT_SLEEP_S="0.1", FAULT_HOLD_DIR=str(hold))
    with running(proc):
        wait_for("two t2i batches were checkpointed", lambda: len(checkpoints(out)) >= 2, proc)
        (name,) = [f.read_text() for f in hold.glob("indexed.*")]
        with MilvusStore(uri=lite_server.uri) as other:
            other.drop_collection(name, force=True)
        t_drop = time.monotonic()
        stdout, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - t_drop
    assert proc.returncode == 1, (stdout, stderr)
    assert took < 10, took  # no retry budget spent on each of the remaining batches
    assert "Traceback" not in stderr
    (err,) = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
    assert f"collection '{name}' does not exist at {lite_server.uri}" in err
    failed = result_in(out)
    assert failed.status.state == "failed" and set(failed.rankings) == {"t2i"}
    assert 0 < failed.rankings["t2i"].n_failed < failed.rankings["t2i"].n_queries
    again = cli(*args)
    assert again.returncode == 0, again.stderr
    got = result_in(out)
    assert got.status.ok and got.rankings["t2i"].timings.n_batches_resumed >= 2
    assert_metrics_equal(got, want)


# ----------------------------------------------------------------------------- 11.3 shared server


@pytest.mark.integration
@pytest.mark.parametrize("folders", ["two folders", "one folder"])
def test_two_runs_of_one_config_on_one_server_at_the_same_time(
    own_server: ServerHandle, undisturbed, tmp_path: Path, folders: str
) -> None:
    """Issue 11.3, and the same two runs writing into one folder (one checkpoint key)."""
    from pymilvus import MilvusClient

    want, _, _ = undisturbed
    hold, log = tmp_path / "hold", tmp_path / "calls.log"
    hold.mkdir()
    env = {"FAULT_HOLD_DIR": str(hold), "FAULT_LOG": str(log), "FAULT_SLEEP_S": "0.02"}
    outs = [tmp_path / "a", tmp_path / ("b" if folders == "two folders" else "a")]
    procs = [start(*milvus_args(own_server), "--output-dir", str(o), **env) for o in outs]
    client = MilvusClient(uri=own_server.uri, dedicated=True)
    try:
        with running(procs[0]), running(procs[1]):
            wait_for("both runs indexed", lambda: len(list(hold.glob("indexed.*"))) == 2, *procs)
            # Both indexes live side by side on the server: one collection per run.
            names = sorted(f.read_text() for f in hold.glob("indexed.*"))
            assert names[0] != names[1]
            assert set(names) <= set(client.list_collections())
            (hold / "go").touch()
            done = [p.communicate(timeout=120) for p in procs]
        for p, (stdout, stderr) in zip(procs, done):
            assert p.returncode == 0, (stdout, stderr)
        # They searched at the same time.
        by_pid: dict[int, list[Call]] = {}
        for c in calls(log):
            by_pid.setdefault(c.pid, []).append(c)
        a, b = by_pid.values()
        assert any(x.start < y.end and y.start < x.end for x in a for y in b)
        for o in outs:
            got = result_in(o)
            assert got.status.ok and got.n_failed == 0
            assert_metrics_equal(got, want)
        # Each run dropped its own collections and nothing else.
        assert not [n for n in client.list_collections() if n.startswith("ia_")]
    finally:
        client.close()


# ----------------------------------------------------------------------------- 11.4 stale checkpoints


def _write_embeddings(folder: Path, images: np.ndarray, texts: np.ndarray) -> list[str]:
    np.save(folder / "img.npy", images)
    np.save(folder / "txt.npy", texts)
    return [
        "--dataset", "precomputed",
        "--dataset-param", f"image_path={folder / 'img.npy'}",
        "--dataset-param", f"text_path={folder / 'txt.npy'}",
        "--image-encoder", "none",
        "--text-encoder", "none",
    ]  # fmt: skip


@pytest.mark.integration
def test_changed_documents_under_an_old_checkpoint_give_the_new_datas_metrics(
    lite_server: ServerHandle, tmp_path: Path
) -> None:
    rng = np.random.default_rng(11)
    z = rng.standard_normal((300, 8))
    old_img = np.tanh(z @ rng.standard_normal((8, 24))) + 0.1 * rng.standard_normal((300, 24))
    txt = np.repeat(z, 2, axis=0) @ rng.standard_normal((8, 20))
    txt += 0.3 * rng.standard_normal(txt.shape)
    # The new image files: the same vectors in another order, so the pairs change.
    new_img = old_img[rng.permutation(300)]
    data = tmp_path / "data"
    data.mkdir()
    cache = ["--cache-dir", str(tmp_path / "cache")]  # a real embedding cache, shared by all
    store = ["--store", "fault-milvus", "--store-param", f"uri={lite_server.uri}"]
    common = [*METHOD, *RUN, *store, *cache]

    def eval_into(out: Path, **env: str) -> subprocess.CompletedProcess:
        return cli("eval", *dataset, *common, "--output-dir", str(out), **env)

    dataset = _write_embeddings(data, old_img.astype(np.float32), txt.astype(np.float32))
    p = eval_into(tmp_path / "old_truth")
    assert p.returncode == 0, p.stderr
    old = result_in(tmp_path / "old_truth")
    # A run on the old files, killed mid-search: its checkpoints stay behind.
    out = tmp_path / "out"
    proc = start("eval", *dataset, *common, "--output-dir", str(out), FAULT_SLEEP_S="0.1")
    with running(proc):
        wait_for("three t2i batches were checkpointed", lambda: len(checkpoints(out)) >= 3, proc)
        proc.kill()
        proc.communicate(timeout=30)
    stale = checkpoints(out)
    assert len(stale) >= 3 and not list(out.glob("*.json"))
    # The image files change; the config (paths included) does not.
    assert _write_embeddings(data, new_img.astype(np.float32), txt.astype(np.float32)) == dataset
    p = eval_into(out)
    assert p.returncode == 0, p.stderr
    got = result_in(out)
    p = eval_into(tmp_path / "new_truth")
    assert p.returncode == 0, p.stderr
    truth = result_in(tmp_path / "new_truth")
    assert got.key == old.key == truth.key  # one config throughout
    assert got.status.ok
    assert_metrics_equal(got, truth)
    assert all(r.timings.n_batches_resumed == 0 for r in got.rankings.values())
    # ... and the old data's numbers are far from them: a stale checkpoint would show.
    assert old.metric("t2i/HitRate@10") > truth.metric("t2i/HitRate@10") + 0.2
    assert not list(out.glob(".checkpoints/*/*/*/batch_*.npz"))  # stale ones removed too


# ----------------------------------------------------------------------------- re-run into a folder


@pytest.mark.integration
def test_rerun_into_the_same_folder(undisturbed, lite_server: ServerHandle, tmp_path: Path) -> None:
    first, out0, p0 = undisturbed
    out = Path(shutil.copytree(out0, tmp_path / "out"))
    (path,) = out.glob("*.json")
    mtime = path.stat().st_mtime_ns
    args = [*milvus_args(lite_server, "milvus"), "--output-dir", str(out)]
    kept = cli(*args, "--skip-existing")
    assert kept.returncode == 0, kept.stderr
    assert f"skipped: {path} holds this config's clean result" in kept.stdout
    assert path.stat().st_mtime_ns == mtime
    table = p0.stdout[p0.stdout.index("ranking ") : p0.stdout.index("HitRate@k =")]
    assert table in kept.stdout  # the kept numbers, as measured
    # Without --skip-existing the run is repeated in full (no checkpoint is left to load).
    again = cli(*args)
    assert again.returncode == 0, again.stderr
    assert path.stat().st_mtime_ns != mtime
    got = ExperimentResult.load(path)
    assert got.status.ok and got.created >= first.created
    for name, r in got.rankings.items():
        assert r.timings.n_batches_searched == r.timings.n_batches > 0, name
        assert r.timings.n_batches_resumed == 0 and r.timings.queries_per_s > 0, name
    assert_metrics_equal(got, first)


# ----------------------------------------------------------------------------- 11.6 lying stores

FAISS_EVAL = ["eval", *SYN, *METHOD, "--no-progress"]


@pytest.fixture(scope="module")
def faiss_truth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A clean FAISS run of the experiment, in a folder the lying stores' results join."""
    out = tmp_path_factory.mktemp("lies")
    p = cli(*FAISS_EVAL, "--store", "faiss", "--ann-fidelity", "--output-dir", str(out))
    assert p.returncode == 0, p.stderr
    res = result_in(out)
    assert res.status.ok and res.metric("t2i/ann_recall@10") == 1.0
    return out


@pytest.mark.parametrize(
    ("store", "problem"),
    [
        ("sign-flip-faiss", ": sign flipped?"),
        ("shifted-ids-faiss", "ids off by +1? (the store maps rows to ids wrongly)"),
    ],
)
def test_a_store_that_lies_makes_a_degraded_run_and_a_marked_row(
    store: str, problem: str, faiss_truth: Path, tmp_path: Path
) -> None:
    out = Path(shutil.copytree(faiss_truth, tmp_path / "out"))
    clean = result_in(out)
    p = cli(*FAISS_EVAL, "--store", store, "--ann-fidelity", "--output-dir", str(out))
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    (err,) = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert "the run is degraded" in err and "--allow-failures" in err
    for direction in ("t2i", "i2t"):
        assert f"{direction}: the store's results fail the truth check (query 0" in err
    assert problem in err
    res = ExperimentResult.load(out / f"synthetic_procrustes_{store}_100.json")
    assert res.status.state == "degraded"
    assert any(problem in r for r in res.status.reasons)
    for direction in ("t2i", "i2t"):
        fid = res.rankings[direction].fidelity
        bad = fid["score_mismatch_rows@10"] + fid["invalid_hits@10"]
        assert bad > 0 and fid["ann_recall@10"] < 0.5, fid
        # The lie costs what it should: the truthful store's numbers are far above.
        assert res.metric(f"{direction}/HitRate@10") < clean.metric(f"{direction}/HitRate@10") / 2
    # The leaderboard marks the row and never bolds it.
    md = tmp_path / "lb.md"
    b = cli("build", str(out), "--output", str(tmp_path / "b.csv"), "--markdown", str(md))
    assert b.returncode == 0, b.stderr
    assert "1 of 2 results are not ok" in b.stderr
    lines = [ln for ln in md.read_text().splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {
        r[header.index("store")]: r
        for r in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])
    }
    assert rows[store][header.index("status")] == "degraded"
    assert rows["faiss"][header.index("status")] == "ok"
    assert not any("**" in c for c in rows[store])
    assert problem in md.read_text()


def test_a_sweep_shows_the_lying_cell_degraded_and_skip_existing_runs_only_it(
    tmp_path: Path,
) -> None:
    """Issue 11.2 in a sweep: the table shows the status, the exit is 3, and
    ``--skip-existing`` keeps the clean cell but runs the degraded one again."""
    args = ["sweep", *SYN, "--methods", "procrustes", "--method-param", "dim=8",
            "--n-support", "100", "--stores", "faiss", "sign-flip-faiss", "--ann-fidelity",
            "--no-progress", "--output-dir", str(tmp_path)]  # fmt: skip
    p = cli(*args)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "2 runs (0 failed, 1 degraded, 0 skipped)" in p.stdout
    lines = [ln for ln in p.stdout[p.stdout.index("| method") :].splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    status = {
        r[header.index("store")]: r[header.index("status")]
        for r in ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])
    }
    assert status == {"faiss": "ok", "sign-flip-faiss": "degraded"}
    clean = tmp_path / "synthetic_procrustes_faiss_100.json"
    lying = tmp_path / "synthetic_procrustes_sign-flip-faiss_100.json"
    mtimes = {f: f.stat().st_mtime_ns for f in (clean, lying)}
    again = cli(*args, "--skip-existing")
    assert again.returncode == 3, again.stderr
    assert "2 runs (0 failed, 1 degraded, 1 skipped)" in again.stdout
    assert clean.stat().st_mtime_ns == mtimes[clean]
    assert lying.stat().st_mtime_ns != mtimes[lying]
    assert ExperimentResult.load(lying).status.state == "degraded"


# ----------------------------------------------------------------------------- an unreachable server


def test_an_unreachable_server_fails_before_the_method_is_fitted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unclear today (11): a wrong uri is reported after one retry budget, before fitting,
    with a failed result that names the server."""
    from imsearch_align.experiment import ExperimentConfig, ExperimentError, context, run_experiment
    from imsearch_align.testing.servers import free_port

    pytest.importorskip("pymilvus")

    def no_fit(self) -> None:
        raise AssertionError("the method was fitted before the store was reached")

    monkeypatch.setattr(context.TaskContext, "fit", no_fit)
    uri = f"http://127.0.0.1:{free_port()}"
    cfg = ExperimentConfig(
        dataset="synthetic",
        dataset_params={"n_images": 300, "d_image": 24, "d_text": 20},
        image_encoder=None,
        text_encoder=None,
        cache_dir=None,
        method="procrustes",
        method_params={"dim": 8},
        store="milvus",
        store_params={"uri": uri, "retry_budget_s": 1},
    )
    t0 = time.monotonic()
    with pytest.raises(ExperimentError, match="is unavailable") as err:
        run_experiment(cfg, output_dir=tmp_path, progress=False)
    assert time.monotonic() - t0 < 15
    failed = err.value.result
    assert failed.status.state == "failed" and uri in failed.status.error
    assert "Is the server running" in failed.status.error
    assert ExperimentResult.load(failed.path).status == failed.status


@pytest.mark.parametrize(
    ("store", "problem"),
    [
        ("sign-flip-faiss", ": sign flipped?"),
        ("shifted-ids-faiss", "ids off by +1?"),
    ],
)
def test_a_store_that_lies_is_caught_without_ann_fidelity(
    store: str, problem: str, tmp_path: Path
) -> None:
    """Every run checks a seeded sample of the store's answers against the vectors."""
    p = cli(*FAISS_EVAL, "--store", store, "--output-dir", str(tmp_path))
    assert p.returncode == 3, (p.stdout, p.stderr)
    (err,) = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert "answers to a sample of" in err and problem in err
    res = result_in(tmp_path)
    assert res.status.state == "degraded" and not res.rankings["t2i"].fidelity


# ----------------------------------------------------------------------------- issue 28: one folder, two runs

#: ``S`` of issue 28: the synthetic experiment a new user runs first.
S = [
    "--dataset", "synthetic", "--dataset-param", "n_images=200",
    "--image-encoder", "none", "--text-encoder", "none",
    "--method", "csa", "--n-support", "100", "--no-progress",
]  # fmt: skip

#: A plug-in store for these tests: ExactStore sleeping ``SLOW_S`` before each search.
SLOW_STORE = '''
import os
import time

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.framework.registry import STORES


@STORES.register("slow-exact")
class SlowExact(ExactStore):
    """ExactStore that sleeps SLOW_S seconds before each search."""

    def search(self, *args, **kw):
        time.sleep(float(os.environ.get("SLOW_S", "0")))
        return super().search(*args, **kw)
'''


def start_slow(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen:
    """Start ``imsearch-align ARGS`` with the ``slow-exact`` store of :data:`SLOW_STORE`."""
    mod = tmp_path / "slow_exact_store.py"
    if not mod.exists():
        mod.write_text(SLOW_STORE)
    path = os.pathsep.join([str(tmp_path), str(HERE), os.environ.get("PYTHONPATH", "")])
    return subprocess.Popen(
        [sys.executable, "-m", "imsearch_align.cli", "--plugin", "slow_exact_store", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(PYTHONPATH=path.rstrip(os.pathsep), **env),
    )


def finish(*procs: subprocess.Popen, timeout: float = 180) -> list[tuple[str, str]]:
    """Wait for every process; each must exit 0."""
    done = [p.communicate(timeout=timeout) for p in procs]
    for p, (stdout, stderr) in zip(procs, done):
        assert p.returncode == 0, (stdout, stderr)
    return done


def test_two_runs_of_different_configs_into_one_folder_keep_both_results(tmp_path: Path) -> None:
    """Issue 28.1: ``eval S --seed 1`` and ``--seed 2`` at once into one folder: the
    templated name fits both; each result is kept (the second beside the first)."""
    out = tmp_path / "out"
    args = ["eval", *S, "--store", "slow-exact", "--batch-size", "8", "--output-dir", str(out)]
    # Both runs pick their file name before the other writes (each searches for ~1.5 s).
    procs = [start_slow(tmp_path, *args, "--seed", s, SLOW_S="0.1") for s in ("1", "2")]
    with running(procs[0]), running(procs[1]):
        done = finish(*procs)
    files = sorted(out.glob("*.json"))
    results = [ExperimentResult.load(f) for f in files]
    assert sorted(r.config.seed for r in results) == [1, 2], files
    assert all(r.status.ok for r in results)
    # Each names its own file, with its own per-query table beside it.
    printed = {
        ln.split()[1] for out, _ in done for ln in out.splitlines() if ln.startswith("result:")
    }
    assert printed == {str(f) for f in files}
    for f, r in zip(files, results):
        assert r.per_query_file == f.with_suffix(".per_query.parquet").name
        assert f.with_suffix(".per_query.parquet").is_file()


def test_two_identical_runs_into_one_folder_each_measure_their_own_speed(tmp_path: Path) -> None:
    """Issue 28.7: a live run's checkpoints belong to it. A second run of the same config
    started while the first searches takes none of its batches as a resume: both
    results have every batch searched and a measured speed."""
    out = tmp_path / "out"
    args = ["eval", *S, "--store", "slow-exact", "--batch-size", "8", "--workers", "1",
            "--output-dir", str(out)]  # fmt: skip
    first = start_slow(tmp_path, *args, "--output", "first.json", SLOW_S="0.4")
    with running(first):
        wait_for(
            "the first run checkpointed two batches", lambda: len(checkpoints(out)) >= 2, first
        )
        second = start_slow(tmp_path, *args, "--output", "second.json", SLOW_S="0")
        with running(second):
            finish(first, second)
    for name in ("first.json", "second.json"):
        res = ExperimentResult.load(out / name)
        assert res.status.ok, name
        for ranking in res.rankings.values():
            t = ranking.timings
            assert t.n_batches_resumed == 0 and t.n_batches_searched == t.n_batches > 0, name
            assert t.queries_per_s is not None and t.queries_per_s > 0, name
    assert not checkpoints(out)  # the last clean result removed every checkpoint
