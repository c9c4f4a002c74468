"""Timings as distributions (issue 37 item 1): every cell's speed from several timed passes
after a warm-up, interleaved across the settings of one build, every pass kept.

Oracles: the order in which the study really ran the passes (recorded by wrapping the one
function that times a pass), and the median / min / max of the kept passes by hand.
"""

from __future__ import annotations

import statistics

import pytest

import imsearch_align.collection.passes as cell_passes
import imsearch_align.collection.study as cell_study
from imsearch_align.collection.passes import interleaved_order, summarize
from imsearch_align.study import StudySpec, run_study
from imsearch_align.testing.scripts import write_cone_pairs


def _spec(tmp_path, **kw):
    (tmp_path / "emb").mkdir(exist_ok=True)
    emb = write_cone_pairs(tmp_path / "emb", 80)
    fields = dict(embeddings=str(emb), stores=("faiss",), methods=("procrustes",),
                  index=("faiss:ivf_flat:nprobe=1,2,4",), sizes=(500,), queries=40,
                  latency_queries=3, out=str(tmp_path / "o"), truth_cache=str(tmp_path / "t"))  # fmt: skip
    fields.update(kw)
    return StudySpec(**fields)


def _recording(monkeypatch):
    """Wrap the pass timer: each call records the setting the store searched with."""
    real = cell_passes.timed_pass
    log = []

    def timed(store, name, *args, counted, **kw):
        params = getattr(store, "search_params", lambda _: {})(name)
        log.append((dict(params).get("nprobe"), counted))
        return real(store, name, *args, counted=counted, **kw)

    monkeypatch.setattr(cell_passes, "timed_pass", timed)
    return log


def test_passes_follow_a_warm_up_and_are_interleaved_across_the_build(tmp_path, monkeypatch):
    log = _recording(monkeypatch)
    result = run_study(_spec(tmp_path, repeats=3), progress=False)
    warm, timed = log[:3], log[3:]
    assert warm == [(1, False), (2, False), (4, False)]  # each setting's scored warm-up
    # round r starts at setting r: no setting is always the first after a change
    assert [n for n, _ in timed] == [1, 2, 4, 2, 4, 1, 4, 1, 2]
    assert all(counted for _, counted in timed)
    assert len(result.cells) == 3
    for cell in result.cells:
        passes = cell["passes"]
        assert [p["counted"] for p in passes] == [False, True, True, True]
        assert cell["timing"] == {"repeats": 3, "counted": 3, "warmup": True,
                                  "order": "interleaved", "cpu_of": "this process",
                                  "settled": None}  # fmt: skip
        qps = [p["queries_per_s"] for p in passes[1:]]
        assert cell["queries_per_s"] == statistics.median(qps)
        assert cell["queries_per_s_range"] == [min(qps), max(qps)]
        p50 = [p["latency_ms"]["p50"] for p in passes[1:]]
        assert cell["latency_ms"]["p50"] == pytest.approx(statistics.median(p50), abs=1e-4)
        assert cell["latency_ms_range"]["p50"] == [min(p50), max(p50)]
        starts = [p["started"] for p in passes]
        assert starts == sorted(starts) and all(s.endswith("Z") for s in starts)
        assert all(p["cpu_s"] is not None and p["cpu_s"] >= 0 for p in passes)
        assert cell["status"]["state"] == "ok"


def test_a_rebuilt_setting_times_its_passes_back_to_back(tmp_path, monkeypatch):
    """A store that cannot change its setting in place (the exact store's one setting is
    built per cell) runs its passes right after its warm-up, on its own build."""
    log = _recording(monkeypatch)
    spec = _spec(tmp_path, stores=("exact",), index=("exact:flat",), repeats=2)
    (cell,) = run_study(spec, progress=False).cells
    assert [c for _, c in log] == [False, True, True]
    assert cell["timing"]["order"] == "back to back" and cell["timing"]["counted"] == 2


def test_quick_is_one_counted_pass(tmp_path, monkeypatch):
    log = _recording(monkeypatch)
    result = run_study(_spec(tmp_path, quick=True), progress=False)
    assert [c for _, c in log] == [True, True, True]  # no warm-up, no repeats
    for cell in result.cells:
        assert cell["timing"]["repeats"] == 1 and cell["timing"]["order"] == "one pass"
        assert cell["queries_per_s"] == cell["passes"][0]["queries_per_s"]


def test_passes_cut_short_make_the_cells_degraded_and_keep_what_ran(tmp_path, monkeypatch):
    real = cell_passes.timed_pass
    calls = []

    def failing(store, name, *args, counted, **kw):
        calls.append(counted)
        if counted and calls.count(True) == 4:  # the first pass of round 2
            raise RuntimeError("the store stopped answering")
        return real(store, name, *args, counted=counted, **kw)

    monkeypatch.setattr(cell_passes, "timed_pass", failing)
    result = run_study(_spec(tmp_path, repeats=3), progress=False)
    assert result.exit_code == 1
    for cell in result.cells:
        assert cell["status"]["state"] == "degraded"
        assert "of 3 timed passes ran" in cell["status"]["reasons"][0]
        assert 1 <= cell["timing"]["counted"] < 3
    again = run_study(_spec(tmp_path, repeats=3, skip_existing=True), progress=False)
    assert all(c["status"]["state"] == "ok" for c in again.cells)  # measured again


def test_summary_and_order_by_hand():
    passes = [
        {"counted": False, "queries_per_s": 1.0, "latency_ms": {"p50": 9.0}, "outages": 0},
        {"counted": True, "queries_per_s": 30.0, "latency_ms": {"p50": 2.0}, "outages": 0},
        {"counted": True, "queries_per_s": 10.0, "latency_ms": {"p50": 4.0}, "outages": 1},
        {"counted": True, "queries_per_s": 20.0, "latency_ms": {"p50": 3.0}, "outages": 0},
    ]
    s = summarize(passes)
    assert s["queries_per_s"] == 20.0 and s["queries_per_s_range"] == [10.0, 30.0]
    assert s["latency_ms"] == {"p50": 3.0} and s["latency_ms_range"] == {"p50": [2.0, 4.0]}
    assert s["passes_counted"] == 3 and s["outages"] == 1
    assert [interleaved_order(3, r) for r in range(4)] == [
        [0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]
    ]  # fmt: skip
    assert interleaved_order(0, 1) == []


def test_segments_changing_during_a_counted_pass_make_the_cell_degraded(tmp_path, monkeypatch):
    """Issue 37: at 1M a Milvus 2.3.5 server compacted 9 segments into 4 after the settle
    wait, while passes ran (82 s of server CPU for a pass that takes 7 s). A cell whose
    segment count moved during a counted pass is degraded; one whose count moved only
    during its warm-up is not; the second settle wait, before the counted rounds, is
    recorded."""
    real = cell_passes.timed_pass
    calls = []

    def timed(store, name, *args, counted, **kw):
        rec, ids, scores = real(store, name, *args, counted=counted, **kw)
        calls.append(counted)
        rec["segments"], rec["segments_after"] = 9, 9
        if len(calls) in (1, 5):  # the first setting's warm-up; the second's 1st counted
            rec["segments_after"] = 4
        return rec, ids, scores

    monkeypatch.setattr(cell_passes, "timed_pass", timed)
    monkeypatch.setattr(cell_study, "wait_settled", lambda *a, **k: {"settled": True})
    result = run_study(_spec(tmp_path, repeats=3), progress=False)
    assert calls[:5] == [False, False, False, True, True] and result.exit_code == 1
    states = [c["status"]["state"] for c in result.cells]
    assert states == ["ok", "degraded", "ok"]
    assert "segments changed during 1 counted pass" in result.cells[1]["status"]["reasons"][0]
    for cell in result.cells:
        assert cell["timing"]["settled"] == {"settled": True, "before_counted": {"settled": True}}
