"""The study against a real server that fails while it is measured (the fault suite's
study cases): a milvus-lite server of the test's own, restarted in the middle of a cell's
timed searches, and a server that is not there at all.

Oracle: the server's own behaviour (a restart breaks the connection; the store's retries
heal it and count the outage); the cell must say its timings include the outage.
"""

from __future__ import annotations

import pytest

import imsearch_align.collection.study as cell_study
from imsearch_align.study import StudySpec, run_study
from imsearch_align.testing.scripts import write_cone_pairs
from imsearch_align.testing.servers import ServerHandle

pytestmark = pytest.mark.integration


def test_a_restart_during_the_timed_searches_makes_the_cell_degraded(
    own_lite_server: ServerHandle, tmp_path, monkeypatch
):
    """Issue 36: 'an outage mid-search leaves an ok cell at 8 q/s against 554'. The server
    is restarted (SIGTERM, same data) just before the latency searches of the cell: the
    searches wait it out and answer, and the cell is degraded, naming the outage, and the
    study exits 1; run again with --skip-existing on a quiet server it is measured again
    and ok."""
    real = cell_study.search_latency
    restarted = []

    def restart_then_time(store, name, *args, **kw):
        if not restarted:
            own_lite_server.restart()
            restarted.append(name)
        return real(store, name, *args, **kw)

    monkeypatch.setattr(cell_study, "search_latency", restart_then_time)
    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    spec = StudySpec(embeddings=str(emb), stores=("milvus",), uri=own_lite_server.uri,
                     index=("milvus:FLAT",), methods=("procrustes",), sizes=(0,), queries=20,
                     latency_queries=5, out=str(tmp_path / "o"),
                     truth_cache=str(tmp_path / "t"))  # fmt: skip
    result = run_study(spec, progress=False)
    assert restarted, "the patched timing never ran"
    (cell,) = result.cells
    assert cell["status"]["state"] == "degraded", cell["status"]
    assert "outage(s) during the timed searches" in cell["status"]["reasons"][0]
    assert cell["metrics"]["t2i/ann_recall@10"] == 1.0  # the answers are still right
    assert result.exit_code == 1
    again = run_study(spec.replace(skip_existing=True), progress=False)
    assert again.cells[0]["status"]["state"] == "ok"  # measured again, not reused
    assert again.exit_code == 0
