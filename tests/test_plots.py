"""plots: learning curves and recall-vs-QPS figures are written, readable PNGs."""

from __future__ import annotations

import json

import pytest

from imsearch_align.plots import learning_curve, metric_label, recall_vs_qps

PIL = pytest.importorskip("PIL.Image")


def fake_result(method: str, n: int, r1: float, *, store: str = "faiss", store_params=None, qps=1000.0,
                fidelity: float | None = None) -> dict:  # fmt: skip
    metrics = {"t2i/R@1": r1, "t2i/R@10": min(1.0, r1 + 0.2)}
    if fidelity is not None:
        metrics["t2i/ann_recall@10"] = fidelity
    return {
        "config": {
            "dataset": "synthetic",
            "method": method,
            "method_params": {},
            "store": store,
            "store_params": store_params or {},
            "n_support": n,
            "image_encoder": None,
            "text_encoder": None,
            "task": "retrieval",
        },
        "dataset": {"n_support_pairs": n},
        "tasks": {"t2i": {"intervals": {"R@1": [r1 - 0.04, r1 + 0.04]}}},
        "metrics": metrics,
        "timings": {"t2i_queries_per_s": qps},
    }


@pytest.fixture
def curve_results():
    out = []
    for n, a, b in ((100, 0.2, 0.3), (1000, 0.45, 0.5), (10000, 0.6, 0.55)):
        out += [fake_result("csa", n, a), fake_result("asif", n, b)]
    out.append(fake_result("identity", 100, 0.7))  # the jointly trained reference
    out.append(
        {"config": {"method": "cka", "store": "faiss"}, "error": "boom"}
    )  # failed cells are left out
    return out


def _check_png(path, min_kb: float = 20):
    assert path.is_file() and path.stat().st_size > min_kb * 1024
    with PIL.open(path) as im:
        assert im.format == "PNG"
        w, h = im.size
        assert w >= 900 and h >= 600  # 7.5 x 4.8 in at 150 dpi


def test_learning_curve_png(tmp_path, curve_results):
    path = learning_curve(curve_results, "t2i/R@1", out_path=tmp_path / "sub" / "lc.png")
    assert path == tmp_path / "sub" / "lc.png"
    _check_png(path)


def test_learning_curve_from_files(tmp_path, curve_results):
    for i, r in enumerate(curve_results):
        (tmp_path / f"r{i}.json").write_text(json.dumps(r))
    _check_png(learning_curve(tmp_path, "t2i/R@10", out_path=tmp_path / "lc.png"))


def test_learning_curve_unknown_metric_names_the_available_ones(tmp_path, curve_results):
    with pytest.raises(ValueError, match=r"metric 't2i/R@2'.*Did you mean.*t2i/R@1"):
        learning_curve(curve_results, "t2i/R@2", out_path=tmp_path / "x.png")
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
    # Without fidelity numbers the default y is R@10.
    plain = [fake_result("csa", 1000, 0.5, qps=q) for q in (100.0, 1000.0)]
    _check_png(recall_vs_qps(plain, tmp_path / "qps2.png"), min_kb=10)


def test_recall_vs_qps_needs_timings(tmp_path):
    r = fake_result("csa", 10, 0.5)
    r["timings"] = {}
    with pytest.raises(ValueError, match="t2i_queries_per_s"):
        recall_vs_qps([r], tmp_path / "q.png")


def test_metric_label():
    assert metric_label("t2i/R@1") == "text→image R@1"
    assert metric_label("classification/acc1") == "zero-shot classification acc1"
