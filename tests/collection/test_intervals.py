"""Clustered bootstrap intervals of a cell's task quality and the non-inferiority rule
(issue 37): checked against a naive gather implementation, the plain row bootstrap,
known coverage on synthetic clustered data, and hand-built cells."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from imsearch_align.collection.intervals import (
    clustered_bootstrap,
    interval_meta,
    quality_intervals,
)
from imsearch_align.experiment.deploy import (
    as_good_as_exact,
    check_delta,
    deploy_by_quality,
    deploy_index,
)
from imsearch_align.framework.metrics.result import bootstrap_ci

# Beta(0.5, 0.5) hit rates per image: intra-cluster correlation 1 / (a + b + 1) = 0.5,
# so 5 captions per image carry the information of about 5 / 3 independent queries.
A, B, N_IMAGES, PER_IMAGE = 0.5, 0.5, 300, 5
FLIP_A, FLIP_B = 1.0, 9.0  # per-image chance an approximate index loses a hit, mean 0.1
TRUE_MEAN = A / (A + B)
TRUE_DIFFERENCE = -TRUE_MEAN * FLIP_A / (FLIP_A + FLIP_B)  # p and q independent
SEEDS = 200


def clustered_hits(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(approximate, exact, image)``: per-caption hits of exact search, Bernoulli of
    its image's Beta rate, and of an index losing each hit with its image's Beta chance."""
    rng = np.random.default_rng(seed)
    p = rng.beta(A, B, N_IMAGES)
    exact = (rng.random((N_IMAGES, PER_IMAGE)) < p[:, None]).astype(np.float64).ravel()
    q = rng.beta(FLIP_A, FLIP_B, N_IMAGES)
    lost = (rng.random((N_IMAGES, PER_IMAGE)) < q[:, None]).ravel()
    approx = np.where(lost, 0.0, exact)
    return approx, exact, np.repeat(np.arange(N_IMAGES), PER_IMAGE)


def naive_clustered(values, clusters, n_resamples, level, seed):
    """The scheme written out: draw cluster positions (ids in sorted order), gather
    every query of each drawn cluster, take the mean of the gathered values."""
    uniq = np.unique(clusters)
    members = [np.flatnonzero(clusters == u) for u in uniq]
    draws = np.random.default_rng(seed).integers(0, len(uniq), size=(n_resamples, len(uniq)))
    means = np.array([values[np.concatenate([members[j] for j in row])].mean(0) for row in draws])
    alpha = (1 - level) / 2
    return np.quantile(means, alpha, axis=0), np.quantile(means, 1 - alpha, axis=0)


def coverage(interval, truth: float) -> float:
    """Share of :data:`SEEDS` data sets whose interval ``interval(seed)`` holds ``truth``."""
    hits = 0
    for seed in range(SEEDS):
        low, high = interval(seed)
        hits += low <= truth <= high
    return hits / SEEDS


def test_without_clusters_it_is_the_row_bootstrap():
    v = np.random.default_rng(3).random((500, 3))
    mean, low, high = clustered_bootstrap(v, n_resamples=300, seed=7)
    np.testing.assert_allclose(mean, v.mean(axis=0), rtol=0, atol=1e-12)
    lo, hi = bootstrap_ci(v, n_resamples=300, seed=7)
    np.testing.assert_allclose(low, lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(high, hi, rtol=0, atol=1e-12)
    # one id per query, given explicitly, is the same scheme
    same = clustered_bootstrap(v, np.arange(500), n_resamples=300, seed=7)
    np.testing.assert_allclose(np.array(same), np.array([mean, low, high]), rtol=0, atol=1e-12)


def test_clustered_draws_equal_a_naive_gather():
    rng = np.random.default_rng(4)
    clusters = rng.integers(0, 40, 230) * 3 + 5  # uneven sizes, ids not 0..G-1
    v = rng.random((230, 2))
    mean, low, high = clustered_bootstrap(v, clusters, n_resamples=250, level=0.9, seed=11)
    lo, hi = naive_clustered(v, clusters, 250, 0.9, 11)
    np.testing.assert_allclose(mean, v.mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(low, lo, rtol=0, atol=1e-12)
    np.testing.assert_allclose(high, hi, rtol=0, atol=1e-12)


def test_clustered_interval_covers_and_ignoring_clusters_does_not():
    def interval(clusters_used: bool):
        def one(seed: int):
            _, exact, image = clustered_hits(seed)
            c = image if clusters_used else None
            _, low, high = clustered_bootstrap(exact, c, n_resamples=400, seed=seed)
            return low[0], high[0]

        return one

    assert 0.92 <= coverage(interval(True), TRUE_MEAN) <= 0.98
    assert coverage(interval(False), TRUE_MEAN) < 0.85  # captions treated as independent


def test_paired_difference_covers_the_expected_loss():
    def one(seed: int):
        approx, exact, image = clustered_hits(seed)
        d = quality_intervals({"h": approx}, {"h": exact}, image, n_resamples=400, seed=seed)
        return d["h"]["difference"]["low"], d["h"]["difference"]["high"]

    assert 0.92 <= coverage(one, TRUE_DIFFERENCE) <= 0.98


def test_paired_difference_by_hand():
    exact = np.zeros(1000)
    exact[:600] = 1.0
    approx = exact.copy()
    approx[np.arange(0, 600, 20)] = 0.0  # 30 of the 600 hits lost
    image = np.arange(1000) // 4
    out = quality_intervals({"h": approx}, {"h": exact}, image, seed=2)["h"]
    assert out["difference"]["mean"] == pytest.approx(approx.mean() - exact.mean(), abs=1e-12)
    assert out["difference"]["mean"] == pytest.approx(-0.03, abs=1e-12)
    assert out["difference"]["low"] < -0.03 < out["difference"]["high"] <= 0.0
    for part, v in (("approximate", approx), ("exact", exact)):
        m, lo, hi = clustered_bootstrap(v, image, seed=2)  # the same draws, one column
        assert (out[part]["mean"], out[part]["low"], out[part]["high"]) == pytest.approx(
            (m[0], lo[0], hi[0]), abs=1e-12
        )
    same = quality_intervals({"h": exact}, {"h": exact}, image, seed=2)["h"]["difference"]
    assert (same["mean"], same["low"], same["high"]) == (0.0, 0.0, 0.0)


def test_output_is_json_ready_and_deterministic_with_string_ids():
    rng = np.random.default_rng(5)
    approx = {"t2i/HitRate@10": rng.random(90), "t2i/nDCG@10": rng.random(90)}
    exact = {k: np.clip(v + 0.05, 0, 1) for k, v in approx.items()}
    ints = np.arange(90) // 3
    strings = [f"img{i:03d}" for i in ints]  # sorts as the ints do: the same clusters
    first = quality_intervals(approx, exact, strings, n_resamples=200, seed=9)
    assert first == quality_intervals(approx, exact, strings, n_resamples=200, seed=9)
    assert first == quality_intervals(approx, exact, ints, n_resamples=200, seed=9)
    assert first != quality_intervals(approx, exact, strings, n_resamples=200, seed=10)
    assert list(first) == list(approx)
    for parts in first.values():
        assert set(parts) == {"approximate", "exact", "difference"}
        for q in parts.values():
            assert set(q) == {"mean", "low", "high"}
            assert all(type(x) is float for x in q.values())
            assert q["low"] <= q["mean"] <= q["high"]
    json.dumps(first, allow_nan=False)
    meta = interval_meta(strings, 90, n_resamples=200, seed=9)
    assert meta == {
        "method": "percentile bootstrap, queries resampled by cluster",
        "level": 0.95,
        "resamples": 200,
        "seed": 9,
        "queries": 90,
        "clusters": 30,
    }
    assert interval_meta(None, 90)["clusters"] == 90
    json.dumps(meta, allow_nan=False)


def test_empty_input_gives_nan_and_bad_input_is_refused():
    mean, low, high = clustered_bootstrap(np.empty((0, 2)), [])
    assert mean.shape == low.shape == high.shape == (2,)
    assert np.isnan(np.concatenate([mean, low, high])).all()
    empty = quality_intervals({"h": []}, {"h": []})["h"]
    assert all(math.isnan(x) for q in empty.values() for x in q.values())
    v = np.ones(10)
    with pytest.raises(ValueError, match="clusters"):
        clustered_bootstrap(v, np.arange(9))
    with pytest.raises(ValueError, match="level"):
        clustered_bootstrap(v, level=1.0)
    with pytest.raises(ValueError, match="level"):
        clustered_bootstrap(v, level=0)
    with pytest.raises(ValueError, match="n_resamples"):
        clustered_bootstrap(v, n_resamples=0)
    with pytest.raises(ValueError, match="finite"):
        clustered_bootstrap(np.array([0.5, np.nan]))
    with pytest.raises(ValueError, match=r"exact\['h'\]"):
        quality_intervals({"h": v}, {"h": v[:9]})
    with pytest.raises(ValueError, match="same measures"):
        quality_intervals({"h": v}, {"g": v})


def cell(qps: float, recall: float, low: float, state: str = "ok") -> dict:
    return {
        "status": {"state": state},
        "queries_per_s": qps,
        "ann_recall": {"mean": recall},
        "intervals": {"t2i/HitRate@10": {"difference": {"mean": low + 0.01, "low": low}}},
    }


def test_deploy_by_quality_disagrees_with_the_recall_rule():
    measure = "t2i/HitRate@10"
    fast = cell(9000.0, 0.92, -0.05)  # recall passes 0.9 but loses hits
    medium = cell(5000.0, 0.85, -0.008)  # recall below 0.9, within 0.01 of exact
    slow = cell(800.0, 0.999, 0.001)
    cells = [slow, None, fast, medium]
    assert deploy_index(cells) == 2  # the recall rule takes the fast one
    assert deploy_by_quality(cells, measure, 0.01) == 3
    assert deploy_by_quality(cells, measure, 0.0) == 0  # only low >= 0 passes
    assert deploy_by_quality(cells, measure, 0.1) == 2
    # a failed or degraded cell is never picked, however fast and good
    broken = [cell(1e6, 1.0, 0.0, "failed"), cell(1e6, 1.0, 0.0, "degraded"), medium]
    assert deploy_by_quality(broken, measure, 0.01) == 2
    # NaN or missing bounds never pass; cells without the measure are skipped
    nan = cell(1e6, 1.0, float("nan"))
    bare = {"status": {"state": "ok"}, "queries_per_s": 1e6}
    assert deploy_by_quality([nan, bare, medium], measure, 0.01) == 2
    assert deploy_by_quality([medium], "i2t/HitRate@10", 1.0) is None
    assert deploy_by_quality([fast, nan, None], measure, 0.01) is None
    assert deploy_by_quality([], measure, 0.01) is None
    # ties on q/s: the earlier position
    assert deploy_by_quality([cell(5.0, 0.9, 0.0), cell(5.0, 0.9, 0.0)], measure, 0.0) == 0


def test_as_good_as_exact():
    assert as_good_as_exact(-0.01, 0.01)
    assert not as_good_as_exact(-0.0101, 0.01)
    assert as_good_as_exact(0.0, 0.0)
    assert not as_good_as_exact(float("nan"), 1.0)


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "x", None])
def test_check_delta_refuses(bad):
    with pytest.raises(ValueError) as err:
        check_delta(bad)
    message = str(err.value)
    assert message.startswith("--deploy-delta: expected a number in [0, 1], got ")
    assert repr(bad) in message and "\n" not in message


@pytest.mark.parametrize("good", [0, 0.01, 1, np.float32(0.5)])
def test_check_delta_accepts(good):
    assert check_delta(good) == float(good)
    assert type(check_delta(good)) is float


def test_a_study_cell_carries_intervals_and_the_table_both_deploy_rules(tmp_path):
    """End to end: every task measure of a sweep cell has its interval and the paired
    difference, the difference's mean is the cell's approximate minus exact value (a direct
    formula), the clusters are the images (two captions each), and the CSV marks the
    setting each rule deploys."""
    import pandas as pd

    from imsearch_align.study import StudySpec, run_study
    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 120)
    spec = StudySpec(embeddings=str(emb), stores=("faiss",), index=("faiss:ivf_flat",),
                     methods=("procrustes",), sizes=(2000,), queries=120, latency_queries=2,
                     out=str(tmp_path / "o"), truth_cache=str(tmp_path / "t"))  # fmt: skip
    result = run_study(spec, progress=False)
    assert result.cells
    for cell in result.cells:
        assert cell["interval"]["clusters"] * 2 == cell["interval"]["queries"] == cell["queries"]
        assert set(cell["intervals"]) == set(cell["exact_metrics"])
        for key, iv in cell["intervals"].items():
            a, e, diff = iv["approximate"], iv["exact"], iv["difference"]
            assert a["mean"] == pytest.approx(cell["metrics"][key], abs=1e-12)
            assert e["mean"] == pytest.approx(cell["exact_metrics"][key], abs=1e-12)
            assert diff["mean"] == pytest.approx(a["mean"] - e["mean"], abs=1e-12)
            for part in (a, e, diff):
                assert part["low"] <= part["mean"] <= part["high"]
        # the per-query table beside the cell explains its means, query by query
        from imsearch_align.collection.per_query import read_per_query

        files = [p for p in (tmp_path / "o").glob("*.json") if p.stem in cell["per_query"]]
        pq = read_per_query(files[0])
        assert len(pq) == cell["queries"] and pq["cluster"].nunique() * 2 == len(pq)
        for key in cell["intervals"]:
            m = key.split("/", 1)[1]
            assert pq[m].mean() == pytest.approx(cell["metrics"][key], abs=1e-12)
            assert pq[f"{m} exact"].mean() == pytest.approx(cell["exact_metrics"][key], abs=1e-12)
            assert (pq[f"{m} diff"] == pq[m] - pq[f"{m} exact"]).all()
        assert pq["ann_recall"].mean() == pytest.approx(cell["metrics"]["t2i/ann_recall@10"])
        assert all(len(r) == 10 for r in pq["returned"])
    df = pd.read_csv(tmp_path / "o" / "collection.csv", keep_default_na=False)
    assert {"HitRate@10 low", "HitRate@10 high", "vs exact low", "deploy"} <= set(df.columns)
    assert (df["deploy"].isin(["recall", "both"])).sum() == 1  # one per build
    assert (df["deploy"].isin(["quality", "both"])).sum() <= 1
    # the HTML report rings the same settings, labelled by rule, with the study's delta
    from imsearch_align.report_html.collect import collect
    from imsearch_align.report_html.page import _figures, build_page

    (fig,) = [f for f in _figures(collect(tmp_path / "o"))["quality-vs-qps"] if f.chart.marks]
    label = {"recall": "R", "quality": "Q", "both": "R+Q"}
    want = sorted((float(r["q/s"]), label[r["deploy"]]) for _, r in df.iterrows() if r["deploy"])
    got = sorted(fig.chart.marks)
    assert [t for *_, t in got] == [t for _, t in want]
    assert [x for x, *_ in got] == pytest.approx([x for x, _ in want], rel=1e-3)
    assert "more than 0.01 at 95 %" in fig.caption
    assert build_page(collect(tmp_path / "o")).count('r="9" fill="none"') == len(want)


def test_deploy_marks_apply_both_rules_build_by_build():
    from imsearch_align.experiment.deploy import deploy_marks

    def cell(method, nprobe, qps, recall, low):
        return {
            "method": method, "direction": "t2i", "store": "faiss", "n_support": 10,
            "index": {"type": "ivf_flat", "params": {"nlist": 8}, "search_params": {"nprobe": nprobe}},
            "collection": {"size": 100, "distractors": 50},
            "status": {"state": "ok"}, "queries_per_s": qps, "ann_recall": {"mean": recall},
            "intervals": {"t2i/HitRate@10": {"difference": {"low": low}}},
        }  # fmt: skip

    cells = [
        cell("csa", 1, 900.0, 0.95, -0.04),  # recall rule's pick, task quality lost
        cell("csa", 4, 500.0, 0.97, -0.005),  # the quality rule's pick
        cell("procrustes", 1, 800.0, 0.99, 0.0),  # its own build: both rules pick it
        cell("procrustes", 4, 300.0, 1.0, 0.0),
    ]
    assert deploy_marks(cells, "HitRate@10", 0.01) == ["recall", "quality", "both", ""]
    assert deploy_marks(cells, "HitRate@10", 0.05) == ["both", "", "both", ""]


def test_the_report_draws_each_methods_own_frontier():
    """Two methods at one size: one chart each, each with its own frontier (a pooled one
    would drop the slower method's every point)."""
    from imsearch_align.report_html.quality import QualityPoint, qps_figures

    def pt(method, qps, quality):
        return QualityPoint(size=100, series=f"faiss hnsw · {method}", method=method, qps=qps,
                            quality=quality, metric="t2i/HitRate@10", exact=False,
                            params=f"ef={qps}", ann_recall=None, source="")  # fmt: skip

    figs = qps_figures([pt("csa", 1000, 0.9), pt("csa", 500, 0.95), pt("asif", 100, 0.5),
                        pt("asif", 50, 0.6)])  # fmt: skip
    assert len(figs) == 2
    fronts = {f.chart.title.split(" · ")[-1]: sorted(f.chart.frontier) for f in figs}
    assert fronts == {"asif": [(50, 0.6), (100, 0.5)], "csa": [(500, 0.95), (1000, 0.9)]}


def test_a_filtered_cell_carries_intervals_and_its_per_query_table(tmp_path):
    """Issue 37 item 4: a surprising filtered cell can be explained query by query."""
    import json

    from imsearch_align.collection.per_query import read_per_query
    from imsearch_align.study import StudySpec, run_study
    from imsearch_align.testing.scripts import write_cone_pairs

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 120)
    spec = StudySpec(embeddings=str(emb), stores=("faiss",), index=("faiss:hnsw",),
                     methods=("procrustes",), sizes=(1000,), queries=60, latency_queries=2,
                     repeats=1, filters=(0.5,), out=str(tmp_path / "o"),
                     truth_cache=str(tmp_path / "t"))  # fmt: skip
    result = run_study(spec, progress=False)
    (cell,) = result.filtered
    assert cell["status"]["state"] == "ok" and cell["filter"]["outside_filter"] == 0
    path = next((tmp_path / "o").glob("filtered-*.json"))
    assert json.loads(path.read_text())["per_query"] == path.stem + ".queries.parquet"
    pq = read_per_query(path)
    for key, iv in cell["intervals"].items():
        m = key.split("/", 1)[1]
        assert pq[m].mean() == pytest.approx(cell["metrics"][key], abs=1e-12)
        assert iv["approximate"]["low"] <= cell["metrics"][key] <= iv["approximate"]["high"]
        assert iv["difference"]["mean"] == pytest.approx(
            cell["metrics"][key] - cell["exact_metrics"][key], abs=1e-12
        )
