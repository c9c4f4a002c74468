"""leaderboard: merging result JSONs into a frame, CSV columns, Markdown ranking."""

from __future__ import annotations

import json

import pytest

from imsearch_align.leaderboard import (
    LeaderboardWarning,
    default_sort_metric,
    flatten_result,
    load_results,
    to_markdown,
)


def fake_result(method: str, store: str, n: int | None, r1: float, **extra) -> dict:
    """A result dict with the layout run_experiment writes (the parts build reads)."""
    res = {
        "config": {
            "dataset": "synthetic",
            "method": method,
            "method_params": {"dim": 8},
            "store": store,
            "store_params": {},
            "n_support": n,
            "k_values": [1, 10],
            "image_encoder": None,
            "text_encoder": None,
        },
        "key": f"{method}-{store}-{n}",
        "dataset": {"name": "synthetic-300-0", "n_support_pairs": n or 210, "n_test_images": 90},
        "method": {"name": method, "output_dim": 8, "sparse": False},
        "tasks": {
            "t2i": {"intervals": {"R@1": [r1 - 0.05, r1 + 0.05]}, "n_queries": 90, "n_failed": 0}
        },
        "metrics": {"t2i/R@1": r1, "t2i/R@10": min(1.0, r1 + 0.3), "i2t/R@1": r1 / 2},
        "clip_benchmark": {"image_retrieval_recall@1": r1},
        "timings": {"fit_s": 0.01, "t2i_queries_per_s": 1234.5},
        "environment": {"git_commit": "abc", "versions": {"numpy": "2.0"}},
        "created": "2026-01-01T00:00:00",
    }
    res.update(extra)
    return res


@pytest.fixture
def files(tmp_path):
    rows = [("csa", "faiss", 100, 0.5), ("csa", "faiss", 1000, 0.8), ("asif", "exact", None, 0.6)]
    sub = tmp_path / "nested" / "deeper"
    sub.mkdir(parents=True)
    for i, (m, s, n, r1) in enumerate(rows):
        (sub if i == 2 else tmp_path).joinpath(f"{m}_{s}_{n}.json").write_text(
            json.dumps(fake_result(m, s, n, r1))
        )
    (tmp_path / ".checkpoints").mkdir()
    (tmp_path / ".checkpoints" / "state.json").write_text("{}")  # hidden folders are not results
    return tmp_path


def test_load_results_one_row_per_file_with_flat_columns(files):
    df = load_results([files])
    assert len(df) == 3
    for col in ("method", "store", "n_support", "method_params.dim", "n_support_pairs", "t2i/R@1",
                "image_retrieval_recall@1", "t2i/R@1.ci_low", "t2i/R@1.ci_high", "fit_s",
                "t2i_queries_per_s", "t2i_n_failed", "env.git_commit", "env.numpy", "key", "path"):  # fmt: skip
        assert col in df.columns, col
    row = df.set_index("key").loc["asif-exact-None"]
    assert row["n_support_pairs"] == 210 and row["t2i/R@1.ci_low"] == pytest.approx(0.55)
    # Config first, then metrics, then intervals, then timings.
    cols = list(df.columns)
    assert (
        cols.index("method")
        < cols.index("t2i/R@1")
        < cols.index("t2i/R@1.ci_low")
        < cols.index("fit_s")
    )


def test_unreadable_and_foreign_json_are_skipped_with_a_warning(files):
    (files / "broken.json").write_text("{nope")
    (files / "config.json").write_text(json.dumps({"method": "csa"}))
    with pytest.warns(LeaderboardWarning) as rec:
        df = load_results([files])
    assert len(df) == 3
    msgs = " ".join(str(w.message) for w in rec)
    assert "broken.json" in msgs and "config.json" in msgs


def test_files_and_dirs_mix_without_duplicates(files):
    df = load_results([files, files / "csa_faiss_100.json"])
    assert len(df) == 3


def test_missing_path_raises_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_results([tmp_path / "nowhere"])


def test_markdown_sorted_by_metric_with_rank_and_bold_best(files):
    df = load_results([files])
    assert default_sort_metric(df) == "t2i/R@1"
    md = to_markdown(df)
    lines = md.strip().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:4] == ["#", "method", "store", "N"]
    assert "t2i/R@1" in header and "t2i QPS" in header and "params" in header
    body = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [r[1] for r in body] == ["csa", "asif", "csa"]  # 0.8, 0.6, 0.5
    assert body[0][header.index("t2i/R@1")] == "**0.8000**"
    assert body[0][header.index("t2i QPS")] == "1,234"
    assert body[1][header.index("N")] == "210"


def test_markdown_sort_by_other_metric_and_columns(files):
    df = load_results([files])
    md = to_markdown(df, sort_by="i2t/R@1", columns=["method", "i2t/R@1"], bold_best=False)
    assert md.splitlines()[0] == "| # | method | i2t/R@1 |"
    assert md.splitlines()[2] == "| 1 | csa | 0.4000 |"
    with pytest.raises(ValueError, match=r"sort_by 't2i/R@2'.*Did you mean"):
        to_markdown(df, sort_by="t2i/R@2")


def test_default_sort_metric_falls_back_to_first_metric():
    r = fake_result("csa", "faiss", 10, 0.5)
    r["metrics"] = {"classification/acc1": 0.7}
    r["clip_benchmark"] = {}
    import pandas as pd

    df = pd.DataFrame([flatten_result(r)])
    assert default_sort_metric(df) == "classification/acc1"


def test_failed_cells_show_their_error():
    import pandas as pd

    ok = flatten_result(fake_result("csa", "faiss", 10, 0.5))
    bad = flatten_result(
        {"config": {"method": "asif", "store": "faiss", "n_support": 10}, "error": "ValueError: x"}
    )
    md = to_markdown(pd.DataFrame([ok, bad]))
    assert "ValueError: x" in md and md.splitlines()[2].startswith("| 1 | csa")
