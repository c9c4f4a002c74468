"""Tie-aware experiments: exact stores agree on data full of near-duplicates.

Stores round equal inner products differently in the last bits, so under the
id-ascending tie rule they can disagree; the expected value over tie orders
must be the same for every exact store (to 1e-9), every store's tie-rule
value must lie within the reported bounds, and the leaderboard must show
the bounds and the number of tie-dependent queries.
"""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.experiment import ConfigError, ExperimentConfig, run_experiment

EXACT_STORES = {
    "exact": {},
    "faiss": {"index": "flat"},
    "lancedb": {},
    "qdrant": {},
    "milvus": None,  # Milvus Lite file, FLAT
}


def _near_duplicates(tmp_path):
    """120 images in 30 groups of 4 near-identical vectors (relative noise 1e-7),
    two near-identical captions each: most rankings hold tie groups."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((30, 32)).astype(np.float32)
    X = np.repeat(centres, 4, axis=0) * (1 + 1e-7 * rng.standard_normal((120, 32))).astype(
        np.float32
    )
    Y = np.repeat(X, 2, axis=0) * (1 + 1e-7 * rng.standard_normal((240, 32))).astype(np.float32)
    np.save(tmp_path / "image.npy", X)
    np.save(tmp_path / "text.npy", Y)
    return {
        "image_path": str(tmp_path / "image.npy"),
        "text_path": str(tmp_path / "text.npy"),
        "test_fraction": 0.5,
    }


def _cfg(tmp_path, store, params):
    return ExperimentConfig(
        dataset="precomputed",
        dataset_params=_near_duplicates(tmp_path),
        image_encoder=None,
        text_encoder=None,
        method="identity",
        store=store,
        store_params=params if params is not None else {"uri": str(tmp_path / "lite.db")},
        cache_dir=None,
        k_values=(1, 5),
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = {}
    for store, params in EXACT_STORES.items():
        pytest.importorskip(
            {
                "faiss": "faiss",
                "lancedb": "lancedb",
                "qdrant": "qdrant_client",
                "milvus": "pymilvus",
            }.get(store, "numpy")
        )
        tmp = tmp_path_factory.mktemp(store)
        out[store] = run_experiment(
            _cfg(tmp, store, params), output_dir=tmp / "res", progress=False
        )
    return out


def test_exact_stores_give_equal_tie_aware_metrics(results):
    ref = results["exact"]
    assert ref.status.ok
    dependent = sum(r.n_tie_dependent for r in ref.rankings.values())
    assert dependent > 0, "the data must make some queries depend on tie order"
    for store, res in results.items():
        assert res.status.ok, (store, res.status)
        for name, r in res.rankings.items():
            assert r.ties["groups"] == "closed", (store, name)
            for m, v in ref.rankings[name].metrics.items():
                assert r.metrics[m] == pytest.approx(v, abs=1e-9), (store, name, m)


def test_every_store_tie_rule_value_lies_within_the_bounds(results):
    for store, res in results.items():
        for name, r in res.rankings.items():
            for m, t in r.ties["measures"].items():
                assert t["low"] - 1e-12 <= r.tie_rule[m] <= t["high"] + 1e-12, (store, name, m)
                assert t["low"] - 1e-12 <= r.metrics[m] <= t["high"] + 1e-12, (store, name, m)


@pytest.mark.integration
def test_a_real_milvus_235_flat_server_gives_the_same_tie_aware_metrics(
    results, milvus_standalone, tmp_path
):
    """The issue's check on a real Milvus 2.3.5 standalone (FLAT, over gRPC):
    tie-aware metrics equal ExactStore's to 1e-9, its tie-rule values within the bounds."""
    pytest.importorskip("pymilvus")
    res = run_experiment(
        _cfg(tmp_path, "milvus", {"uri": milvus_standalone.uri, "index": "FLAT"}),
        output_dir=tmp_path / "res",
        progress=False,
    )
    assert res.status.ok, res.status
    ref = results["exact"]
    for name, r in res.rankings.items():
        assert r.ties["groups"] == "closed", name
        for m, v in ref.rankings[name].metrics.items():
            assert r.metrics[m] == pytest.approx(v, abs=1e-9), (name, m)
        for m, t in r.ties["measures"].items():
            assert t["low"] - 1e-12 <= r.tie_rule[m] <= t["high"] + 1e-12, (name, m)


def test_the_leaderboard_and_console_show_the_bounds(results, tmp_path):
    from imsearch_align.leaderboard import results_frame, to_markdown

    md = to_markdown(results_frame(list(results.values())))
    assert "range over tie orders" in md and "tie-dependent queries" in md
    text = results["exact"].summary()
    assert "queries depend on tie order" in text and "groups closed" in text


@pytest.mark.parametrize("tol", [-1e-6, float("nan"), float("inf")])
def test_a_bad_tie_tolerance_is_refused(tol):
    with pytest.raises(ConfigError, match="tie_tolerance"):
        ExperimentConfig(tie_tolerance=tol)


def test_tolerance_zero_ties_only_equal_scores(tmp_path):
    res = run_experiment(_cfg(tmp_path, "exact", {}).replace(tie_tolerance=0.0), progress=False)
    assert all(r.ties["tolerance"] == 0.0 for r in res.rankings.values())


# ----------------------------------------------------------------------------- gaps near tol

_JITTER = "test-jitter-exact"


def _jitter_store():
    """An exact store whose scores carry a rounding-like error of up to 0.45 of
    the default tolerance (a fixed function of the doc id), ranked by them, as a
    store summing in another order would: its gaps differ from ExactStore's by
    up to 0.9 tol, so a gap near tol links in one store and not in the other."""
    from imsearch_align.adapters.exact import ExactStore
    from imsearch_align.framework.interfaces import SearchResult
    from imsearch_align.framework.registry import STORES
    from imsearch_align.framework.ties import default_tolerance

    if _JITTER not in STORES.names():

        @STORES.register(_JITTER)
        class JitterExact(ExactStore):
            def search(self, name, queries, k):
                res = super().search(name, queries, k + 8)
                tol = default_tolerance(int(queries.shape[1]))
                wobble = ((res.ids * 2654435761) % 1000) / 1000.0 - 0.5  # in [-0.5, 0.5)
                sc = np.where(res.ids >= 0, res.scores + 0.9 * tol * wobble, -np.inf)
                order = np.lexsort((res.ids, -sc), axis=1)[:, :k]
                ids = np.take_along_axis(res.ids, order, axis=1)
                return SearchResult(ids, np.take_along_axis(sc, order, axis=1))

    return _JITTER


def _gaps_near_tol(tmp_path):
    """Images: unit vectors in 30 groups of 6 whose members differ by about the
    default tolerance (noise 1.5e-5 at d = 32, tol = 4.8e-6); captions: their
    images with a large noise, so a caption's score gaps between the members of
    its image's group fall near tol, where float32 scores cannot say whether
    two documents tie."""
    rng = np.random.default_rng(1)
    centres = rng.standard_normal((30, 32))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    X = np.repeat(centres, 6, axis=0) + 1.5e-5 * rng.standard_normal((180, 32))
    Y = np.repeat(X, 2, axis=0) + 0.15 * rng.standard_normal((360, 32))
    for name, a in (("image", X), ("text", Y)):
        a = a / np.linalg.norm(a, axis=1, keepdims=True)
        np.save(tmp_path / f"{name}.npy", a.astype(np.float32))
    return {
        "image_path": str(tmp_path / "image.npy"),
        "text_path": str(tmp_path / "text.npy"),
        "test_fraction": 0.5,
    }


def test_gaps_near_the_tolerance_group_alike_in_every_store(tmp_path):
    """Groups are formed from float64 scores of the vectors where float32 scores
    cannot decide them: a store with other rounding, FAISS flat and Milvus Lite
    give ExactStore's tie-aware metrics to 1e-9 on data whose gaps sit at tol."""
    from imsearch_align.adapters.exact import ExactStore
    from imsearch_align.framework.metrics import Run
    from imsearch_align.framework.ties import default_tolerance, tie_groups

    (tmp_path / "data").mkdir()
    params = _gaps_near_tol(tmp_path / "data")
    # The data is discriminating: the two stores' own scores group differently.
    X = np.load(params["image_path"])
    Y = np.load(params["text_path"])
    tol = default_tolerance(32)
    runs = []
    for store in (ExactStore(), __import__("imsearch_align").STORES.get(_jitter_store())()):
        store.create_collection("c", 32)
        store.insert("c", X, np.arange(len(X)))
        r = store.search("c", Y, 12)
        runs.append(Run.from_arrays(np.arange(len(Y)), r.ids, r.scores))
    split = [
        i
        for i in range(len(Y))
        if len(np.unique(tie_groups(runs[0], tol=tol)[i, :6]))
        != len(np.unique(tie_groups(runs[1], tol=tol)[i, :6]))
    ]
    assert len(split) >= 10, "the data must put store-dependent gaps near tol"

    stores = {"exact": {}, _jitter_store(): {}, "faiss": {"index": "flat"}, "milvus": None}
    out = {}
    for store, p in stores.items():
        (tmp_path / store).mkdir()
        if store == "faiss":
            pytest.importorskip("faiss")
        if store == "milvus":
            pytest.importorskip("pymilvus")
            pytest.importorskip("milvus_lite")
        cfg = _cfg(tmp_path / store, store, p).replace(dataset_params=params)
        out[store] = run_experiment(cfg, output_dir=tmp_path / f"res_{store}", progress=False)
    ref = out["exact"]
    assert sum(r.n_tie_dependent for r in ref.rankings.values()) > 0
    for store, res in out.items():
        assert res.status.ok, (store, res.status)
        assert res.rankings["t2i"].ties["rows_rescored"] > 0, store
        for name, r in res.rankings.items():
            assert r.ties["groups"] == "closed", (store, name)
            assert r.ties["rows_rescored"] is not None, (store, name)
            for m, v in ref.rankings[name].metrics.items():
                assert r.metrics[m] == pytest.approx(v, abs=1e-9), (store, name, m)
            for m, t in r.ties["measures"].items():
                assert t["low"] - 1e-12 <= r.tie_rule[m] <= t["high"] + 1e-12, (store, name, m)


@pytest.mark.integration
def test_gaps_near_the_tolerance_on_a_real_milvus_235_flat_server(milvus_standalone, tmp_path):
    """The same data on a real Milvus 2.3.5 standalone (FLAT, over gRPC): ExactStore's
    tie-aware metrics to 1e-9."""
    pytest.importorskip("pymilvus")
    (tmp_path / "data").mkdir()
    params = _gaps_near_tol(tmp_path / "data")
    res = {}
    for store, p in (("exact", {}), ("milvus", {"uri": milvus_standalone.uri, "index": "FLAT"})):
        (tmp_path / store).mkdir()
        cfg = _cfg(tmp_path / store, store, p).replace(dataset_params=params)
        res[store] = run_experiment(cfg, output_dir=tmp_path / f"res_{store}", progress=False)
    assert res["milvus"].status.ok, res["milvus"].status
    for name, r in res["milvus"].rankings.items():
        assert r.ties["groups"] == "closed", name
        for m, v in res["exact"].rankings[name].metrics.items():
            assert r.metrics[m] == pytest.approx(v, abs=1e-9), (name, m)
