"""Tie-aware experiments: exact stores agree on data full of near-duplicates.

Stores round equal inner products differently in the last bits, so under the
id-ascending tie rule they can disagree; the expected value over the orders
of truly tied documents (float64 scores of the vectors) must be the same for
every exact store (to 1e-9) and lie within the reported bounds, and the
leaderboard must show the bounds and the number of tie-dependent queries.
"""

from __future__ import annotations

from pathlib import Path

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
    """120 images in 30 groups of 4: two identical vectors and two near-identical
    ones (relative noise 1e-7, below what a float32 score can order); two
    captions each, one of them near-identical. The identical vectors tie (equal
    true scores); the near-identical ones differ only in float64."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((30, 32)).astype(np.float32)
    noisy = (np.arange(120) % 4 >= 2)[:, None]
    X = np.repeat(centres, 4, axis=0) * np.where(
        noisy, 1 + 1e-7 * rng.standard_normal((120, 32)), 1.0
    ).astype(np.float32)
    Y = np.repeat(X, 2, axis=0) * np.where(
        (np.arange(240) % 2 == 1)[:, None], 1 + 1e-7 * rng.standard_normal((240, 32)), 1.0
    ).astype(np.float32)
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


def test_every_store_value_lies_within_the_bounds(results):
    # The bounds span the orders of truly tied documents (equal true scores);
    # a store's own tie-rule value may order near-duplicates otherwise.
    for store, res in results.items():
        for name, r in res.rankings.items():
            for m, t in r.ties["measures"].items():
                assert t["low"] - 1e-12 <= r.metrics[m] <= t["high"] + 1e-12, (store, name, m)


def test_per_query_file_holds_the_values_the_means_are_reported_from(results):
    """The per-query parquet's measure columns average to the headline metrics
    (tie-aware), not to the store's tie-rule means (which differ on this data)."""
    import pandas as pd

    for store, res in results.items():
        pq = pd.read_parquet(Path(res.path).with_name(res.per_query_file))
        differs = 0
        for name, r in res.rankings.items():
            rows = pq[pq["ranking"] == name]
            for m, v in r.metrics.items():
                if m not in r.tie_rule:
                    continue
                assert rows[m].notna().all()
                assert rows[m].mean() == pytest.approx(v, abs=1e-12), (store, name, m)
                differs += int(abs(v - r.tie_rule[m]) > 1e-9)
        assert differs, f"{store}: ties must move some measure on this data"


@pytest.mark.integration
def test_a_real_milvus_235_flat_server_gives_the_same_tie_aware_metrics(
    results, milvus_standalone, tmp_path
):
    """The issue's check on a real Milvus 2.3.5 standalone (FLAT, over gRPC):
    tie-aware metrics equal ExactStore's to 1e-9 and lie within the bounds."""
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
            assert t["low"] - 1e-12 <= r.metrics[m] <= t["high"] + 1e-12, (name, m)


def test_the_leaderboard_and_console_show_the_bounds(results, tmp_path):
    from imsearch_align.leaderboard import results_frame, to_markdown

    md = to_markdown(results_frame(list(results.values())))
    assert "range over tie orders" in md and "tie-dependent queries" in md
    text = results["exact"].summary()
    assert "queries depend on tie order" in text and "groups closed" in text
    assert "x max(1, |score|)" in text and "relative" not in text
    for name, r in results["exact"].rankings.items():  # the headline measure's own count
        dep = r.ties["measures"]["HitRate@1"]["n_tie_dependent"]
        assert (f"{name}: {dep} queries depend on tie order, HitRate@1" in text) == (dep > 0)


def test_the_console_names_every_ranking_whose_groups_stay_open(results):
    """Each ranking's groups text is shown where it is not "closed" (not only
    the last ranking's), with the error bound the rows were rescored within."""
    import dataclasses

    res = results["exact"]
    names = list(res.rankings)
    assert len(names) >= 2
    first = res.rankings[names[0]]
    opened = dataclasses.replace(
        first, ties={**first.ties, "groups": "closed by the exact store except 3 rows"}
    )
    task = dataclasses.replace(res.task, rankings={**res.task.rankings, names[0]: opened})
    text = dataclasses.replace(res, task=task).summary()
    assert f"{names[0]}: groups closed by the exact store except 3 rows" in text
    assert "groups closed;" not in text and "; groups closed" not in text
    bound = first.ties["error_bound"]
    assert f"float32 error bound {bound:.2g}" in text


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
    """Rows are ordered by float64 scores of the vectors where float32 scores
    cannot decide them: a store with other rounding, FAISS flat and Milvus Lite
    give ExactStore's tie-aware metrics to 1e-9 on data whose gaps sit at the
    error bound (the gaps are not ties: no value depends on tie order)."""
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
    # Gaps near the error bound are not ties: the true (float64) order decides them.
    assert sum(r.n_tie_dependent for r in ref.rankings.values()) == 0
    for store, res in out.items():
        assert res.status.ok, (store, res.status)
        assert res.rankings["t2i"].ties["rows_rescored"] > 0, store
        for name, r in res.rankings.items():
            assert r.ties["groups"] == "closed", (store, name)
            assert r.ties["rows_rescored"] is not None, (store, name)
            for m, v in ref.rankings[name].metrics.items():
                assert r.metrics[m] == pytest.approx(v, abs=1e-9), (store, name, m)


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


def test_scores_crowded_below_the_error_bound_are_scored_by_their_true_order(tmp_path):
    """Local CKA's scores crowd within float32's error bound (about 1e-7 apart
    around 0.2): every neighbour pair is a near-tie. Chaining them into tie
    groups made one group of the whole collection and halved HitRate@1. Here
    every image sits within 6e-5 of one centre, so per caption neighbouring
    image scores are mostly closer than the default error bound at d = 32
    (4.8e-6); the reported values must be those of the true (float64) ranking."""
    from imsearch_align.datasets.precomputed import load_precomputed
    from imsearch_align.framework.ties import default_tolerance
    from imsearch_align.methods.identity import Identity

    rng = np.random.default_rng(5)
    c = rng.standard_normal(32)
    dev = rng.standard_normal((120, 32))
    dev /= np.linalg.norm(dev, axis=1, keepdims=True)
    X = c + 6e-5 * np.linalg.norm(c) * dev
    # a caption leans towards its image's deviation, through noise
    z = rng.standard_normal((240, 32)) / np.sqrt(32)
    Y = c + 0.5 * np.linalg.norm(c) * (0.3 * np.repeat(dev, 2, axis=0) + 0.8 * z)
    for name, a in (("image", X), ("text", Y)):
        np.save(tmp_path / f"{name}.npy", a.astype(np.float32))
    params = {
        "image_path": str(tmp_path / "image.npy"),
        "text_path": str(tmp_path / "text.npy"),
        "test_fraction": 0.5,
    }
    # The oracle: the test split's indexed vectors (the identity method's
    # transform of its rows), ranked by float64 inner products.
    ds = load_precomputed(**params).dataset
    ti, tt = ds.split_ids("test", "image"), ds.split_ids("test", "text")
    m = Identity().fit(X[:4].astype(np.float32), Y[:4].astype(np.float32))
    Xi = m.transform_images(np.load(tmp_path / "image.npy")[ti])
    Yi = m.transform_texts(np.load(tmp_path / "text.npy")[tt])
    S = Yi.astype(np.float64) @ Xi.astype(np.float64).T  # (test captions, test images)
    gold = np.searchsorted(ti, tt // 2)
    nq = len(tt)
    gs = S[np.arange(nq), gold]
    # the data is crowded: neighbouring scores are mostly within the error bound,
    # so chains of near-ties run through most of each caption's ranking
    gaps = -np.diff(np.sort(S, axis=1)[:, ::-1], axis=1)
    assert np.median(gaps) < default_tolerance(32) / 2
    # and decidable in float64: no image scores within 1e-12 of the relevant one
    others = np.abs(S - gs[:, None])
    others[np.arange(nq), gold] = np.inf
    assert others.min() > 1e-12
    rank = (S > gs[:, None]).sum(1)  # images strictly above the relevant one
    want = {f"HitRate@{k}": float((rank < k).mean()) for k in (1, 5)}
    assert 0.05 < want["HitRate@1"] < 0.95  # not trivial either way

    for store, p in (("exact", {}), ("faiss", {"index": "flat"})):
        if store == "faiss":
            pytest.importorskip("faiss")
        (tmp_path / store).mkdir()
        cfg = _cfg(tmp_path / store, store, p).replace(dataset_params=params)
        res = run_experiment(cfg, output_dir=tmp_path / f"res_{store}", progress=False)
        assert res.status.ok, (store, res.status)
        r = res.rankings["t2i"]
        assert r.n_queries == nq
        for m, v in want.items():
            assert r.metrics[m] == pytest.approx(v, abs=1e-12), (store, m, r.ties)
            assert r.ties["measures"][m]["n_tie_dependent"] == 0, (store, m)
