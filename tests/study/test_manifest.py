"""Self-describing results (issue 37 item 5): no cell holds an absolute path of the machine
that wrote it, and every run of a study leaves a manifest (when, where, with what, the git
commit and a digest of every cell) that :func:`verify_manifest` checks the folder against."""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.experiment import study_cell
from imsearch_align.experiment.study_cell import CellPathError, is_cell, load_cell, write_cell
from imsearch_align.study import StudySpec, StudySpecError, run_study
from imsearch_align.study.manifest import (
    MANIFEST_DIR,
    NOT_READABLE,
    SETTINGS_ENV,
    StudyManifest,
    verify_manifest,
)
from imsearch_align.study.result import StudyResult
from imsearch_align.testing.scripts import write_cone_pairs

ROOT = Path(__file__).resolve().parents[2]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10)
    except OSError:
        return None
    return out.stdout if out.returncode == 0 else None


def _spec(tmp: Path, **kw) -> StudySpec:
    return StudySpec(
        embeddings=str(tmp / "emb"), stores=("exact", "faiss"), methods=("procrustes",),
        index=("exact:flat", "faiss:ivf_flat:nprobe=1,2"), sizes=(0, 100), queries=20,
        latency_queries=2, filters=(0.5,), concurrency=(1,), concurrency_duration=0.1,
        concurrency_warmup=0.02, out=str(tmp / "study"), truth_cache=str(tmp / "truth"), **kw,
    )  # fmt: skip


def _manifests(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / MANIFEST_DIR).glob("*.json"))]


def _cell_files(out: Path) -> list[Path]:
    return [p for p in sorted(out.glob("*.json")) if is_cell(json.loads(p.read_text()))]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("manifest")
    (tmp / "emb").mkdir()
    write_cone_pairs(tmp / "emb", 50)
    before = _git("status", "--porcelain")
    result = run_study(_spec(tmp), progress=False)
    after = _git("status", "--porcelain")
    assert result.exit_code == 0, result.failed
    return tmp, Path(result.spec.out), result, (before, after)


def test_a_study_writes_a_manifest_of_its_run(study):
    _, out, result, _ = study
    (m,) = _manifests(out)
    assert m["format"] == "study-manifest/1" and m["status"] == "ok" and m["exit_code"] == 0
    started, ended = (dt.datetime.fromisoformat(m[k]) for k in ("started", "ended"))
    assert started.tzinfo is not None and started <= ended and m["seconds"] >= 0
    cells = _cell_files(out)
    assert len(cells) == len(result.all_cells) > 0
    assert m["cells"] == [{"file": p.name, "sha256": _sha(p), "written": True} for p in cells]
    others = sorted(p.name for p in out.iterdir() if p.is_file() and p not in cells)
    assert [o["file"] for o in m["outputs"]] == others and "collection.csv" in others
    host = m["host"]
    assert host["logical_cores"] == os.cpu_count() and host["cpu_model"]
    if hasattr(os, "sched_getaffinity"):
        assert host["usable_cores"] == len(os.sched_getaffinity(0))
    assert m["libraries"]["packages"]["numpy"] and m["libraries"]["blas"] is not None
    (name,) = (p.name for p in (out / MANIFEST_DIR).iterdir())
    assert name.startswith("manifest-") and name.endswith(f"-{m['token']}.json")
    assert m["stores"]["faiss"]["server"] is False and m["stores"]["faiss"]["declared"]
    assert m["spec"]["out"] == "." and m["command"][m["command"].index("--out") + 1] == "."
    assert verify_manifest(out) == []


def test_the_manifest_names_the_checkout_and_whether_it_is_dirty(study):
    _, out, _, (before, after) = study
    head = _git("rev-parse", "HEAD")
    tracked = _git("ls-files", "--error-unmatch", "imsearch_align/__init__.py")
    if head is None or tracked is None or not study_cell.__file__.startswith(str(ROOT)):
        pytest.skip("the package is not imported from a git checkout here")
    git = _manifests(out)[0]["git"]
    assert git["commit"] == head.strip()
    # another hand may edit the checkout meanwhile: the flag is the one of before or after
    assert git["dirty"] in {bool(before.strip()), bool(after.strip())}


def test_no_file_of_the_study_holds_a_path_of_this_machine(study):
    tmp, out, _, _ = study
    marks = {str(tmp), os.path.realpath(tmp)}
    files = [p for p in out.rglob("*") if p.is_file()]
    assert any(p.parent.name == MANIFEST_DIR for p in files)
    for p in files:
        data = p.read_bytes()
        assert not any(m.encode() in data for m in marks), p.name
    cell = json.loads(_cell_files(out)[0].read_text())
    assert cell["command"][cell["command"].index("--embeddings") + 1] == "<outside>/emb"
    # the data by content, not by where it was (the key is the hash of this)
    assert cell["config"]["data"] == {"params": {}, "files": {
        "image_path": _sha(tmp / "emb" / "image.npy"), "text_path": _sha(tmp / "emb" / "text.npy"),
        "text_image": _sha(tmp / "emb" / "text_image.npy"),
    }}  # fmt: skip


def test_a_rerun_with_skip_existing_reuses_every_cell_and_adds_a_manifest(tmp_path):
    """The cells' paths are rewritten, their keys are not: the same study run again (its data
    and folder where they were) finds every cell and rewrites none."""
    (tmp_path / "emb").mkdir()
    write_cone_pairs(tmp_path / "emb", 50)
    first = run_study(_spec(tmp_path), progress=False)
    out = Path(first.spec.out)
    digests = {p.name: _sha(p) for p in _cell_files(out)}
    log = io.StringIO()
    again = run_study(_spec(tmp_path, skip_existing=True), progress=False, log=log)
    assert first.exit_code == again.exit_code == 0
    assert len(again.all_cells) == len(first.all_cells) == len(digests)
    assert "reused" in log.getvalue() and "deployable setting" not in log.getvalue()
    assert {p.name: _sha(p) for p in _cell_files(out)} == digests  # not written again
    one, two = _manifests(out)
    assert [c["file"] for c in two["cells"]] == [c["file"] for c in one["cells"]]
    assert all(c["written"] for c in one["cells"]) and not any(c["written"] for c in two["cells"])
    assert verify_manifest(out) == []


# -- the cell's key: the same on every machine ----------------------------------------------


def _copy_data(tmp: Path, to: Path) -> Path:
    shutil.copytree(tmp / "emb", to)
    return to


def test_the_same_study_from_other_folders_writes_the_same_cell_files(study, tmp_path):
    """Data, ``--out``, truth cache and embedding cache elsewhere: the same file names, the
    filtered and concurrency cells' too (two machines name one study's cells alike)."""
    tmp, out, _, _ = study
    other = tmp_path / "second" / "machine"
    spec = _spec(tmp_path, cache_dir=str(other / "cache")).replace(
        embeddings=str(_copy_data(tmp, other / "vectors")), out=str(other / "results"),
        truth_cache=str(other / "truth"),
    )  # fmt: skip
    again = run_study(spec, progress=False)
    assert again.exit_code == 0
    names = [p.name for p in _cell_files(out)]
    assert [p.name for p in _cell_files(other / "results")] == names
    assert any(n.startswith("filtered-") for n in names)
    assert any(n.startswith("concurrency-") for n in names)


def test_a_study_folder_copied_elsewhere_with_its_data_is_reused_whole(study, tmp_path):
    """The folder and its data moved (another machine): ``--skip-existing`` rewrites no cell
    and builds nothing, with an empty truth cache and another embedding cache."""
    tmp, out, _, _ = study
    moved = tmp_path / "elsewhere"
    shutil.copytree(out, moved / "study")
    cells = _cell_files(moved / "study")
    before = {p.name: (_sha(p), p.stat().st_mtime_ns) for p in cells}
    spec = _spec(moved, skip_existing=True, cache_dir=str(moved / "cache")).replace(
        embeddings=str(_copy_data(tmp, moved / "data"))
    )
    log = io.StringIO()
    again = run_study(spec, progress=False, log=log)
    assert again.exit_code == 0 and len(again.all_cells) == len(before)
    assert "reused" in log.getvalue() and "deployable setting" not in log.getvalue()
    assert {p.name: (_sha(p), p.stat().st_mtime_ns) for p in cells} == before
    assert not any(c["written"] for c in _manifests(moved / "study")[-1]["cells"])
    assert verify_manifest(moved / "study") == []


def test_embeddings_of_other_content_under_the_same_names_are_other_cells(study, tmp_path):
    tmp, out, _, _ = study
    emb = _copy_data(tmp, tmp_path / "emb")
    X = np.load(emb / "image.npy")
    X[0] = X[1]  # one image row changed: the same file name, other data
    np.save(emb / "image.npy", X)
    spec = _spec(tmp_path).replace(sizes=(0,), filters=(), concurrency=())
    other = {p.name for p in _cell_files(Path(run_study(spec, progress=False).spec.out))}
    assert other and not other & {p.name for p in _cell_files(out)}
    # the same cells (dataset, method, store, index, size), under other keys
    assert {n.rsplit("_", 1)[0] for n in other} <= {p.name.rsplit("_", 1)[0] for p in
                                                     _cell_files(out)}  # fmt: skip


@pytest.mark.parametrize(
    "flags",
    [{"shapes": 120}, {"data": "flickr"}, {"embeddings": "emb"}],
    ids=["shapes", "data", "embeddings"],
)
def test_the_data_in_a_cell_key_holds_no_path(tmp_path, flags):
    """``--shapes``: ``(n, seed)`` fix the images, the root only caches them; ``--data``: the
    dataset's name and split parameters; ``--embeddings``: each file's SHA-256."""
    from imsearch_align.experiment.study_cell import absolute_paths
    from imsearch_align.study.data import data_identity, dataset_spec

    def identity(at: Path) -> dict:
        (at / "flickr").mkdir(parents=True)
        (at / "emb").mkdir()
        write_cone_pairs(at / "emb", 20)
        kw = {k: str(at / v) if isinstance(v, str) else v for k, v in flags.items()}
        _, params, _ = dataset_spec(**kw, shapes_root=str(at / "shapes"))
        assert absolute_paths(params)  # where the data is ...
        return data_identity(params)  # ... and what it is

    one, two = identity(tmp_path / "a"), identity(tmp_path / "b" / "c")
    assert one == two and absolute_paths(one) == []
    if "shapes" in flags:
        assert one == {"params": {"n_images": 120, "seed": 0}}
    if "embeddings" in flags:
        assert set(one["files"]) == {"image_path", "text_path", "text_image"}


def test_synthetic_distractors_enter_the_key_by_what_fixes_them_not_their_fitted_bytes():
    """Another machine fits the same rows to other low bits (another BLAS, CPU, encoder
    kernel), and a local encoder's version is its files' times: neither enters the key;
    the count, the seed and the encoder's id do."""
    from imsearch_align.collection.synthetic import MixtureModel, SyntheticSource
    from imsearch_align.study.run import _distractors

    rows = np.random.default_rng(0).standard_normal((400, 8))
    here = MixtureModel.fit(rows, seed=0, encoder="enc:v1@local-0123456789ab")
    there = MixtureModel.fit(rows * (1 + 1e-12), seed=0, encoder="enc:v1@local-ba9876543210")
    assert here.fingerprint != there.fingerprint

    def key(model, n=100, seed=0):
        return _distractors(SyntheticSource(model, n, seed=seed, modality="image"))

    assert key(here) == key(there) and key(here)["encoder"] == "enc:v1"
    assert key(here, n=99) != key(here) != key(here, seed=1)
    hub = MixtureModel.fit(rows, seed=0, encoder="enc:v1@rev-abc")
    assert key(hub)["encoder"] == "enc:v1@rev-abc"  # a Hub revision names the weights


def test_a_distractor_file_is_keyed_by_its_content_not_its_place(tmp_path):
    from imsearch_align.collection.files import open_file

    rows = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    for d in ("a", "b"):
        (tmp_path / d).mkdir()
        np.save(tmp_path / d / "d.npy", rows)
    rec = [open_file(tmp_path / d / "d.npy", encoder="e", modality="image").record()
           for d in ("a", "b")]  # fmt: skip
    assert rec[0] == rec[1] and rec[0]["name"] == "d.npy" and "sha256" in rec[0]
    np.save(tmp_path / "b" / "d.npy", rows[::-1])  # regenerated in place
    changed = open_file(tmp_path / "b" / "d.npy", encoder="e", modality="image").record()
    assert changed["sha256"] != rec[0]["sha256"]


def test_verify_names_a_changed_a_missing_and_an_unlisted_cell(study, tmp_path):
    _, out, _, _ = study
    folder = tmp_path / "copy"
    shutil.copytree(out, folder)
    assert verify_manifest(folder) == []
    a, b, c = _cell_files(folder)[:3]
    a.write_text(a.read_text().replace('"ok"', '"ok" ', 1))  # one byte more, still a cell
    b.unlink()
    shutil.copy(c, folder / ("extra_" + c.name))
    (folder / "collection.csv").write_text("tampered\n")
    (folder / "by_hand.json").write_text(json.dumps(_cell(config={"root": "/srv/data/x"})))
    problems = verify_manifest(folder)
    assert len(problems) == 6, problems
    assert any(a.name in p and "differs from its digest" in p for p in problems)
    assert any(b.name in p and "missing" in p for p in problems)
    assert any("extra_" + c.name in p and "not listed" in p for p in problems)
    assert any("collection.csv" in p and "output" in p for p in problems)
    assert "cell by_hand.json: not listed by any manifest" in problems
    assert "cell by_hand.json: field 'config.root' holds an absolute path" in problems


def test_verify_refuses_a_folder_whose_study_is_still_running_or_has_no_manifest(study, tmp_path):
    _, out, _, _ = study
    folder = tmp_path / "copy"
    shutil.copytree(out, folder)
    (m,) = (folder / MANIFEST_DIR).glob("*.json")
    m.write_text(json.dumps({**json.loads(m.read_text()), "status": "running", "ended": None}))
    (problem,) = verify_manifest(folder)
    assert problem == f"{MANIFEST_DIR}/{m.name}: the study has not ended (status 'running')"
    shutil.rmtree(folder / MANIFEST_DIR)
    assert verify_manifest(folder) == [
        f"no study manifest in {MANIFEST_DIR}/: the study wrote none"
    ]


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_a_study_stopped_by_ctrl_c_or_an_error_ends_its_manifest(tmp_path, monkeypatch, stop):
    from imsearch_align.study import run as run_module

    def halt(*args, **kwargs):
        raise stop("stopped in the first collection")

    monkeypatch.setattr(run_module, "_collection", halt)
    (tmp_path / "emb").mkdir()
    write_cone_pairs(tmp_path / "emb", 30)
    spec = StudySpec(embeddings=str(tmp_path / "emb"), stores=("exact",), sizes=(0,),
                     queries=10, out=str(tmp_path / "o"), truth_cache=str(tmp_path / "t"))  # fmt: skip
    if stop is KeyboardInterrupt:
        assert run_study(spec, progress=False).exit_code == 130
    else:
        with pytest.raises(RuntimeError, match="stopped in the first collection"):
            run_study(spec, progress=False)
    (m,) = _manifests(tmp_path / "o")
    assert m["ended"] >= m["started"] and m["cells"] == []
    if stop is KeyboardInterrupt:
        assert (m["status"], m["exit_code"], m["error"]) == ("interrupted", 130, None)
    else:
        assert m["status"] == "error"
        assert m["error"] == "RuntimeError: stopped in the first collection"


def test_git_state_without_git_is_none_not_an_error(monkeypatch):
    from imsearch_align.study.manifest import git_state

    monkeypatch.setenv("PATH", "")
    assert git_state() == {"commit": None, "dirty": None, "changes": None}


# -- the writer: no absolute path --------------------------------------------------------------


def _cell(**extra) -> dict:
    return {"kind": "collection_scale", "store": "exact", "method": "csa",
            "collection": {"size": 10}, "queries_per_s": 1.0, "metrics": {"t2i/HitRate@10": 1.0},
            **extra}  # fmt: skip


def test_write_cell_writes_paths_relative_to_the_study_folder_or_outside(tmp_path):
    out = tmp_path / "study"
    cell = write_cell(out / "c.json", _cell(
        config={"dataset_params": {"root": str(tmp_path / "full" / "shapes")}},
        command=["imsearch-align", "study", "--out", str(out), f"--truth-cache={tmp_path}/t",
                 "--shapes-root", "~/data/shapes", "--uri", "http://u@h:1/x", "C:\\data\\emb"],
        status={"state": "failed", "error": f"OSError: cannot open '{out}/.stores/ab/x.db'"},
    ))  # fmt: skip
    data = json.loads((out / "c.json").read_text())
    assert data["config"]["dataset_params"]["root"] == "<outside>/shapes"
    assert data["command"][2:] == ["--out", ".", "--truth-cache=<outside>/t", "--shapes-root",
                                   "<outside>/shapes", "--uri", "http://u@h:1/x",
                                   "<outside>/emb"]  # fmt: skip
    assert data["status"]["error"] == "OSError: cannot open '.stores/ab/x.db'"
    assert cell.record == data and load_cell(out / "c.json").record == data


def test_a_cell_with_an_absolute_path_the_writer_cannot_rewrite_is_refused(tmp_path):
    path = tmp_path / "c.json"
    # a key is never rewritten (two keys could become one): the guard names the field
    with pytest.raises(CellPathError, match=r"field 'timings\./data/a\.npy' holds an absolute"):
        write_cell(path, _cell(timings={"/data/a.npy": 1.0}))
    assert not path.exists()


def test_the_guard_fires_when_the_rewrite_is_bypassed(tmp_path, monkeypatch):
    """A writer that lost its rewrite (a future change) cannot write a machine path."""
    monkeypatch.setattr(study_cell, "portable_paths", lambda value, folder: value)
    record = _cell(config={"dataset_params": {"root": str(tmp_path / "shapes")}})
    with pytest.raises(ValueError, match=r"field 'config\.dataset_params\.root' holds an abs"):
        write_cell(tmp_path / "c.json", record)
    with pytest.raises(ValueError, match=r"field 'command\[1\]'"):
        write_cell(tmp_path / "c.json", _cell(command=["x", "--out=/srv/results"]))
    assert not (tmp_path / "c.json").exists()


# -- the manifest without a study: a server's store, secrets, bad input --------------------------


class _Runner:
    token = "t0k3n000"

    def __init__(self) -> None:
        self.wrote: list[str] = []

    def write(self, path, cell) -> None:
        self.wrote.append(Path(path).name)


def test_a_server_store_records_what_is_unreadable_and_what_the_user_declared(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(SETTINGS_ENV, '{"dataCoord.segment.maxSize": 1024}')
    uri = "http://root:s3cret@db.example:19530"
    spec = StudySpec(stores=("milvus",), uri=uri, embeddings=str(tmp_path / "e"),
                     out=str(tmp_path / "o"))  # fmt: skip
    manifest = StudyManifest.begin(spec)
    runner = _Runner()
    path = manifest.start(tmp_path / "o", runner)
    assert json.loads(path.read_text())["status"] == "running"
    runner.write(tmp_path / "o" / "x.json", {})
    assert runner.wrote == ["x.json"] and manifest.written == {"x.json"}
    error = RuntimeError(f"cannot reach {uri} from {tmp_path}/o/.stores")
    manifest.finish(StudyResult(spec=spec, out=tmp_path / "o"), error)
    text = path.read_text()
    assert "s3cret" not in text and str(tmp_path) not in text
    m = json.loads(text)
    assert m["status"] == "error" and m["exit_code"] is None
    assert m["error"] == "RuntimeError: cannot reach http://db.example:19530 from .stores"
    assert (
        m["spec"]["uri"] == "http://db.example:19530" and m["spec"]["embeddings"] == "<outside>/e"
    )
    settings = m["stores"]["milvus"]["settings"]
    assert settings == {"read": NOT_READABLE, "declared": {"dataCoord.segment.maxSize": 1024}}
    assert m["stores"]["milvus"]["server"] is True and m["cells"] == []


@pytest.mark.parametrize("value", ["not json", "[1, 2]", '{"a": {"b": 1}}'])
def test_bad_declared_server_settings_are_one_clear_error_before_anything_runs(
    tmp_path, monkeypatch, value
):
    monkeypatch.setenv(SETTINGS_ENV, value)
    spec = StudySpec(embeddings=str(tmp_path / "e"), stores=("exact",), out=str(tmp_path / "o"))
    with pytest.raises(StudySpecError, match=rf"{SETTINGS_ENV}: expected a JSON object"):
        run_study(spec, progress=False)
    assert not (tmp_path / "o").exists()
