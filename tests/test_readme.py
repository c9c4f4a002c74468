"""The README stays true: its measure tables are generated from the measure table."""

from __future__ import annotations

from pathlib import Path

from imsearch_align.framework.measures import MEASURES, markdown_table, task_markdown_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_measure_tables_equal_the_measure_table():
    text = README.read_text(encoding="utf-8")
    assert markdown_table() in text, "README's measure table differs from framework/measures.py"
    assert task_markdown_table() in text, (
        "README's task-measure table differs from framework/measures.py"
    )
    for m in MEASURES:  # every family appears in the table (and so in the README)
        assert f"`{m.name}" in markdown_table()


def test_readme_starts_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.split("#", 1)[0].strip() for ln in block.strip().splitlines()]
    assert [ln for ln in lines if ln][:2] == ["make demo", "make test"]
