"""``benchmarks/scale_out.py --measure-cores`` without a server: the core sets it accepts
(clients outside the server's share), the ``core_scaling`` entry it makes from the
repeats, and that the model then scales by Amdahl's law fitted to it instead of saying
"assumed linear (not measured)". The measurement itself needs a Milvus server pinned to 1
and 2 cores and is not run here (``measure_at`` stands in)."""

from __future__ import annotations

import json

import pytest

from imsearch_align.collection.cost_cores import (
    check_core_sets,
    core_entry,
    merge_core_entry,
    parse_cores,
)
from imsearch_align.collection.cost_model import INPUTS, ClusterSpec, IndexSpec, estimate
from imsearch_align.collection.cost_model import load_inputs as load
from imsearch_align.collection.cost_rates import amdahl


def test_core_sets_are_parsed_and_must_exist():
    have = {0, 1, 2, 3}
    assert parse_cores("0,1", "--server-cores", have) == {0, 1}
    assert parse_cores("2-3", "--client-cores", have) == {2, 3}
    with pytest.raises(ValueError, match=r"--client-cores '2,9': CPUs \[9\] are not available"):
        parse_cores("2,9", "--client-cores", have)
    with pytest.raises(ValueError, match="--server-cores 'x': expected CPU numbers"):
        parse_cores("x", "--server-cores", have)


def test_clients_must_run_outside_the_servers_share():
    check_core_sets([frozenset({0}), frozenset({0, 1})], frozenset({2, 3}))
    with pytest.raises(ValueError, match=r"shares CPU\(s\) \[1\] with --server-cores"):
        check_core_sets([frozenset({0}), frozenset({0, 1})], frozenset({1}))
    with pytest.raises(ValueError, match="one set of 1 CPU and one of 2"):
        check_core_sets([frozenset({0}), frozenset({1})], frozenset({2}))


def test_the_entry_is_the_median_of_the_repeats_with_their_extremes():
    results = {1: {"single": [240.0, 250.0, 260.0], "build": [5000.0]},
               2: {"single": [380.0, 400.0, 420.0], "build": [9000.0]}}  # fmt: skip
    e = core_entry(results, kind="IVF_FLAT", n=10**6, dim=384, setting="IVF_FLAT nprobe 16",
                   command="python benchmarks/scale_out.py", when="today")  # fmt: skip
    assert e["single"]["1"] == {"value": 250.0, "low": 240.0, "high": 260.0, "n": 10**6,
                                "dim": 384, "cores": 1}  # fmt: skip
    assert e["single"]["2"]["value"] == 400.0 and e["build"]["2"]["value"] == 9000.0
    assert e["batched"] == {"1": None, "2": None}
    assert "median of 3 and 3 repeat(s)" in e["source"]
    with pytest.raises(ValueError, match="every rate must be > 0"):
        core_entry({1: {"single": [0.0]}}, kind="IVF_FLAT", n=1, dim=1, setting="",
                   command="", when="")  # fmt: skip


@pytest.fixture(scope="module")
def script(load_benchmark):
    return load_benchmark("scale_out", "scale_out_script_cores")


def test_measure_cores_writes_the_entry_and_the_model_uses_it(tmp_path, script, capsys,
                                                              monkeypatch):  # fmt: skip
    inputs = tmp_path / "inputs.json"
    inputs.write_bytes(INPUTS.read_bytes())
    monkeypatch.setattr(script, "parse_cores", lambda text, what: frozenset(
        int(c) for c in text.split(",")))  # fmt: skip
    seen = []

    def fake(server, client, args):
        seen.append((sorted(server), sorted(client)))
        q = {1: 250.0, 2: 400.0}[len(server)]
        return {"single": [q * 0.95, q, q * 1.05], "batched": [3 * q], "build": [20 * q]}

    args = script._parser().parse_args(["--measure-cores", "--index", "IVF_FLAT", "--inputs",
                                        str(inputs), "--write", "--repeats", "3"])  # fmt: skip
    assert script.measure_cores(args, measure_at=fake) == 0
    assert seen == [([0], [2, 3]), ([0, 1], [2, 3])]
    assert "core_scaling[IVF_FLAT]" in capsys.readouterr().out
    stored = json.loads(inputs.read_text())
    before = json.loads(INPUTS.read_text())
    assert {k: v for k, v in stored.items() if k != "core_scaling"} == {
        k: v for k, v in before.items() if k != "core_scaling"}  # fmt: skip
    assert stored["core_scaling"]["IVF_FLAT"]["single"]["2"]["value"] == 400.0
    e = estimate(IndexSpec("IVF_FLAT"), 10**7, 384, load(inputs), ClusterSpec())
    # only the pinned speed-up is used: the type's own figure (2 cores, its size) scaled
    r = 400.0 / 250.0
    base = load(inputs).qps("IVF_FLAT", "single")
    work = base.n * base.dim / (10**7 * 384)
    one_node = base.value * amdahl(16, r) / amdahl(base.cores, r) * work
    assert e["qps"].value == pytest.approx(2 * one_node)
    assert any("Amdahl" in n for n in e["qps"].notes)
    assert not any("assumed linear" in n for n in e["qps"].notes + e["build"].notes)


def test_measure_cores_refuses_clients_on_the_servers_cores(script, capsys, monkeypatch):
    monkeypatch.setattr(script, "parse_cores", lambda text, what: frozenset(
        int(c) for c in text.split(",")))  # fmt: skip
    argv = ["--measure-cores", "--server-cores", "0", "0,1", "--client-cores", "1"]
    assert script.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "outside the server's share" in err[0]


def test_merge_keeps_every_other_figure():
    d = {"a": 1, "core_scaling": {"HNSW": {"x": 1}}}
    out = merge_core_entry(d, "IVF_FLAT", {"single": {}})
    assert out["core_scaling"] == {"HNSW": {"x": 1}, "IVF_FLAT": {"single": {}}}
    assert d["core_scaling"] == {"HNSW": {"x": 1}} and out["a"] == 1
