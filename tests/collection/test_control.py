"""--control (issue 38 item 1): every built index is also searched with in-distribution
control queries of the indexed modality, which are in no collection and are no test query.

Oracles: the ids and vectors themselves (a control row is none of the collection's rows
and none of the test split's), and exact search (the control recall is 1.0 on an exact
store)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imsearch_align.collection.control import ControlError
from imsearch_align.study import StudySpec, StudySpecError, run_study
from imsearch_align.testing.scripts import write_cone_pairs


def _spec(tmp_path, **kw):
    (tmp_path / "emb").mkdir(exist_ok=True)
    emb = write_cone_pairs(tmp_path / "emb", 160)
    fields = dict(embeddings=str(emb), stores=("faiss", "exact"), methods=("procrustes",),
                  index=("faiss:ivf_flat:nprobe=1,4", "exact:flat"), sizes=(600,),
                  queries=50, latency_queries=2, repeats=1, control=True,
                  out=str(tmp_path / "o"), truth_cache=str(tmp_path / "t"))  # fmt: skip
    fields.update(kw)
    return StudySpec(**fields)


def _captured(monkeypatch):
    """The controls each prepared method gets, as the study built them."""
    import imsearch_align.study.run as run_mod

    seen = []
    real = run_mod.control_queries

    def spy(study, cfg, prep, src, **kw):
        out = real(study, cfg, prep, src, **kw)
        seen.append((study.load(cfg), prep, src, kw["after_rows"], out))
        return out

    monkeypatch.setattr(run_mod, "control_queries", spy)
    return seen


@pytest.mark.parametrize("n", [40, None])  # held-out support rows; else the distractor model
def test_controls_are_in_no_collection_and_no_test_query(tmp_path, monkeypatch, n):
    seen = _captured(monkeypatch)
    result = run_study(_spec(tmp_path, n=(n,) if n else None), progress=False)
    ((data, prep, src, after, controls),) = seen
    assert len(controls.ids) == len(prep.query_ids)
    test_docs = set(data.dataset.split_ids("test", "image").tolist())
    if n:
        assert "held-out support images" in controls.source
        assert not set(controls.ids.tolist()) & set(prep.fitted_ids["image"].tolist())
        assert not set(controls.ids.tolist()) & test_docs
    else:
        assert "distractor model" in controls.source
        ids, _ = zip(*src.head(after).blocks(), strict=True)
        assert not set(controls.ids.tolist()) & set(np.concatenate(ids).tolist())
    # no control vector is a collection vector (documents, every aligned distractor) or a query
    aligned = [np.asarray(prep.method.transform_images(b), np.float32)
               for _, b in src.head(after).blocks()]  # fmt: skip
    taken = {r.tobytes() for part in [prep.docs, prep.queries, *aligned] for r in part}
    assert not any(np.asarray(r, np.float32).tobytes() in taken for r in controls.queries)
    for cell in result.cells:
        ctl = cell["control"]
        assert ctl["queries"] == len(prep.query_ids) and ctl["source"] == controls.source
        if cell["store"] == "exact":
            assert ctl["ann_recall"]["mean"] == 1.0  # exact search finds the exact top-k
        assert 0.0 <= ctl["ann_recall"]["mean"] <= 1.0


def test_no_rows_to_spare_and_no_distractor_model_is_refused_naming_what_to_pass(tmp_path):
    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 60)
    rows = np.random.default_rng(0).standard_normal((50, 32)).astype(np.float32)
    dim = np.load(emb / "image.npy").shape[1]
    rows = np.random.default_rng(0).standard_normal((50, dim)).astype(np.float32)
    np.save(tmp_path / "d.npy", rows)
    spec = _spec(tmp_path, embeddings=str(emb), distractors=str(tmp_path / "d.npy"), sizes=(50,))
    with pytest.raises(StudySpecError, match=r"--control: .* pass a smaller --n") as info:
        run_study(spec, progress=False)
    assert isinstance(info.value.__cause__ or info.value, StudySpecError | ControlError)


def test_a_cell_measured_without_controls_is_measured_again(tmp_path):
    run_study(_spec(tmp_path, control=False), progress=False)
    again = run_study(_spec(tmp_path, skip_existing=True), progress=False)
    assert all("control" in c for c in again.cells)
    stored = [json.loads(p.read_text()) for p in (tmp_path / "o").glob("image_*.json")]
    assert stored and all("control" in c for c in stored)


def test_the_study_reports_the_ood_cost_of_each_build_from_its_cells(tmp_path):
    """ood.md (and the leaderboard's section) holds, per build, the cost recomputed from
    the cells' own recall curves by ood_cost; every cell names the collection's
    index-free predictors."""
    from imsearch_align.collection.ood import ood_cost
    from imsearch_align.collection.ood_report import ood_rows

    spec = _spec(tmp_path, n=(40,), stores=("faiss",), index=("faiss:ivf_flat:nprobe=1,2,4,8",))
    result = run_study(spec, progress=False)
    assert result.exit_code == 0
    text = (tmp_path / "o" / "ood.md").read_text()
    assert "| procrustes | t2i | faiss | ivf_flat |" in text
    assert (
        "What cross-modal queries cost the index" in (tmp_path / "o" / "leaderboard.md").read_text()
    )
    cells = sorted(result.cells, key=lambda c: c["index"]["search_params"]["nprobe"])
    for c in cells:
        pred = c["control"]["predictor"]
        assert pred["nn_similarity_ratio"] > 0 and pred["documents_sampled"] > 0
    ((row),) = ood_rows(result.cells, 10)
    direct = ood_cost([c["index"]["search_params"]["nprobe"] for c in cells],
                      [c["metrics"]["t2i/ann_recall@10"] for c in cells],
                      [c["control"]["ann_recall"]["mean"] for c in cells])  # fmt: skip
    assert row["median effort ratio"] == direct["median_ratio"]
    assert row["gap"] is None or row["gap"] == direct["gap_at"].get("16")
