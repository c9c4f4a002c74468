"""A concurrency level that fails in a study fails only its own cell.

Before: one crashed level made every level of the build a failed cell (the
levels measured before it were lost). Now each level runs on its own; the
study keeps the measured levels, marks the failed one, still writes the
build's ok cell into the CSV, and exits non-zero naming the failure.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

import imsearch_align.concurrency as concurrency
from imsearch_align.cli.app import main
from imsearch_align.concurrency.client import ConcurrencyRunError
from imsearch_align.testing.scripts import write_cone_pairs


def test_a_crashed_level_fails_alone_and_the_build_stays_in_the_table(
    tmp_path, monkeypatch, capsys
):
    real = concurrency.run_concurrent
    asked = []

    def crash_at_two(*args, levels, **kw):
        asked.append(tuple(levels))
        if tuple(levels) == (2,):
            raise ConcurrencyRunError("level 2: client 1 died (exit -9)")
        return real(*args, levels=levels, **kw)

    monkeypatch.setattr(concurrency, "run_concurrent", crash_at_two)
    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    out = tmp_path / "o"
    code = main(["study", "--embeddings", str(emb), "--stores", "faiss", "--index",
                 "faiss:flat", "--methods", "procrustes", "--sizes", "0", "--queries", "20",
                 "--latency-queries", "2", "--concurrency", "1", "2", "4",
                 "--concurrency-duration", "0.3", "--concurrency-warmup", "0", "--out",
                 str(out), "--truth-cache", str(tmp_path / "t"), "--no-progress"])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 1, printed
    assert asked == [(1,), (2,), (4,)]  # the level after the crash still ran
    cells = {
        json.loads(p.read_text())["concurrency"]: json.loads(p.read_text())
        for p in out.glob("concurrency-c*.json")
    }
    assert sorted(cells) == [1, 2, 4]
    assert cells[2]["status"]["state"] == "failed"
    assert "client 1 died" in cells[2]["status"]["error"]
    for lv in (1, 4):
        assert cells[lv]["status"]["state"] == "ok", cells[lv]["status"]
        assert cells[lv]["queries_per_s"] > 0
        # every task measure with its clustered interval, around the mean the cell reports
        assert set(cells[lv]["intervals"]) == set(cells[lv]["metrics"])
        for key, iv in cells[lv]["intervals"].items():
            a = iv["approximate"]
            assert a["mean"] == pytest.approx(cells[lv]["metrics"][key], abs=1e-12)
            assert a["low"] <= a["mean"] <= a["high"]
    df = pd.read_csv(out / "collection.csv")
    assert len(df) == 1 and df["status"].iloc[0] == "ok"  # the build's cell is in the table
    assert "concurrency: 2/3 cells ok" in printed
    assert "failed:      concurrency procrustes faiss flat  at 2 clients: Concurrency" in printed
