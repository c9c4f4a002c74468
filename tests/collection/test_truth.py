"""The collection ground truth against float64 brute force, tie-aware, streamed or whole."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.collection import (
    ArraySource,
    CollectionBlocks,
    StreamDigest,
    ann_recall_at_k,
    compare_measures,
    cone_vectors,
    exact_truth,
)
from imsearch_align.framework.metrics import Qrels, Run
from imsearch_align.framework.ranking.tie_aware import EXACT_TIE_TOL
from imsearch_align.framework.ties import tie_aware_evaluate

MEASURES = ["HitRate@1", "HitRate@5", "HitRate@10", "nDCG@10", "R@10"]


def brute_force_run(queries, qids, docs, dids) -> Run:
    """Every document of every query, float64 scores (the reference)."""
    S = queries.astype(np.float64) @ docs.astype(np.float64).T
    return Run.from_arrays(qids, np.broadcast_to(dids, S.shape).copy(), S)


@pytest.fixture(scope="module")
def tied():
    """Test docs, distractors that copy some of them (exact ties with relevant
    docs, one group larger than the candidate margin), queries near the docs."""
    rng = np.random.default_rng(3)
    test = cone_vectors(60, 32, seed=1, clusters=6)
    test_ids = np.arange(100, 160, dtype=np.int64)
    extra = cone_vectors(300, 32, seed=2, clusters=6)
    copies = np.concatenate([np.repeat(test[:1], 40, axis=0), np.repeat(test[1:20], 2, axis=0)])
    distr = np.concatenate([extra, copies])
    distr = distr[rng.permutation(len(distr))]
    q = test[rng.integers(0, 60, 80)] + 0.05 * rng.standard_normal((80, 32)).astype(np.float32)
    q[:5] = test[0]  # the 41-member tie group at rank 1
    q[5:10] = test[3]
    qids = np.arange(80, dtype=np.int64) + 5000
    rel = test_ids[rng.integers(0, 60, 80)]
    rel[:5], rel[5:10] = test_ids[0], test_ids[3]
    qrels = Qrels.from_pairs(qids, rel)
    return test, test_ids, ArraySource(distr), q.astype(np.float32), qids, qrels


def _all_docs(test, test_ids, source):
    blocks = list(source.blocks(10_000))
    return (
        np.concatenate([test, blocks[0][1]]),
        np.concatenate([test_ids, blocks[0][0]]),
    )


def test_truth_equals_float64_brute_force_with_ties(tied):
    test, test_ids, source, q, qids, qrels = tied
    coll = CollectionBlocks(test_ids, test, source, block_rows=37)
    truth = exact_truth(q, qids, coll, 10, margin=8)
    assert truth.groups_closed and truth.n_docs == 60 + len(source)
    docs, dids = _all_docs(test, test_ids, source)
    ref = brute_force_run(q, qids, docs, dids)
    # The exact top-10, in true order, with the same float64 scores.
    np.testing.assert_array_equal(truth.run.doc_ids[:, :10], ref.doc_ids[:, :10])
    np.testing.assert_allclose(truth.run.scores[:, :10], ref.scores[:, :10], rtol=1e-12)
    # The 41-way tie at rank 1 is whole (it needed the deeper pass).
    assert (truth.run.doc_ids[:5] >= 0).sum(axis=1).min() >= 42
    mine = truth.evaluate(qrels, MEASURES)
    theirs = tie_aware_evaluate(ref, qrels, MEASURES, tol=EXACT_TIE_TOL)
    for m in MEASURES:
        np.testing.assert_allclose(mine.values[m], theirs.values[m], atol=1e-12)
    assert mine.mean()["HitRate@1"] < 1.0  # the tied copies share rank 1
    assert mine.n_tie_dependent["HitRate@1"] >= 10


def test_streamed_in_blocks_equals_loaded_whole(tied):
    test, test_ids, source, q, qids, qrels = tied
    docs, dids = _all_docs(test, test_ids, source)
    whole = exact_truth(q, qids, (dids, docs), 10, block_rows=len(dids))
    streamed = exact_truth(q, qids, CollectionBlocks(test_ids, test, source, block_rows=16), 10)
    np.testing.assert_array_equal(whole.run.doc_ids, streamed.run.doc_ids)
    np.testing.assert_allclose(whole.run.scores, streamed.run.scores, rtol=1e-12, atol=1e-12)
    a, b = whole.evaluate(qrels, MEASURES).mean(), streamed.evaluate(qrels, MEASURES).mean()
    assert a == b
    d1, d2 = StreamDigest(), StreamDigest()
    for ids, blk in CollectionBlocks(test_ids, test, source, block_rows=16):
        d1.update(ids, blk)
    d2.update(dids, docs)
    assert d1.hexdigest() == d2.hexdigest()


def test_cache_by_content(tmp_path, tied):
    test, test_ids, source, q, qids, _ = tied
    coll = CollectionBlocks(test_ids, test, source, block_rows=50)
    first = exact_truth(q, qids, coll, 5, cache_dir=tmp_path)
    files = list(tmp_path.glob("truth-*.npz"))
    assert len(files) == 1 and first.key
    again = exact_truth(q, qids, coll, 5, cache_dir=tmp_path)
    assert again.seconds == 0.0 and again.key == first.key
    np.testing.assert_array_equal(again.run.doc_ids, first.run.doc_ids)
    np.testing.assert_array_equal(again.closed, first.closed)
    exact_truth(q, qids, coll, 6, cache_dir=tmp_path)  # another k: another entry
    exact_truth(q[:-1], qids[:-1], coll, 5, cache_dir=tmp_path)
    assert len(list(tmp_path.glob("truth-*.npz"))) == 3
    with pytest.raises(ValueError, match="documents streamed differ from docs_digest"):
        exact_truth(q, qids, coll, 5, docs_digest="0" * 64)


def test_duplicate_document_id_refused():
    d = cone_vectors(20, 8)
    with pytest.raises(ValueError, match="document id 3 appears 2 times"):
        exact_truth(d[:2], [0, 1], (np.array([*range(19), 3]), d), 3)


def test_ann_recall_and_compare_measures(tied):
    test, test_ids, source, q, qids, qrels = tied
    truth = exact_truth(q, qids, CollectionBlocks(test_ids, test, source), 10)
    exact_ids = truth.run.doc_ids[:, :10]
    assert ann_recall_at_k(exact_ids, truth).mean == 1.0
    # Drop the best hit of half the queries: an ANN that missed them.
    ann_ids = exact_ids.copy()
    ann_ids[::2, 0] = -1
    ann_sc = np.where(ann_ids >= 0, truth.run.scores[:, :10], -np.inf)
    run = Run.from_arrays(qids, ann_ids, ann_sc)
    rec = ann_recall_at_k(run, truth)
    assert rec.per_query[1::2].min() == 1.0
    # a dropped id counts as missed unless another returned id ties with it
    assert rec.mean < 1.0
    # A repeated id counts once.
    rep = exact_ids.copy()
    rep[:, 1] = rep[:, 0]
    assert ann_recall_at_k(rep, truth).per_query.max() <= 0.9 + 1e-12
    out = compare_measures(run, truth, qrels, ["HitRate@1", "nDCG@10"])
    assert out["means"]["HitRate@1"]["exact"] >= out["means"]["HitRate@1"]["approximate"]
    with pytest.raises(ValueError, match="exact to rank 10"):
        truth.evaluate(qrels, ["nDCG@20"])
