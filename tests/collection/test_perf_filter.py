"""``benchmarks/perf_filter.py``'s arithmetic without a server: the exact filtered top-k it
scores recall against, the median-with-range of each case's percentiles, the table, and its
bad arguments."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def perf(load_benchmark):
    return load_benchmark("perf_filter")


def test_exact_top_is_the_best_k_of_the_kept_rows_only(perf) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((500, 8)).astype(np.float32)
    q = rng.standard_normal((6, 8)).astype(np.float32)
    keep = rng.random(500) < 0.1
    got = perf.exact_top(x, q, keep, k=5)
    for r in range(6):
        s = np.where(keep, x.astype(np.float64) @ q[r].astype(np.float64), -np.inf)
        assert set(got[r].tolist()) == set(np.argsort(-s)[:5].tolist())
        assert keep[got[r]].all()


def test_percentiles_are_the_median_over_passes_with_their_range(perf) -> None:
    passes = [list(np.arange(1.0, 101.0)), list(np.arange(1.0, 101.0) * 2), [5.0] * 100]
    out = perf.summarize({"typed/10%": passes})["typed/10%"]
    p50 = [np.percentile(p, 50) for p in passes]  # 50.5, 101, 5
    assert out["p50"] == {"median": 50.5, "min": 5.0, "max": 101.0}
    assert out["p99"]["max"] == pytest.approx(np.percentile(passes[1], 99))
    assert sorted(p50)[1] == out["p50"]["median"]
    res = {
        "latency": {"typed/10%": out},
        "quality": {"typed/10%": {"recall@10": 0.98, "outside_filter": 0, "returned_ids": 2000}},
        "load_average_1min": {"typed/10%": [1.5, 2.25]},
    }
    row = perf.table(res).splitlines()[2]
    assert row == (
        "| typed | 10% | 50.5 (5.0-101.0) | 95.0 (5.0-190.1) | 99.0 (5.0-198.0) | 0.980 "
        "| 0 of 2000 | 1.5-2.2 |"
    )


def test_bad_arguments_exit_2_before_any_work(perf, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        perf.main(["--rows", "10"])
    assert err.value.code == 2 and "--rows must be >= 1000" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        perf.main(["--index", "FLAT"])
