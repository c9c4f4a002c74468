"""Store knowledge lives on the store mode: no store-name branch in the study's rooms, and a
store joins the study by one subclass of ``StoreMode`` added to ``STORES``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from imsearch_align.collection import store_modes
from imsearch_align.collection.settings import parse_index, resolve
from imsearch_align.collection.store_modes import STORES, ExactMode
from imsearch_align.study import StudySpec, run_study
from imsearch_align.testing.scripts import write_cone_pairs

PACKAGE = Path(__file__).resolve().parents[2] / "imsearch_align"
ROOMS = ("collection", "concurrency", "study")


def _name_branches(path: Path) -> list[str]:
    """``x == "faiss"`` / ``x in ("milvus", ...)``: a comparison with a store mode's name."""
    names = set(STORES)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        for comp in node.comparators:
            values = comp.elts if isinstance(comp, ast.Tuple | ast.List | ast.Set) else [comp]
            hits = [v.value for v in values if isinstance(v, ast.Constant) and v.value in names]
            if hits:
                out.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {hits}")
    return out


def test_no_room_of_the_study_branches_on_a_store_name():
    files = [p for room in ROOMS for p in (PACKAGE / room).rglob("*.py")]
    assert len(files) > 30
    found = [hit for p in files if p.name != "store_modes.py" for hit in _name_branches(p)]
    assert not found, found


def test_the_branch_finder_finds_a_branch(tmp_path):
    p = PACKAGE / "collection" / "_probe_for_test.py"
    try:
        p.write_text('def f(s):\n    return s.store in ("faiss", "x") or s == "milvus"\n')
        assert len(_name_branches(p)) == 2
    finally:
        p.unlink()


class _TinyExact(ExactMode):
    """A store mode added by a user: the exact store under another name, with a size limit."""

    name = "tiny-exact"
    max_rows = 400
    alternative = "use --stores exact"
    default_index = ("tiny-exact:flat",)


def test_a_store_joins_the_study_by_one_subclass(tmp_path, monkeypatch):
    monkeypatch.setitem(STORES, _TinyExact.name, _TinyExact())
    (s,) = parse_index("tiny-exact:flat")
    assert resolve(s, 100) == ({}, [{}])
    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    spec = StudySpec(embeddings=str(emb), stores=("tiny-exact",), methods=("procrustes",),
                     sizes=(0, 100), queries=20, latency_queries=3, out=str(tmp_path / "o"),
                     truth_cache=str(tmp_path / "t"))  # fmt: skip
    result = run_study(spec, progress=False)
    assert result.exit_code == 0 and {c["store"] for c in result.cells} == {"tiny-exact"}
    assert [c["collection"]["distractors"] for c in result.cells] == [0, 100]
    from imsearch_align.study import StudySpecError

    with pytest.raises(StudySpecError, match=r"serves \(at most 400\): use --stores exact"):
        run_study(spec.replace(sizes=(1000,)), progress=False)


def test_every_mode_declares_what_the_study_reads():
    for name, mode in STORES.items():
        assert mode.name == name and mode.registry
        assert mode.index_types() and mode.grid(quick=False) and mode.grid(quick=True)
        for text in mode.grid(quick=False) + mode.grid(quick=True):
            assert parse_index(text)[0].store == name
    assert store_modes.MILVUS_NLIST_CAP == STORES["milvus"].nlist_cap


class _FlakyMode(ExactMode):
    """The exact store, whose server 'goes through an outage' during the timed searches."""

    name = "flaky-exact"
    default_index = ("flaky-exact:flat",)

    def open(self, index_type, build, search, *, uri, workdir):
        from imsearch_align.adapters.exact import ExactStore

        class Flaky(ExactStore):
            outages = 0
            searches = 0

            def search(self, name, queries, k):
                Flaky.searches += 1
                if Flaky.searches == 2:
                    Flaky.outages += 1  # as a Milvus store counts one that started
                return super().search(name, queries, k)

        return Flaky()


def test_a_timing_through_an_outage_is_a_degraded_cell_not_an_ok_one(tmp_path, monkeypatch):
    monkeypatch.setitem(STORES, _FlakyMode.name, _FlakyMode())
    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    spec = StudySpec(embeddings=str(emb), stores=("flaky-exact",), methods=("procrustes",),
                     sizes=(0,), queries=20, latency_queries=3, out=str(tmp_path / "o"),
                     truth_cache=str(tmp_path / "t"))  # fmt: skip
    result = run_study(spec, progress=False)
    (cell,) = result.cells
    assert cell["status"]["state"] == "degraded" and "1 outage(s)" in cell["status"]["reasons"][0]
    assert result.exit_code == 1
    again = run_study(spec.replace(skip_existing=True), progress=False)
    assert again.cells[0]["status"]["state"] == "degraded"  # measured again, not reused
