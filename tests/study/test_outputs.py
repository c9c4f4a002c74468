"""One leaderboard of study cells: ``imsearch-align build`` over a study's folder writes the
table the study wrote, read through the one reader of cells; results beside them too."""

from __future__ import annotations

from imsearch_align.cli import main
from imsearch_align.study import StudySpec, run_study
from imsearch_align.testing.scripts import write_cone_pairs


def test_build_makes_the_cells_leaderboard_the_study_made(tmp_path, capsys):
    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    out = tmp_path / "study"
    spec = StudySpec(embeddings=str(emb), stores=("exact", "faiss"),
                     index=("exact:flat", "faiss:ivf_flat:nprobe=1,2"), methods=("procrustes",),
                     sizes=(0, 200), queries=30, latency_queries=3, out=str(out),
                     truth_cache=str(tmp_path / "t"))  # fmt: skip
    result = run_study(spec, progress=False)
    assert result.exit_code == 0
    csv, md = tmp_path / "b.csv", tmp_path / "b.md"
    assert main(["build", str(out), "--output", str(csv), "--markdown", str(md)]) == 0
    printed = capsys.readouterr()
    assert "skipping" not in printed.err  # cells are read, not skipped with a warning
    # the same rows (build reads the files in name order, the study wrote them in run order)
    for mine, theirs in (("b_cells.csv", "collection.csv"), ("b_cells.md", "leaderboard.md")):
        got = (tmp_path / mine).read_text().splitlines()
        assert got[0] == (out / theirs).read_text().splitlines()[0]
        assert sorted(got) == sorted((out / theirs).read_text().splitlines())
    assert f"{len(result.cells)} study cells" in printed.out


def test_two_studies_into_one_folder_both_show_in_its_table(tmp_path):
    """The second study's CSV and leaderboard hold the first's cells too (they used to show
    only the last finisher's), each cell once; the first study's cells are kept."""
    import pandas as pd

    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    out = tmp_path / "shared"
    common = dict(embeddings=str(emb), stores=("exact",), index=("exact:flat",), sizes=(0,),
                  queries=20, latency_queries=2, out=str(out), truth_cache=str(tmp_path / "t"))  # fmt: skip
    first = run_study(StudySpec(methods=("procrustes",), **common), progress=False)
    second = run_study(StudySpec(methods=("csa",), **common), progress=False)
    assert first.exit_code == second.exit_code == 0
    df = pd.read_csv(out / "collection.csv")
    assert sorted(df["method"]) == sorted(["procrustes", "csa"] * (len(df) // 2))
    assert len(df) == len(first.cells) + len(second.cells)
    board = (out / "leaderboard.md").read_text()
    assert "procrustes" in board and "csa" in board
