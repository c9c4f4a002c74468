"""A run's cells carry the report contract's fields and read back as concurrency cells."""

from __future__ import annotations

import json

import numpy as np

from imsearch_align.concurrency import concurrency_cells, quality, run_concurrent, write_cells
from imsearch_align.experiment.study_cell import read_cell
from imsearch_align.framework.metrics import Qrels
from imsearch_align.report_html.collect import collect


def test_cells_read_back_through_the_report_contract(built, tmp_path):
    store, Q, qids = built
    res = run_concurrent(store, "docs", Q, qids, 10, levels=(1, 2), duration_s=0.2, seed=4)
    full = store.search("docs", Q, 10)
    qrels = Qrels.from_pairs(qids, full.ids[:, 0])
    q = {lv.concurrency: quality(lv.answers, qrels, ["HitRate@10"]) for lv in res.levels}
    cells = concurrency_cells(
        res,
        store="exact",
        method="identity",
        dataset="synthetic",
        collection_size=4000,
        quality=q,
        command=["python", "bench.py", "--levels", "1,2"],
    )
    assert [c["concurrency"] for c in cells] == [1, 2]
    paths = write_cells(cells, tmp_path)
    assert [p.name for p in paths] == [
        "concurrency-exact-exact-identity-c1.json",
        "concurrency-exact-exact-identity-c2.json",
    ]
    for path, lv in zip(paths, res.levels):
        data = json.loads(path.read_text())
        cell = read_cell(data, str(path))
        assert cell.kind == "concurrency"
        assert cell.concurrency == lv.concurrency
        assert cell.queries_per_s == lv.queries_per_s
        assert cell.latency_ms == {p: lv.latency_ms[p] for p in ("p50", "p95", "p99")}
        assert cell.metrics == {"t2i/HitRate@10": 1.0}
        assert cell.collection_size == 4000
        assert cell.status.ok and cell.exact
        assert cell.command == "python bench.py --levels 1,2"
        run = data["run"]
        assert run["sent"] == run["answered"] == lv.sent
        assert run["failed"] == 0
        assert run["saturation"] == res.saturation
        assert run["quality"]["n_answers"] == lv.answered
    got = collect(tmp_path)
    assert sorted(c.concurrency for c in got.cells) == [1, 2]


def test_a_level_without_answers_is_a_failed_cell(tmp_path):
    from imsearch_align.concurrency.result import ConcurrencyResult, level_result

    lv = level_result(4, "threads", np.arange(3), [], 0.0, 1.0)
    res = ConcurrencyResult((lv,), "c", 10, "threads", 1.0, 0.0, 0)
    (cell,) = concurrency_cells(res, store="milvus", method="m", index_type="HNSW")
    assert cell["status"]["state"] == "failed"
    assert cell["metrics"] == {} and cell["latency_ms"] == {}
    (path,) = write_cells([cell], tmp_path)
    back = read_cell(json.loads(path.read_text()))
    assert back.status.state == "failed" and back.setting == "milvus HNSW"
