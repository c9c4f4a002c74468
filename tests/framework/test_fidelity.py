"""ANN fidelity from the truth: hand-computed cases, lying stores, an independent oracle.

Oracles: hand-computed inner products; numpy brute force and set
intersection on tie-free data; the published tie rule (ann-benchmarks).
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.framework.fidelity import (
    FidelityReport,
    ann_recall,
    default_rtol,
    measure_fidelity,
)
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.testing.store_conformance import clustered_vectors, sparse_clustered


def R(ids, scores):
    return SearchResult(np.array(ids), np.array(scores, dtype=np.float32))


# true scores for the query (2, 1): id 10 -> 2, 20 -> 1, 30 -> 3, 40 -> -2, 50 -> 2 (tie with 10)
DOCS = np.array([[1, 0], [0, 1], [1, 1], [-1, 0], [1, 0]], dtype=np.float32)
IDS = np.array([10, 20, 30, 40, 50])
Q = np.array([[2, 1]], dtype=np.float32)


@pytest.mark.parametrize(
    ("ids", "scores", "recall"),
    [
        ([[30, 10]], [[3, 2]], 1.0),
        ([[30, 50]], [[3, 2]], 1.0),  # 50 is tied with the 2nd best (10): as good
        ([[30, 20]], [[3, 1]], 0.5),
        ([[20, 40]], [[1, -2]], 0.0),
        ([[10, 50]], [[2, 2]], 1.0),  # both tied at t: min(found, m) / m
    ],
)
def test_hand_computed_recall(ids, scores, recall):
    rep = ann_recall(R(ids, scores), DOCS, IDS, Q, 2)
    assert isinstance(rep, FidelityReport)
    assert rep.recall == pytest.approx(recall) and rep.per_query.tolist() == [recall]
    assert rep.ok and rep.problems == ()


def test_a_lie_about_the_score_is_not_believed():
    # id 20's true score is 1; reported as 2 (the k-th exact score) it used to count as found
    rep = ann_recall(R([[30, 20]], [[3, 2]]), DOCS, IDS, Q, 2)
    assert rep.recall == 0.5
    assert rep.n_score_mismatch == 1 and rep.n_score_mismatch_rows == 1
    assert rep.score_max_abs_error == pytest.approx(1.0)
    assert rep.score_max_rel_error == pytest.approx(1.0 / (np.sqrt(5) * 1.0))
    assert not rep.ok
    assert (
        rep.first_problem
        == "query 0: id 20 reported 2, true 1, which is the true score of id 10: ids shifted by one place in id order? (the store maps rows to ids wrongly)"
    )


def test_sign_flipped_store():
    # ranks by -<q, x> and reports that: the worst docs, with confident scores
    rep = ann_recall(R([[40, 20]], [[2, -1]]), DOCS, IDS, Q, 2)
    assert rep.recall == 0.0 and rep.n_score_mismatch == 2
    assert rep.first_problem == "query 0: id 40 reported 2, true -2: sign flipped?"


def test_unknown_duplicate_short_and_misordered():
    rep = ann_recall(R([[31, 10]], [[3, 2]]), DOCS, IDS, Q, 2)
    assert rep.n_unknown_ids == 1 and rep.recall == 0.5
    assert rep.first_problem.startswith("query 0, rank 0: id 31 (reported 3) was never inserted")
    assert "ids off by" in rep.first_problem

    rep = ann_recall(R([[30, 30]], [[3, 3]]), DOCS, IDS, Q, 2)
    assert rep.n_duplicate_ids == 1 and rep.recall == 0.5
    assert rep.first_problem == "query 0: id 30 returned twice (ranks 0 and 1)"

    rep = ann_recall(R([[30, -1]], [[3, -np.inf]]), DOCS, IDS, Q, 2)
    assert rep.n_short_rows == 1 and rep.recall == 0.5
    assert rep.first_problem == (
        "query 0: 1 hits, expected 2 (min(k, n) = min(2, 5)): the store returned too few"
    )

    rep = ann_recall(R([[10, 30]], [[2, 3]]), DOCS, IDS, Q, 2)
    assert rep.recall == 1.0 and rep.n_misordered_rows == 1
    assert "row not sorted by score" in rep.first_problem


def test_sparse_rule_only_documents_with_a_non_zero_inner_product():
    docs = sp.csr_matrix(np.eye(3, dtype=np.float32))
    q = sp.csr_matrix(np.array([[1, 0, 0]], dtype=np.float32))
    ids = np.array([1, 2, 3])
    good = ann_recall(R([[1, -1]], [[1, -np.inf]]), docs, ids, q, 2)
    assert good.ok and good.recall == 1.0  # m = 1: only id 1 shares a term
    bad = ann_recall(R([[1, 2]], [[1, 0]]), docs, ids, q, 2)
    assert bad.n_zero_ip_hits == 1 and not bad.ok and bad.recall == 1.0
    assert "id 2 shares no term with the query" in bad.first_problem
    assert "non-zero inner product" in bad.first_problem
    none = ann_recall(
        R([[-1, -1]], [[-np.inf, -np.inf]]), docs, ids, sp.csr_matrix((1, 3), dtype=np.float32), 2
    )
    assert none.ok and none.recall == 1.0  # nothing to find


def _independent_recall(got_ids, x, ids, q, k):
    """Set intersection with a numpy brute force (valid when there are no ties)."""
    true = q.astype(np.float64) @ x.astype(np.float64).T
    top = ids[np.argsort(-true, axis=1)[:, :k]]
    return np.array([len(set(a) & set(b)) / k for a, b in zip(got_ids.tolist(), top.tolist())])


def test_matches_set_intersection_on_a_real_ann_index():
    faiss = pytest.importorskip("faiss")
    x, q = clustered_vectors(3000, 32, n_clusters=30, n_queries=100, seed=1)
    ids = np.arange(3000, dtype=np.int64) * 2 + 1
    from imsearch_align.adapters.faiss_store import FaissStore

    del faiss
    with FaissStore("hnsw", M=8, efSearch=10, efConstruction=20) as fs:
        fs.create_collection("c", 32)
        fs.insert("c", x, ids)
        rep = measure_fidelity(fs, "c", x, ids, q, 10)
        got = fs.search("c", q, 10)
    want = _independent_recall(got.ids, x, ids, q, 10)
    np.testing.assert_allclose(rep.per_query, want)
    assert 0.5 < rep.recall < 1.0 and rep.recall_min == want.min()
    assert rep.ok, rep.problems  # HNSW loses recall but never lies about scores
    assert rep.store_seconds > 0 and rep.exact_seconds > 0


def test_sparse_recall_matches_an_independent_count():
    x, q = sparse_clustered(400, 64, nnz=6, n_queries=30, seed=3)
    ids = np.arange(400, dtype=np.int64)[::-1] * 5
    with ExactStore(topk="numpy") as ex:
        ex.create_collection("s", 64, sparse=True)
        ex.insert("s", x, ids)
        res = ex.search("s", q, 10)
    keep = res.ids.copy()
    keep[:, 5:] = -1  # drop half of each row
    rep = ann_recall(SearchResult(keep, np.where(keep >= 0, res.scores, -np.inf)), x, ids, q, 10)
    true = (q @ x.T).toarray()
    m = np.minimum((true != 0).sum(axis=1), 10)
    np.testing.assert_allclose(rep.per_query, np.minimum(5, m) / m)
    assert rep.n_short_rows == int((m > 5).sum())


def test_exact_store_is_truthful_dense_and_within_float32():
    x, q = clustered_vectors(2000, 128, n_queries=64, seed=4)
    ids = np.random.default_rng(4).permutation(10**6)[:2000]
    with ExactStore(topk="numpy") as ex:
        ex.create_collection("c", 128)
        ex.insert("c", x, ids)
        res = ex.search("c", q, 20)
    rep = ann_recall(res, x, ids, q, 20)
    assert rep.ok and rep.recall == 1.0
    assert rep.score_max_rel_error <= default_rtol(128)
    # the tolerance is tied to float32 epsilon and the dimension
    assert default_rtol(512) == pytest.approx(max(1e-5, 4 * np.finfo(np.float32).eps * 512**0.5))


def test_wrong_row_and_off_by_one_are_named():
    x, q = clustered_vectors(500, 16, n_queries=8, seed=5)
    ids = np.arange(500, dtype=np.int64)
    with ExactStore(topk="numpy") as ex:
        ex.create_collection("c", 16)
        ex.insert("c", x, ids)
        res = ex.search("c", q, 5)
    rolled = SearchResult(np.roll(res.ids, 1, axis=0), np.roll(res.scores, 1, axis=0))
    rep = ann_recall(rolled, x, ids, q, 5)
    assert "its true score for query 7: results in the wrong row" in rep.first_problem
    shifted = SearchResult(np.where(res.ids >= 0, res.ids + 1, -1), res.scores)
    rep = ann_recall(shifted, x, ids, q, 5)
    assert "ids off by +1?" in rep.first_problem and rep.recall < 0.5
    assert len(rep.problems) == 5  # one per bad query, at most five


def test_metrics_are_json_ready():
    rep = ann_recall(R([[30, 20]], [[3, 2]]), DOCS, IDS, Q, 2)
    m = rep.as_metrics()
    assert m["ann_recall@2"] == 0.5 and m["score_mismatch_rows@2"] == 1
    assert set(m) == {
        "ann_recall@2", "ann_recall_min@2", "score_max_abs_error@2", "score_max_rel_error@2",
        "score_mismatch_rows@2", "invalid_hits@2", "short_rows@2", "misordered_rows@2",
    }  # fmt: skip
    assert all(isinstance(v, int | float) for v in m.values())


def test_bad_arguments():
    with pytest.raises(ValueError, match="store_result has 1 rows, queries has 2"):
        ann_recall(R([[30]], [[3]]), DOCS, IDS, np.ones((2, 2), np.float32), 1)
    with pytest.raises(ValueError, match="store_result must have at least k=3 columns, got 2"):
        ann_recall(R([[30, 10]], [[3, 2]]), DOCS, IDS, Q, 3)
    with pytest.raises(ValueError, match=r"k must be in \[1, inf\], got 0"):
        ann_recall(R([[30]], [[3]]), DOCS, IDS, Q, 0)
    with pytest.raises(TypeError, match="store_result must be a SearchResult, got tuple"):
        ann_recall((1, 2), DOCS, IDS, Q, 1)
    with pytest.raises(ValueError, match="doc_ids must be unique, got repeated ids"):
        ann_recall(R([[30]], [[3]]), DOCS, [1, 1, 2, 3, 4], Q, 1)
    with pytest.raises(ValueError, match=r"doc_ids must be 1-D with one id per row of docs \(5\)"):
        ann_recall(R([[30]], [[3]]), DOCS, [1, 2], Q, 1)
    with pytest.raises(ValueError, match=r"queries must have the dimension of docs \(2\), got 3"):
        ann_recall(R([[30]], [[3]]), DOCS, IDS, np.ones((1, 3), np.float32), 1)
    with pytest.raises(TypeError, match="queries must be sparse when docs are sparse"):
        ann_recall(R([[30]], [[3]]), sp.csr_matrix(DOCS), IDS, Q, 1)


def test_no_queries_and_empty_collection():
    rep = ann_recall(
        SearchResult(np.zeros((0, 2), np.int64), np.zeros((0, 2))),
        DOCS,
        IDS,
        np.zeros((0, 2), np.float32),
        2,
    )
    assert rep.n_queries == 0 and np.isnan(rep.recall)
    none = R([[-1, -1]], [[-np.inf, -np.inf]])
    rep = ann_recall(none, np.zeros((0, 2), np.float32), np.zeros(0, np.int64), Q, 2)
    assert rep.ok and rep.recall == 1.0


# ----------------------------------------------------------------------------- deprecated form

EXACT = R([[1, 2, 3], [4, 5, -1]], [[0.9, 0.8, 0.7], [0.5, 0.4, -np.inf]])


@pytest.mark.parametrize(
    ("ids", "scores", "want"),
    [
        ([[1, 2, 3], [4, 5, -1]], [[0.9, 0.8, 0.7], [0.5, 0.4, -np.inf]], [1.0, 1.0]),
        ([[3, 1, 8], [5, -1, -1]], [[0.7, 0.9, 0.1], [0.4, -np.inf, -np.inf]], [2 / 3, 1 / 2]),
        ([[1, 2, 8], [4, 5, -1]], [[0.9, 0.8, 0.7], [0.5, 0.4, -np.inf]], [1.0, 1.0]),
        ([[1, 1, 1], [-1, -1, -1]], [[0.9, 0.9, 0.9], [-np.inf] * 3], [1 / 3, 0.0]),
        # an id outside the exact top-k reported *above* the k-th score is a lie
        ([[1, 2, 8], [4, 5, -1]], [[0.9, 0.8, 5.0], [0.5, 0.4, -np.inf]], [2 / 3, 1.0]),
    ],
)
def test_deprecated_score_based_form(ids, scores, want):
    with pytest.warns(DeprecationWarning, match="trusts reported scores"):
        per_query, mean = ann_recall(R(ids, scores), EXACT, 3)
    np.testing.assert_allclose(per_query, want)
    assert mean == pytest.approx(np.mean(want))


def test_deprecated_form_bad_arguments():
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="has 1 queries"):
        ann_recall(R([[1]], [[1.0]]), EXACT, 1)


@pytest.mark.parametrize("density", [0.02, 0.3])
@pytest.mark.parametrize("block_cells", [1 << 18, 97])
def test_sparse_kth_equals_float64_brute_force_over_blocks(monkeypatch, block_cells, density):
    """The true k-th best non-zero score of each query, computed in query chunks
    and document row blocks (a tiny budget forces many of both), equals a dense
    float64 brute force; queries that share no term with any document get m = 0.
    Density 0.3 takes the dense-query product (rows fill over 1/8 of the columns)."""
    import imsearch_align.framework.fidelity.truth as fid

    monkeypatch.setattr(fid, "_SPARSE_BLOCK_CELLS", block_cells)
    rng = np.random.default_rng(7)
    docs = sp.random(700, 300, density=density, format="csr", dtype=np.float32, random_state=rng)
    q = sp.random(300, 300, density=density, format="csr", dtype=np.float32, random_state=rng)
    q = sp.vstack([q, sp.csr_matrix((1, 300), dtype=np.float32)]).tocsr()  # a query with no terms
    k = 5
    truth = fid._Truth(docs, np.arange(700), q)
    t, m = truth.kth(k)
    full = q.astype(np.float64) @ docs.astype(np.float64).T
    full = full.toarray()
    nz = (q.astype(np.float64) @ (docs != 0).astype(np.float64).T).toarray() > 0
    for i in range(q.shape[0]):
        vals = np.sort(full[i, nz[i]])[::-1]
        assert m[i] == min(k, vals.size), i
        if m[i]:
            assert t[i] == pytest.approx(vals[m[i] - 1], rel=1e-12, abs=1e-15), i
        else:
            assert t[i] == np.inf
    assert m[-1] == 0 and (m < k).any() and (m == k).any()
    if density > 0.2:  # the k-th scores of the dense path's candidates
        assert (m[:-1] == k).all()
    np.testing.assert_allclose(
        truth.xnorm, np.sqrt((docs.astype(np.float64).multiply(docs)).sum(axis=1)).A1, rtol=1e-12
    )
