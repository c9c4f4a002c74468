"""ANN fidelity: tie-tolerant recall@k, hand-computed cases and a real ANN index."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.framework.fidelity import ann_recall, measure_fidelity
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.testing.store_conformance import clustered_vectors


def R(ids, scores):
    return SearchResult(np.array(ids), np.array(scores, dtype=np.float32))


EXACT = R([[1, 2, 3], [4, 5, -1]], [[0.9, 0.8, 0.7], [0.5, 0.4, -np.inf]])


@pytest.mark.parametrize(
    ("ids", "scores", "want"),
    [
        ([[1, 2, 3], [4, 5, -1]], [[0.9, 0.8, 0.7], [0.5, 0.4, -np.inf]], [1.0, 1.0]),
        # order does not matter; one miss out of three; one of two
        ([[3, 1, 8], [5, -1, -1]], [[0.7, 0.9, 0.1], [0.4, -np.inf, -np.inf]], [2 / 3, 1 / 2]),
        # id 8 is tied with the k-th exact score (0.7): it counts
        ([[1, 2, 8], [4, 5, -1]], [[0.9, 0.8, 0.7], [0.5, 0.4, -np.inf]], [1.0, 1.0]),
        # a repeated id counts once; nothing returned scores 0
        ([[1, 1, 1], [-1, -1, -1]], [[0.9, 0.9, 0.9], [-np.inf] * 3], [1 / 3, 0.0]),
    ],
)
def test_ann_recall_hand_computed(ids, scores, want):
    per_query, mean = ann_recall(R(ids, scores), EXACT, 3)
    np.testing.assert_allclose(per_query, want)
    assert mean == pytest.approx(np.mean(want))


def test_tolerance_is_relative_to_the_kth_score():
    exact = R([[1, 2]], [[1000.0, 900.0]])
    near = R([[1, 7]], [[1000.0, 899.995]])  # 5e-3 below, within 1e-5 * 900
    far = R([[1, 7]], [[1000.0, 899.9]])
    assert ann_recall(near, exact, 2)[1] == 1.0
    assert ann_recall(far, exact, 2)[1] == 0.5
    assert ann_recall(far, exact, 2, rtol=0)[1] == 0.5


def test_empty_collection_counts_as_perfect():
    none = R([[-1, -1]], [[-np.inf, -np.inf]])
    per_query, mean = ann_recall(none, none, 2)
    assert per_query.tolist() == [1.0] and mean == 1.0


def test_cutoff_smaller_than_columns():
    exact = R([[1, 2, 3]], [[3.0, 2.0, 1.0]])
    got = R([[1, 9, 2]], [[3.0, 1.5, 2.0]])
    assert ann_recall(got, exact, 1)[1] == 1.0
    assert ann_recall(got, exact, 2)[1] == 0.5  # only the first 2 columns of each count


def test_bad_arguments():
    with pytest.raises(ValueError, match="store_result has 1 queries, exact_result has 2"):
        ann_recall(R([[1]], [[1.0]]), EXACT, 1)
    with pytest.raises(ValueError, match="store_result must have at least k=4 columns, got 3"):
        ann_recall(EXACT, EXACT, 4)
    with pytest.raises(ValueError, match=r"k must be in \[1, inf\], got 0"):
        ann_recall(EXACT, EXACT, 0)
    with pytest.raises(TypeError, match="store_result must be a SearchResult, got tuple"):
        ann_recall((1, 2), EXACT, 1)


def test_matches_set_intersection_without_ties():
    """With distinct scores the rule is VectorDBBench's |ANN ∩ exact| / k."""
    rng = np.random.default_rng(0)
    x, q = clustered_vectors(2000, 16, n_queries=200, seed=0)
    ids = np.arange(2000, dtype=np.int64)
    with ExactStore() as ex:
        ex.create_collection("c", 16)
        ex.insert("c", x, ids)
        ref = ex.search("c", q, 10)
    # corrupt: replace random columns by ids not in the top-10, with low scores
    got_ids = ref.ids.copy()
    got_sc = ref.scores.copy()
    mask = rng.random(got_ids.shape) < 0.3
    got_ids[mask] = 5000 + np.arange(mask.sum())
    got_sc[mask] = -5.0
    per_query, _ = ann_recall(SearchResult(got_ids, got_sc), ref, 10)
    want = [len(set(a) & set(b)) / 10 for a, b in zip(got_ids.tolist(), ref.ids.tolist())]
    np.testing.assert_allclose(per_query, want)


def test_measure_fidelity_on_faiss_hnsw():
    pytest.importorskip("faiss")
    from imsearch_align.adapters.faiss_store import FaissStore

    x, q = clustered_vectors(3000, 32, n_clusters=30, n_queries=100, seed=1)
    ids = np.arange(3000, dtype=np.int64) * 2
    with ExactStore() as ex, FaissStore("hnsw", M=8, efSearch=10, efConstruction=20) as fs:
        for s in (ex, fs):
            s.create_collection("c", 32)
            s.insert("c", x, ids)
        rep = measure_fidelity(fs, "c", ex, "c", q, 10)
        self_rep = measure_fidelity(ex, "c", ex, "c", q, 10)
        got, ref = fs.search("c", q, 10), ex.search("c", q, 10)
    assert rep.k == 10 and rep.per_query.shape == (100,)
    assert rep.recall == pytest.approx(ann_recall(got, ref, 10)[1])
    assert 0.5 < rep.recall <= 1.0
    assert self_rep.recall == 1.0
    assert rep.store_seconds > 0 and rep.exact_seconds > 0
