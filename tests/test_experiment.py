"""End-to-end experiments on the typed result: every method x store, agreement with an
independent brute force, learning curves, result files, --skip-existing, resume after a
real SIGKILL, classification and perturbations with real encoders, bad input."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imsearch_align import Run
from imsearch_align.experiment import (
    ConfigError,
    ExperimentConfig,
    ExperimentError,
    ExperimentResult,
    class_vectors,
    run_experiment,
    sweep,
)
from imsearch_align.experiment.result import RunStatus
from imsearch_align.experiment.tasks import TaskUnsupportedError
from imsearch_align.framework.registry import STORES, UnknownNameError

METHODS = {
    "csa": {},
    "asif": {"non_zeros": 64},
    "cka": {},
    "procrustes": {},
    "linear": {},
}
SYN = {"n_images": 600, "captions_per_image": 2, "seed": 3, "d_image": 40, "d_text": 32}
STORE_NAMES = ["exact", "faiss", "milvus"]


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


@pytest.fixture(scope="module")
def syn_run(tmp_path_factory):
    """``syn_run(method, store)``: one run per pair for the whole module, written to disk."""
    root = tmp_path_factory.mktemp("syn_runs")
    done: dict[tuple[str, str], ExperimentResult] = {}

    def get(method: str, store: str) -> ExperimentResult:
        if (method, store) not in done:
            d = root / f"{method}_{store}"
            d.mkdir()
            done[method, store] = run_experiment(
                _syn_config(method, store, d), output_dir=d / "out", progress=False
            )
        return done[method, store]

    return get


@pytest.mark.parametrize("store", STORE_NAMES)
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_and_store_on_synthetic(method, store, syn_run):
    res = syn_run(method, store)
    assert isinstance(res, ExperimentResult) and res.status.ok, res.status
    n_test = res.dataset.n_test_images
    assert res.dataset.n_support_pairs == 400 and res.config.store == store
    chance = 1 / n_test
    for d in ("t2i", "i2t"):
        assert res.metric(f"{d}/Accuracy") > 10 * chance, (method, store, d, res.metrics)
    # CLIP_benchmark's retrieval recall is our HitRate (not IR recall).
    cb = res.clip_benchmark()
    assert cb["image_retrieval_recall@5"] == res.metric("t2i/HitRate@5")
    assert cb["text_retrieval_recall@5"] == res.metric("i2t/HitRate@5")
    t2i = res.rankings["t2i"]
    assert t2i.n_queries == res.dataset.n_test_texts == 2 * n_test and t2i.n_failed == 0
    assert t2i.n_docs == n_test and res.rankings["i2t"].n_queries == n_test
    assert res.timings["fit_s"] >= 0 and t2i.timings.queries_per_s > 0
    assert t2i.timings.n_batches_searched == t2i.timings.n_batches >= 1
    assert res.method.name == method and res.method.output_dim > 0
    assert res.method.sparse == (method == "asif")


def _oracle_spaces():
    """CSA fitted by hand on the pipeline's seeded support sample; aligned test vectors."""
    from imsearch_align.datasets.synthetic import load_synthetic
    from imsearch_align.methods.csa import CSA

    ds, ip, tp = load_synthetic(**SYN)
    texts = ds.texts[ds.texts.split == "train"]
    pick = np.sort(np.random.default_rng(0).choice(len(texts), 400, replace=False))
    sup_t, sup_i = texts.text_id.to_numpy()[pick], texts.image_id.to_numpy()[pick]
    m = CSA().fit(ip.encode(list(sup_i)), tp.encode(list(sup_t)))
    test_i, test_t = ds.split_ids("test", "image"), ds.split_ids("test", "text")
    a_img = np.asarray(m.transform_images(ip.encode(list(test_i))))
    a_txt = np.asarray(m.transform_texts(tp.encode(list(test_t))))
    return ds, test_i, test_t, a_img, a_txt


def _pytrec(qids, dids, scores, qrels_pairs, measures):
    import pytrec_eval

    qrels: dict[str, dict[str, int]] = {}
    for q, d in qrels_pairs:
        qrels.setdefault(str(q), {})[str(d)] = 1
    run = {
        str(q): {str(d): float(s) for d, s in zip(row_d, row_s)}
        for q, row_d, row_s in zip(qids, dids, scores)
    }
    per_q = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(run)
    return {m: float(np.mean([per_q[q][m] for q in qrels])) for m in measures}


def test_stores_agree_with_each_other_and_with_an_independent_brute_force(syn_run):
    """Every store's numbers lie within the tie-aware bounds of a float64 brute force of a
    hand-fitted CSA, as do pytrec_eval's; the bounds are tight, so the check has teeth."""
    from imsearch_align.framework.measures import needs_vectors
    from imsearch_align.framework.ties import default_tolerance, tie_aware_evaluate

    results = {s: syn_run("csa", s) for s in STORE_NAMES}
    ds, test_i, test_t, a_img, a_txt = _oracle_spaces()
    img64, txt64 = a_img.astype(np.float64), a_txt.astype(np.float64)
    scale = float(np.linalg.norm(img64, axis=1).max() * np.linalg.norm(txt64, axis=1).max())
    tol = default_tolerance(a_img.shape[1]) * max(1.0, scale)
    texts = ds.texts.set_index("text_id").loc[test_t]
    pairs = {
        "t2i": list(zip(test_t, texts.image_id)),
        "i2t": list(zip(texts.image_id, test_t)),
    }
    trec = {"recall_1": "R@1", "recall_10": "R@10", "ndcg_cut_10": "nDCG@10",
            "success_1": "HitRate@1", "success_5": "HitRate@5", "P_5": "P@5"}  # fmt: skip
    for direction, (q, d, qids, dids) in {
        "t2i": (txt64, img64, test_t, test_i),
        "i2t": (img64, txt64, test_i, test_t),
    }.items():
        s = q @ d.T
        order = np.argsort(-s, axis=1, kind="stable")[:, :20]
        top = np.take_along_axis(s, order, 1)
        run = Run.from_arrays(qids, dids[order], top)
        # Judgement measures here; the vector measure (Diversity) has its own oracle
        # tests in tests/framework/test_diversity.py.
        measures = [m for m in results["exact"].rankings[direction].metrics if not needs_vectors(m)]
        tie = tie_aware_evaluate(run, ds.qrels(direction, "test"), measures, tol=tol)
        div = [m for m in results["exact"].rankings[direction].metrics if needs_vectors(m)]
        for m in div:  # from the same vectors: every store gives the same value
            vals = [res.rankings[direction].metrics[m] for res in results.values()]
            assert max(vals) - min(vals) < 1e-9, (direction, m, vals)
        low, high = tie.low_mean(), tie.high_mean()
        for m in measures:
            assert high[m] - low[m] < 0.01, (direction, m, low[m], high[m])
            for store, res in results.items():
                got = res.rankings[direction].metrics[m]
                assert low[m] - 1e-9 <= got <= high[m] + 1e-9, (store, direction, m, got, low, high)
        want = _pytrec(qids, dids[order[:, :10]], top[:, :10], pairs[direction], list(trec))
        for tm, m in trec.items():
            assert low[m] - 1e-9 <= want[tm] <= high[m] + 1e-9, (direction, m, want[tm])
            for store, res in results.items():
                got = res.rankings[direction].metrics[m]
                assert got == pytest.approx(want[tm], abs=high[m] - low[m] + 1e-9), (store, m)


def test_learning_curve_csa_improves_with_support_size(tmp_path):
    base = _syn_config("csa", "exact", tmp_path, directions=("t2i",))
    res = sweep(base, n_values=[60, 400], output_dir=tmp_path / "out", progress=False)
    assert [r.dataset.n_support_pairs for r in res] == [60, 400]
    assert all(isinstance(r, ExperimentResult) and r.status.ok for r in res)
    assert res[1].metric("t2i/HitRate@1") > res[0].metric("t2i/HitRate@1") + 0.05
    files = sorted(p.name for p in (tmp_path / "out").glob("*.json"))
    assert files == ["synthetic_csa_exact_400.json", "synthetic_csa_exact_60.json"]
    assert [Path(r.path).name for r in res] == files[::-1]


def test_result_file_round_trips_with_provenance_intervals_and_per_query_parquet(syn_run):
    r1 = syn_run("linear", "exact")
    path = Path(r1.path)
    stored = json.loads(path.read_text())
    cfg = r1.config
    assert stored["config"] == cfg.to_dict() and ExperimentConfig.from_dict(stored["config"]) == cfg
    assert stored["status"]["state"] == "ok" and stored["key"] == cfg.key()
    back = ExperimentResult.load(path)
    assert back == r1 and back.path == str(path)
    assert back.provenance.versions["numpy"] == np.__version__
    assert stored["provenance"]["versions"]["numpy"] == np.__version__
    for name, ranking in r1.rankings.items():
        lo, hi = ranking.intervals["R@1"]
        assert lo <= ranking.metrics["R@1"] <= hi, name
    pq = pd.read_parquet(path.with_suffix(".per_query.parquet"))
    assert r1.per_query_file == path.with_suffix(".per_query.parquet").name
    assert set(pq.ranking) == {"t2i", "i2t"}
    for name, ranking in r1.rankings.items():
        rows = pq[pq.ranking == name]
        assert len(rows) == ranking.n_queries
        for m in ("R@1", "HitRate@5", "nDCG@10"):
            assert rows[m].mean() == pytest.approx(ranking.metrics[m], abs=1e-12), (name, m)
    # A clean result leaves no checkpoints behind.
    assert not (path.parent / ".checkpoints" / cfg.key()).exists()


def test_skip_existing_keeps_a_clean_result(tmp_path):
    cfg = _syn_config("linear", "faiss", tmp_path, directions=("t2i",))
    r1 = run_experiment(cfg, output_dir=tmp_path, progress=False)
    path = Path(r1.path)
    mtime = path.stat().st_mtime_ns
    r2 = run_experiment(cfg, output_dir=tmp_path, skip_existing=True, progress=False)
    assert r2.skipped and not r1.skipped and r2.path == str(path)
    assert path.stat().st_mtime_ns == mtime and r2 == r1


@pytest.mark.parametrize(
    "state",
    [RunStatus("degraded", ("t2i: 16 of 360 queries failed",)), RunStatus("failed", (), "E")],
)
def test_skip_existing_runs_a_degraded_or_failed_result_again(tmp_path, state, caplog):
    cfg = _syn_config("linear", "faiss", tmp_path, directions=("t2i",))
    r1 = run_experiment(cfg, output_dir=tmp_path, progress=False)
    path = Path(r1.path)
    path.write_text(r1.with_(status=state).to_json())
    with caplog.at_level(logging.WARNING, logger="imsearch_align"):
        r2 = run_experiment(cfg, output_dir=tmp_path, skip_existing=True, progress=False)
    assert not r2.skipped and r2.status.ok
    assert ExperimentResult.load(path).status.ok
    assert f"is {state.state}" in caplog.text and "running it again" in caplog.text


def test_another_configs_file_is_kept_and_this_one_written_beside_it(tmp_path, caplog):
    cfg = _syn_config("linear", "faiss", tmp_path, directions=("t2i",))
    other = cfg.replace(seed=7)  # same output name, another experiment
    assert other.output_name("{method}.json") == cfg.output_name("{method}.json")
    run_experiment(other, output_dir=tmp_path, output_template="{method}.json", progress=False)

    def run_cfg():
        return run_experiment(
            cfg,
            output_dir=tmp_path,
            output_template="{method}.json",
            skip_existing=True,
            progress=False,
        )

    with caplog.at_level(logging.WARNING, logger="imsearch_align"):
        r = run_cfg()
    assert not r.skipped and r.key == cfg.key()
    assert ExperimentResult.load(tmp_path / "linear.json").key == other.key()  # kept
    assert r.path == str(tmp_path / f"linear-{cfg.key()}.json")
    assert ExperimentResult.load(r.path).key == cfg.key()
    assert "holds another experiment" in caplog.text and "both are kept" in caplog.text
    again = run_cfg()
    assert again.skipped and again.path == r.path
    # A file that is not a result (torn, or a user's) is never replaced: kept as it is.
    (tmp_path / "linear.json").write_text("{torn")
    again = run_cfg()
    assert again.skipped and again.path == r.path
    assert (tmp_path / "linear.json").read_text() == "{torn"


def test_output_template_with_folders_writes_result_and_parquet_there(tmp_path):
    cfg = _syn_config("linear", "faiss", tmp_path, directions=("t2i",))
    r = run_experiment(
        cfg,
        output_dir=tmp_path / "o",
        output_template="sub/{dataset}/{method}.json",
        progress=False,
    )
    folder = tmp_path / "o" / "sub" / "synthetic"
    assert Path(r.path) == folder / "linear.json"
    assert (folder / "linear.per_query.parquet").is_file()
    assert len(pd.read_parquet(folder / "linear.per_query.parquet")) == r.rankings["t2i"].n_queries


@pytest.mark.parametrize(
    "template", ["{}.json", "{0}.json", "{dataset.x}.json", "{dataset}_{method}"]
)
def test_bad_output_template_fails_before_any_work(tmp_path, template, monkeypatch):
    from imsearch_align.experiment import context

    def no_work(self, config):
        raise AssertionError("the dataset was loaded before the template was checked")

    monkeypatch.setattr(context.Study, "load", no_work)
    with pytest.raises(ConfigError, match="output template"):
        run_experiment(
            _syn_config("linear", "faiss", tmp_path),
            output_dir=tmp_path / "o",
            output_template=template,
            progress=False,
        )
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("*"))


# --------------------------------------------------------------------------- degraded and failed

_FLAKY = "test-flaky-faiss"


@pytest.fixture(scope="module")
def flaky_store():
    """A FAISS store whose every 5th search call raises (ValueError: never retried)."""
    from imsearch_align.adapters.faiss_store import FaissStore

    if _FLAKY not in STORES.names():

        @STORES.register(_FLAKY)
        class FlakyFaiss(FaissStore):
            fail_every = 0

            def search(self, name, queries, k):
                self._calls = getattr(self, "_calls", 0) + 1
                if self.fail_every and self._calls % self.fail_every == 2:
                    raise ValueError(f"flaky store: call {self._calls} refused")
                return super().search(name, queries, k)

    return STORES.get(_FLAKY)


def test_failed_queries_make_a_degraded_result_and_a_rerun_searches_only_them(
    tmp_path, flaky_store, monkeypatch
):
    cfg = _syn_config("linear", "faiss", tmp_path, directions=("t2i",), batch_size=16, workers=1)
    clean = run_experiment(cfg, progress=False)
    monkeypatch.setattr(flaky_store, "fail_every", 5)
    flaky = cfg.replace(store=_FLAKY)
    res = run_experiment(flaky, output_dir=tmp_path, progress=False)
    t2i = res.rankings["t2i"]
    n_batches = -(-t2i.n_queries // 16)
    n_bad = len([c for c in range(1, n_batches + 1) if c % 5 == 2])
    assert res.status.state == "degraded"
    assert t2i.n_failed == 16 * n_bad and res.n_failed == t2i.n_failed
    assert f"t2i: {16 * n_bad} of {t2i.n_queries} queries failed" in res.status.reasons[0]
    assert "flaky store" in res.status.reasons[0] and "STATUS DEGRADED" in res.summary()
    # Failed queries score 0 and count in the mean: the numbers are lower, not invented.
    assert res.metric("t2i/HitRate@10") < clean.metric("t2i/HitRate@10")
    assert ExperimentResult.load(res.path).status.state == "degraded"
    # Checkpoints are kept, so the re-run searches only the failed batches.
    monkeypatch.setattr(flaky_store, "fail_every", 0)
    again = run_experiment(flaky, output_dir=tmp_path, skip_existing=True, progress=False)
    assert again.status.ok and not again.skipped
    assert again.rankings["t2i"].timings.n_batches_searched == n_bad
    assert again.rankings["t2i"].timings.n_batches_resumed == n_batches - n_bad
    assert again.metrics == clean.metrics


def test_a_failed_run_raises_with_its_written_failed_result(tmp_path):
    cfg = _syn_config("csa", "faiss", tmp_path).replace(method_params={"sim_dim": 64})  # > d_text
    with pytest.raises(ExperimentError, match="sim_dim") as err:
        run_experiment(cfg, output_dir=tmp_path, progress=False)
    failed = err.value.result
    assert failed.status.state == "failed" and "sim_dim" in failed.status.error
    assert failed.task is None and failed.metrics == {}
    stored = ExperimentResult.load(failed.path)
    assert stored.status == failed.status and stored.config == cfg


# --------------------------------------------------------------------------- bugs found here


def test_ann_fidelity_of_an_exact_store_is_one_and_truthful(tmp_path):
    res = run_experiment(
        _syn_config("linear", "exact", tmp_path, ann_fidelity=True), progress=False
    )
    assert res.status.ok
    for d in ("t2i", "i2t"):
        assert res.metric(f"{d}/ann_recall@10") == 1.0
        # Reported scores are the true inner products, to float32 rounding (Higham's bound).
        eps = float(np.finfo(np.float32).eps)
        assert res.rankings[d].fidelity["score_max_rel_error@10"] <= res.method.output_dim * eps


def test_diagnostics_describe_the_aligned_space(tmp_path):
    res = run_experiment(_syn_config("linear", "exact", tmp_path, diagnostics=True), progress=False)
    assert res.diagnostics is not None and "aligned" in res.diagnostics


# --------------------------------------------------------------------------- classification


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
    with pytest.raises((ExperimentError, TaskUnsupportedError)) as err:
        run_experiment(cfg, progress=False)
    assert "text embeddings are precomputed" in str(err.value)
    assert "name a text encoder" in str(err.value)


def _no_fit(monkeypatch):
    from imsearch_align.experiment import context

    def fit(self):
        raise AssertionError("embeddings were read and the method fitted before the check")

    monkeypatch.setattr(context.TaskContext, "fit", fit)


def test_classification_without_a_text_encoder_is_refused_before_any_work(tmp_path, monkeypatch):
    _no_fit(monkeypatch)
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
    with pytest.raises(TaskUnsupportedError, match="name a text encoder"):
        run_experiment(cfg, output_dir=tmp_path, progress=False)
    assert not list(tmp_path.glob("*.json"))


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
@pytest.mark.parametrize("store", STORE_NAMES)
@pytest.mark.parametrize("method", list(METHODS))
def test_every_method_and_store_on_shapes_with_real_encoders(shapes_setup, method, store, tmp_path):
    res = run_experiment(_shapes_config(shapes_setup, method, store, tmp_path), progress=False)
    assert res.status.ok, res.status
    n_test = res.dataset.n_test_images
    assert res.metric("t2i/HitRate@5") > 2 * 5 / n_test, (method, store, res.metrics)
    assert res.encoders.image.startswith("efficientnet-lite0")
    assert res.encoders.text.startswith("sentence-transformers")


@pytest.mark.slow
@pytest.mark.parametrize("ensemble", ["mean", "best"])
def test_zero_shot_classification_on_shapes(shapes_setup, tmp_path, ensemble):
    res = run_experiment(
        _shapes_config(
            shapes_setup, "linear", "faiss", tmp_path, task="classification", ensemble=ensemble
        ),
        progress=False,
    )
    assert res.status.ok and res.task.task == "classification"
    details, m = res.task.details, res.metrics
    chance = 1 / details["n_classes"]
    assert details["ensemble"] == ensemble and "not zero-shot" in details["protocol"]
    assert m["classification/acc1"] > 1.5 * chance
    assert m["classification/acc1"] == m["classification/Accuracy"]
    assert m["classification/acc1"] == m["classification/HitRate@1"]
    assert 0 <= m["classification/mean_per_class_recall"] <= 1
    assert m["classification/acc5"] >= m["classification/acc1"]
    assert res.clip_benchmark()["acc1"] == m["classification/acc1"]
    assert res.rankings["classification"].n_queries == res.dataset.n_test_images


@pytest.mark.slow
def test_acc5_is_reported_whatever_k_values_say(shapes_setup, tmp_path):
    res = run_experiment(
        _shapes_config(shapes_setup, "linear", "exact", tmp_path, task="classification").replace(
            k_values=(1,)
        ),
        progress=False,
    )
    assert res.task.details["n_classes"] >= 5
    acc1, acc5 = res.metric("classification/acc1"), res.metric("classification/acc5")
    assert acc1 <= acc5 <= 1.0


# --------------------------------------------------------------------------- resume after SIGKILL

_SLOW_RUN = textwrap.dedent(
    """
    import sys, time, json
    from imsearch_align.adapters.faiss_store import FaissStore
    from imsearch_align.framework.registry import STORES
    from imsearch_align.experiment import ExperimentConfig, run_experiment

    @STORES.register("slow-faiss")
    class SlowFaiss(FaissStore):
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
    cfg = _syn_config("linear", "faiss", tmp_path, batch_size=16, workers=1, directions=("t2i",))
    cfg = cfg.replace(store="slow-faiss")
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
    while time.time() < deadline and proc.poll() is None:
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
    # Resume: only the unfinished batches are searched again, each taking >= 0.05 s.
    subprocess.run(
        [sys.executable, str(script), json.dumps(cfg.to_dict()), "0.05", str(log2), str(out)],
        env=env,
        check=True,
    )
    resumed = ExperimentResult.load(next(out.glob("*.json")))
    t2i = resumed.rankings["t2i"]
    n_batches = -(-t2i.n_queries // 16)
    calls = log2.read_text().split()
    assert calls[0] == "1"  # one untimed warm-up query after indexing
    assert calls[-1] == str(min(200, t2i.n_queries))  # the truth check of a sample, one call
    assert len(calls) - 2 == n_batches - n_done
    assert t2i.timings.n_batches == n_batches
    assert t2i.timings.n_batches_searched == n_batches - n_done
    assert t2i.timings.n_batches_resumed == n_done
    # Speed comes from the searched batches alone: at most 16 queries per 0.05 s.
    assert 0 < t2i.timings.queries_per_s <= 16 / 0.05 * 1.05
    assert resumed.status.ok and not (out / ".checkpoints" / cfg.key()).exists()
    fresh = run_experiment(cfg.replace(store="faiss"), progress=False)
    assert resumed.metrics == fresh.metrics


# --------------------------------------------------------------------------- bad input


def test_unknown_names_say_did_you_mean(tmp_path):
    base = _syn_config("csa", "exact", tmp_path)
    for field, value, needle in (
        ("method", "csaa", r"unknown method 'csaa'. Did you mean 'csa'"),
        ("store", "fais", r"unknown store 'fais'. Did you mean 'faiss'"),
        ("dataset", "flickr", r"unknown dataset 'flickr'. Did you mean 'flickr30k'"),
        ("task", "retreival", r"unknown task 'retreival'. Did you mean 'retrieval'"),
    ):
        with pytest.raises(UnknownNameError, match=needle):
            run_experiment(base.replace(**{field: value}), progress=False)


def test_unknown_parameter_names_are_refused_before_any_work(tmp_path, monkeypatch):
    _no_fit(monkeypatch)
    base = _syn_config("csa", "exact", tmp_path)
    for field, value, needle in (
        ("method_params", {"sim_dimm": 8}, r"method 'csa' takes no parameter 'sim_dimm' "
                                           r"\(did you mean 'sim_dim'\?\)"),
        ("store_params", {"url": "x"}, r"store 'exact' takes no parameter 'url'"),
        ("dataset_params", {**SYN, "n_image": 3}, r"did you mean 'n_images'"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=needle):
            run_experiment(base.replace(**{field: value}), progress=False)


def test_asif_sparse_spaces_give_the_same_metrics_on_faiss_and_exact(tmp_path):
    """FaissStore searches sparse collections with the exact sparse kernel (no
    densifying): its tie-aware metrics equal ExactStore's."""
    res = {
        s: run_experiment(_syn_config("asif", s, tmp_path), progress=False)
        for s in ("exact", "faiss")
    }
    assert res["faiss"].method.sparse and res["faiss"].status.ok
    for m, v in res["exact"].metrics.items():
        assert res["faiss"].metrics[m] == pytest.approx(v, abs=1e-9), m


def test_n_support_larger_than_available(tmp_path):
    with pytest.raises(
        ConfigError, match=r"n_support=100000 is larger than the 840 support pairs available"
    ):
        run_experiment(
            _syn_config("csa", "exact", tmp_path).replace(n_support=100_000), progress=False
        )


def test_output_directory_that_cannot_be_written(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PermissionError, match=r"output folder .* cannot be written"):
        run_experiment(
            _syn_config("csa", "exact", tmp_path), output_dir=blocker / "sub", progress=False
        )


def test_config_file_with_unknown_key(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"method": "csa", "n_suport": 10}))
    with pytest.raises(
        ConfigError, match=r"unknown key\(s\) 'n_suport' \(did you mean 'n_support'\?\)"
    ):
        ExperimentConfig.from_file(p)
    y = tmp_path / "c.yaml"
    y.write_text("method: asif\nn_support: 50\nk_values: [1, 10]\n")
    cfg = ExperimentConfig.from_file(y)
    assert cfg.method == "asif" and cfg.n_support == 50 and cfg.k_values == (1, 10)


def test_n_support_zero_is_refused():
    with pytest.raises(ConfigError, match=r"n_support must be in \[1, inf\], got 0"):
        ExperimentConfig(n_support=0)


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
    m = res.metrics
    assert m["t2i[word_dropout]/R@1"] < m["t2i/R@1"]
    assert m["i2t[blur]/HitRate@1"] < m["i2t/HitRate@1"]
    # A perturbed ranking searches the same index with as many queries.
    assert res.rankings["t2i[word_dropout]"].n_queries == res.rankings["t2i"].n_queries
    assert res.rankings["i2t[blur]"].n_docs == res.rankings["i2t"].n_docs
    p = res.task.details["perturbations"]
    assert p["word_dropout"] == {"direction": "t2i", "params": {"rate": 0.8}, "seed": 0}
    assert p["blur"]["direction"] == "i2t"
    again = run_experiment(cfg, progress=False)
    assert again.metrics == res.metrics
    from imsearch_align.diagnostics.perturbations import PerturbedItems

    caps = ["a red circle on the left of a blue square"] * 3
    assert list(PerturbedItems(caps, "word_dropout", seed=0)) == list(
        PerturbedItems(caps, "word_dropout", seed=0)
    )


def test_perturbation_config_errors(tmp_path):
    with pytest.raises(
        UnknownNameError, match=r"unknown perturbation 'typoo'. Did you mean 'typo'"
    ):
        run_experiment(_syn_config("linear", "exact", tmp_path, perturbations=("typoo",)))
    with pytest.raises(ConfigError, match=r"'perturbation_params' names \['blur'\]"):
        ExperimentConfig(perturbations=("typo",), perturbation_params={"blur": {"sigma": 1}})
    with pytest.raises(ConfigError, match="perturbations apply to the retrieval task"):
        ExperimentConfig(task="classification", perturbations=("typo",))
    with pytest.raises(ConfigError, match=r"perturbation 'typo' takes no parameter 'rat'"):
        run_experiment(
            _syn_config(
                "linear",
                "exact",
                tmp_path,
                perturbations=("typo",),
                perturbation_params={"typo": {"rat": 0.2}},
            )
        )
    cfg = _syn_config("linear", "exact", tmp_path, perturbations=("typo",))
    with pytest.raises(TaskUnsupportedError, match="text embeddings are precomputed; name a text"):
        run_experiment(cfg, progress=False)


def test_perturbation_without_an_encoder_is_refused_before_any_work(tmp_path, monkeypatch):
    _no_fit(monkeypatch)
    cfg = _syn_config("linear", "exact", tmp_path, perturbations=("typo",))
    with pytest.raises(TaskUnsupportedError, match="name a text encoder"):
        run_experiment(cfg, progress=False)


def test_a_retrieval_cell_releases_the_method_state_before_its_last_search(tmp_path, monkeypatch):
    """ASIF's anchors are dropped once both aligned spaces exist (the last
    search runs without them), not when diagnostics follow; the metrics are
    those of a cell that keeps them."""
    from imsearch_align.methods.asif import ASIF

    real = ASIF.release_transform_state
    monkeypatch.setattr(ASIF, "release_transform_state", lambda self: None)
    kept = run_experiment(_syn_config("asif", "exact", tmp_path / "kept"), progress=False)
    calls = []

    def spy(self):
        calls.append(self.anchors_image_ is not None)
        real(self)

    monkeypatch.setattr(ASIF, "release_transform_state", spy)
    freed = run_experiment(_syn_config("asif", "exact", tmp_path / "freed"), progress=False)
    assert calls == [True] and freed.status.ok
    assert freed.metrics == pytest.approx(kept.metrics, abs=1e-12)
    calls.clear()
    diag = run_experiment(
        _syn_config("asif", "exact", tmp_path / "diag", diagnostics=True), progress=False
    )
    assert calls == [] and diag.status.ok and "aligned" in diag.diagnostics


def _image_table(path, seed, n=40):
    """A parquet of n random 32 x 32 PNG images with one caption each."""
    import io

    import pandas as pd
    from PIL import Image

    rng = np.random.default_rng(seed)
    cells = []
    for _ in range(n):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(buf, "PNG")
        cells.append(buf.getvalue())
    words = ["red", "blue", "square", "circle", "small", "large", "noisy", "plain"]
    caps = [" ".join(rng.choice(words, 4)) for _ in range(n)]
    pd.DataFrame({"image": cells, "caption": caps}).to_parquet(path)
    return str(path)


@pytest.mark.slow
def test_a_support_dataset_that_holds_test_images_makes_the_run_degraded(tmp_path):
    """The same data as support (another test_fraction): its pairs hold the
    evaluated test images, so the fit saw the test set: degraded, counted.
    Real encoders (each dataset encoded on its own), so the images are found
    by near-identical embeddings, not by equal bytes."""
    data = _image_table(tmp_path / "a.parquet", 0)
    cfg = ExperimentConfig(
        dataset="hf",
        dataset_params={"data": data, "test_fraction": 0.5, "seed": 1},
        support_dataset="hf",
        support_dataset_params={"data": data, "test_fraction": 0.0},
        n_support=40,
        method="procrustes",
        store="exact",
        cache_dir=str(tmp_path / "cache"),
        k_values=(1, 5),
    )
    res = run_experiment(cfg, output_dir=tmp_path / "out", progress=False)
    assert res.status.state == "degraded"
    assert any(
        "20 of 40 support pairs have an image that is also a test image" in r
        for r in res.status.reasons
    ), res.status.reasons
    # a support set of other images leaves the run ok
    other = _image_table(tmp_path / "b.parquet", 7)
    ok = run_experiment(
        cfg.replace(support_dataset_params={"data": other, "test_fraction": 0.0}),
        output_dir=tmp_path / "out2",
        progress=False,
    )
    assert ok.status.state == "ok", ok.status.reasons


def test_near_identical_rows_finds_equal_and_nearly_equal_rows_only():
    from imsearch_align.experiment.context import RowGather, near_identical_rows

    rng = np.random.default_rng(0)
    B = rng.standard_normal((50, 16)).astype(np.float32)
    A = rng.standard_normal((30, 16)).astype(np.float32)
    A[3] = B[10]
    A[7] = (
        2.5 * B[49] * (1 + 1e-7 * rng.standard_normal(16)).astype(np.float32)
    )  # scaled, perturbed
    A[9] = 0.0  # a missing embedding matches nothing
    A[11] = B[20] + 0.05 * rng.standard_normal(16).astype(np.float32)  # near, but another image
    for b in (B, RowGather.of_array(B, np.arange(50))):
        hit = near_identical_rows(A, b, 1 - 1e-4, block=8)
        assert np.flatnonzero(hit).tolist() == [3, 7]


def test_a_study_never_serves_one_roots_embeddings_for_another():
    """Two shapes datasets of the same layout (same relative paths, same
    fingerprint) under two roots hold other images: one Study embeds each."""
    import tempfile

    from imsearch_align.datasets import load_shapes
    from imsearch_align.experiment import Study

    class Widths:
        id, modality, dim = "widths-test", "image", 1

        def encode(self, items, **kw):
            from PIL import Image

            out = []
            for it in items:
                src = it if isinstance(it, str) else io.BytesIO(it)
                with Image.open(src) as im:
                    out.append([float(im.size[0])])
            return np.asarray(out, dtype=np.float32)

    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        small = load_shapes(a, n_images=20, size=32)
        large = load_shapes(b, n_images=20, size=96)
        assert small.fingerprint == large.fingerprint  # the layout alone
        study, cfg = Study(), ExperimentConfig(cache_dir=None)
        got = {}
        for name, ds in (("small", small), ("large", large)):
            ids = ds.split_ids("test", "image")
            rows = study.embeddings(
                ds, Widths(), "image", ids, split="test", config=cfg, progress=False
            )
            got[name] = set(np.asarray(rows).ravel().tolist())
        assert got == {"small": {32.0}, "large": {96.0}}


def test_the_run_seed_reaches_a_methods_own_random_choices():
    """Local CKA samples its base set: a seed sweep must vary it (the config's
    seed), unless method_params fix the method's seed."""
    from imsearch_align.experiment.components import make_method

    cfg = ExperimentConfig(method="cka", method_params={"base_size": 10})
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((50, 6)), rng.standard_normal((50, 5))
    bases = {}
    for seed in (0, 1, 2):
        m = make_method(cfg.replace(seed=seed))
        assert m.seed == seed
        bases[seed] = tuple(m.fit(X, Y).base_index_.tolist())
    assert len(set(bases.values())) == 3, bases
    fixed = cfg.replace(seed=2, method_params={"base_size": 10, "seed": 7})
    assert make_method(fixed).seed == 7


def test_geometry_never_compares_two_separate_models_raw_spaces(monkeypatch):
    """Equal dimensions are not a shared space: raw geometry only for one model
    (or precomputed vectors of one dimension); the entropy of a sparse space is
    skipped whatever its size."""
    import types

    import pandas as pd
    import scipy.sparse as sp

    from imsearch_align.diagnostics import diagnose
    from imsearch_align.experiment.geometry import space_diagnostics

    rng = np.random.default_rng(0)
    n = 40
    E = rng.standard_normal((n, 8)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)  # unit rows, as aligned spaces are

    def ctx_for(image_encoder, text_encoder):
        cfg = ExperimentConfig(image_encoder=image_encoder, text_encoder=text_encoder)
        ds = types.SimpleNamespace(
            texts=pd.DataFrame({"text_id": np.arange(n), "image_id": np.arange(n)})
        )
        return types.SimpleNamespace(
            dataset=ds,
            config=cfg,
            ids=lambda m: np.arange(n),
            aligned=lambda m: E,
            raw=lambda m: E if m == "image" else E[::-1].copy(),
            clock=lambda name: __import__("contextlib").nullcontext(),
        )

    sep = space_diagnostics(ctx_for("hf-image", "sentence-transformers"))
    assert "separate models" in sep["raw"]["skipped"] and "gap" in sep["aligned"]
    joint = space_diagnostics(ctx_for("clip", "clip"))
    assert "gap" in joint["raw"]
    pre = space_diagnostics(ctx_for(None, None))
    assert "gap" in pre["raw"]
    S = sp.random(30, 200, density=0.05, format="csr", random_state=1) + sp.eye(30, 200)
    S.data = np.abs(S.data)
    S = sp.csr_matrix(sp.diags(1 / np.sqrt(S.multiply(S).sum(axis=1).A1)) @ S)  # unit rows
    small = diagnose(S, S.copy(), k=3, seed=0)  # densified (small), still sparse data
    assert "not meaningful" in small["skipped"]["entropy"]


def test_what_is_asked_is_what_runs_or_it_is_refused(tmp_path):
    """A flag given as a string, a perturbation whose queries are not searched,
    a shapes folder holding another set, a grid value given twice: each was
    silently another experiment than the one asked for."""
    from imsearch_align.datasets import load_shapes
    from imsearch_align.experiment.sweep import grid

    with pytest.raises(ConfigError, match=r"'equal_weights' is a flag: expected true or false"):
        run_experiment(
            _syn_config("csa", "exact", tmp_path).replace(method_params={"equal_weights": "False"}),
            progress=False,
        )
    cfg = _syn_config("linear", "exact", tmp_path, perturbations=("typo",), directions=("i2t",))
    with pytest.raises(TaskUnsupportedError, match=r"queries only in t2i.*dropped"):
        run_experiment(cfg, progress=False)
    load_shapes(tmp_path / "s", n_images=20, size=32, seed=0)
    with pytest.raises(ValueError, match=r"already holds a shapes set with .*'n_images': 20"):
        load_shapes(tmp_path / "s", n_images=40, size=32, seed=0)
    base = _syn_config("linear", "exact", tmp_path)
    cells = grid(base, methods=["linear", "linear"], n_values=[100, 100, None])
    assert [(c.method, c.n_support) for c in cells] == [("linear", 100), ("linear", None)]
