"""Money from a price sheet: every bad sheet is one line naming the file, the node type and
the field, exit 2, before any work; monthly cost and cost per million queries against a
direct formula, bands included; the example sheet says it is an example everywhere; and
``benchmarks/scale_out.py --estimate`` end to end."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from imsearch_align.collection.cost_figures import INPUTS, ConcurrencyCurve, Figure, MeasuredInputs
from imsearch_align.collection.cost_inputs import measure_command
from imsearch_align.collection.cost_model import ClusterSpec, IndexSpec, estimate
from imsearch_align.collection.cost_prices import (
    HOURS_PER_MONTH,
    PriceError,
    load_prices,
    price_rows,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "imsearch_align" / "data" / "example_prices.json"
GOOD = {"name": "n16", "cores": 16, "memory_gib": 64, "hourly_price": 1.25, "currency": "EUR"}


def _sheet(tmp_path: Path, *entries: dict, name: str = "prices.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"about": "test", "node_types": list(entries)}))
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hourly_price": None}, "node type 'n16': hourly_price is missing"),
        ({"currency": None}, "node type 'n16': currency is missing"),
        (
            {"hourly_price": -0.5},
            "node type 'n16': hourly_price must be a positive number, got -0.5",
        ),
        ({"hourly_price": 0}, "node type 'n16': hourly_price must be a positive number, got 0"),
        ({"cores": 0}, "node type 'n16': cores must be a positive number, got 0"),
        ({"cores": 2.5}, "node type 'n16': cores must be a whole number"),
        ({"memory_gib": -64}, "node type 'n16': memory_gib must be a positive number"),
        ({"memory_gib": 0.5}, "node type 'n16': memory_gib 0.5 is smaller than one segment"),
        ({"hourly_prce": 1}, "node type 'n16': hourly_prce is not a field"),
        ({"name": ""}, "node type 1: name must be non-empty text"),
        ({"cores": True}, "node type 'n16': cores must be a positive number, got True"),
    ],
)
def test_a_bad_entry_is_one_line_naming_file_node_type_and_field(tmp_path, change, message):
    entry = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path = _sheet(tmp_path, entry)
    with pytest.raises(PriceError) as err:
        load_prices(path, 512)
    text = str(err.value)
    assert text == f"{path}: {message}" or text.startswith(f"{path}: {message}"), text
    assert "\n" not in text


def test_a_sheet_that_is_not_a_list_of_node_types_is_refused(tmp_path):
    for body in ("{}", '{"node_types": []}', "[]", "not json"):
        path = tmp_path / "p.json"
        path.write_text(body)
        with pytest.raises(PriceError, match=rf"^{path}: "):
            load_prices(path, 512)
    with pytest.raises(PriceError, match="node type 'n16': name is given twice"):
        load_prices(_sheet(tmp_path, GOOD, GOOD), 512)
    with pytest.raises(PriceError, match="cannot be read: FileNotFoundError"):
        load_prices(tmp_path / "absent.json", 512)


def test_a_node_must_hold_one_segment_of_the_inputs_segment_size(tmp_path):
    small = {**GOOD, "memory_gib": 1.0}  # 0.9 GiB usable = 922 MiB
    assert load_prices(_sheet(tmp_path, small), 512)[1][0].memory_gib == 1.0
    with pytest.raises(PriceError, match=r"memory_gib 1\.0 is smaller than one segment.*1024 MB"):
        load_prices(_sheet(tmp_path, small), 1024)


def test_yaml_sheets_are_read(tmp_path):
    pytest.importorskip("yaml")
    path = tmp_path / "p.yaml"
    path.write_text("about: mine\nnode_types:\n  - {name: a, cores: 8, memory_gib: 32, "
                    "hourly_price: 0.4, currency: USD}\n")  # fmt: skip
    about, types = load_prices(path, 512)
    assert about == "mine" and types[0].cores == 8 and types[0].currency == "USD"
    path.write_text("node_types:\n  - {name: a, cores: 8\n")
    with pytest.raises(PriceError, match=rf"^{path}: cannot be read"):
        load_prices(path, 512)


def _measured() -> MeasuredInputs:
    def f(v: float, lo: float, hi: float) -> Figure:
        return Figure(v, "hand", n=1_000_000, dim=384, cores=2, low=lo, high=hi)

    return MeasuredInputs(
        search_qps={
            "IVF_FLAT": {"single": f(400.0, 380.0, 420.0), "batched": f(1400.0, 1000.0, 1800.0)}
        },
        build_rows_per_s={"IVF_FLAT": f(10_000.0, 10_000.0, 10_000.0)},
        insert_rows_per_s=f(20_000.0, 20_000.0, 20_000.0),
        concurrency=ConcurrencyCurve((1, 2), (300.0, 400.0), 2, "hand"),
        server_memory_ratio=f(2.0, 1.8, 2.2),
    )


def test_money_against_a_direct_formula(tmp_path):
    _, types = load_prices(_sheet(tmp_path, GOOD, {**GOOD, "name": "big", "memory_gib": 256,
                                                   "hourly_price": 4.0}), 512)  # fmt: skip
    m, cl, n = _measured(), ClusterSpec(replicas=2), 100_000_000
    rows = price_rows(types, IndexSpec("IVF_FLAT"), n, 384, m, cl)
    mem = estimate(IndexSpec("IVF_FLAT"), n, 384, m, cl)["memory"].value
    for row, price, gib in ((rows[0], 1.25, 64), (rows[1], 4.0, 256)):
        nodes = {r: 2 * math.ceil(mem * r / (gib * 2**30 * 0.9)) for r in (2.0, 1.8, 2.2)}
        qps = {r: nodes[r] * 16 * q / 2 * 1 / 100 for r, q in ((2.0, 400), (1.8, 380), (2.2, 420))}
        assert row.nodes.value == nodes[2.0]
        assert row.monthly == pytest.approx((nodes[2.0] * price * HOURS_PER_MONTH,
                                             nodes[1.8] * price * HOURS_PER_MONTH,
                                             nodes[2.2] * price * HOURS_PER_MONTH))  # fmt: skip
        per = nodes[2.0] * price / (qps[2.0] * 3600) * 1e6
        assert row.per_million[0] == pytest.approx(per)
        corners = [k * price / (k * 16 * q / 2 / 100 * 3600) * 1e6
                   for k in {nodes[1.8], nodes[2.2]} for q in (380, 420)]  # fmt: skip
        assert row.per_million[1:] == pytest.approx((min(corners), max(corners)))
    at = price_rows(types[:1], IndexSpec("IVF_FLAT"), n, 384, m, cl, target_qps=5000)[0]
    assert at.per_million[0] == pytest.approx(at.nodes.value * 1.25 / (5000 * 3600) * 1e6)
    assert at.load == "5,000 q/s (the target)"


def test_the_example_sheet_says_it_is_an_example_everywhere():
    data = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    assert "EXAMPLE" in data["about"] and "made up" in data["about"]
    assert "no claim about any provider's current prices" in data["about"]
    for entry in data["node_types"]:
        assert entry["name"].startswith("example-") and "EXAMPLE" in entry["note"]
        assert "made-up price" in entry["note"] and entry["currency"] == "XXX"
    assert len(load_prices(EXAMPLE, 512)[1]) == len(data["node_types"])


@pytest.fixture(scope="module")
def script(load_benchmark):
    return load_benchmark("scale_out", "scale_out_script_prices")


def test_script_estimate_with_the_example_sheet(script, capsys):
    argv = ["--estimate", "--index", "IVF_FLAT", "--rows", "10000000", "--dim", "384",
            "--prices", str(EXAMPLE)]  # fmt: skip
    assert script.main(argv) == 0
    out = capsys.readouterr().out
    assert "query nodes, sized by single q/s" in out and "q/s of it, batches" in out
    assert "Amdahl's law fitted to the measured 1->2-core speed-up" in out
    # the stored inputs' quality comes from cells with intervals (the studies re-run)
    assert re.search(r"task quality: t2i/HitRate@10 [\d.]+ \[[\d.]+-[\d.]+\]", out), out
    assert "EXAMPLE price sheet" in out and "a month is 730 h" in out
    for name in ("example-8c-32g", "example-16c-64g", "example-16c-128g"):
        assert name in out


def test_script_refuses_a_bad_sheet_before_any_work(tmp_path, script, capsys, monkeypatch):
    def no_work(*a, **k):
        raise AssertionError("estimated before the price sheet was checked")

    monkeypatch.setattr(script, "estimate", no_work)
    path = _sheet(tmp_path, GOOD, {**GOOD, "name": "tiny", "memory_gib": 0.25})
    assert script.main(["--prices", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path}: node type 'tiny': memory_gib 0.25 is smaller than one "
                   "segment: 90% of it (230 MiB) cannot hold a 512 MB sealed segment"]  # fmt: skip


def test_script_refuses_a_figure_not_measured_naming_what_to_measure(script, capsys, tmp_path):
    data = json.loads(INPUTS.read_text(encoding="utf-8"))
    why = "not measured: no clean cell of IVF_PQ in the folders read; measure: "
    for what in ("single", "batched"):  # the stored inputs as before IVF_PQ was measured
        cmd = measure_command("IVF_PQ", what)
        data["search_qps"]["IVF_PQ"][what] = {"value": None, "source": why + cmd}
    (inputs := tmp_path / "inputs.json").write_text(json.dumps(data), encoding="utf-8")
    assert script.main(["--estimate", "--index", "IVF_PQ", "--inputs", str(inputs)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: IVF_PQ single q/s: not measured")
    assert "--index milvus:IVF_PQ:" in err[0]
