"""Linear probe: beats chance on synthetic classes, selects C on val, errors;
the ``clip_benchmark`` procedure equals CLIP_benchmark's own function
(vendored as a reference in ``_clip_benchmark_linear_probe_ref.py``)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score

from imsearch_align.diagnostics.linear_probe import linear_probe


def _classes(n_per: int, n_cls: int, d: int, seed: int, spread: float = 1.0):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((n_cls, d))
    y = np.repeat(np.arange(n_cls), n_per)
    return centres[y] + spread * rng.standard_normal((len(y), d)), y


def test_beats_chance_and_matches_a_direct_refit():
    Xtr, ytr = _classes(40, 6, 16, 0)
    Xva, yva = _classes(10, 6, 16, 1)
    Xte, yte = _classes(30, 6, 16, 2)
    res = linear_probe(Xtr, ytr, Xte, yte, val_x=Xva, val_y=yva, seed=0)
    assert res.acc1 > 0.6  # chance is 1/6
    assert res.acc5 >= res.acc1
    assert (res.n_train, res.n_val, res.n_test) == (240, 60, 180)
    # Oracle: sklearn refit on train + val with the chosen C, normalised rows.
    norm = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    clf = LogisticRegression(C=res.C, max_iter=1000).fit(
        norm(np.vstack([Xtr, Xva])), np.r_[ytr, yva]
    )
    pred = clf.predict(norm(Xte))
    assert res.acc1 == pytest.approx(np.mean(pred == yte))
    assert res.mean_per_class_recall == pytest.approx(balanced_accuracy_score(yte, pred))


def test_fewshot_is_seeded_and_acc5_nan_below_five_classes():
    X, y = _classes(30, 3, 8, 3)
    Xte, yte = _classes(20, 3, 8, 4)
    other = linear_probe(X, y, Xte, yte, seed=6, fewshot_k=4)
    a = linear_probe(X, y, Xte, yte, seed=5, fewshot_k=4)
    b = linear_probe(X, y, Xte, yte, seed=5, fewshot_k=4)
    assert a.acc1 == b.acc1 and a.C == b.C and a.mean_per_class_recall == b.mean_per_class_recall
    assert a.n_train + a.n_val == 12 and a.fewshot_k == 4
    assert np.isnan(a.acc5)
    assert (other.acc1, other.val_acc1) != (a.acc1, a.val_acc1)  # another sample
    assert a.acc1 > 1 / 3


def test_single_class_raises():
    X, _ = _classes(10, 2, 4, 0)
    with pytest.raises(ValueError, match="at least 2 classes, got a single class"):
        linear_probe(X, np.zeros(len(X), int), X, np.zeros(len(X), int), seed=0)


def test_fewshot_larger_than_a_class_raises():
    X, y = _classes(3, 2, 4, 0)
    with pytest.raises(ValueError, match="fewshot_k = 5 but class 0 has only 3"):
        linear_probe(X, y, X, y, seed=0, fewshot_k=5)


def test_bad_shapes_raise():
    X, y = _classes(5, 2, 4, 0)
    with pytest.raises(ValueError, match="train_y must have shape"):
        linear_probe(X, y[:-1], X, y, seed=0)
    with pytest.raises(ValueError, match="test_x must have dimension 4"):
        linear_probe(X, y, X[:, :3], y, seed=0)


# ------------------------------------------------------------- procedure="clip_benchmark"

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
import _clip_benchmark_linear_probe_ref as reference  # noqa: E402

sys.path.remove(str(Path(__file__).parent))

FAST = {"lr": 0.1, "epochs": 2, "batch_size": 16}  # CLIP_benchmark: 10 epochs, batches of 64


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny layers train faster on one thread (and the tests share few cores)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _unit(X):
    """The features both sides train on: L2-normalised in float64, then float32."""
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def _reference(train, val, test, *, fewshot_k, seed, perm_seed):
    """CLIP_benchmark's ``evaluate`` on these features; its first step shuffles the
    training rows with the global torch generator, seeded here with ``perm_seed``."""
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
    torch.manual_seed(perm_seed)
    return reference.evaluate(
        t(_unit(train[0])), t(train[1]),
        None if val is None else t(_unit(val[0])), None if val is None else t(val[1]),
        t(_unit(test[0])), t(test[1]),
        fewshot_k, FAST["batch_size"], FAST["lr"], FAST["epochs"], seed=seed,
    )  # fmt: skip


def _reference_rows(y, fewshot_k, perm_seed):
    """The training rows, in order, that the reference trains on (its few-shot walk)."""
    torch.manual_seed(perm_seed)
    kept, counts = [], {}
    for p in torch.randperm(len(y)).tolist():
        if fewshot_k < 0 or counts.get(y[p], 0) < fewshot_k:
            counts[y[p]] = counts.get(y[p], 0) + 1
            kept.append(p)
    return np.array(kept)


def _assert_equal(ours, ref):
    assert ours.acc1 == ref["lp_acc1"]
    assert ours.mean_per_class_recall == ref["lp_mean_per_class_recall"]
    assert ours.weight_decay == ref["weight_decay"]
    if np.isnan(ref["lp_acc5"]):
        assert np.isnan(ours.acc5)
    else:
        assert ours.acc5 == ref["lp_acc5"]


@pytest.mark.parametrize("with_val", [True, False])
def test_clip_benchmark_equals_its_reference_on_the_same_features(with_val):
    train, val, test = (
        _classes(20, 7, 16, 0, 1.5),
        _classes(5, 7, 16, 1, 1.5),
        _classes(10, 7, 16, 2, 1.5),
    )
    ref = _reference(train, val if with_val else None, test, fewshot_k=-1, seed=5, perm_seed=11)
    rows = _reference_rows(train[1], -1, perm_seed=11)
    names = np.array([f"class{c}" for c in range(7)])  # any labels: coded in sorted order
    ours = linear_probe(
        train[0][rows], names[train[1][rows]], test[0], names[test[1]],
        val_x=val[0] if with_val else None, val_y=names[val[1]] if with_val else None,
        val_proportion=None, seed=5, procedure="clip_benchmark", **FAST,
    )  # fmt: skip
    _assert_equal(ours, ref)
    assert ours.procedure == "clip_benchmark" and np.isnan(ours.C)
    assert (ours.n_train, ours.n_val) == (140, 35 if with_val else 0)
    if with_val:
        assert ours.acc1 > 0.5 and ours.acc5 >= ours.acc1 and 0 < ours.val_acc1 <= 1
        assert ours.weight_decay not in np.logspace(-6, 2, 7)  # the refined search ran
    else:
        assert ours.weight_decay == 0 and np.isnan(ours.val_acc1)


def test_clip_benchmark_fewshot_equals_its_reference_and_keeps_val_apart():
    from imsearch_align.diagnostics.linear_probe_torch import clip_benchmark_probe

    train, val, test = (
        _classes(20, 5, 16, 3, 1.5),
        _classes(6, 5, 16, 4, 1.5),
        _classes(8, 5, 16, 5, 1.5),
    )
    ref = _reference(train, val, test, fewshot_k=4, seed=2, perm_seed=7)
    rows = _reference_rows(train[1], 4, perm_seed=7)
    ours = clip_benchmark_probe(
        _unit(train[0][rows]), train[1][rows], _unit(val[0]), val[1], _unit(test[0]), test[1],
        n_classes=5, fewshot=True, seed=2, **FAST,
    )  # fmt: skip
    _assert_equal(ours, ref)
    assert np.isnan(ours.acc5)  # top-5 from 6 classes only


def test_clip_benchmark_is_seeded_on_the_sklearn_splits_and_leaves_torch_rng_alone():
    X, y = _classes(20, 6, 8, 6)
    Xte, yte = _classes(10, 6, 8, 7)
    state = torch.get_rng_state()
    a = linear_probe(X, y, Xte, yte, seed=3, procedure="clip_benchmark", **FAST)
    assert torch.equal(torch.get_rng_state(), state)
    b = linear_probe(X, y, Xte, yte, seed=3, procedure="clip_benchmark", **FAST)
    np.testing.assert_equal(dataclasses.astuple(a), dataclasses.astuple(b))  # nan C on both
    s = linear_probe(X, y, Xte, yte, seed=3)  # the same validation split (val_proportion 0.2)
    assert (a.n_train, a.n_val) == (s.n_train, s.n_val) == (96, 24)
    assert np.isnan(s.weight_decay) and s.procedure == "sklearn"
    few = linear_probe(X, y, Xte, yte, seed=3, fewshot_k=3, procedure="clip_benchmark", **FAST)
    assert (few.n_train, few.n_val) == (18, 24)  # validation drawn first, apart from the shots


def test_unknown_procedure_names_the_argument_and_the_choices():
    X, y = _classes(5, 2, 4, 0)
    with pytest.raises(
        ValueError, match=r"procedure must be one of 'sklearn', 'clip_benchmark', got 'sgd'"
    ):
        linear_probe(X, y, X, y, seed=0, procedure="sgd")
    with pytest.raises(ValueError, match=r"val_proportion=None \(no validation split\) is for"):
        linear_probe(X, y, X, y, seed=0, val_proportion=None)


# ------------------------------------------------------------- the task parameter

TASKS_DIR = str(Path(__file__).parents[1] / "experiment")


@pytest.fixture
def tiny_tasks():
    """The tiny-tasks dataset of tests/experiment, registered for one test."""
    import importlib

    from imsearch_align.framework.registry import DATASETS, ENCODERS

    sys.path.insert(0, TASKS_DIR)
    try:
        mod = importlib.import_module("tiny_tasks_plugin")
        if "bow-test" not in ENCODERS:  # imported before, then unregistered
            mod = importlib.reload(mod)
        yield mod
    finally:
        sys.path.remove(TASKS_DIR)
        for reg, name in ((DATASETS, "tiny-tasks"), (ENCODERS, "bow-test")):
            if name in reg:
                reg.unregister(name)


def _probe_config(**task_params):
    from imsearch_align.experiment import ExperimentConfig

    return ExperimentConfig(
        dataset="tiny-tasks", dataset_params={"kind": "classes"}, image_encoder=None,
        text_encoder="bow-test", method="identity", store="exact", task="linear_probe",
        cache_dir=None, k_values=(1, 5), task_params=task_params,
    )  # fmt: skip


def test_task_records_the_procedure_and_its_definition(tiny_tasks):
    from imsearch_align.diagnostics.linear_probe import PROCEDURES
    from imsearch_align.experiment import run_experiment

    r = run_experiment(_probe_config(procedure="clip_benchmark"), progress=False)
    assert r.status.ok
    assert r.task.details["params"]["procedure"] == "clip_benchmark"
    assert r.task.details["procedure"] == PROCEDURES["clip_benchmark"]
    for space in ("raw", "aligned"):
        assert r.metric(f"linear_probe/{space}_acc1") == 1.0
        assert "weight_decay" in r.task.details[space] and "C" not in r.task.details[space]


def test_task_refuses_an_unknown_procedure_before_any_work(tiny_tasks):
    from imsearch_align.experiment import ConfigError, run_experiment

    tiny_tasks.ENCODE_CALLS.clear()
    with pytest.raises(
        ConfigError,
        match=r"task 'linear_probe' parameter procedure must be one of 'sklearn', "
        r"'clip_benchmark', got 'sgd'",
    ):
        run_experiment(_probe_config(procedure="sgd"), progress=False)
    assert tiny_tasks.ENCODE_CALLS == []
