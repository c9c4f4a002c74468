"""The cost model refuses what it cannot stand on: sizes, counts and targets that are not
positive, an unreadable inputs file (named), a figure of the inputs that is NaN, negative,
zero or outside its band (named, never a StopIteration), and study cells with a negative
or non-finite timing or rate (named, instead of "insert -520 min" in the document)."""

from __future__ import annotations

import json
import math

import pytest

from imsearch_align.collection.cost_cells import read_cells
from imsearch_align.collection.cost_figures import ConcurrencyCurve, InputsError
from imsearch_align.collection.cost_model import (
    INPUTS,
    ClusterSpec,
    IndexSpec,
    estimate,
    load_inputs,
)


def test_sizes_counts_and_targets_must_be_positive():
    m = load_inputs()
    for n in (0, -5, math.nan, 1.5):
        with pytest.raises(ValueError, match=r"n \(rows\) must be a"):
            estimate(IndexSpec("IVF_FLAT"), n, 384, m, ClusterSpec())
    with pytest.raises(ValueError, match="dim must be a positive"):
        estimate(IndexSpec("IVF_FLAT"), 10**6, 0, m, ClusterSpec())
    for target in (0, -100.0, math.inf):
        with pytest.raises(ValueError, match="target_qps must be a positive"):
            estimate(IndexSpec("IVF_FLAT"), 10**6, 384, m, ClusterSpec(), target_qps=target)
    for field in ("replicas", "query_node_gib", "query_node_cores", "index_nodes", "shards",
                  "segment_mb"):  # fmt: skip
        with pytest.raises(ValueError, match=rf"ClusterSpec.{field} must be a positive"):
            ClusterSpec(**{field: 0})
        with pytest.raises(ValueError, match=rf"ClusterSpec.{field} must be a positive"):
            ClusterSpec(**{field: -2})
    for field in ("M", "nlist", "nbits", "m"):
        for bad in (0, -1):
            with pytest.raises(ValueError, match=rf"IndexSpec.{field} must be a positive"):
                IndexSpec("HNSW", **{field: bad})
    assert estimate(IndexSpec("IVF_FLAT"), 10**6, 384, m, ClusterSpec())["qps"].value > 0


def test_an_unreadable_inputs_file_is_named(tmp_path):
    bad = tmp_path / "inputs.json"
    bad.write_text('{"search_qps": ')
    with pytest.raises(ValueError, match=r"cost-model inputs '.*inputs\.json' cannot be read"):
        load_inputs(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"inputs\.json' cannot be read"):
        load_inputs(bad)
    old = {"search_qps": {"IVF_FLAT": {"value": 1400, "source": "x"}}, "insert_rows_per_s": {}}
    bad.write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"search_qps\[IVF_FLAT\] needs 'single' and 'batched'"):
        load_inputs(bad)


def _stored() -> dict:
    return json.loads(INPUTS.read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (("search_qps", "IVF_FLAT", "single", "value"), math.nan, r"single\.value is nan"),
        (("search_qps", "IVF_FLAT", "batched", "value"), -3.0, r"batched\.value is -3\.0"),
        (("search_qps", "HNSW", "batched", "low"), 0, r"batched\.low is 0"),
        (("search_qps", "IVF_FLAT", "single", "high"), 1.0, r"single: value .* is outside"),
        (("build_rows_per_s", "IVF_FLAT", "value"), math.inf, r"build_rows_per_s\[IVF_FLAT\]"),
        (("insert_rows_per_s", "value"), "fast", r"insert_rows_per_s\.value is 'fast'"),
        (("server_memory_ratio", "value"), -2.1, r"server_memory_ratio\.value is -2\.1"),
        (("concurrency", "qps", 2), math.nan, r"concurrency\.qps\[2\] is nan"),
        (("concurrency", "qps", 0), -1.0, r"concurrency\.qps\[0\] is -1\.0"),
        (("concurrency", "clients", 1), 1, r"concurrency\.clients .* ascending"),
        (("segment_mb", "value"), 0, r"segment_mb\.value is 0"),
    ],
)
def test_a_bad_figure_in_the_inputs_is_named_not_a_stopiteration(tmp_path, path, value, message):
    d = _stored()
    at = d
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    bad = tmp_path / "inputs.json"
    bad.write_text(json.dumps(d))  # json writes NaN and Infinity, and reads them back
    with pytest.raises(
        ValueError, match=rf"inputs\.json' cannot be read: InputsError: .*{message}"
    ):
        load_inputs(bad)


def test_a_concurrency_curve_of_nan_is_refused_before_saturation_is_asked():
    with pytest.raises(InputsError, match=r"concurrency\.qps\[0\] is nan"):
        ConcurrencyCurve.from_dict({"clients": [1, 2], "qps": [math.nan, math.nan], "cores": 2})
    with pytest.raises(InputsError, match="must pair up"):
        ConcurrencyCurve.from_dict({"clients": [1, 2], "qps": [3.0], "cores": 2})


@pytest.mark.parametrize(
    ("field", "value"),
    [("timings.insert_s", -31200.0), ("queries_per_s", math.nan), ("queries_per_s", -3.0),
     ("timings.load_s", -55.0), ("queries_per_s_range", [100.0, math.inf])],
)  # fmt: skip
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
