"""Golden result: every number of a small offline shapes study stays what it was.

The study is ``benchmarks/flickr.py`` as a user runs it offline (rendered
shapes in the Flickr30k layout, EfficientNet-Lite0 + the packaged MiniLM),
all four training-free methods, the exact store and FAISS, two support
sizes. Every number of every result file (the metrics, their intervals, the
tie-rule values, the tie summaries, the task's details and the per-query
tables; times and speeds left out) must equal the stored baseline to 1e-9.
The baseline was written by the code before the one-shape refactor (issue
27); a change that moves any number fails here.

Regenerate (only when a number is meant to change, and say why in the
commit)::

    python tests/experiment/test_golden.py --write
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BASELINE = Path(__file__).resolve().parent / "data" / "golden_shapes.json"
ARGS = [
    "--shapes", "120", "--quick", "--n", "40", "80",
    "--methods", "csa", "asif", "cka", "procrustes",
    "--stores", "exact", "faiss", "--no-progress",
]  # fmt: skip
#: Keys whose values are times, speeds or machine facts, not results.
VOLATILE = {"timings", "provenance", "created", "search_deeper_s", "fit_s", "key"}
TOL = 1e-9


def _numbers(node, prefix: str, out: dict) -> None:
    """Every number (and status string) below ``node``, keyed by its path."""
    if isinstance(node, dict):
        for k, v in node.items():
            if str(k) in VOLATILE or str(k).endswith("_s"):
                continue
            _numbers(v, f"{prefix}/{k}", out)
    elif isinstance(node, list | tuple):
        for i, v in enumerate(node):
            _numbers(v, f"{prefix}[{i}]", out)
    elif isinstance(node, bool) or node is None or isinstance(node, str):
        if prefix.endswith("/state") or prefix.endswith("/groups"):
            out[prefix] = node
    elif isinstance(node, int | float):
        out[prefix] = float(node)


def collect(out_dir: Path) -> dict:
    """``{cell: {path: value}}`` of every result JSON and its per-query table."""
    import pandas as pd

    cells: dict = {}
    for f in sorted(out_dir.glob("*.json")):
        d = json.loads(f.read_text())
        name = f"{d['method']['name']}|{d['config']['store']}|{d['config']['n_support']}"
        vals: dict = {}
        for part in ("status", "metrics", "clip_benchmark", "task"):
            _numbers(d.get(part), part, vals)
        pq = f.with_suffix(".per_query.parquet")
        frame = pd.read_parquet(pq).sort_values(["ranking", "query_id"], kind="stable")
        for col in frame.columns:
            if col in ("ranking", "query_id") or not pd.api.types.is_numeric_dtype(frame[col]):
                continue
            for (rk, qid), v in zip(
                zip(frame["ranking"], frame["query_id"], strict=True), frame[col], strict=True
            ):
                vals[f"per_query/{rk}/{qid}/{col}"] = float(v)
        cells[name] = vals
    return cells


def run_study(tmp: Path) -> dict:
    """Run the study into ``tmp`` and collect its numbers."""
    spec = importlib.util.spec_from_file_location(
        "flickr_golden", ROOT / "benchmarks" / "flickr.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp / "out"
    argv = [
        *ARGS,
        "--out", str(out),
        "--cache-dir", str(tmp / "cache"),
        "--shapes-root", str(tmp / "shapes"),
    ]  # fmt: skip
    rc = mod.main(argv)
    assert rc == 0, f"the study exited {rc}"
    return collect(out)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= TOL
    return a == b


@pytest.mark.slow
def test_every_number_of_the_offline_study_equals_the_baseline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    want = json.loads(BASELINE.read_text())
    got = run_study(tmp_path)
    assert sorted(got) == sorted(want), "the study's cells changed"
    problems = []
    for cell, values in want.items():
        mine = got[cell]
        missing = sorted(set(values) - set(mine))
        extra = sorted(set(mine) - set(values))
        if missing or extra:
            problems.append(f"{cell}: missing {missing[:5]}, new {extra[:5]}")
        for path, v in values.items():
            if path in mine and not _same(mine[path], v):
                problems.append(f"{cell} {path}: {mine[path]!r} != baseline {v!r}")
    assert not problems, f"{len(problems)} differences:\n" + "\n".join(problems[:30])


if __name__ == "__main__":
    import os
    import tempfile

    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/experiment/test_golden.py --write")
    os.environ["HF_HUB_OFFLINE"] = "1"
    with tempfile.TemporaryDirectory() as d:
        cells = run_study(Path(d))
    BASELINE.write_text(json.dumps(cells, indent=0, sort_keys=True) + "\n")
    print(f"wrote {BASELINE} ({len(cells)} cells, {sum(map(len, cells.values()))} numbers)")
