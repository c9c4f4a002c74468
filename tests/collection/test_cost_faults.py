"""The cost model refuses what it cannot stand on: sizes, counts and prices that are not
positive, an unreadable inputs file (named), and study cells with a negative or
non-finite timing or rate (named, instead of "insert -520 min" in the document)."""

from __future__ import annotations

import json
import math

import pytest

from imsearch_align.collection.cost_inputs import read_cells
from imsearch_align.collection.cost_model import ClusterSpec, IndexSpec, estimate, load_inputs


def test_sizes_and_counts_must_be_positive():
    m = load_inputs()
    for n in (0, -5):
        with pytest.raises(ValueError, match=r"n \(rows\) must be a positive number"):
            estimate(IndexSpec("IVF_FLAT"), n, 384, m, ClusterSpec())
    for field in ("replicas", "query_node_gib", "index_nodes", "shards"):
        with pytest.raises(ValueError, match=rf"ClusterSpec.{field} must be a positive"):
            ClusterSpec(**{field: 0})
    for field in ("M", "nlist"):
        with pytest.raises(ValueError, match=rf"IndexSpec.{field} must be a positive"):
            IndexSpec("HNSW", **{field: -1})
    assert estimate(IndexSpec("IVF_FLAT"), 10**6, 384, m, ClusterSpec())["qps"].value > 0


def test_an_unreadable_inputs_file_is_named(tmp_path):
    bad = tmp_path / "inputs.json"
    bad.write_text('{"search_qps": ')
    with pytest.raises(ValueError, match=r"cost-model inputs '.*inputs\.json' cannot be read"):
        load_inputs(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"inputs\.json' cannot be read"):
        load_inputs(bad)


@pytest.mark.parametrize(
    ("field", "value"),
    [("timings.insert_s", -31200.0), ("queries_per_s", math.nan), ("queries_per_s", -3.0)],
)
def test_a_cell_with_a_negative_or_nan_figure_is_refused_by_name(tmp_path, field, value):
    cell = {
        "format": "collection-cell/1", "kind": "collection_scale", "store": "milvus",
        "method": "csa", "index": {"type": "IVF_FLAT", "params": {}, "search_params": {}},
        "collection": {"size": 1000}, "queries_per_s": 100.0,
        "metrics": {"t2i/ann_recall@10": 0.9}, "timings": {"insert_s": 10.0, "build_s": 1.0},
        "status": {"state": "ok"},
    }  # fmt: skip
    head, _, key = field.rpartition(".")
    (cell[head] if head else cell)[key] = value
    (tmp_path / "bad_cell.json").write_text(json.dumps(cell))
    with pytest.raises(ValueError, match=rf"cell bad_cell.json: .*'?{field}'? (is|must be)"):
        read_cells(tmp_path, "milvus")
