"""The committed study files are the studies whose cells are committed: each file,
with the machine's folders the run used, is the spec of the command its cells recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imsearch_align.cli.app import build_parser
from imsearch_align.experiment.study_cell import absolute_paths, portable_paths
from imsearch_align.study import StudySpec
from imsearch_align.study.flags import spec_mapping

ROOT = Path(__file__).resolve().parents[2]
STUDIES = ROOT / "benchmarks" / "studies"
#: Every study file whose cells are committed (``benchmarks/results/collection_NAME``).
STUDIED = sorted(p.stem for p in STUDIES.glob("*.yaml")
                 if (ROOT / "benchmarks" / "results" / f"collection_{p.stem}").is_dir())  # fmt: skip


def _first_cell(folder: Path) -> dict:
    return json.loads(sorted(folder.glob("*.json"))[0].read_text())


def _recorded_spec(folder: Path, cell: dict | None = None) -> StudySpec:
    """The spec of the command the folder's first cell (or ``cell``) recorded."""
    cell = _first_cell(folder) if cell is None else cell
    # how a run goes (progress, going on from kept cells), not what it measures
    argv = [a for a in cell["command"][2:] if a not in ("--no-progress", "--skip-existing")]
    args = build_parser().parse_args(["study", *argv])
    mapping = spec_mapping(args)
    # benchmarks/results/NAME: an old cell recorded the absolute folder, a new one "--out ."
    mapping["out"] = str(folder.relative_to(ROOT))
    return StudySpec.from_dict(mapping)


@pytest.mark.parametrize("name", STUDIED)
def test_the_study_file_is_the_recorded_study(name):
    folder = ROOT / "benchmarks" / "results" / f"collection_{name}"
    recorded = _recorded_spec(folder)
    spec = StudySpec.from_file(STUDIES / f"{name}.yaml").replace(
        shapes_root=recorded.shapes_root, cache_dir=recorded.cache_dir,
        truth_cache=recorded.truth_cache,
    )  # fmt: skip
    # None means the default: compare what the study resolves them to
    resolved = {
        "queries": recorded.query_count(),
        "latency_queries": recorded.latency_count(),
        "sizes": tuple(recorded.size_grid()),
    }
    assert spec.replace(**resolved) == recorded.replace(**resolved)
    assert [s.label for s in spec.index_settings()] == [s.label for s in recorded.index_settings()]


def test_the_committed_studies_are_found():
    assert {"default", "production"} <= set(STUDIED), STUDIED


def test_every_study_file_loads():
    for path in sorted(STUDIES.glob("*.yaml")):
        spec = StudySpec.from_file(path)
        assert spec.index_settings() and spec.command()[:2] == ["imsearch-align", "study"]


@pytest.mark.parametrize("name", STUDIED)
def test_a_cell_written_portable_records_the_same_study(name):
    """Cells written from now on hold no absolute path (``--out .``, ``<outside>/shapes``):
    the recorded spec is the same as from the committed cells, but for the machine's
    folders."""
    folder = ROOT / "benchmarks" / "results" / f"collection_{name}"
    old = _recorded_spec(folder)
    cell = _first_cell(folder)
    written_at = cell["command"][cell["command"].index("--out") + 1]
    if Path(written_at).is_absolute():  # a cell from before the portable writer
        portable = portable_paths(cell, written_at)  # as the writer now does
        assert portable["command"][portable["command"].index("--out") + 1] == "."
    else:  # written by the portable writer: nothing of the machine in it
        assert not absolute_paths(cell) and "<outside>/shapes" in cell["command"]
        portable = cell
    new = _recorded_spec(folder, portable)
    places = {"shapes_root": old.shapes_root, "cache_dir": old.cache_dir,
              "truth_cache": old.truth_cache}  # fmt: skip
    assert new.replace(**places) == old
