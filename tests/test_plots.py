"""plots: learning curves and recall-vs-QPS figures from typed results are readable PNGs."""

from __future__ import annotations

import pytest

from imsearch_align.experiment import ExperimentConfig, ExperimentResult, RankingResult, TaskResult
from imsearch_align.experiment.result import DatasetInfo, RunStatus, SearchTimings
from imsearch_align.plots import learning_curve, metric_label, recall_vs_qps

PIL = pytest.importorskip("PIL.Image")


def fake_result(
    method: str,
    n: int,
    hit1: float,
    *,
    store: str = "faiss",
    store_params: dict | None = None,
    qps: float | None = 1000.0,
    fidelity: float | None = None,
) -> ExperimentResult:
    cfg = ExperimentConfig(
        dataset="synthetic",
        method=method,
        store=store,
        store_params=store_params or {},
        n_support=n,
        image_encoder=None,
        text_encoder=None,
        cache_dir=None,
    )
    t2i = RankingResult(
        "t2i",
        metrics={"HitRate@1": hit1, "HitRate@10": min(1.0, hit1 + 0.2), "R@1": hit1 / 2},
        intervals={"HitRate@1": (hit1 - 0.04, hit1 + 0.04)},
        timings=SearchTimings(queries_per_s=qps),
        fidelity={} if fidelity is None else {"ann_recall@10": fidelity},
    )
    return ExperimentResult(
        config=cfg,
        dataset=DatasetInfo("synthetic", n_support_pairs=n),
        task=TaskResult("retrieval", {"t2i": t2i}),
    )


@pytest.fixture
def curve_results():
    out = []
    for n, a, b in ((100, 0.2, 0.3), (1000, 0.45, 0.5), (10000, 0.6, 0.55)):
        out += [fake_result("csa", n, a), fake_result("asif", n, b)]
    out.append(fake_result("identity", 100, 0.7))  # the jointly trained reference
    failed = ExperimentResult(
        config=ExperimentConfig(method="cka", store="faiss"),
        status=RunStatus("failed", error="boom"),
    )
    out.append(failed)  # failed cells are left out
    return out


def _check_png(path, min_kb: float = 20):
    assert path.is_file() and path.stat().st_size > min_kb * 1024
    with PIL.open(path) as im:
        assert im.format == "PNG"
        w, h = im.size
        assert w >= 900 and h >= 600  # 7.5 x 4.8 in at 150 dpi


def test_learning_curve_png(tmp_path, curve_results):
    path = learning_curve(curve_results, "t2i/HitRate@1", out_path=tmp_path / "sub" / "lc.png")
    assert path == tmp_path / "sub" / "lc.png"
    _check_png(path)


def test_learning_curve_from_files(tmp_path, curve_results):
    for i, r in enumerate(curve_results):
        (tmp_path / f"r{i}.json").write_text(r.to_json())
    _check_png(learning_curve(tmp_path, "t2i/HitRate@10", out_path=tmp_path / "lc.png"))


def test_learning_curve_only_failed_results_is_an_error(tmp_path, curve_results):
    with pytest.raises(ValueError, match="at least one successful result"):
        learning_curve(curve_results[-1:], "t2i/HitRate@1", out_path=tmp_path / "x.png")
    with pytest.raises(TypeError, match="ExperimentResult objects or paths"):
        learning_curve([{"config": {}}], "t2i/HitRate@1", out_path=tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_learning_curve_unknown_metric_names_the_available_ones(tmp_path, curve_results):
    with pytest.raises(ValueError, match=r"metric 't2i/HitRate@2'.*Did you mean.*t2i/HitRate@1"):
        learning_curve(curve_results, "t2i/HitRate@2", out_path=tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_recall_vs_qps_png(tmp_path):
    rs = [
        fake_result(
            "csa", 1000, 0.5, store_params={"index": "hnsw", "efSearch": ef}, qps=q, fidelity=f
        )
        for ef, q, f in ((16, 9000.0, 0.8), (64, 4000.0, 0.95), (256, 1500.0, 0.99))
    ]
    rs += [fake_result("csa", 1000, 0.5, store="exact", qps=800.0, fidelity=1.0)]
    _check_png(recall_vs_qps(rs, tmp_path / "qps.png"))
    # Without fidelity numbers the default y is HitRate@10.
    plain = [fake_result("csa", 1000, 0.5, qps=q) for q in (100.0, 1000.0)]
    _check_png(recall_vs_qps(plain, tmp_path / "qps2.png"), min_kb=10)


def test_recall_vs_qps_needs_timings(tmp_path):
    # A result resumed entirely from checkpoints has no speed: it cannot be a point.
    r = fake_result("csa", 10, 0.5, qps=None)
    with pytest.raises(ValueError, match=r"timed 't2i' ranking \(queries/s\)"):
        recall_vs_qps([r], tmp_path / "q.png")
    assert not (tmp_path / "q.png").exists()


def test_metric_label():
    assert metric_label("t2i/HitRate@1") == "text→image HitRate@1"
    assert metric_label("t2i/R@1") == "text→image IR R@1"
    assert metric_label("classification/acc1") == "zero-shot classification acc1"


@pytest.fixture
def plotted(monkeypatch):
    """(label, x, y) of every line learning_curve / recall_vs_qps draws."""
    from matplotlib.axes import Axes

    lines = []
    real = Axes.plot

    def spy(self, xs, ys, *a, **kw):
        lines.append((kw.get("label"), list(xs), list(ys)))
        return real(self, xs, ys, *a, **kw)

    monkeypatch.setattr(Axes, "plot", spy)
    return lines


def test_a_degraded_result_is_left_out_of_the_curve_not_averaged_in(tmp_path, plotted):
    ok = fake_result("csa", 100, 0.30)
    bad = fake_result("csa", 100, 0.05)
    bad = bad.with_(status=RunStatus("degraded", ("t2i: 60 of 100 queries failed",)))
    with pytest.warns(UserWarning, match="1 degraded result.*60 of 100 queries failed"):
        learning_curve([ok, bad], "t2i/HitRate@1", out_path=tmp_path / "lc.png")
    assert [(x, y) for _, x, y in plotted] == [([100.0], [0.30])]


def test_results_differing_in_a_hidden_setting_are_two_lines(tmp_path, plotted):
    """Two image models (encoder params) are two lines, each labelled by its
    model, not one line averaging them as if they were seeds."""
    a, b = fake_result("csa", 100, 0.30), fake_result("csa", 100, 0.50)
    a = a.with_(config=a.config.replace(image_encoder_params={"model": "dinov2-base"}))
    b = b.with_(config=b.config.replace(image_encoder_params={"model": "dinov2-large"}))
    learning_curve([a, b], "t2i/HitRate@1", out_path=tmp_path / "lc.png")
    got = sorted((label, y) for label, _, y in plotted)
    assert got == [
        ("csa · image_encoder_params: model=dinov2-base", [0.30]),
        ("csa · image_encoder_params: model=dinov2-large", [0.50]),
    ]
    plotted.clear()
    qa = fake_result("csa", 100, 0.3, store_params={"index": "hnsw", "efSearch": 16}, qps=900)
    qb = fake_result("csa", 100, 0.5, store_params={"index": "hnsw", "efSearch": 64}, qps=300)
    qb = qb.with_(config=qb.config.replace(method_params={"sim_dim": 64}))
    recall_vs_qps([qa, qb], out_path=tmp_path / "q.png", metric="t2i/HitRate@1")
    assert sorted(len(x) for _, x, _ in plotted) == [1, 1]  # not one joined curve
