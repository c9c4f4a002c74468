"""Predictors of the OOD cost without searching an index (issue 38): the chunked float64
top-k against the dense ranking, the predictors against dense numpy and FAISS IVF-Flat
recall, the k-means, and the rank agreement against the textbook formulas."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest

from imsearch_align.collection.cone import cone_vectors
from imsearch_align.collection.ood import rank_agreement
from imsearch_align.collection.ood_predict import (
    ivf_centroids,
    ivf_list_share,
    nn_similarity_ratio,
    topk_inner,
)


def _dense_topk(q: np.ndarray, d: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The oracle: every score at once, each row sorted by (score desc, row asc)."""
    s = q.astype(np.float64) @ d.astype(np.float64).T
    ids = np.arange(len(d))
    order = np.array([np.lexsort((ids, -row))[:k] for row in s])
    return order, np.take_along_axis(s, order, axis=1)


# ---- the chunked top-k ---------------------------------------------------------------


def test_chunked_topk_equals_the_dense_ranking_with_ties():
    """Integer vectors make every float64 inner product exact, so ties are true ties
    (duplicated documents, spread over blocks); blocks of 50 docs x 7 queries force
    many merges and ties across the cut of a block."""
    rng = np.random.default_rng(0)
    docs = rng.integers(-2, 3, (400, 12)).astype(np.float32)
    docs = np.concatenate([docs, docs[::3], docs[5:40]])  # duplicates in later blocks
    queries = rng.integers(-2, 3, (37, 12)).astype(np.float32)
    # a group of 45 identical documents, the best of every query, across the cut of k
    hub = np.full((45, 12), 2.0, dtype=np.float32)
    crowded = np.concatenate([docs[:13], hub[:30], docs[13:90], hub[30:]])
    positive = np.abs(queries) + 1
    for d, q in ((docs, queries), (crowded, positive)):
        for k in (1, 3, 10, 60):
            ids, scores = topk_inner(q, d, k, doc_block=50, query_block=7)
            want_ids, want_scores = _dense_topk(q, d, k)
            assert scores.dtype == np.float64 and ids.dtype == np.int64
            assert np.array_equal(ids, want_ids), k
            assert np.array_equal(scores, want_scores), k


def test_chunked_topk_equals_the_dense_ranking_on_float_data(tmp_path):
    """Cone-shaped float32 rows, read from a memmap: the same ids, float64 scores."""
    x = cone_vectors(2_100, 32, seed=3, clusters=8)
    path = tmp_path / "docs.npy"
    np.save(path, x[:2_000])
    docs = np.load(path, mmap_mode="r")
    ids, scores = topk_inner(x[2_000:], docs, 10, doc_block=256, query_block=16)
    want_ids, want_scores = _dense_topk(x[2_000:], x[:2_000], 10)
    assert np.array_equal(ids, want_ids)
    assert scores.dtype == np.float64
    np.testing.assert_allclose(scores, want_scores, rtol=0, atol=1e-12)
    # float64, not float32: the scores match the float64 product, not the float32 one
    f32 = (x[2_000:] @ x[:2_000].T)[np.arange(100)[:, None], want_ids]
    assert not np.array_equal(scores, f32.astype(np.float64))


def test_topk_over_rows_searches_only_those_rows_and_caps_k():
    x = cone_vectors(330, 16, seed=4, clusters=4)
    docs, queries = x[:300], x[300:]
    rows = np.arange(0, 300, 7)
    ids, scores = topk_inner(queries, docs, 5, rows=rows, doc_block=9)
    sub_ids, sub_scores = _dense_topk(queries, docs[rows], 5)
    assert np.array_equal(ids, rows[sub_ids])
    np.testing.assert_allclose(scores, sub_scores, atol=1e-12)
    ids, _ = topk_inner(queries, docs[:4], 10)
    assert ids.shape == (30, 4) and sorted(ids[0]) == [0, 1, 2, 3]


# ---- nearest-neighbour similarity ------------------------------------------------------


def test_nn_similarity_ratio_is_the_dense_median_quotient():
    x = cone_vectors(3_000, 64, seed=5, clusters=10)
    docs, q, c = x[:2_500], x[2_500:2_700], x[2_700:]
    q = q + 0.3 * np.eye(64, dtype=np.float32)[7]  # somewhere else than the documents
    got = nn_similarity_ratio(q, docs, c)
    s64 = docs.astype(np.float64)
    mq = np.median((q.astype(np.float64) @ s64.T).max(axis=1))
    mc = np.median((c.astype(np.float64) @ s64.T).max(axis=1))
    assert got["median_query"] == pytest.approx(mq, abs=1e-12)
    assert got["median_control"] == pytest.approx(mc, abs=1e-12)
    assert got["ratio"] == pytest.approx(mq / mc, rel=1e-12)
    assert (got["n_queries"], got["n_controls"], got["n_docs"]) == (200, 300, 2_500)
    assert got["sampled"] is False and got["docs_used"] == 2_500


def test_nn_similarity_ratio_on_a_sample_says_so_and_never_exceeds_the_full_best():
    x = cone_vectors(3_000, 64, seed=6, clusters=10)
    docs, q, c = x[:2_500], x[2_500:2_700], x[2_700:]
    full = nn_similarity_ratio(q, docs, c)
    part = nn_similarity_ratio(q, docs, c, sample=500, seed=1)
    assert part["sampled"] is True and part["docs_used"] == 500 and part["sample"] == 500
    # a maximum over a subset is at most the maximum over all, row by row: so the median
    assert part["median_query"] <= full["median_query"]
    assert part["median_control"] <= full["median_control"]
    assert part == nn_similarity_ratio(q, docs, c, sample=500, seed=1)
    assert part != nn_similarity_ratio(q, docs, c, sample=500, seed=2)
    assert nn_similarity_ratio(q, docs, c, sample=10_000)["sampled"] is False


def test_nn_similarity_ratio_is_none_when_the_control_median_is_not_positive():
    docs = np.eye(4)
    got = nn_similarity_ratio(np.ones((3, 4)), docs, -np.ones((3, 4)))
    assert got["median_control"] == -1.0 and got["ratio"] is None


# ---- IVF list share --------------------------------------------------------------------


@pytest.fixture(scope="module")
def ivf_case() -> dict:
    faiss = pytest.importorskip("faiss")
    x = cone_vectors(6_000 + 800, 64, seed=7, clusters=20, cone=2.5, spread=2.5)
    docs, q, c = x[:6_000], x[6_000:6_400], x[6_400:]
    rng = np.random.default_rng(1)
    shift = rng.standard_normal(64).astype(np.float32)
    q = q + 0.4 * shift / np.linalg.norm(shift)
    q = (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    quantizer = faiss.IndexFlatIP(64)
    index = faiss.IndexIVFFlat(quantizer, 64, 32, faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    return {"docs": docs, "q": q, "c": c, "index": index,
            "centroids": quantizer.reconstruct_n(0, 32)}  # fmt: skip


def _faiss_recall(index, docs: np.ndarray, queries: np.ndarray, nprobe: int) -> float:
    truth, _ = _dense_topk(queries, docs, 10)
    index.nprobe = nprobe
    _, got = index.search(queries, 10)
    return float((got[:, :, None] == truth[:, None, :]).any(axis=2).mean())


@pytest.mark.parametrize("nprobe", [1, 4, 8])
def test_ivf_list_share_is_the_recall_of_an_ivf_flat_search(ivf_case, nprobe):
    """FAISS searches exactly inside the lists it visits: its recall@10 at ``nprobe``
    is the share of the true top-10 in the probed lists (float32 assignment against
    float64 may move a document lying on a list boundary)."""
    docs, q, c, index = ivf_case["docs"], ivf_case["q"], ivf_case["c"], ivf_case["index"]
    got = ivf_list_share(q, docs, ivf_case["centroids"], nprobe, controls=c)
    assert got["queries"] == pytest.approx(_faiss_recall(index, docs, q, nprobe), abs=0.005)
    assert got["controls"] == pytest.approx(_faiss_recall(index, docs, c, nprobe), abs=0.005)
    assert got["ratio"] == pytest.approx(got["queries"] / got["controls"])
    assert (got["nprobe"], got["k"], got["nlist"], got["sampled"]) == (nprobe, 10, 32, False)


def test_ivf_list_share_visiting_every_list_is_one_and_a_sample_says_so(ivf_case):
    docs, q, c = ivf_case["docs"], ivf_case["q"], ivf_case["c"]
    full = ivf_list_share(q, docs, ivf_case["centroids"], 32, controls=c, sample=1_000)
    assert full["queries"] == 1.0 and full["controls"] == 1.0
    assert full["sampled"] is True and full["docs_used"] == 1_000


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"nprobe": 0}, r"nprobe must be in \[1, 32\]"),
        ({"nprobe": 33}, r"nprobe must be in \[1, 32\]"),
        ({"nprobe": 4, "k": 0}, "k must be >= 1"),
        ({"nprobe": 4, "sample": 0}, "sample must be a positive number"),
    ],
)
def test_ivf_list_share_refuses_bad_arguments(ivf_case, kwargs, match):
    with pytest.raises(ValueError, match=match):
        ivf_list_share(ivf_case["q"], ivf_case["docs"], ivf_case["centroids"],
                       controls=ivf_case["c"], **kwargs)  # fmt: skip


def test_predictors_refuse_mismatched_or_non_finite_arrays():
    docs = np.eye(8)
    with pytest.raises(ValueError, match="controls has 4 columns, the queries 8"):
        nn_similarity_ratio(np.ones((2, 8)), docs, np.ones((2, 4)))
    with pytest.raises(ValueError, match="docs has 8 columns, the queries 3"):
        topk_inner(np.ones((2, 3)), docs, 1)
    bad = np.ones((2, 8))
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="queries holds a non-finite value"):
        topk_inner(bad, docs, 1)
    with pytest.raises(ValueError, match="docs holds a non-finite value"):
        topk_inner(np.ones((2, 8)), bad, 1)
    with pytest.raises(ValueError, match="non-empty 2-D array"):
        topk_inner(np.ones(8), docs, 1)
    for rows in ([3, 1], [0, 8], [], [2, 2], [0.0, 1.0]):
        with pytest.raises(ValueError, match=r"strictly ascending document rows in 0..7"):
            topk_inner(np.ones((2, 8)), docs, 1, rows=np.array(rows))
    with pytest.raises(ValueError, match="sample must be a positive number"):
        nn_similarity_ratio(np.ones((2, 8)), docs, np.ones((2, 8)), sample=2.5)


# ---- k-means centroids -----------------------------------------------------------------


def _objective(docs: np.ndarray, cents: np.ndarray) -> float:
    return float((docs.astype(np.float64) @ cents.T).max(axis=1).mean())


def test_ivf_centroids_are_unit_seeded_and_improve_with_iterations():
    docs = cone_vectors(3_000, 32, seed=8, clusters=12, cone=2.5, spread=2.5)
    cents = ivf_centroids(docs, 16, seed=3)
    assert cents.shape == (16, 32) and cents.dtype == np.float64
    np.testing.assert_allclose(np.linalg.norm(cents, axis=1), 1.0, atol=1e-12)
    assert np.array_equal(cents, ivf_centroids(docs, 16, seed=3))
    objectives = [_objective(docs, ivf_centroids(docs, 16, iters=i, seed=3)) for i in (0, 1, 10)]
    assert objectives[0] < objectives[1] <= objectives[2] + 1e-12, objectives
    sampled = ivf_centroids(docs, 16, sample=800, seed=3)
    assert sampled.shape == (16, 32)
    with pytest.raises(ValueError, match=r"nlist must be in \[1, 800\]"):
        ivf_centroids(docs, 801, sample=800)


# ---- rank agreement --------------------------------------------------------------------


def _spearman(x: list[float], y: list[float]) -> float:
    """1 - 6 sum d^2 / (n (n^2 - 1)), for distinct values."""
    rx, ry = np.argsort(np.argsort(x)), np.argsort(np.argsort(y))
    n = len(x)
    return 1 - 6 * float(((rx - ry) ** 2).sum()) / (n * (n * n - 1))


def _kendall(x: list[float], y: list[float]) -> float:
    """(concordant - discordant) / pairs, for distinct values."""
    s = sum(np.sign(x[i] - x[j]) * np.sign(y[i] - y[j]) for i, j in combinations(range(len(x)), 2))
    return float(s) / (len(x) * (len(x) - 1) / 2)


def test_rank_agreement_is_the_textbook_spearman_and_kendall():
    predictor = {"csa": 0.91, "asif": 0.72, "procrustes": 0.95, "linear": 0.80, "cka": 0.60,
                 "identity": 0.99, "extra": 0.5}  # fmt: skip
    costs = {"csa": 1.9, "asif": 2.4, "procrustes": 1.2, "linear": 3.0, "cka": 4.1,
             "identity": 1.1, "unmeasured": 2.0}  # fmt: skip
    got = rank_agreement(predictor, costs)
    kept = sorted(set(predictor) & set(costs))
    x, y = [predictor[m] for m in kept], [costs[m] for m in kept]
    assert got["methods"] == kept and got["n"] == 6
    assert got["left_out"] == ["extra", "unmeasured"]
    assert got["spearman"] == pytest.approx(_spearman(x, y))
    assert got["kendall_tau"] == pytest.approx(_kendall(x, y))
    assert 0 < got["spearman_p"] < 1 and 0 < got["kendall_p"] < 1


def test_rank_agreement_leaves_out_costs_beyond_the_sweep_and_small_sets():
    got = rank_agreement({"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0},
                         {"a": 1.0, "b": None, "c": float("nan"), "d": 2.0})  # fmt: skip
    assert got["n"] == 2 and got["left_out"] == ["b", "c"]
    assert got["spearman"] is None and got["kendall_tau"] is None
    flat = rank_agreement({"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 1.0, "b": 2.0, "c": 3.0})
    assert flat["n"] == 3 and flat["spearman"] is None
