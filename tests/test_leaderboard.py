"""leaderboard: typed results merged into a frame, CSV columns, Markdown ranking with status."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from imsearch_align.experiment import ExperimentConfig, ExperimentResult, RankingResult, TaskResult
from imsearch_align.experiment.provenance import Provenance
from imsearch_align.experiment.result import DatasetInfo, MethodInfo, RunStatus, SearchTimings
from imsearch_align.leaderboard import (
    LeaderboardWarning,
    default_sort_metric,
    load_result_objects,
    load_results,
    results_frame,
    to_markdown,
)


def fake_result(
    method: str, store: str, n: int | None, hit1: float, *, status: RunStatus | None = None
) -> ExperimentResult:
    """A typed result with the parts ``build`` reads (two rankings, intervals, speed)."""
    cfg = ExperimentConfig(
        dataset="synthetic",
        method=method,
        method_params={"dim": 8},
        store=store,
        n_support=n,
        k_values=(1, 10),
        image_encoder=None,
        text_encoder=None,
        cache_dir=None,
    )
    t2i = RankingResult(
        "t2i",
        metrics={"HitRate@1": hit1, "HitRate@10": min(1.0, hit1 + 0.3), "R@1": hit1 / 2},
        intervals={"HitRate@1": (hit1 - 0.05, hit1 + 0.05)},
        n_queries=90,
        n_docs=90,
        timings=SearchTimings(queries_per_s=1234.5, n_batches=1, n_batches_searched=1),
    )
    i2t = RankingResult("i2t", metrics={"HitRate@1": hit1 / 2}, n_queries=90, n_docs=90)
    return ExperimentResult(
        config=cfg,
        status=status or RunStatus(),
        dataset=DatasetInfo("synthetic-300-0", n or 210, 210, 90, 90),
        method=MethodInfo(method, {"dim": 8}, 8, False),
        task=TaskResult("retrieval", {"t2i": t2i, "i2t": i2t}),
        timings={"fit_s": 0.01},
        provenance=Provenance(versions={"numpy": "2.0"}, git_commit="abc"),
        created="2026-01-01T00:00:00",
    )


ROWS = [("csa", "faiss", 100, 0.5), ("csa", "faiss", 1000, 0.8), ("asif", "exact", None, 0.6)]


@pytest.fixture
def files(tmp_path):
    sub = tmp_path / "nested" / "deeper"
    sub.mkdir(parents=True)
    for i, (m, s, n, hit1) in enumerate(ROWS):
        (sub if i == 2 else tmp_path).joinpath(f"{m}_{s}_{n}.json").write_text(
            fake_result(m, s, n, hit1).to_json()
        )
    (tmp_path / ".checkpoints").mkdir()
    (tmp_path / ".checkpoints" / "state.json").write_text("{}")  # hidden folders are not results
    return tmp_path


def _table(md: str) -> tuple[list[str], list[list[str]]]:
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    body = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    return header, body


def test_load_results_one_row_per_file_with_flat_columns(files):
    df = load_results([files])
    assert len(df) == 3
    for col in ("method", "store", "n_support", "method_params.dim", "n_support_pairs", "status",
                "t2i/HitRate@1", "t2i/R@1", "image_retrieval_recall@1", "t2i/HitRate@1.ci_low",
                "t2i/HitRate@1.ci_high", "fit_s", "t2i.queries_per_s", "t2i.n_failed",
                "env.git_commit", "env.numpy", "key", "path"):  # fmt: skip
        assert col in df.columns, col
    row = df.set_index("method").loc["asif"]
    assert row["n_support_pairs"] == 210 and row["t2i/HitRate@1.ci_low"] == pytest.approx(0.55)
    # CLIP_benchmark's retrieval recall is our HitRate, not IR recall.
    assert row["image_retrieval_recall@1"] == row["t2i/HitRate@1"] == 0.6
    assert row["t2i/R@1"] == pytest.approx(0.3) and row["status"] == "ok"
    assert row["env.numpy"] == "2.0" and row["t2i.queries_per_s"] == 1234.5
    # Config first, then metrics, then intervals, then timings.
    cols = list(df.columns)
    assert (
        cols.index("method")
        < cols.index("t2i/HitRate@1")
        < cols.index("t2i/HitRate@1.ci_low")
        < cols.index("fit_s")
    )


def test_objects_and_frame_agree_with_the_files(files):
    objs = load_result_objects([files])
    assert len(objs) == 3 and all(isinstance(r, ExperimentResult) for r in objs)
    assert all(r.path and r.path.endswith(".json") for r in objs)
    by_method = {(r.config.method, r.config.n_support): r for r in objs}
    assert by_method[("csa", 1000)].metric("t2i/HitRate@1") == 0.8
    # The frame of the typed objects is the frame of the files.
    pd.testing.assert_frame_equal(results_frame(objs), load_results([files]))


def test_unreadable_foreign_and_future_json_are_skipped_with_a_warning(files):
    (files / "broken.json").write_text("{nope")
    (files / "config.json").write_text(json.dumps({"method": "csa"}))
    future = json.loads(fake_result("csa", "faiss", 5, 0.1).to_json())
    future["schema_version"] = 99
    (files / "future.json").write_text(json.dumps(future))
    with pytest.warns(LeaderboardWarning) as rec:
        df = load_results([files])
    assert len(df) == 3
    msgs = " ".join(str(w.message) for w in rec)
    assert "broken.json" in msgs and "config.json" in msgs and "future.json" in msgs
    assert "schema_version 99" in msgs


def test_files_and_dirs_mix_without_duplicates(files):
    df = load_results([files, files / "csa_faiss_100.json"])
    assert len(df) == 3


def test_missing_path_raises_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_results([tmp_path / "nowhere"])


def test_markdown_sorted_by_hitrate_with_rank_and_bold_best(files):
    df = load_results([files])
    assert default_sort_metric(df) == "t2i/HitRate@1"
    md = to_markdown(df)
    header, body = _table(md)
    assert header[:4] == ["#", "method", "store", "N"]
    assert "t2i HitRate@1" in header and "t2i QPS" in header and "params" in header
    assert "status" not in header  # every row is ok
    assert [r[1] for r in body] == ["csa", "asif", "csa"]  # 0.8, 0.6, 0.5
    assert [r[0] for r in body] == ["1", "2", "3"]
    assert body[0][header.index("t2i HitRate@1")] == "**0.8000**"
    assert body[1][header.index("t2i HitRate@1")] == "0.6000"
    assert body[0][header.index("t2i QPS")] == "1,234"
    assert body[1][header.index("N")] == "210"
    assert body[0][header.index("params")] == "dim=8"
    # The legend says what HitRate@k and IR R@k are, in CLIP_benchmark's words.
    assert "image_retrieval_recall@k" in md and "IR R@k" in md


def test_markdown_sort_by_other_metric_and_columns(files):
    df = load_results([files])
    md = to_markdown(
        df, sort_by="i2t/HitRate@1", columns=["method", "i2t/HitRate@1"], bold_best=False
    )
    assert md.splitlines()[0] == "| # | method | i2t HitRate@1 |"
    assert md.splitlines()[2] == "| 1 | csa | 0.4000 |"
    # IR recall keeps its own label.
    ir = to_markdown(df, columns=["method", "t2i/R@1"], legend=False)
    assert ir.splitlines()[0] == "| # | method | t2i IR R@1 |"
    with pytest.raises(ValueError, match=r"sort_by 't2i/HitRate@2'.*Did you mean"):
        to_markdown(df, sort_by="t2i/HitRate@2")


def test_default_sort_metric_falls_back_to_the_task_metric():
    r = fake_result("csa", "faiss", 10, 0.5)
    cls = r.with_(
        config=r.config.replace(task="classification"),
        task=TaskResult("classification", {}, {"acc1": 0.7}),
    )
    df = results_frame([cls])
    assert default_sort_metric(df) == "classification/acc1"


def test_failed_cells_show_their_error_and_go_last():
    ok = fake_result("csa", "faiss", 10, 0.5)
    bad = ExperimentResult(
        config=ok.config.replace(method="asif"),
        status=RunStatus("failed", error="ValueError: x"),
    )
    md = to_markdown(results_frame([bad, ok]))
    header, body = _table(md)
    assert "status" in header and "error" in header
    assert body[0][1] == "csa" and body[0][header.index("status")] == "ok"
    assert body[1][1] == "asif" and body[1][header.index("status")] == "failed"
    assert body[1][header.index("error")] == "ValueError: x"


def test_a_degraded_row_is_marked_ranked_after_ok_rows_and_never_bold():
    degraded = RunStatus("degraded", ("t2i: 40 of 90 queries failed (TimeoutError: slow)",))
    rows = [
        fake_result("csa", "faiss", 100, 0.5),
        fake_result("procrustes", "faiss", 100, 0.7),
        fake_result("asif", "faiss", 100, 0.95, status=degraded),  # the highest number
    ]
    md = to_markdown(results_frame(rows))
    header, body = _table(md)
    col, st = header.index("t2i HitRate@1"), header.index("status")
    assert [r[1] for r in body] == ["procrustes", "csa", "asif"]
    assert [r[st] for r in body] == ["ok", "ok", "degraded"]
    assert body[0][col] == "**0.7000**"  # the best among the clean rows
    assert body[2][col] == "0.9500"  # never bold, though higher
    assert not any("**" in cell for cell in body[2])
    assert "40 of 90 queries failed" in md  # the reason is shown


def test_rows_differing_only_in_a_hidden_setting_say_how_they_differ():
    """Two image models and two seeds of one (method, store, N): each row's
    params cell names what sets it apart, so no two rows read the same."""
    rows = []
    for model, seed, hit in (
        ("dinov2-base", 0, 0.3),
        ("dinov2-large", 0, 0.5),
        ("dinov2-large", 1, 0.4),
    ):
        r = fake_result("csa", "faiss", 1000, hit)
        cfg = r.config.replace(image_encoder_params={"model": model}, seed=seed)
        rows.append(r.with_(config=cfg))
    header, body = _table(to_markdown(results_frame(rows)))
    params = [row[header.index("params")] for row in body]
    assert len(set(params)) == 3, params
    assert "seed=1" in params[body.index(next(b for b in body if "0.4000" in b))]
    assert all("image_encoder_params.model=dinov2-" in p for p in params)
    # one experiment alone: nothing hidden to tell apart
    header, body = _table(to_markdown(results_frame(rows[:1])))
    assert "image_encoder_params" not in "".join(body[0])


@pytest.mark.parametrize(("n", "shown"), [(100, "100"), (None, "all")])
def test_a_failed_run_shows_its_configured_n(tmp_path, monkeypatch, n, shown):
    """Issue 28, unclear: a run that failed before drawing its support pairs (a dead
    server port) shows the N it was configured with, never 0, in the table and the CSV."""
    from imsearch_align.experiment import ExperimentError, pipeline, run_experiment

    def dead_port(ctx):
        raise ConnectionError("Fail connecting to server on 127.0.0.1:1")

    monkeypatch.setattr(pipeline, "_connect", dead_port)
    cfg = fake_result("csa", "exact", n, 0.5).config.replace(
        dataset_params={"n_images": 200}, method_params={}
    )
    with pytest.raises(ExperimentError):
        run_experiment(cfg, output_dir=tmp_path, progress=False)
    ok = fake_result("procrustes", "exact", 100, 0.5)
    (tmp_path / "ok.json").write_text(ok.to_json())
    df = load_results([tmp_path])
    failed = df[df["status"] == "failed"].iloc[0]
    assert str(failed["n_support_pairs"]) == shown
    header, body = _table(to_markdown(df))
    row = next(r for r in body if r[header.index("status")] == "failed")
    assert row[header.index("N")] == shown
    df.to_csv(tmp_path / "bench.csv", index=False)
    csv = pd.read_csv(tmp_path / "bench.csv", dtype=str)
    assert csv.loc[csv["status"] == "failed", "n_support_pairs"].tolist() == [shown]
    # A failed result without dataset info (a sweep cell that failed outright) alike.
    bare = ExperimentResult(config=cfg, status=RunStatus("failed", error="ConnectionError: x"))
    assert str(results_frame([bare]).iloc[0]["n_support_pairs"]) == shown
