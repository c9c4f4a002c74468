"""The study spec refuses bad input field by field, before any data is loaded: one line
naming the field, exit 2 on the command line; a spec file and the flags make one spec."""

from __future__ import annotations

import pytest

from imsearch_align.cli import main
from imsearch_align.framework.errors import ConfigError
from imsearch_align.study import StudySpec, StudySpecError


def test_defaults_resolve_as_the_old_script_did():
    spec = StudySpec()
    assert spec.store_modes() == ("faiss",) and spec.query_count() == 10_000
    assert spec.latency_count() == 1000 and spec.size_grid() == [0, 100_000, 1_000_000]
    assert [s.label for s in spec.index_settings()] == [
        "faiss:flat", "faiss:ivf_flat", "faiss:hnsw:M=16,efConstruction=100",
    ]  # fmt: skip
    quick = StudySpec(quick=True, stores=("faiss",))
    assert quick.query_count() == 1000 and quick.size_grid() == [0, 20_000]


def test_a_yaml_list_becomes_a_tuple_and_an_int_a_float():
    spec = StudySpec.from_dict({"methods": ["csa"], "concurrency_duration": 2, "k": [10, 1]})
    assert spec.methods == ("csa",) and spec.concurrency_duration == 2.0 and spec.ks() == (1, 10)
    assert StudySpec.from_dict(spec.to_dict()) == spec  # round trip


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"methdos": ["csa"]}, r"unknown field\(s\) 'methdos' \(did you mean 'methods'\?\)"),
        ({"queries": "many"}, r"--queries must be an int, got 'many' \(str\)"),
        ({"queries": 0}, r"--queries must be a positive integer, got 0"),
        ({"latency_queries": 0}, r"--latency-queries must be a positive integer, got 0"),
        ({"methods": "csa"}, r"--methods must be a list of str values, got 'csa'"),
        ({"skip_existing": "yes"}, r"--skip-existing must be a bool"),
        ({"stores": ["fiass"]}, r"unknown store 'fiass' \(did you mean 'faiss'\?\)"),
        ({"index": ["faiss:hnsw:nprobe=4"]}, r"nprobe is not a parameter of faiss index 'hnsw'"),
        ({"index": ["milvus-lite:FLAT"]}, r"store milvus-lite is not in --stores"),
        ({"filters": [1.5]}, r"--filters: selectivity must be in \(0, 1\]"),
        ({"filters": ["range"]}, r"--filters: unknown filter kind 'range'.*one of: label"),
        ({"filters": [["x"]]}, r"--filters must be a float or str, got \['x'\]"),
        ({"concurrency_duration": float("inf")}, r"--concurrency-duration must be a finite"),
        ({"concurrency": [0]}, r"--concurrency: levels: each concurrency must be an integer >= 1"),
        ({"deploy_delta": -0.1}, r"--deploy-delta: expected a number in \[0, 1\], got -0.1"),
        ({"deploy_delta": 1.5}, r"--deploy-delta: expected a number in \[0, 1\], got 1.5"),
        ({"method_params": {"asif": {"k": 1}}}, r"--method-param asif:\.\.\.: 'asif' is not in"),
        ({"embeddings": "x", "shapes": 10}, r"give one of --data, --embeddings, --shapes"),
        ({"directions": ["x2y"]}, r"--directions: 'x2y' is not one of t2i, i2t"),
        ({"measures": ["nDCG@20"]}, r"--measures nDCG@20: its cut-off 20 is above the largest"),
        ({"measures": ["HitRat@5"]}, r"--measures: measures: unknown measure 'HitRat@5'"),
        ({"measures": ["Diversity@5"]}, r"--measures Diversity@5: it needs the documents"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(fields, message):
    with pytest.raises(StudySpecError, match=message) as info:
        StudySpec.from_dict(fields)
    assert isinstance(info.value, ConfigError) and "\n" not in str(info.value)


def _run(argv, capsys):
    code = main(["study", *argv])
    return code, capsys.readouterr().err


def test_the_command_refuses_a_bad_spec_file_before_loading_data(tmp_path, capsys):
    bad = tmp_path / "study.yaml"
    bad.write_text("shapes: 10\nmethdos: [csa]\n")
    code, err = _run(["--config", str(bad), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "did you mean 'methods'" in err and err.count("\n") == 1
    assert not (tmp_path / "o").exists()  # nothing written
    code, err = _run(["--index", "faiss:annoy", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "store faiss has no index 'annoy'" in err
    code, err = _run(["--concurrency-duration", "inf"], capsys)
    assert code == 2 and "finite" in err
    code, err = _run(["--deploy-delta", "-0.5"], capsys)
    assert code == 2 and "--deploy-delta: expected a number in [0, 1]" in err


def test_flags_given_win_over_the_spec_file(tmp_path):
    from imsearch_align.cli.app import build_parser
    from imsearch_align.experiment.config_file import read_config_file
    from imsearch_align.study.flags import spec_mapping

    f = tmp_path / "s.yaml"
    f.write_text("methods: [csa]\nqueries: 50\nmethod_params: {csa: {eps: 0.01}}\n")
    args = build_parser().parse_args(
        ["study", "--queries", "70", "--method-param", "csa:sim_dim=8"]
    )
    spec = StudySpec.from_dict(spec_mapping(args, read_config_file(f)))
    assert spec.methods == ("csa",) and spec.queries == 70
    assert dict(spec.method_params["csa"]) == {"eps": 0.01, "sim_dim": 8}


def test_the_recorded_command_masks_the_uri_password_and_gives_the_spec_back():
    from imsearch_align.cli.app import build_parser
    from imsearch_align.study.flags import spec_mapping

    spec = StudySpec(stores=("milvus",), uri="http://root:s3cret@127.0.0.1:19530",
                     sizes=(0, 10), filters=(0.5,), method_params={"csa": {"eps": 0.01}})  # fmt: skip
    words = spec.command()
    assert "s3cret" not in " ".join(words) and "s3cret" not in str(spec.to_dict())
    back = StudySpec.from_dict(spec_mapping(build_parser().parse_args(words[1:])))
    assert back.replace(uri=spec.uri) == spec


def test_a_label_filter_on_data_without_labels_is_refused_before_any_cell(tmp_path):
    from imsearch_align.study import run_study
    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 40)
    spec = StudySpec(embeddings=str(emb), filters=(0.5, "label"), stores=("exact",),
                     sizes=(0,), queries=10, out=str(tmp_path / "o"),
                     truth_cache=str(tmp_path / "t"))  # fmt: skip
    assert spec.filters == (0.5, "label")
    with pytest.raises(StudySpecError, match=r"--filters: 'label' needs the dataset's class"):
        run_study(spec, progress=False)
    assert not (tmp_path / "o").exists()


def test_a_measure_chosen_in_the_spec_reaches_the_cells_and_the_csv(tmp_path):
    import pandas as pd

    from imsearch_align.study import run_study
    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    spec = StudySpec(embeddings=str(emb), stores=("exact",), methods=("procrustes",),
                     sizes=(0,), queries=30, latency_queries=3, k=(1, 10),
                     measures=("P@5", "RR@10", "HitRate@10"), out=str(tmp_path / "o"),
                     truth_cache=str(tmp_path / "t"))  # fmt: skip
    result = run_study(spec, progress=False)
    (cell,) = result.cells
    assert {"t2i/P@5", "t2i/RR@10", "t2i/HitRate@10"} <= set(cell["metrics"])
    assert cell["metrics"]["t2i/RR@10"] == cell["exact_metrics"]["t2i/RR@10"]  # exact store
    df = pd.read_csv(tmp_path / "o" / "collection.csv")
    assert {"P@5", "P@5 exact", "RR@10"} <= set(df.columns)


def test_an_unreachable_server_fails_the_study_lists_its_cells_and_keeps_no_password(
    tmp_path, capsys
):
    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 40)
    out = tmp_path / "o"
    code = main(["study", "--embeddings", str(emb), "--stores", "milvus", "exact",
                 "--uri", "http://root:s3cret@127.0.0.1:9", "--index", "milvus:FLAT",
                 "exact:flat", "--methods", "procrustes", "--sizes", "0", "--queries", "10",
                 "--latency-queries", "2", "--out", str(out), "--truth-cache",
                 str(tmp_path / "t"), "--no-progress"])  # fmt: skip
    printed = capsys.readouterr()
    assert code == 1, printed.out + printed.err
    assert "1/2 cells ok" in printed.out and "milvus:      unreachable" in printed.out
    assert "failed:      collection_scale procrustes milvus FLAT" in printed.out
    for f in out.rglob("*"):
        if f.is_file():
            assert b"s3cret" not in f.read_bytes(), f


@pytest.mark.parametrize("name", ["out", "truth_cache", "cache_dir"])
def test_an_output_folder_under_a_file_is_refused_before_any_work(tmp_path, name):
    (tmp_path / "file").write_text("x")
    with pytest.raises(StudySpecError, match=r"cannot be made: .* is a file, not a folder"):
        StudySpec(**{name: str(tmp_path / "file" / "sub")})
    with pytest.raises(StudySpecError, match=r"is a file, not a folder"):
        StudySpec(**{name: str(tmp_path / "file")})


def test_more_support_pairs_than_the_data_holds_is_refused_before_any_fit(tmp_path):
    from imsearch_align.study import run_study
    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 40)
    spec = StudySpec(embeddings=str(emb), n=(10, 100_000), stores=("exact",), sizes=(0,),
                     out=str(tmp_path / "o"), truth_cache=str(tmp_path / "t"))  # fmt: skip
    with pytest.raises(StudySpecError, match=r"--n: n_support=100000 is larger than the"):
        run_study(spec, progress=False)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("inf", r"1 row\(s\) with NaN or infinite values"),
        ("zero", r"1 all-zero row\(s\)"),
        ("empty", r"--distractors '.*empty\.npy': cannot be read: EOFError"),
    ],
)
def test_a_bad_distractor_file_is_refused_before_any_fit(tmp_path, capsys, case, message):
    import re

    import numpy as np

    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 40)
    rows = np.load(emb / "image.npy")[:30].copy()
    path = tmp_path / f"{case}.npy"
    if case == "inf":
        rows[3, 0] = np.inf
    elif case == "zero":
        rows[5] = 0
    np.save(path, rows) if case != "empty" else path.write_bytes(b"")
    code = main(["study", "--embeddings", str(emb), "--distractors", str(path), "--stores",
                 "exact", "--sizes", "0", "20", "--queries", "10", "--out", str(tmp_path / "o"),
                 "--truth-cache", str(tmp_path / "t"), "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and re.search(message, err), err
    assert "fitting" not in err and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_sigterm_keeps_the_finished_cells_prints_the_table_and_exits_143(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    out = tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, "-m", "imsearch_align.cli", "study", "--embeddings", str(emb),
         "--stores", "exact", "--methods", "procrustes", "--sizes", "0", "--queries", "20",
         "--latency-queries", "3", "--concurrency", "1", "--concurrency-duration", "60",
         "--out", str(out), "--truth-cache", str(tmp_path / "t"), "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(out.glob("image_*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # into the 60 s concurrency level
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert "1/1 cells ok" in stdout and "interrupted after" in stdout
    assert "terminated (SIGTERM)" in stderr and "--skip-existing" in stderr
    assert len(list(out.glob("image_*.json"))) == 1 and (out / "collection.csv").is_file()


def test_the_study_help_prints_every_flag(capsys):
    """argparse formats help texts with %: a field's help holding one ("95 %") must not
    crash --help."""
    assert main(["study", "--help"]) == 0
    out = capsys.readouterr().out
    assert "--deploy-delta" in out and "95 %" in out and "--repeats" in out and "--control" in out
