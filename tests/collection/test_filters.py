"""Filtered search over a collection: categories of known selectivity, the exact filtered
truth against float64 brute force over the kept rows (tie-aware), queries a filter
leaves unanswerable, HNSW under a 1% filter, and the study's ``--filters`` cells."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from imsearch_align.collection import (
    ArraySource,
    CollectionBlocks,
    ann_recall_at_k,
    cone_vectors,
    exact_truth,
)
from imsearch_align.collection.filters import (
    assign_categories,
    collection_ids,
    filtered_truth,
    milvus_expression,
    queries_without_relevant,
    relevant_doc_ids,
    selectivity_filter,
)
from imsearch_align.framework.interfaces import Filter
from imsearch_align.framework.metrics import Qrels, Run
from imsearch_align.framework.ranking.tie_aware import EXACT_TIE_TOL
from imsearch_align.framework.ties import tie_aware_evaluate
from imsearch_align.testing.scripts import write_cone_pairs

ROOT = Path(__file__).resolve().parents[2]
MEASURES = ["HitRate@1", "HitRate@10", "nDCG@10"]


@pytest.fixture(scope="module")
def tied():
    """60 test docs, 400 distractors of which 60 copy test docs (exact ties), queries."""
    rng = np.random.default_rng(7)
    test = cone_vectors(60, 32, seed=1, clusters=6)
    test_ids = np.arange(100, 160, dtype=np.int64)
    extra = cone_vectors(340, 32, seed=2, clusters=6)
    copies = np.concatenate([np.repeat(test[:1], 20, axis=0), np.repeat(test[1:21], 2, axis=0)])
    distr = np.concatenate([extra, copies])[rng.permutation(400)]
    q = test[rng.integers(0, 60, 50)] + 0.05 * rng.standard_normal((50, 32)).astype(np.float32)
    q[:4] = test[0]  # a 21-way tie at rank 1
    qids = np.arange(50, dtype=np.int64) + 5000
    rel = test_ids[rng.integers(0, 60, 50)]
    rel[:4] = test_ids[0]
    coll = CollectionBlocks(test_ids, test, ArraySource(distr), block_rows=41)
    return coll, q.astype(np.float32), qids, Qrels.from_pairs(qids, rel)


def _rows(coll):
    ids, blocks = zip(*coll, strict=True)
    return np.concatenate(ids), np.concatenate(blocks)


def test_categories_have_known_selectivity_and_keep_relevant_items(tied):
    coll, _, _, qrels = tied
    ids = collection_ids(coll)
    rel = relevant_doc_ids(qrels)
    attr = assign_categories(ids, rel, seed=3)
    assert len(ids) == 460 and attr.n_relevant == len(rel)
    assert np.bincount(attr.categories).min() >= 4 and np.bincount(attr.categories).max() <= 5
    prev = None
    for share in (0.5, 0.1, 0.01):
        f = selectivity_filter(share)
        kept = attr.kept_ids(f)
        assert len(kept) == int(np.ceil(share * 460 - 1e-9))  # ceil(m N / C)
        assert attr.kept_share(f) == pytest.approx(share, abs=1 / 460)
        assert prev is None or set(kept) <= prev  # nested
        prev = set(kept)
        if len(kept) >= len(rel):
            assert set(rel) <= set(kept)  # relevant items are kept while they fit
    assert milvus_expression(selectivity_filter(0.01)) == "category in [0]"
    assert milvus_expression(Filter("category", [1], expression="category == 1")) == (
        "category == 1"
    )
    again = assign_categories(ids[::-1], rel, seed=3)
    np.testing.assert_array_equal(again.of(ids), attr.of(ids))  # seeded, order-free


def test_bad_selectivity_and_unknown_ids_are_refused():
    with pytest.raises(ValueError, match=r"multiple of 1/100.*nearest: 0\.01, 0\.02"):
        selectivity_filter(0.015)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        selectivity_filter(0)
    attr = assign_categories(np.arange(10), [])
    with pytest.raises(ValueError, match="id 99 is not an item"):
        attr.of([1, 99])


def test_filtered_truth_equals_brute_force_over_kept_rows_tie_aware(tied):
    coll, q, qids, qrels = tied
    attr = assign_categories(collection_ids(coll), relevant_doc_ids(qrels), seed=1)
    ids, docs = _rows(coll)
    for share in (0.5, 0.1):
        f = selectivity_filter(share)
        truth = filtered_truth(q, qids, coll, 10, attr, f, margin=8)
        keep = attr.keeps(ids, f)
        assert truth.groups_closed and truth.n_docs == keep.sum()
        S = q.astype(np.float64) @ docs[keep].astype(np.float64).T
        ref = Run.from_arrays(qids, np.broadcast_to(ids[keep], S.shape).copy(), S)
        np.testing.assert_array_equal(truth.run.doc_ids[:, :10], ref.doc_ids[:, :10])
        np.testing.assert_allclose(truth.run.scores[:, :10], ref.scores[:, :10], rtol=1e-12)
        assert set(truth.run.doc_ids[truth.run.doc_ids >= 0]) <= set(ids[keep])
        mine = truth.evaluate(qrels, MEASURES)
        theirs = tie_aware_evaluate(ref, qrels, MEASURES, tol=EXACT_TIE_TOL)
        for m in MEASURES:
            np.testing.assert_allclose(mine.values[m], theirs.values[m], atol=1e-12)
    # the deliberate ties: test doc 100's copies are all kept at 50% or not, the group whole
    f = selectivity_filter(0.5)
    truth = filtered_truth(q, qids, coll, 10, attr, f, margin=8)
    tied_kept = int((attr.keeps(ids, f) & (docs == coll.docs[0]).all(axis=1)).sum())
    assert (truth.run.doc_ids[:4] >= 0).sum(axis=1).min() >= min(tied_kept, 10)


def test_a_query_left_without_relevant_items_is_named_and_counted(tied):
    coll, _, _, qrels = tied
    attr = assign_categories(collection_ids(coll), relevant_doc_ids(qrels), seed=1)
    f = selectivity_filter(0.01)  # keeps 5 of 460 items: fewer than the relevant ones
    lost = queries_without_relevant(qrels, attr.kept_ids(f))
    kept_rel = set(attr.kept_ids(f)) & set(relevant_doc_ids(qrels))
    expect = [
        qid for qid, d in zip(qrels.query_ids, qrels.doc_ids, strict=True) if d not in kept_rel
    ]
    assert sorted(lost.tolist()) == sorted(set(expect)) and len(lost) > 0
    assert len(queries_without_relevant(qrels, attr.kept_ids(selectivity_filter(0.5)))) == 0


def test_faiss_hnsw_under_a_one_percent_filter_reports_recall(capsys):
    """The case where graph indexes lose recall: the number is printed, not asserted."""
    pytest.importorskip("faiss")
    from imsearch_align.adapters.faiss_store import FaissStore

    n, d = 20_000, 32
    docs = cone_vectors(n, d, seed=4, clusters=20)
    ids = np.arange(n, dtype=np.int64) * 3 + 11
    q = docs[np.random.default_rng(0).integers(0, n, 200)] + 0.02
    q = q.astype(np.float32)
    qids = np.arange(200)
    attr = assign_categories(ids, [], seed=0)
    out = {}
    for share in (0.5, 0.01):
        f = selectivity_filter(share)
        truth = filtered_truth(q, qids, (ids, docs), 10, attr, f)
        with FaissStore("hnsw", M=16, efConstruction=64, efSearch=64) as store:
            store.create_collection("c", d)
            store.insert("c", docs, ids, attributes=attr.attributes(ids))
            res = store.search_filtered("c", q, 10, f)
        out[share] = ann_recall_at_k(res, truth, 10).mean
        assert 0.0 <= out[share] <= 1.0
        assert np.isin(res.ids[res.ids >= 0], attr.kept_ids(f)).all()
    with capsys.disabled():
        print(f"\nFAISS HNSW (M=16, efSearch=64, 20k x 32-d) recall@10 against the exact "
              f"filtered truth: 50% {out[0.5]:.3f}, 1% {out[0.01]:.3f}")  # fmt: skip


def test_the_unfiltered_truth_is_the_filter_keeping_everything(tied):
    coll, q, qids, _ = tied
    attr = assign_categories(collection_ids(coll), [], n_categories=1)
    a = filtered_truth(q, qids, coll, 10, attr, selectivity_filter(1.0, 1), margin=8)
    b = exact_truth(q, qids, coll, 10, margin=8)
    np.testing.assert_array_equal(a.run.doc_ids, b.run.doc_ids)


# -- the study ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def study(load_benchmark):
    return load_benchmark("collection", "collection_script_filters")


@pytest.fixture(scope="module")
def emb(tmp_path_factory) -> Path:
    """200 images x 24-d, two captions each x 16-d, unit rows sharing a cone-shaped latent."""
    return write_cone_pairs(tmp_path_factory.mktemp("emb"), 200)


def _argv(emb: Path, out: Path, tmp: Path, *extra: str) -> list[str]:
    return ["--embeddings", str(emb), "--out", str(out), "--no-progress", "--methods",
            "procrustes", "--truth-cache", str(tmp / "truth"), "--queries", "60",
            "--latency-queries", "5", "--sizes", "2000", *extra]  # fmt: skip


def test_study_filters_write_cells_the_report_reads(study, emb, tmp_path, capsys):
    pytest.importorskip("faiss")
    from imsearch_align.report_html import read_cell, write_report

    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--index", "faiss:flat", "faiss:hnsw:M=8,efSearch=16",
                 "--filters", "0.5", "0.1", "0.01")  # fmt: skip
    assert study.main(argv) == 0
    text = capsys.readouterr()
    assert "filtered:    6/6 cells ok" in text.out
    cells = [json.loads(p.read_text()) for p in sorted(out.glob("filtered-*.json"))]
    assert len(cells) == 6
    for c in cells:
        cell = read_cell(c)
        assert cell.kind == "filtered" and cell.selectivity in (0.5, 0.1, 0.01)
        assert c["filter"]["kept_share"] == pytest.approx(cell.selectivity, abs=1e-3)
        assert cell.filter_expression.startswith("category in [0")
        assert 0 <= cell.metrics["t2i/ann_recall@10"] <= 1 and cell.queries_per_s > 0
        lost = c["filter"]["queries_without_relevant"]
        assert lost["count"] >= len(lost["first"])
        assert c["filter"]["returned_ids"] > 0 and c["filter"]["outside_filter"] == 0
        if cell.index_type == "flat":
            assert cell.metrics["t2i/ann_recall@10"] == 1.0
            assert c["metrics"]["t2i/HitRate@10"] == pytest.approx(
                c["exact_metrics"]["t2i/HitRate@10"]
            )
    # 1% of ~2,200 items keeps fewer than the relevant ones: the queries are counted and named
    one = next(c for c in cells if c["filter"]["selectivity"] == 0.01)
    assert one["filter"]["queries_without_relevant"]["count"] > 0
    assert "queries without a kept relevant item (counted, scored 0)" in text.err
    html = write_report(out).read_text()
    assert "ANN recall vs filter selectivity" in html
    # rerun with --skip-existing: every cell (filtered too) reused, nothing built
    assert study.main([*argv, "--skip-existing"]) == 0
    assert "reused" in capsys.readouterr().err


def test_a_store_that_ignores_the_filter_is_caught(study, emb, tmp_path, monkeypatch, capsys):
    """Never trust the store: a filtered search that returns ids the filter does not keep
    makes its cell degraded, with the ids counted, and the study does not exit 0."""
    pytest.importorskip("faiss")
    from imsearch_align.adapters.faiss_store import FaissStore

    monkeypatch.setattr(
        FaissStore, "search_filtered", lambda self, n, q, k, f: self.search(n, q, k)
    )
    out = tmp_path / "out"
    argv = _argv(emb, out, tmp_path, "--stores", "faiss", "--index", "faiss:flat",
                 "--filters", "0.1")  # fmt: skip
    assert study.main(argv) != 0
    (cell,) = [json.loads(p.read_text()) for p in out.glob("filtered-*.json")]
    got = cell["filter"]
    assert 0 < got["outside_filter"] <= got["returned_ids"]
    assert cell["status"]["state"] == "degraded"
    assert "returned ids are outside the filter" in cell["status"]["reasons"][0]
    capsys.readouterr()


def test_study_bad_filter_is_one_line_before_any_work(study, emb, tmp_path, capsys):
    out = tmp_path / "out"
    assert study.main(_argv(emb, out, tmp_path, "--filters", "0.015")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --filters: selectivity must be a multiple of 1/100")
    assert "\n" not in err and not out.exists()


def test_the_filter_check_equals_isin_and_runs_outside_the_search():
    """The check of returned ids against the kept ids (ascending): counts equal to
    ``np.isin`` (the oracle) with -1 padding skipped and ids below, between and above the
    kept ones; nothing is checked until the counts are read (never inside a timed search)."""
    from imsearch_align.collection.under_filter import FilterCheck

    rng = np.random.default_rng(3)
    kept = np.unique(rng.integers(0, 10_000, 3_000))
    check, want_returned, want_outside = FilterCheck(), 0, 0
    for _ in range(50):
        ids = rng.integers(-5, 12_000, (7, 10))
        ids[ids < 0] = -1
        check.count(ids, kept)
        got = ids[ids >= 0]
        want_returned += got.size
        want_outside += int((~np.isin(got, kept)).sum())
    assert len(check._pending) == 50  # kept for later, not checked in the search
    assert (check.returned, check.outside) == (want_returned, want_outside) and want_outside
    assert not check._pending and check.status()["state"] == "degraded"
    inside = FilterCheck()
    inside.count(kept[None, :10], kept)
    assert (inside.returned, inside.outside) == (10, 0) and inside.status()["state"] == "ok"
