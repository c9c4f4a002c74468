"""ExperimentConfig: every field typed and checked, digests for in-memory inputs, templates,
and every field a flag of ``eval`` and ``sweep``."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from imsearch_align.experiment import ConfigError, ExperimentConfig, check_template


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("k_values", "15", "'k_values' must be a list of int"),
        ("k_values", [1, "5"], "'k_values' must be a list of int"),
        ("k_values", True, "'k_values'"),
        ("ann_fidelity", "no", "'ann_fidelity' must be bool, got str 'no'"),
        ("diagnostics", "false", "'diagnostics' must be bool, got str 'false'"),
        ("diagnostics", 1, "'diagnostics' must be bool, got int 1"),
        ("cache_dir", False, "'cache_dir' must be str or null, got bool False"),
        ("seed", 1.5, "'seed' must be int, got float 1.5"),
        ("seed", True, "'seed' must be int, got bool True"),
        ("n_support", "100", "'n_support' must be int or null"),
        ("method_params", ["dim", 8], "'method_params' must be a mapping"),
        ("directions", ["t2i", "x2y"], "'directions' must be one of ['t2i', 'i2t'], got 'x2y'"),
        ("ensemble", "maen", "did you mean 'mean'"),
        ("batch_size", 0, "batch_size must be"),
        ("workers", -2, "workers must be"),
        ("k_values", [], "at least one cutoff"),
        ("perturbation_params", {"typo": {"rate": 0.2}}, "not in perturbations"),
    ],
)
def test_a_wrong_type_or_value_names_the_field(field, value, needle):
    with pytest.raises(ConfigError) as err:
        ExperimentConfig(**{field: value})
    assert needle in str(err.value)
    with pytest.raises(ConfigError):  # the same from a mapping (a YAML/JSON file)
        ExperimentConfig.from_dict({field: value})


def test_a_lone_value_is_accepted_where_a_list_is_meant():
    cfg = ExperimentConfig.from_dict({"k_values": 10, "directions": "t2i"})
    assert cfg.k_values == (10,) and cfg.directions == ("t2i",)
    # Lists are normalised: sorted unique cutoffs, numpy ints accepted.
    assert ExperimentConfig(k_values=np.array([10, 1, 5, 1])).k_values == (1, 5, 10)


def test_yaml_file_values_are_checked_like_python(tmp_path):
    p = tmp_path / "cfg.yaml"
    p.write_text("k_values: '15'\n")
    with pytest.raises(ConfigError, match="'k_values'"):
        ExperimentConfig.from_file(p)
    p.write_text("ann_fidelity: no\nk_values: 10\n")  # YAML's `no` is a real boolean
    assert ExperimentConfig.from_file(p).ann_fidelity is False
    p.write_text("methd: csa\n")
    with pytest.raises(ConfigError, match="did you mean 'method'"):
        ExperimentConfig.from_file(p)


def test_round_trip_and_key():
    cfg = ExperimentConfig(method="asif", method_params={"non_zeros": 8}, k_values=(1, 10))
    again = ExperimentConfig.from_dict(cfg.to_dict())
    assert again == cfg and again.key() == cfg.key()
    assert cfg.replace(seed=1).key() != cfg.key()


def test_in_memory_inputs_are_recorded_by_content_digest():
    a = pd.DataFrame({"caption": ["a red circle", "a blue square"], "image": ["x.png", "y.png"]})
    b = a.assign(caption=["a red circle", "a green square"])
    ca = ExperimentConfig(dataset="hf", dataset_params={"data": a})
    cb = ExperimentConfig(dataset="hf", dataset_params={"data": b})
    rec = ca.to_dict()["dataset_params"]["data"]
    assert rec["type"] == "pandas.DataFrame" and rec["rows"] == 2 and len(rec["sha256"]) == 64
    # Same shape, different content: different keys (repr-based keys collided).
    assert ca.key() != cb.key()
    assert ExperimentConfig(dataset="hf", dataset_params={"data": a.copy()}).key() == ca.key()
    # A long list (a caption-to-image map) is a digest, not 158,915 inline numbers.
    big = ExperimentConfig(dataset="precomputed", dataset_params={"text_image": list(range(5000))})
    assert len(str(big.to_dict()["dataset_params"])) < 200
    arr = ExperimentConfig(dataset="precomputed", dataset_params={"text_image": np.arange(5000)})
    assert arr.to_dict()["dataset_params"]["text_image"]["type"] == "numpy.ndarray"
    # Something that cannot be recorded is named before any work.
    with pytest.raises(ConfigError, match="cannot record a object"):
        ExperimentConfig(dataset="hf", dataset_params={"data": object()})


def test_secrets_never_reach_the_record():
    cfg = ExperimentConfig(
        store="milvus", store_params={"uri": "http://127.0.0.1:1", "token": "root:Milvus"}
    )
    d = cfg.to_dict()
    assert d["store_params"] == {"uri": "http://127.0.0.1:1", "token": "***"}
    assert "root:Milvus" not in str(d)


@pytest.mark.parametrize(
    "template, needle",
    [
        ("{}.json", "positional field"),
        ("{0}.json", "positional field"),
        ("{dataset.__class__}.json", "unknown field {dataset.__class__}"),
        ("{dataset[0]}.json", "unknown field"),
        ("{datset}.json", "did you mean {dataset}"),
        ("{dataset}_{method}", "must end in '.json'"),
        ("{dataset!r}.json", "no conversion"),
        ("/abs/{dataset}.json", "relative path"),
        ("../{dataset}.json", "relative path"),
        ("{dataset", "malformed"),
    ],
)
def test_bad_output_templates_are_rejected_before_work(template, needle):
    with pytest.raises(ConfigError, match=None) as err:
        check_template(template)
    assert needle in str(err.value)


def test_template_with_folders():
    cfg = ExperimentConfig(dataset="coco", method="csa", store="faiss", n_support=100)
    assert cfg.output_name("sub/{dataset}/{method}_{n}.json") == "sub/coco/csa_100.json"
    assert cfg.output_name("{key}.json") == f"{cfg.key()}.json"


# ----------------------------------------------------------------------------- flags


def _config_of(*argv: str, command: str = "eval") -> ExperimentConfig:
    """The config ``imsearch-align COMMAND ARGV`` would run (flags over ``--config``)."""
    from imsearch_align.cli import build_parser
    from imsearch_align.cli.config_flags import GIVEN, config_mapping, given_flags

    args = build_parser().parse_args([command, *argv])
    setattr(args, GIVEN, given_flags(argv))
    data, _ = config_mapping(args, swept=("n_support",) if command == "sweep" else ())
    return ExperimentConfig.from_dict(data)


def test_every_config_field_is_a_flag_of_eval_and_sweep():
    """A field and its flag are one place: every field has one, made from the field."""
    import argparse

    from imsearch_align.cli import build_parser
    from imsearch_align.cli.config_flags import config_flags

    flags = config_flags()
    assert [cf.field for cf in flags] == ExperimentConfig.field_names()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("eval", "sweep"):
        options = {o for a in sub.choices[command]._actions for o in a.option_strings}
        assert {f"--{cf.flag}" for cf in flags} <= options, command
    assert {cf.field: cf.flag for cf in flags}["k_values"] == "k"
    assert {cf.field: cf.flag for cf in flags}["method_params"] == "method-param"


def test_tie_tolerance_has_a_flag(tmp_path):
    assert _config_of().tie_tolerance is None
    assert _config_of("--tie-tolerance", "1e-6").tie_tolerance == 1e-6
    assert _config_of("--tie-tolerance", "0", command="sweep").tie_tolerance == 0.0
    cfg = tmp_path / "c.yaml"
    cfg.write_text("tie_tolerance: 0.1\n")
    assert _config_of("--config", str(cfg)).tie_tolerance == 0.1
    assert _config_of("--config", str(cfg), "--tie-tolerance", "none").tie_tolerance is None
    with pytest.raises(ConfigError, match="'tie_tolerance' must be a finite number >= 0"):
        _config_of("--tie-tolerance", "-1")


# ----------------------------------------------------------------------------- config files


def _bomb(levels: int = 9) -> str:
    """A YAML "billion laughs": each level names the one below nine times (9**9 values)."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "dataset_params:\n" + "".join(f"  {ln}\n" for ln in lines)


@pytest.mark.parametrize(
    "name, text, needle",
    [
        ("empty.yaml", "# only a comment\n", "is empty; expected a mapping of config fields"),
        ("empty.json", "  \n", "is empty; expected a mapping of config fields"),
        ("dup.yaml", "method: csa\nstore: exact\nmethod: asif\n",
         "has the key 'method' twice in one mapping (lines 1 and 3)"),
        ("dup.yml", "dataset_params:\n  n_images: 10\n  n_images: 20\n", "key 'n_images' twice"),
        ("dup.json", '{"method": "csa", "method": "asif"}', "has the key 'method' twice"),
        ("bomb.yaml", _bomb(), "expands its YAML aliases to more than 10000 values"),
        ("loop.yaml", "dataset_params: &a {x: *a}\n", "alias that contains itself"),
    ],
)  # fmt: skip
def test_a_config_file_that_cannot_be_meant_is_refused_naming_it(tmp_path, name, text, needle):
    """An empty file, a key given twice (the last silently won) and an alias bomb (a
    1 KB file that ran for minutes) are refused before the config is built."""
    import time

    from imsearch_align.experiment.config_file import ConfigFileError

    p = tmp_path / name
    p.write_text(text)
    t = time.perf_counter()
    with pytest.raises(ConfigFileError, match=re.escape(needle)) as err:
        ExperimentConfig.from_file(p)
    assert time.perf_counter() - t < 5
    assert str(p) in str(err.value)


def test_a_config_file_that_is_a_directory_or_too_large_is_refused(tmp_path):
    from imsearch_align.experiment.config_file import (
        MAX_CONFIG_BYTES,
        ConfigFileError,
        read_config_file,
    )

    with pytest.raises(ConfigFileError, match="is a directory; expected a YAML or JSON file"):
        read_config_file(tmp_path)
    big = tmp_path / "big.json"
    big.write_text('{"name": "' + "x" * MAX_CONFIG_BYTES + '"}')
    with pytest.raises(ConfigFileError, match=f"expected at most {MAX_CONFIG_BYTES}"):
        read_config_file(big)


def test_yaml_anchors_and_merge_keys_still_work(tmp_path):
    p = tmp_path / "ok.yaml"
    p.write_text(
        "dataset: synthetic\ndataset_params: &d {n_images: 200, d_image: 8}\n"
        "support_dataset: synthetic\nsupport_dataset_params: {<<: *d, n_images: 100}\n"
    )
    cfg = ExperimentConfig.from_file(p)
    assert cfg.support_dataset_params == {"n_images": 100, "d_image": 8}
    assert cfg.dataset_params == {"n_images": 200, "d_image": 8}
