"""Every task end to end with a known answer, in Python and through the CLI.

The data (tests/experiment/tiny_tasks_plugin.py) is built so that, with the
``identity`` method, each task's answer is known exactly: zero-shot
accuracy 1, multi-label mAP 1, a separable linear probe, one-to-one
matching 1, and retrieval captioning that finds an identical caption
(BLEU-4 = 100).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.experiment import ExperimentConfig, run_experiment
from imsearch_align.experiment.tasks import TaskUnsupportedError
from imsearch_align.experiment.tasks.matching import hungarian_accuracy
from imsearch_align.framework.registry import DATASETS, ENCODERS, TASKS

HERE = str(Path(__file__).parent)


@pytest.fixture(scope="module", autouse=True)
def tiny_tasks_plugin():
    """Register tiny-tasks and bow-test for this module only: other tests list
    the registries, so the names are removed again afterwards."""
    import importlib

    sys.path.insert(0, HERE)
    try:
        mod = importlib.import_module("tiny_tasks_plugin")
        if "bow-test" not in ENCODERS:  # imported before, then unregistered
            mod = importlib.reload(mod)
        yield mod
    finally:
        sys.path.remove(HERE)
        for reg, name in ((DATASETS, "tiny-tasks"), (ENCODERS, "bow-test")):
            if name in reg:
                reg.unregister(name)


CLASSES = {"kind": "classes"}
ITEMS = {"kind": "items", "n_items": 20}


def _cfg(
    task: str, dataset_params: dict, *, text_params: dict | None = None, **kw
) -> ExperimentConfig:
    return ExperimentConfig(
        dataset="tiny-tasks",
        dataset_params=dataset_params,
        image_encoder=None,
        text_encoder="bow-test",
        text_encoder_params=text_params or {},
        method="identity",
        store="exact",
        task=task,
        cache_dir=None,
        k_values=(1, 5),
        **kw,
    )


def test_every_task_is_registered():
    assert set(TASKS.names()) >= {
        "retrieval",
        "classification",
        "matching",
        "multilabel",
        "linear_probe",
        "captioning",
    }


def test_classification_on_separable_prompts_is_exact():
    r = run_experiment(_cfg("classification", CLASSES), progress=False)
    assert r.status.ok
    assert r.metric("classification/acc1") == 1.0 and r.metric("classification/acc5") == 1.0
    assert r.metric("classification/mean_per_class_recall") == 1.0
    assert "not zero-shot" in r.task.details["protocol"]


def test_multilabel_map_is_one_when_each_image_is_its_label_set():
    r = run_experiment(_cfg("multilabel", {**CLASSES, "multi": True}), progress=False)
    assert r.metric("multilabel/mAP") == pytest.approx(1.0, abs=1e-12)
    # Every image's two classes rank first: P@2 would be 1; at k=1 precision is 1, R@1 0.5.
    assert r.metric("multilabel/P@1") == 1.0 and r.metric("multilabel/R@1") == pytest.approx(0.5)


def test_linear_probe_separates_separable_classes_raw_and_aligned():
    r = run_experiment(_cfg("linear_probe", CLASSES), progress=False)
    for space in ("raw", "aligned"):
        assert r.metric(f"linear_probe/{space}_acc1") == 1.0
        assert r.metric(f"linear_probe/{space}_acc5") == 1.0


def test_matching_on_identical_spaces_is_exact_dense_and_through_the_store():
    tp = {"kind": "items", "n_items": 20}
    dense = run_experiment(
        _cfg("matching", {**ITEMS, "twins": False}, text_params=tp), progress=False
    )
    assert (
        dense.metric("matching/accuracy") == 1.0 and dense.metric("matching/top1_accuracy") == 1.0
    )
    sparse = run_experiment(
        _cfg(
            "matching",
            {**ITEMS, "twins": False},
            text_params=tp,
            task_params={"dense_limit": 4, "candidates": 3},
        ),
        progress=False,
    )
    assert sparse.metric("matching/accuracy") == 1.0
    assert "store candidates" in sparse.task.details["path"]


def test_hungarian_beats_greedy_on_a_known_matrix():
    # Greedy argmax sends both rows to column 0; the assignment must use the diagonal.
    s = np.array([[0.9, 0.8], [0.85, 0.1]])
    acc, assigned = hungarian_accuracy(s)
    assert acc == 0.0 and assigned.tolist() == [1, 0]  # max-sum = 0.8 + 0.85
    acc, _ = hungarian_accuracy(np.eye(5) + 0.01)
    assert acc == 1.0


def test_captioning_finds_the_identical_twin_caption():
    tp = {"kind": "items", "n_items": 20}
    r = run_experiment(_cfg("captioning", ITEMS, text_params=tp), progress=False)
    assert r.metric("captioning/bleu4") == pytest.approx(100.0)
    assert r.task.details["n_images"] == 20


@pytest.mark.parametrize(
    "task, params, needle",
    [
        ("multilabel", CLASSES, "needs label sets"),
        ("classification", {**ITEMS}, "needs class labels"),
        ("linear_probe", {**ITEMS}, "needs class labels"),
    ],
)
def test_a_task_the_dataset_cannot_serve_fails_before_encoding(
    task, params, needle, tiny_tasks_plugin
):
    tiny_tasks_plugin.ENCODE_CALLS.clear()
    with pytest.raises(TaskUnsupportedError, match=needle):
        run_experiment(
            _cfg(task, params, text_params={"kind": params.get("kind", "classes")}), progress=False
        )
    assert tiny_tasks_plugin.ENCODE_CALLS == []


def test_unknown_task_and_task_param():
    from imsearch_align.experiment import ConfigError
    from imsearch_align.framework.registry import UnknownNameError

    with pytest.raises(UnknownNameError, match="Did you mean 'matching'"):
        run_experiment(_cfg("matchin", CLASSES), progress=False)
    with pytest.raises(ConfigError, match="did you mean 'candidates'"):
        run_experiment(_cfg("matching", CLASSES, task_params={"candidate": 3}), progress=False)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "imsearch_align.cli", "--plugin", "tiny_tasks_plugin", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


@pytest.mark.parametrize(
    "task, dparams, tparams, metric, want",
    [
        (
            "retrieval",
            ["kind=items", "n_items=10", "twins=false"],
            ["kind=items", "n_items=10"],
            "t2i/HitRate@1",
            1.0,
        ),
        ("classification", ["kind=classes"], [], "classification/acc1", 1.0),
        ("multilabel", ["kind=classes", "multi=true"], [], "multilabel/mAP", 1.0),
        ("linear_probe", ["kind=classes"], [], "linear_probe/aligned_acc1", 1.0),
        (
            "matching",
            ["kind=items", "n_items=10", "twins=false"],
            ["kind=items", "n_items=10"],
            "matching/accuracy",
            1.0,
        ),
        (
            "captioning",
            ["kind=items", "n_items=10"],
            ["kind=items", "n_items=10"],
            "captioning/bleu4",
            100.0,
        ),
    ],
)
def test_every_task_through_the_cli(task, dparams, tparams, metric, want, tmp_path):
    args = ["eval", "--task", task, "--dataset", "tiny-tasks", "--image-encoder", "none",
            "--text-encoder", "bow-test", "--method", "identity", "--store", "exact",
            "--cache-dir", "none", "--no-progress", "--k", "1", "5", "--output-dir", str(tmp_path)]  # fmt: skip
    for p in dparams:
        args += ["--dataset-param", p]
    for p in tparams:
        args += ["--text-encoder-param", p]
    p = _cli(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr + p.stdout
    (path,) = [f for f in tmp_path.glob("*.json")]
    res = json.loads(path.read_text())
    assert res["status"]["state"] == "ok" and res["task"]["task"] == task
    assert res["metrics"][metric] == pytest.approx(want)
    assert task in p.stdout
    _reported_keys_are_the_listed_ones(task, res["metrics"])


def _is_ranking_measure(name: str) -> bool:
    from imsearch_align.framework.measures import parse_measure

    try:
        parse_measure(name)
    except ValueError:
        return False
    return True


def _reported_keys_are_the_listed_ones(task: str, metrics: dict) -> None:
    """The task-measure table is where task keys come from: what the task reports beside its
    rankings' measures is listed there for it, and what is listed is reported (captioning's
    coco keys come with ``scorer=coco``; retrieval's ``ann_recall@k`` with ``--ann-fidelity``)."""
    from imsearch_align.framework.task_measures import task_keys

    reported = {k.split("/", 1)[1] for k in metrics if k.startswith(f"{task}/")}
    task_level = {k for k in reported if not _is_ranking_measure(k)}
    listed = set(task_keys(task))
    if task == "captioning":
        listed = {k for k in listed if not k.startswith("coco_")}
    if task == "retrieval":
        listed = set()
    assert task_level == listed, (task, sorted(task_level), sorted(listed))


def test_list_tasks_names_each_task_and_its_source(tmp_path):
    p = _cli("list", "tasks", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    for name in (
        "retrieval",
        "classification",
        "matching",
        "multilabel",
        "linear_probe",
        "captioning",
    ):
        assert name in p.stdout


@pytest.mark.parametrize("sparse", [False, True])
def test_class_vectors_in_an_inner_product_space_score_the_mean_similarity(sparse):
    """Rows that are not unit-norm (CSA, local CKA): a class scores the mean of
    its prompts' similarities; CLIP_benchmark's normalise-average-normalise
    would rescale each class by its own factor and reorder the classes."""
    import scipy.sparse as sp

    from imsearch_align.experiment.tasks.classification import class_vectors

    rng = np.random.default_rng(0)
    C, T, d = 6, 3, 8
    P = rng.standard_normal((C * T, d)) * rng.uniform(0.1, 3.0, (C * T, 1))  # uneven norms
    q = rng.standard_normal((50, d))
    want = (q @ P.T).reshape(50, C, T).mean(axis=2)
    got = class_vectors(sp.csr_matrix(P) if sparse else P, C, T, cosine=False)
    got = got.toarray() if sparse else got
    np.testing.assert_allclose(q @ got.T.astype(np.float64), want, rtol=1e-5, atol=1e-5)
    unit = P / np.linalg.norm(P, axis=1, keepdims=True)
    clip = unit.reshape(C, T, d).mean(axis=1)
    clip /= np.linalg.norm(clip, axis=1, keepdims=True)
    cos = class_vectors(sp.csr_matrix(P) if sparse else P, C, T)
    np.testing.assert_allclose(cos.toarray() if sparse else cos, clip, rtol=1e-5, atol=1e-6)
    assert ((q @ clip.T).argmax(1) != want.argmax(1)).any()  # the two differ on this data


@pytest.mark.parametrize(("method", "cosine"), [("identity", True), ("csa", False)])
def test_classification_ensemble_follows_the_methods_geometry(method, cosine, monkeypatch):
    from imsearch_align.experiment.tasks import classification

    seen = []
    real = classification.class_vectors

    def spy(*a, **kw):
        seen.append(kw.get("cosine", True))
        return real(*a, **kw)

    monkeypatch.setattr(classification, "class_vectors", spy)
    params = {"eps": 1e-2} if method == "csa" else {}
    r = run_experiment(
        _cfg("classification", CLASSES, method_params=params).replace(method=method),
        progress=False,
    )
    assert r.status.state != "failed", r.status
    assert seen == [cosine]


def test_mean_per_class_recall_averages_expected_hits_per_class():
    """Tie-aware per-query top-1 values (0.5: the true class tied with one
    other) count as such, not as a hit of whichever class has the lower id."""
    import pandas as pd

    from imsearch_align.experiment.tasks.classification import _mean_per_class_recall

    class DS:
        images = pd.DataFrame({"image_id": [10, 11, 12, 13, 14], "label": [0, 0, 1, 1, 2]})

    pq = pd.DataFrame({"query_id": [10, 11, 12, 13, 14], "Accuracy": [1.0, 0.5, 0.5, 0.0, 1.0]})
    got = _mean_per_class_recall(DS, np.array([10, 11, 12, 13, 14]), pq)
    assert got == pytest.approx((0.75 + 0.25 + 1.0) / 3, abs=1e-15)
    from sklearn.metrics import balanced_accuracy_score  # 0/1 hits: sklearn's definition

    hits = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    labels = DS.images["label"].to_numpy()
    pred = np.where(hits > 0, labels, -1)
    with pytest.warns(UserWarning):
        want = balanced_accuracy_score(labels, pred)
    got = _mean_per_class_recall(DS, np.array([10, 11, 12, 13, 14]), pq.assign(Accuracy=hits))
    assert got == pytest.approx(want, abs=1e-15)


@pytest.mark.parametrize("sparse", [False, True])
def test_true_scores_are_the_float64_products_in_any_block_size(sparse):
    import scipy.sparse as sp

    from imsearch_align.experiment.tasks.multilabel import true_scores

    rng = np.random.default_rng(1)
    Q = (rng.random((37, 11)) * (rng.random((37, 11)) < 0.4)).astype(np.float32)
    D = (rng.random((5, 11)) * (rng.random((5, 11)) < 0.6)).astype(np.float32)
    want = Q.astype(np.float64) @ D.astype(np.float64).T
    q, d = (sp.csr_matrix(Q), sp.csr_matrix(D)) if sparse else (Q, D)
    for block in (1, 8, 100):
        got = true_scores(q, d, block=block)
        assert got.dtype == np.float64 and got.shape == (37, 5)
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)


def test_ties_do_not_fall_to_the_true_pairs_in_matching():
    """A collapsed space (every score equal) or blocks of identical vectors:
    the true pairing is one of many equally good answers and must not be
    chosen for being the solver's input order."""
    from imsearch_align.experiment.tasks.matching import top1_accuracy

    n = 200
    flat = np.zeros((n, n))
    assert top1_accuracy(flat) == pytest.approx(1 / n, abs=1e-15)
    accs = [hungarian_accuracy(flat, seed=s)[0] for s in range(20)]
    assert np.mean(accs) < 0.05  # about 1/n; the identity gave 1.0
    block = np.kron(np.eye(n // 5), np.ones((5, 5)))  # 5 identical images and captions each
    assert top1_accuracy(block) == pytest.approx(0.2, abs=1e-15)
    accs = [hungarian_accuracy(block, seed=s)[0] for s in range(20)]
    assert abs(np.mean(accs) - 0.2) < 0.05  # the expected value over the tied orders
    # near-ties within the tolerance count as tied, beyond it they do not
    near = np.eye(3) * 1e-14 + 0.5
    assert top1_accuracy(near, 1e-12) == pytest.approx(1 / 3)
    assert top1_accuracy(near, 0.0) == 1.0


def test_multilabel_refuses_the_best_prompt_ensemble():
    """multilabel averages the prompts; ensemble='best' ran as 'mean' silently."""
    from imsearch_align.experiment import ExperimentError

    cfg = _cfg("multilabel", {**CLASSES, "multi": True}).replace(ensemble="best")
    with pytest.raises((ExperimentError, ValueError), match="applies to classification only"):
        run_experiment(cfg, progress=False)


@pytest.mark.parametrize("n_test", [18, 30])
@pytest.mark.parametrize("dense", [True, False])
def test_matching_on_a_collapsed_space_is_one_over_n_on_both_paths(tmp_path, n_test, dense):
    """Every image and caption the same vector: every assignment is optimal, so the expected
    accuracy is 1/n exactly. A float32 score matrix rounded rows by their position in the
    GEMM and read one-ulp differences as preferences (0.0486 for 1/18 at 64-768 dims)."""
    rng = np.random.default_rng(n_test)
    n = round(n_test / 0.3)
    for dim in (64, 384):
        v = rng.standard_normal(dim).astype(np.float32)
        X = np.repeat((v / np.linalg.norm(v))[None], n, axis=0)
        np.save(tmp_path / "img.npy", X)
        np.save(tmp_path / "txt.npy", X)
        np.save(tmp_path / "ti.npy", np.arange(n))
        paths = {k: str(tmp_path / f) for k, f in
                 (("image_path", "img.npy"), ("text_path", "txt.npy"), ("text_image", "ti.npy"))}  # fmt: skip
        cfg = ExperimentConfig(
            dataset="precomputed",
            dataset_params=paths,
            image_encoder=None,
            text_encoder=None,
            method="identity",
            store="exact",
            task="matching",
            cache_dir=None,
            k_values=(1,),
            task_params={} if dense else {"dense_limit": 4, "candidates": n},
        )
        r = run_experiment(cfg, progress=False)
        m = r.task.details["n_items"]
        assert m == n_test and ("dense" in r.task.details["path"]) == dense
        assert r.metric("matching/accuracy") == pytest.approx(1 / m, abs=1e-12), dim


@pytest.mark.parametrize(
    ("param", "message"),
    [
        ("fewshot_k=0", r"fewshot_k must be an integer >= 1, got 0"),
        ("lr=0", r"lr must be in \(0, inf\), got 0"),
        ("epochs=0", r"epochs must be an integer >= 1, got 0"),
        ("batch_size=-4", r"batch_size must be an integer >= 1, got -4"),
        ("val_proportion=1.0", r"val_proportion must be in \(0, 1\), got 1.0"),
    ],
)
def test_linear_probe_parameters_are_refused_before_any_work(param, message, tmp_path):
    p = _cli("eval", "--task", "linear_probe", "--dataset", "tiny-tasks", "--dataset-param",
             "kind=classes", "--image-encoder", "none", "--text-encoder", "bow-test",
             "--method", "identity", "--store", "exact", "--cache-dir", "none",
             "--task-param", param, "--output-dir", str(tmp_path), cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert re.search(message, p.stderr) and p.stderr.count("\n") == 1, p.stderr
    assert not list(tmp_path.glob("*.json"))


def test_linear_probe_training_parameters_are_settable_and_recorded():
    from imsearch_align.experiment.tasks.linear_probe import LinearProbe

    t = LinearProbe(lr=0.05, epochs=3, batch_size=16, val_proportion=0.25, procedure="sklearn")
    assert {k: t.params()[k] for k in ("lr", "epochs", "batch_size", "val_proportion")} == {
        "lr": 0.05, "epochs": 3, "batch_size": 16, "val_proportion": 0.25,
    }  # fmt: skip
