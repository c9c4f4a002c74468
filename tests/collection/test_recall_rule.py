"""One recall rule: the collection study's ``ann_recall_at_k`` (ids against the truth's
candidates) and the store check's ``ann_recall`` (ids against the vectors) call the same
``tie_tolerant_recall`` and agree query by query on the same answers."""

from __future__ import annotations

import numpy as np

from imsearch_align.collection import ann_recall_at_k, cone_vectors, exact_truth
from imsearch_align.framework.fidelity import ann_recall
from imsearch_align.framework.fidelity.rule import tie_tolerant_recall
from imsearch_align.framework.interfaces import SearchResult


def test_both_recalls_agree_on_an_approximate_answer():
    docs = cone_vectors(3000, 32, seed=1)
    queries = cone_vectors(200, 32, seed=2)
    ids = np.arange(3000, dtype=np.int64) + 10
    truth = exact_truth(queries, np.arange(200), (ids, docs), 10)
    S = queries.astype(np.float64) @ docs.astype(np.float64).T
    order = np.argsort(-S, axis=1, kind="stable")
    rng = np.random.default_rng(0)
    # an ANN answer: the true top 14, with 0-4 of the first ten swapped for ranks 10-13
    got = order[:, :10].copy()
    for i in range(len(got)):
        n = rng.integers(0, 5)
        got[i, rng.choice(10, n, replace=False)] = order[i, 10 : 10 + n]
    got_ids = ids[got]
    scores = np.take_along_axis(S, got, axis=1).astype(np.float32)
    mine = ann_recall_at_k(got_ids, truth, 10)
    report = ann_recall(SearchResult(got_ids, scores), docs, ids, queries, 10)
    np.testing.assert_array_equal(mine.per_query, report.per_query)
    assert 0.5 < mine.mean < 1.0  # the swaps cost recall


def test_the_rule_by_hand():
    true = np.array([[0.9, 0.8, 0.7, -np.inf], [0.5, 0.5, 0.49999999, 0.1]])
    kth = np.array([0.7, 0.5])
    per = tie_tolerant_recall(true, kth, 3, np.ones((2, 1)), 1e-6)
    # row 0: three at or above the 3rd; row 1: 0.49999999 is within 1e-6 of 0.5
    np.testing.assert_array_equal(per, [1.0, 1.0])
    per = tie_tolerant_recall(true, kth, 3, np.ones((2, 1)), 1e-9)
    np.testing.assert_allclose(per, [1.0, 2 / 3])
    assert tie_tolerant_recall(true[:, :0], kth, 0, 1.0, 1e-6).tolist() == [1.0, 1.0]
