"""The README and the docs stay true: the measure tables are generated from the measure
table, every relative link resolves, and every collection-study command is accepted by
the real command line and makes a valid study spec."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from imsearch_align.framework.measures import MEASURES, markdown_table, task_markdown_table

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
METRICS = ROOT / "docs" / "metrics.md"
STUDY_DOC = ROOT / "docs" / "collection-study.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]


def test_measure_tables_equal_the_measure_table():
    text = METRICS.read_text(encoding="utf-8")
    assert markdown_table() in text, (
        "docs/metrics.md's measure table differs from framework/measures.py"
    )
    assert task_markdown_table() in text, (
        "docs/metrics.md's task-measure table differs from framework/measures.py"
    )
    for m in MEASURES:  # every family appears in the table (and so in docs/metrics.md)
        assert f"`{m.name}" in markdown_table()
    assert "(docs/metrics.md)" in README.read_text(encoding="utf-8"), (
        "the README no longer links the measure tables"
    )


def test_readme_starts_with_the_two_commands():
    text = README.read_text(encoding="utf-8")
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    lines = [ln.split("#", 1)[0].strip() for ln in block.strip().splitlines()]
    assert [ln for ln in lines if ln][:2] == ["make demo", "make test"]


# ----------------------------------------------------------------------------- links


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_relative_link_resolves(page: Path):
    for link in _links(page):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        assert target.exists(), f"{page.name}: link {link!r} points to a missing file"
        if anchor and target.suffix == ".md":
            assert anchor in _anchors(target), f"{page.name}: link {link!r}: no such heading"


# ----------------------------------------------------------------------------- study commands


def _commands(page: Path) -> list[str]:
    """``imsearch-align study ...`` and ``python benchmarks/collection.py ...`` lines of
    the page's code blocks (continuations joined, comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith(("imsearch-align study", "python benchmarks/collection.py")):
                out.append(line)
    return out


STUDY_COMMANDS = [(p, c) for p in (README, STUDY_DOC) for c in _commands(p)]


def test_the_study_is_documented_with_its_commands():
    assert any(c.startswith("imsearch-align study --shapes 120 --quick") for _, c in STUDY_COMMANDS)
    assert any("--config benchmarks/studies/default.yaml" in c for p, c in STUDY_COMMANDS
               if p == README)  # fmt: skip


@pytest.mark.parametrize(
    "page, cmd", STUDY_COMMANDS, ids=[f"{p.name}-{i}" for i, (p, _) in enumerate(STUDY_COMMANDS)]
)
def test_documented_study_command_makes_a_valid_spec(page: Path, cmd: str, tmp_path, monkeypatch):
    from imsearch_align.cli import build_parser
    from imsearch_align.cli.config_flags import read_config
    from imsearch_align.study import StudySpec
    from imsearch_align.study.flags import spec_mapping

    words = shlex.split(cmd.replace("DIR", str(tmp_path / "dir")))
    argv = ["study", *words[2:]]
    if "--help" in argv:
        return
    monkeypatch.chdir(ROOT)  # study files are named from the repository root
    args = build_parser().parse_args(argv)
    from_file = read_config(args.config) if getattr(args, "config", None) else None
    spec = StudySpec.from_dict(spec_mapping(args, from_file))  # StudySpecError if not valid
    assert spec.index_settings()


@pytest.mark.parametrize("name", ["default", "production", "quick"])
def test_each_committed_study_file_is_documented(name: str):
    path = f"benchmarks/studies/{name}.yaml"
    assert (ROOT / path).is_file()
    assert f"`{name}.yaml`" in STUDY_DOC.read_text(encoding="utf-8")


def test_every_study_field_is_documented_as_a_flag():
    from imsearch_align.study import StudySpec

    text = STUDY_DOC.read_text(encoding="utf-8")
    for name in StudySpec.field_names():
        flag = "--method-param" if name == "method_params" else "--" + name.replace("_", "-")
        assert f"`{flag}" in text, f"docs/collection-study.md does not document {flag}"


def test_list_metrics_markdown_prints_the_tables_of_the_metrics_page(capsys):
    from imsearch_align.cli import main

    assert main(["list", "metrics", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert out == markdown_table() + "\n" + task_markdown_table()
    text = (README.parent / "docs" / "metrics.md").read_text(encoding="utf-8")
    assert markdown_table() in text and task_markdown_table() in text
    assert main(["list", "stores", "--markdown"]) == 2


def test_leaderboard_and_plot_defaults_come_from_the_task_measure_table():
    from imsearch_align.framework.task_measures import (
        TASK_MEASURES,
        default_metrics,
        plot_metrics,
        task_keys,
    )
    from imsearch_align.leaderboard import DEFAULT_METRICS

    assert DEFAULT_METRICS == default_metrics()
    for name in (*default_metrics(), *plot_metrics()):
        task, key = name.split("/", 1)
        assert key in task_keys(task), name
    assert {n.split("/")[0] for n in plot_metrics()} == {
        t.task for t in TASK_MEASURES if t.headline
    }
