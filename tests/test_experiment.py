"""End-to-end experiments: every method x store, classification, resume, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from imsearch_align import Run, evaluate
from imsearch_align.experiment import ExperimentConfig, class_vectors, run_experiment, sweep

METHODS = {
    "csa": {},
    "asif": {"non_zeros": 64},
    "cka": {},
    "procrustes": {},
    "linear": {},
}
SYN = {"n_images": 600, "captions_per_image": 2, "seed": 3, "d_image": 40, "d_text": 32}


def _store_params(store, tmp_path):
    return {"uri": str(tmp_path / "lite.db")} if store == "milvus" else {}


def _syn_config(method, store, tmp_path, **kw):
    return ExperimentConfig(
        dataset="synthetic",
        dataset_params=SYN,
        image_encoder=None,
        text_encoder=None,
        method=method,
        method_params=METHODS[method],
        store=store,
        store_params=_store_params(store, tmp_path),
        n_support=400,
        cache_dir=None,
        k_values=(1, 5, 10),
        **kw,
    )


@pytest.mark.parametrize("store", ["exact", "faiss", "milvus"])
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_and_store_on_synthetic(method, store, tmp_path):
    res = run_experiment(_syn_config(method, store, tmp_path), progress=False)
    n_test = res["dataset"]["n_test_images"]
    chance = 1 / n_test
    for d in ("t2i", "i2t"):
        assert res["metrics"][f"{d}/Accuracy"] > 10 * chance, (
            method,
            store,
            d,
            res["metrics"][f"{d}/Accuracy"],
        )
    # CLIP_benchmark aliases are our HitRate.
    assert res["clip_benchmark"]["image_retrieval_recall@5"] == res["metrics"]["t2i/HitRate@5"]
    assert res["clip_benchmark"]["text_retrieval_recall@5"] == res["metrics"]["i2t/HitRate@5"]
    assert res["tasks"]["t2i"]["n_queries"] == 2 * n_test and res["tasks"]["t2i"]["n_failed"] == 0
    assert res["timings"]["fit_s"] >= 0 and res["timings"]["t2i_queries_per_s"] > 0


def test_stores_agree_with_each_other_and_with_a_direct_computation(tmp_path):
    results = {
        s: run_experiment(_syn_config("csa", s, tmp_path), progress=False)
        for s in ("exact", "faiss", "milvus")
    }
    for s in ("faiss", "milvus"):
        for m, v in results["exact"]["metrics"].items():
            assert results[s]["metrics"][m] == pytest.approx(v, abs=1e-9), (s, m)
    # Independent check of t2i: fit CSA by hand on the same support pairs, brute force.
    from imsearch_align.datasets.synthetic import load_synthetic
    from imsearch_align.methods.csa import CSA

    ds, ip, tp = load_synthetic(**SYN)
    texts = ds.texts[ds.texts.split == "train"]
    pick = np.sort(np.random.default_rng(0).choice(len(texts), 400, replace=False))
    sup_t, sup_i = texts.text_id.to_numpy()[pick], texts.image_id.to_numpy()[pick]
    m = CSA().fit(ip.encode(list(sup_i)), tp.encode(list(sup_t)))
    test_i, test_t = ds.split_ids("test", "image"), ds.split_ids("test", "text")
    s = m.similarity(ip.encode(list(test_i)), tp.encode(list(test_t))).T
    order = np.argsort(-s, axis=1, kind="stable")[:, :10]
    run = Run.from_arrays(test_t, test_i[order], np.take_along_axis(s, order, 1))
    want = evaluate(run, ds.qrels("t2i"), ["R@1", "nDCG@10"]).mean()
    assert results["exact"]["metrics"]["t2i/R@1"] == pytest.approx(want["R@1"], abs=1e-9)
    assert results["exact"]["metrics"]["t2i/nDCG@10"] == pytest.approx(want["nDCG@10"], abs=1e-6)


def test_learning_curve_csa_improves_with_support_size(tmp_path):
    base = _syn_config("csa", "exact", tmp_path)
    res = sweep(base, n_values=[60, 400], output_dir=tmp_path / "out", progress=False)
    assert res[1]["metrics"]["t2i/R@1"] > res[0]["metrics"]["t2i/R@1"] + 0.05
    files = sorted(p.name for p in (tmp_path / "out").glob("*.json"))
    assert files == ["synthetic_csa_exact_400.json", "synthetic_csa_exact_60.json"]


def test_result_files_skip_existing_and_per_query(tmp_path):
    cfg = _syn_config("linear", "exact", tmp_path, diagnostics=True, ann_fidelity=True)
    out = tmp_path / "res"
    r1 = run_experiment(cfg, output_dir=out, progress=False)
    path = Path(r1["path"])
    stored = json.loads(path.read_text())
    assert stored["config"] == cfg.to_dict() and ExperimentConfig.from_dict(stored["config"]) == cfg
    assert stored["environment"]["versions"]["numpy"] == np.__version__
    assert (
        "t2i/ann_recall@10" in stored["metrics"] and stored["metrics"]["t2i/ann_recall@10"] == 1.0
    )
    assert "aligned" in stored["diagnostics"]
    lo, hi = stored["tasks"]["t2i"]["intervals"]["R@1"]
    assert lo <= stored["metrics"]["t2i/R@1"] <= hi
    import pandas as pd

    pq = pd.read_parquet(path.with_suffix(".per_query.parquet"))
    assert set(pq.direction) == {"t2i", "i2t"}
    assert pq[pq.direction == "t2i"]["R@1"].mean() == pytest.approx(stored["metrics"]["t2i/R@1"])
    mtime = path.stat().st_mtime_ns
    r2 = run_experiment(cfg, output_dir=out, skip_existing=True, progress=False)
    assert r2["skipped"] and path.stat().st_mtime_ns == mtime


def test_classification_on_synthetic_classes_requires_a_text_encoder(tmp_path):
    cfg = ExperimentConfig(
        dataset="synthetic",
        dataset_params={**SYN, "n_classes": 5},
        image_encoder=None,
        text_encoder=None,
        task="classification",
        method="linear",
        store="exact",
        cache_dir=None,
    )
    with pytest.raises(ValueError, match="precomputed text provider cannot encode new text"):
        run_experiment(cfg, progress=False)


def test_class_vectors_ensemble_is_normalised_mean_of_normalised_prompts():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((6, 4))
    got = class_vectors(v, 2, 3)
    for c in range(2):
        u = v[3 * c : 3 * c + 3] / np.linalg.norm(v[3 * c : 3 * c + 3], axis=1, keepdims=True)
        w = u.mean(0) / np.linalg.norm(u.mean(0))
        np.testing.assert_allclose(got[c], w, atol=1e-6)
    import scipy.sparse as sp

    np.testing.assert_allclose(
        class_vectors(sp.csr_matrix(np.abs(v)), 2, 3).toarray(),
        class_vectors(np.abs(v), 2, 3),
        atol=1e-6,
    )


# --------------------------------------------------------------------------- shapes (real encoders)


@pytest.fixture(scope="session")
def shapes_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    return {"root": str(root / "data"), "cache": str(root / "cache")}


def _shapes_config(setup, method, store, tmp_path, **kw):
    params = {"csa": {"eps": 1e-2, "sim_dim": 32}, "asif": {"non_zeros": 50}}.get(method, {})
    return ExperimentConfig(
        dataset="shapes",
        dataset_params={"root": setup["root"], "n_images": 60, "size": 64, "seed": 1},
        method=method,
        method_params=params,
        store=store,
        store_params=_store_params(store, tmp_path),
        cache_dir=setup["cache"],
        k_values=(1, 5),
        **kw,
    )


@pytest.mark.slow
@pytest.mark.parametrize("store", ["exact", "faiss", "milvus"])
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_and_store_on_shapes_with_real_encoders(shapes_setup, method, store, tmp_path):
    res = run_experiment(_shapes_config(shapes_setup, method, store, tmp_path), progress=False)
    n_test = res["dataset"]["n_test_images"]
    assert res["metrics"]["t2i/HitRate@5"] > 2 * 5 / n_test, (method, store, res["metrics"])
    assert res["encoders"]["image"].startswith("efficientnet-lite0")


@pytest.mark.slow
@pytest.mark.parametrize("ensemble", ["mean", "best"])
def test_zero_shot_classification_on_shapes(shapes_setup, tmp_path, ensemble):
    res = run_experiment(
        _shapes_config(
            shapes_setup, "linear", "faiss", tmp_path, task="classification", ensemble=ensemble
        ),
        progress=False,
    )
    cls = res["tasks"]["classification"]
    chance = 1 / cls["n_classes"]
    assert cls["metrics"]["acc1"] > 1.5 * chance
    assert cls["metrics"]["acc1"] == res["metrics"]["classification/Accuracy"]
    assert 0 <= cls["metrics"]["mean_per_class_recall"] <= 1
    assert cls["metrics"]["acc5"] >= cls["metrics"]["acc1"]


# --------------------------------------------------------------------------- resume after SIGKILL

_SLOW_RUN = textwrap.dedent(
    """
    import sys, time, json
    from imsearch_align.adapters.exact import ExactStore
    from imsearch_align.framework.registry import STORES
    from imsearch_align.experiment import ExperimentConfig, run_experiment

    @STORES.register("slow-exact")
    class SlowExact(ExactStore):
        def search(self, name, queries, k):
            time.sleep(float(sys.argv[2]))
            with open(sys.argv[3], "a") as f:
                f.write(f"{queries.shape[0]}\\n")
            return super().search(name, queries, k)

    cfg = ExperimentConfig.from_dict(json.loads(sys.argv[1]))
    run_experiment(cfg, output_dir=sys.argv[4], progress=False)
    """
)


def test_resume_after_sigkill_equals_uninterrupted_run(tmp_path):
    cfg = _syn_config("linear", "exact", tmp_path, batch_size=16, workers=1, directions=("t2i",))
    cfg = cfg.replace(store="slow-exact")
    script = tmp_path / "run.py"
    script.write_text(_SLOW_RUN)
    out = tmp_path / "out"
    log1, log2 = tmp_path / "calls1.txt", tmp_path / "calls2.txt"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, str(script), json.dumps(cfg.to_dict()), "0.15", str(log1), str(out)],
        env=env,
    )
    ckpt = out / ".checkpoints" / cfg.key() / "t2i"
    deadline = time.time() + 120
    while time.time() < deadline:
        done = list(ckpt.glob("*/batch_*.npz")) if ckpt.exists() else []
        if len(done) >= 4:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not list(out.glob("*.json")), "the killed run must not have written a result"
    n_done = len(list(ckpt.glob("*/batch_*.npz")))
    assert n_done >= 4
    # Resume: only the unfinished batches are searched again.
    subprocess.run(
        [sys.executable, str(script), json.dumps(cfg.to_dict()), "0", str(log2), str(out)],
        env=env,
        check=True,
    )
    n_queries = json.loads(next(out.glob("*.json")).read_text())["tasks"]["t2i"]["n_queries"]
    n_batches = -(-n_queries // 16)
    assert len(log2.read_text().split()) == n_batches - n_done
    resumed = json.loads(next(out.glob("*.json")).read_text())
    fresh = run_experiment(cfg.replace(store="exact"), progress=False)
    assert resumed["metrics"] == fresh["metrics"]


# --------------------------------------------------------------------------- bad input


def test_unknown_names_say_did_you_mean(tmp_path):
    with pytest.raises(KeyError, match=r"unknown method 'csaa'. Did you mean 'csa'"):
        run_experiment(_syn_config("csa", "exact", tmp_path).replace(method="csaa"), progress=False)
    with pytest.raises(KeyError, match=r"unknown store 'fais'. Did you mean 'faiss'"):
        run_experiment(_syn_config("csa", "exact", tmp_path).replace(store="fais"), progress=False)
    with pytest.raises(KeyError, match=r"unknown dataset 'flickr'. Did you mean 'flickr30k'"):
        run_experiment(
            _syn_config("csa", "exact", tmp_path).replace(dataset="flickr"), progress=False
        )


def test_sparse_space_too_large_for_a_densifying_store_names_native_stores(tmp_path):
    cfg = _syn_config("asif", "faiss", tmp_path).replace(store_params={"max_dense_gb": 1e-6})
    with pytest.raises(MemoryError, match=r"MilvusStore \(native sparse vectors\) or ExactStore"):
        run_experiment(cfg, progress=False)


def test_n_support_larger_than_available(tmp_path):
    with pytest.raises(
        ValueError, match=r"n_support=100000 is larger than the \d+ support pairs available"
    ):
        run_experiment(
            _syn_config("csa", "exact", tmp_path).replace(n_support=100_000), progress=False
        )


def test_output_directory_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match=r"output_dir .* cannot be written"):
        run_experiment(
            _syn_config("csa", "exact", tmp_path), output_dir=blocker / "sub", progress=False
        )


def test_config_file_with_unknown_key(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"method": "csa", "n_suport": 10}))
    with pytest.raises(
        ValueError, match=r"unknown key\(s\) 'n_suport' \(did you mean 'n_support'\?\)"
    ):
        ExperimentConfig.from_file(p)
    y = tmp_path / "c.yaml"
    y.write_text("method: asif\nn_support: 50\nk_values: [1, 10]\n")
    cfg = ExperimentConfig.from_file(y)
    assert cfg.method == "asif" and cfg.n_support == 50 and cfg.k_values == (1, 10)


def test_config_validation_messages():
    with pytest.raises(ValueError, match="task must be one of"):
        ExperimentConfig(task="captioning")
    with pytest.raises(ValueError, match="directions must be a non-empty subset"):
        ExperimentConfig(directions=("x2y",))
    with pytest.raises(ValueError, match=r"n_support must be in \[1, inf\], got 0"):
        ExperimentConfig(n_support=0)
    with pytest.raises(ValueError, match=r"output template .* uses unknown field 'foo'"):
        ExperimentConfig().output_name("{foo}.json")


# --------------------------------------------------------------------------- query perturbations


@pytest.mark.slow
def test_perturbed_queries_degrade_retrieval_and_are_seeded(shapes_setup, tmp_path):
    cfg = _shapes_config(
        shapes_setup,
        "linear",
        "exact",
        tmp_path,
        perturbations=("word_dropout", "blur"),
        perturbation_params={"word_dropout": {"rate": 0.8}, "blur": {"sigma": 8.0}},
    )
    res = run_experiment(cfg, progress=False)
    m = res["metrics"]
    assert m["t2i[word_dropout]/R@1"] < m["t2i/R@1"]
    assert m["i2t[blur]/HitRate@1"] < m["i2t/HitRate@1"]
    p = res["perturbations"]["word_dropout"]
    assert p["direction"] == "t2i" and p["params"] == {"rate": 0.8}
    assert p["change"]["R@1"] == pytest.approx(m["t2i[word_dropout]/R@1"] - m["t2i/R@1"])
    again = run_experiment(cfg, progress=False)
    assert again["metrics"] == res["metrics"]
    from imsearch_align.diagnostics.perturbations import PerturbedItems

    caps = ["a red circle on the left of a blue square"] * 3
    assert list(PerturbedItems(caps, "word_dropout", seed=0)) == list(
        PerturbedItems(caps, "word_dropout", seed=0)
    )


def test_perturbation_config_errors(tmp_path):
    with pytest.raises(KeyError, match=r"unknown perturbation 'typoo'. Did you mean 'typo'"):
        ExperimentConfig(perturbations=("typoo",))
    with pytest.raises(ValueError, match=r"perturbation_params names \['blur'\]"):
        ExperimentConfig(perturbations=("typo",), perturbation_params={"blur": {"sigma": 1}})
    with pytest.raises(ValueError, match="perturbations apply to the retrieval task"):
        ExperimentConfig(task="classification", perturbations=("typo",))
    cfg = _syn_config("linear", "exact", tmp_path, perturbations=("typo",))
    with pytest.raises(ValueError, match="text embeddings are precomputed; name a text encoder"):
        run_experiment(cfg, progress=False)


@pytest.mark.slow
def test_acc5_is_reported_whatever_k_values_say(shapes_setup, tmp_path):
    res = run_experiment(
        _shapes_config(shapes_setup, "linear", "exact", tmp_path, task="classification").replace(
            k_values=(1,)
        ),
        progress=False,
    )
    cls = res["tasks"]["classification"]
    assert cls["n_classes"] >= 5
    assert cls["metrics"]["acc1"] <= cls["metrics"]["acc5"] <= 1.0
