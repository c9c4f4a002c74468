"""ExperimentResult: JSON round trip, status, flatten/summary, files written by 0.1.0."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.experiment import (
    ExperimentConfig,
    ExperimentResult,
    RankingResult,
    ResultSchemaError,
    RunStatus,
    TaskResult,
)
from imsearch_align.experiment.result import DatasetInfo, SearchTimings, status_from

DATA = Path(__file__).parent / "data"


def _result(**kw) -> ExperimentResult:
    cfg = ExperimentConfig(
        dataset="synthetic", method="csa", store="exact", n_support=50, k_values=(1, 5)
    )
    ranking = RankingResult(
        name="t2i",
        metrics={"HitRate@1": 0.25, "HitRate@5": 0.5, "R@1": 0.125, "nDCG@5": float("nan")},
        intervals={"HitRate@1": (0.2, 0.3)},
        n_queries=40,
        n_docs=20,
        n_failed=kw.pop("n_failed", 0),
        failed_queries=(3, 4),
        errors=("TimeoutError: slow",),
        timings=SearchTimings(index_build_s=0.1, search_s=0.2, queries_per_s=None, n_batches=2),
        fidelity={"ann_recall@5": 1.0},
    )
    task = TaskResult("retrieval", {"t2i": ranking}, {}, {"note": [1, 2]})
    return ExperimentResult(
        config=cfg,
        status=status_from([ranking]),
        dataset=DatasetInfo("synthetic", 50, 100, 20, 40),
        task=task,
        timings={"fit_s": 0.5},
        created="2026-11-23T00:00:00+0000",
        **kw,
    )


def test_json_round_trip_is_exact_even_with_nan_and_none():
    r = _result()
    text = r.to_json()
    back = ExperimentResult.from_json(text)
    assert back == r and back.to_json() == text
    assert math.isnan(back.metric("t2i/nDCG@5"))
    assert back.rankings["t2i"].timings.queries_per_s is None
    assert back.rankings["t2i"].intervals["HitRate@1"] == (0.2, 0.3)
    assert back.config == r.config


def test_status_degraded_when_queries_failed():
    r = _result(n_failed=2)
    assert r.status.state == "degraded" and "t2i: 2 of 40 queries failed" in r.status.reasons[0]
    assert "TimeoutError" in r.status.reasons[0]
    assert "STATUS DEGRADED" in r.summary()
    row = r.flatten()
    assert row["status"] == "degraded" and "2 of 40" in row["status_reasons"]
    with pytest.raises(ValueError, match="status state"):
        RunStatus("fine")


def test_metrics_flatten_and_aliases():
    r = _result()
    assert r.metrics["t2i/HitRate@1"] == 0.25 and r.metrics["t2i/ann_recall@5"] == 1.0
    assert r.clip_benchmark() == {"image_retrieval_recall@1": 0.25, "image_retrieval_recall@5": 0.5}
    row = r.flatten()
    assert row["t2i/HitRate@1"] == 0.25 and row["image_retrieval_recall@5"] == 0.5
    assert row["t2i/HitRate@1.ci_low"] == 0.2 and row["t2i.n_queries"] == 40
    assert row["n_support_pairs"] == 50 and row["method"] == "csa"
    with pytest.raises(KeyError, match="Did you mean"):
        r.metric("t2i/HitRate@2")


def test_unknown_schema_version_is_named(tmp_path):
    d = json.loads(_result().to_json())
    d["schema_version"] = 7
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    with pytest.raises(
        ResultSchemaError, match=r"schema_version 7.*reads schema versions \[1, 2\]"
    ):
        ExperimentResult.load(p)
    p.write_text(json.dumps({"hello": 1}))
    with pytest.raises(ResultSchemaError, match="not an imsearch-align result"):
        ExperimentResult.load(p)


def test_files_written_by_0_1_0_still_load():
    """Real result files written by imsearch-align 0.1.0 (schema 1, untyped dicts)."""
    raw = json.loads((DATA / "v1_retrieval.json").read_text())
    r = ExperimentResult.load(DATA / "v1_retrieval.json")
    assert r.status.ok and r.config.method == "procrustes"
    for name, v in raw["metrics"].items():
        assert r.metrics[name] == pytest.approx(v, abs=0), name
    t2i = r.rankings["t2i"]
    assert t2i.n_queries == raw["tasks"]["t2i"]["n_queries"]
    # schema 2's queries_per_s is search throughput: 0.1.0's search_queries_per_s
    # (its queries_per_s divided by search and scoring time together)
    old = raw["tasks"]["t2i"]["timings"]
    assert t2i.timings.queries_per_s == old["search_queries_per_s"]
    assert t2i.timings.queries_per_s == pytest.approx(t2i.n_queries / old["search_s"], rel=1e-9)
    assert t2i.intervals["R@1"] == tuple(raw["tasks"]["t2i"]["intervals"]["R@1"])
    assert r.provenance.versions["numpy"] == raw["environment"]["versions"]["numpy"]
    assert r.dataset.n_support_pairs == raw["dataset"]["n_support_pairs"]
    # Upgraded results round-trip in the new schema.
    assert ExperimentResult.from_json(r.to_json()) == r

    raw = json.loads((DATA / "v1_classification.json").read_text())
    c = ExperimentResult.load(DATA / "v1_classification.json")
    assert c.task.task == "classification"
    for m in ("acc1", "acc5", "mean_per_class_recall"):
        got, want = c.metrics[f"classification/{m}"], raw["metrics"][f"classification/{m}"]
        assert got == want or (math.isnan(got) and math.isnan(want))
    assert c.metrics["classification/HitRate@1"] == raw["metrics"]["classification/HitRate@1"]
    assert c.task.details["n_classes"] == raw["tasks"]["classification"]["n_classes"]


def test_failed_sweep_cell_of_0_1_0_loads_as_failed():
    d = {"config": ExperimentConfig().to_dict(), "error": "RuntimeError: boom"}
    r = ExperimentResult.from_dict(d)
    assert r.status.state == "failed" and r.status.error == "RuntimeError: boom" and r.task is None


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [
        (0.9996, 3, "0.9996"),  # never shown as a perfect 1.000
        (0.000545, 3, "0.001"),
        (0.0004, 3, "0.0004"),  # never shown as 0.000
        (1.0, 3, "1.000"),
        (0.0, 4, "0.0000"),
        (0.12345, 4, "0.1235"),
        (0.99999999999, 3, "0.99999999"),
        (1e-12, 3, "0.00000001"),
        (-0.00004, 3, "-0.00004"),
        (12.5, 3, "12.500"),
        (float("nan"), 3, "nan"),
        (None, 3, "-"),
        (3, 3, "3"),
    ],
)
def test_a_value_short_of_0_or_1_never_prints_as_0_or_1(value, digits, text):
    from imsearch_align.experiment.report import fmt

    assert fmt(value, digits) == text
    f32 = np.float32(value) if isinstance(value, float) else None
    if f32 is not None and f32 == f32 and f32 not in (0.0, 1.0):  # numpy floats alike
        assert float(fmt(f32, digits)) not in (0.0, 1.0)


def test_a_result_without_schema_version_is_read_by_its_content(tmp_path):
    """Issue 28.4: the version comes from what the file holds, never a default of 1."""
    r = _result()
    d = json.loads(r.to_json())
    del d["schema_version"]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(d))
    back = ExperimentResult.load(p)
    assert back.metrics.keys() == r.metrics.keys() and back.metrics
    assert back.metric("t2i/HitRate@1") == 0.25 and back.status == r.status
    # A 0.1.0 file (schema 1 never wrote the key) is still read as one.
    raw = json.loads((DATA / "v1_retrieval.json").read_text())
    assert "schema_version" not in raw
    assert ExperimentResult.from_dict(raw).metrics


@pytest.mark.parametrize(
    "drop", [("task", "status"), ("task", "status", "metrics", "timings", "dataset")]
)
def test_a_file_that_fits_no_schema_is_an_error_naming_it(tmp_path, drop):
    d = json.loads(_result().to_json())
    for key in ("schema_version", *drop):
        del d[key]
    p = tmp_path / "no_schema.json"
    p.write_text(json.dumps(d))
    with pytest.raises(ResultSchemaError, match=r"no_schema\.json.*no schema_version") as err:
        ExperimentResult.load(p)
    assert "\n" not in str(err.value)


def test_build_does_not_show_a_result_that_fits_no_schema(tmp_path):
    from imsearch_align.leaderboard import LeaderboardWarning, load_results

    good = _result()
    (tmp_path / "good.json").write_text(good.to_json())
    d = json.loads(good.to_json())
    for key in ("schema_version", "task", "status"):
        del d[key]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.warns(LeaderboardWarning, match=r"bad\.json.*no schema_version"):
        df = load_results([tmp_path])
    assert len(df) == 1 and df["t2i/HitRate@1"].tolist() == [0.25]
