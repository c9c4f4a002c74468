"""The query-aware benchmark's README and figure, from a constructed ``results.json``: each
panel draws exactly the rows it names, and each README gain is the difference it says."""

from __future__ import annotations

import pytest

from imsearch_align.collection.query_aware_report import (
    FIGURE,
    VARIANTS,
    draw,
    equal_effort_gain,
    readme,
)

NPROBE = [1, 4, 16, 64]


def _rows(variant: str, lift: float) -> list[dict]:
    return [{"variant": variant, "nprobe": p, "recall": min(1.0, 0.4 + 0.15 * i + lift),
             "candidates_mean": 100.0 * p * (1 - lift), "seconds_median": 0.001 * p}
            for i, p in enumerate(NPROBE)]  # fmt: skip


def _size(size: int, lift: float) -> dict:
    rows = [r for k, v in enumerate(VARIANTS) for r in _rows(v, lift * k)]
    return {"size": size, "nlist": 1024, "rows": rows,
            "control": {"rows": _rows("control", 0.05)}}  # fmt: skip


RESULT = {
    "config": {"nprobe": NPROBE},
    "data": {"description": "constructed"},
    "command": "python benchmarks/query_aware.py --constructed",
    "methods": [
        {"method": "csa", "sizes": [_size(100_000, 0.02), _size(1_000_000, 0.04)]},
        {"method": "linear", "sizes": [_size(100_000, 0.0)]},  # no 1M: its panel is blank
    ],
}


def test_each_panel_draws_the_rows_of_its_method_and_size(tmp_path):
    fig = draw(RESULT, tmp_path / FIGURE)
    assert (tmp_path / FIGURE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = fig.axes
    assert len(axes) == 4 and not axes[3].axison  # 2 sizes x 2 methods; linear at 1M blank
    for ax, (m, s) in zip(axes[:3], [(0, 0), (1, 0), (0, 1)], strict=True):
        size = RESULT["methods"][m]["sizes"][s]
        assert ax.get_title() == f"{RESULT['methods'][m]['method']} at {size['size']:,}"
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        assert set(lines) == {*VARIANTS, "control (image queries)"}
        for label, ln in lines.items():
            variant = "control" if label.startswith("control") else label
            rows = size["control"]["rows"] if variant == "control" else size["rows"]
            want = sorted((r["candidates_mean"], r["recall"]) for r in rows
                          if r["variant"] == variant)  # fmt: skip
            assert list(zip(ln.get_xdata(), ln.get_ydata(), strict=True)) == want


def test_the_readme_gains_are_the_differences_it_names():
    text = readme(RESULT)
    assert FIGURE in text and "## 1,000,000 documents" in text
    rows = RESULT["methods"][0]["sizes"][0]["rows"]
    at16 = {r["variant"]: r["recall"] for r in rows if r["nprobe"] == 16}
    line = next(x for x in text.splitlines() if x.startswith("| csa (nlist 1024) | both |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert float(cells[2 + len(NPROBE) + 2]) == pytest.approx(
        at16["both"] - at16["document_only"], abs=5e-4)  # fmt: skip
    eq = equal_effort_gain(rows, "both", 16)
    assert cells[2 + len(NPROBE) + 3] == ("-" if eq is None else f"{eq:+.3f}")
