"""``Diversity@k``: imsearch_eval's diversity (1 - intra-list similarity) of the top k,
read from the indexed vectors (:mod:`imsearch_align.framework.diversity`)."""

from __future__ import annotations

import itertools
import logging

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from imsearch_align import Qrels, Run, evaluate
from imsearch_align.framework import measures as M
from imsearch_align.framework.diversity import DocVectors, diversity
from imsearch_align.framework.ties import tie_aware_evaluate, tie_groups

# ----------------------------------------------------------------------------- oracles


def _imsearch_eval_ils(vectors):
    """imsearch_eval 0.1.9 ``framework/evaluator.py:compute_ils``, as written there."""
    from sklearn.metrics.pairwise import cosine_similarity

    if vectors is None or len(vectors) < 2:
        return np.nan
    sim = cosine_similarity(vectors)
    n = sim.shape[0]
    triu_indices = np.triu_indices(n, k=1)
    return float(np.mean(sim[triu_indices]))


def _imsearch_eval_diversity(results_df: pd.DataFrame, vector_column: str = "vector"):
    """imsearch_eval's per-query ``diversity`` from its results frame (one row per
    returned object, the object's vector in ``vector``), as ``evaluate_query`` computes
    it: 0 for an empty result, NaN below two vectors or with a missing one."""
    if results_df.empty:
        return 0
    diversity = np.nan
    if vector_column in results_df.columns:
        rows = []
        for v in results_df[vector_column]:
            if v is None or (isinstance(v, float) and np.isnan(v)):
                rows = []
                break
            if not isinstance(v, list | tuple | np.ndarray):
                rows = []
                break
            rows.append(np.asarray(v, dtype=float))
        if len(rows) >= 2:
            ils = _imsearch_eval_ils(np.array(rows))
            if not np.isnan(ils):
                diversity = 1.0 - ils
    return diversity


def _double_loop(vectors) -> float:
    """1 - mean over the pairs i < j of cos(v_i, v_j), one pair at a time (0 below 2)."""
    v = [np.asarray(x, dtype=np.float64).ravel() for x in vectors]
    total, pairs = 0.0, 0
    for i in range(len(v)):
        for j in range(i + 1, len(v)):
            ni, nj = np.sqrt(v[i] @ v[i]), np.sqrt(v[j] @ v[j])
            total += 0.0 if ni == 0 or nj == 0 else (v[i] @ v[j]) / (ni * nj)
            pairs += 1
    return 1.0 - total / pairs if pairs else 0.0


def _frame_of(ids_row, docs, doc_ids):
    """imsearch_eval's results frame of one query: one row per returned object."""
    where = {int(d): i for i, d in enumerate(doc_ids)}
    rows = [{"id": int(d), "vector": np.asarray(docs[where[int(d)]]).ravel().tolist()}
            for d in ids_row if d != -1]  # fmt: skip
    return pd.DataFrame(rows, columns=["id", "vector"])


def _case(seed: int, n: int = 80, d: int = 12, nq: int = 30, depth: int = 12):
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((n, d)).astype(np.float32)
    docs[rng.random((n, d)) < 0.5] = 0  # sparse-ish, so CSR holds real zeros
    docs[3] = 0  # a zero vector: cosine 0 with everything (sklearn's convention)
    doc_ids = np.arange(n) * 5 + 11
    ids = np.stack([rng.choice(doc_ids, depth, replace=False) for _ in range(nq)])
    ids[0, 0] = doc_ids[3]
    ids[1, 4:] = -1  # short lists
    ids[2, 1:] = -1
    ids[3, :] = -1
    return docs, doc_ids, ids


# ----------------------------------------------------------------------------- the kernel


@pytest.mark.parametrize("seed", [0, 1])
def test_equals_imsearch_eval_on_its_results_frame(seed):
    docs, doc_ids, ids = _case(seed)
    vecs = DocVectors(docs, doc_ids)
    rows = vecs.rows(ids)
    for k in (2, 3, 5, 12):
        got = diversity(vecs, rows, None, k)
        for q in range(len(ids)):
            frame = _frame_of(ids[q, :k], docs, doc_ids)
            theirs = _imsearch_eval_diversity(frame)
            loop = _double_loop(list(frame["vector"]))
            if len(frame) >= 2:
                assert got[q] == pytest.approx(theirs, abs=1e-12), (k, q)
            else:  # theirs: 0 for an empty result, NaN for one; ours 0 (kept in the mean)
                assert got[q] == 0.0 and (theirs == 0 if frame.empty else np.isnan(theirs))
            assert got[q] == pytest.approx(loop, abs=1e-12), (k, q)
    assert diversity(vecs, rows, None, 1).tolist() == [0.0] * len(ids)


@pytest.mark.parametrize("seed", [0, 1])
def test_dense_and_sparse_give_the_same_value(seed):
    docs, doc_ids, ids = _case(seed)
    dense, csr = DocVectors(docs, doc_ids), DocVectors(sp.csr_matrix(docs), doc_ids)
    for k in (2, 5, 12):
        a = diversity(dense, dense.rows(ids), None, k)
        b = diversity(csr, csr.rows(ids), None, k)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)
    # an ASIF-like space: L2-normalised non-negative CSR rows over many anchors
    rng = np.random.default_rng(seed)
    m = sp.random(50, 2000, density=0.02, format="csr", random_state=seed, dtype=np.float32)
    m = sp.csr_matrix(m.multiply(1 / np.sqrt(m.multiply(m).sum(1))))
    top = np.stack([rng.choice(50, 10, replace=False) for _ in range(20)])
    a = diversity(DocVectors(m, np.arange(50)), top, None, 10)
    b = diversity(DocVectors(m.toarray(), np.arange(50)), top, None, 10)
    want = [_double_loop(m[r].toarray()) for r in top]
    np.testing.assert_allclose(a, want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-13)


def test_ids_that_are_not_indexed_count_as_zero_vectors_and_no_hits_end_the_list():
    docs, doc_ids, _ = _case(0)
    vecs = DocVectors(docs, doc_ids)
    ids = np.array([[doc_ids[0], 7, doc_ids[1], -1]])  # 7 is no document's id
    rows = vecs.rows(ids)
    assert rows[0, 1] == -1 and rows[0, 3] == -2
    want = _double_loop([docs[0], np.zeros(docs.shape[1]), docs[1]])
    assert diversity(vecs, rows, None, 4)[0] == pytest.approx(want, abs=1e-12)


def _every_order(vecs, dense, ids, scores, k):
    """Mean over every order of each row's tied documents of the top-k diversity."""
    out = []
    for row, s in zip(ids, scores, strict=True):
        n = int((row != -1).sum())
        bounds = [0, *[j for j in range(1, n) if s[j] != s[j - 1]], n]
        perms = [list(itertools.permutations(range(a, b))) for a, b in itertools.pairwise(bounds)]
        vals = []
        for choice in itertools.product(*perms):
            order = [c for grp in choice for c in grp]
            top = vecs.rows(row[order][:k])
            vals.append(_double_loop([dense[r] for r in top]))
        out.append(np.mean(vals))
    return np.array(out)


@pytest.mark.parametrize("sparse", [False, True])
def test_tie_groups_crossing_the_cut_off_give_the_expected_value_over_their_orders(sparse):
    docs, doc_ids, _ = _case(2)
    vecs = DocVectors(sp.csr_matrix(docs) if sparse else docs, doc_ids)
    ids = np.array(
        [
            doc_ids[[0, 1, 2, 4, 5, 6, 7]],  # group of 4 from rank 2 crossing k=4
            doc_ids[[8, 9, 10, 11, 12, 13, 14]],  # all tied
            doc_ids[[15, 16, 17, 18, 19, 20, 21]],  # no tie
            doc_ids[[22, 23, 24, 25, 26, 27, 3]],  # doc 3: a zero vector
        ]
    )
    scores = np.array(
        [
            [0.9, 0.8, 0.5, 0.5, 0.5, 0.5, 0.1],
            [0.5] * 7,
            [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3],
            [0.9, 0.7, 0.7, 0.6, 0.6, 0.6, 0.2],  # one group inside, one crossing k=4
        ]
    )
    run = Run.from_arrays(np.arange(4), ids, scores)
    groups = tie_groups(run, tol=0.0)
    rows = vecs.rows(run.doc_ids)
    for k in (2, 3, 4, 5):
        got = diversity(vecs, rows, groups, k)
        want = _every_order(vecs, docs, run.doc_ids, run.scores, k)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12, err_msg=f"k={k}")
        # without the groups: the rows' order (the tie rule); equal where no tie crosses k
        plain = diversity(vecs, rows, None, k)
        assert plain[2] == got[2]
    assert diversity(vecs, rows, None, 4)[0] != pytest.approx(got[0])


# ----------------------------------------------------------------------------- the table


def test_one_entry_reported_at_the_largest_k_and_listed():
    meas, k = M.lookup("Diversity@10")
    assert meas.needs_vectors and k == 10 and M.needs_vectors("Diversity@3")
    assert M.default_measures([1, 5, 10])[-2:] == ["Diversity@10", "Accuracy"]
    assert "Diversity@1" not in M.default_measures([1, 5, 10])
    assert "| `Diversity@k` |" in M.markdown_table()
    assert any(r[0] == "Diversity@k" and "imsearch_eval" in r[3] for r in M.list_rows())
    assert "Diversity@k" not in M.tie_aware_names()


def test_measures_of_judgements_refuse_it_with_the_reason():
    run = Run.from_arrays([0], np.array([[1, 2, 3]]), np.array([[0.9, 0.5, 0.1]]))
    qrels = Qrels.from_pairs([0], [2])
    with pytest.raises(ValueError, match=r"'Diversity@3' is computed from the indexed vectors"):
        evaluate(run, qrels, ["P@3", "Diversity@3"])
    with pytest.raises(ValueError, match=r"'Diversity@3' is computed from the indexed vectors"):
        tie_aware_evaluate(run, qrels, ["Diversity@3"], tol=0.0)


# ----------------------------------------------------------------------------- the ranking path


def _exact_store(docs, ids):
    from imsearch_align.adapters.exact import ExactStore

    s = ExactStore()
    s.create_collection("c", docs.shape[1], sparse=sp.issparse(docs))
    s.insert("c", docs, ids)
    return s


class _LyingStore:
    """The exact store's ids, with made-up scores (``how``): one per rank, or all equal."""

    def __init__(self, inner, how):
        self.inner, self.how = inner, how

    def search(self, collection, q, k):
        from imsearch_align.framework.interfaces import SearchResult

        r = self.inner.search(collection, q, k)
        n, kk = r.ids.shape
        fake = (
            np.broadcast_to(100.0 - np.arange(kk), (n, kk))
            if self.how == "rank"
            else np.full((n, kk), 0.25)
        )
        return SearchResult(r.ids, np.where(r.ids == -1, -np.inf, fake).astype(np.float32))


def _space(seed=0, n=120, nq=40, d=16):
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((n, d)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    q = rng.standard_normal((nq, d)).astype(np.float32)
    doc_ids = np.arange(n) + 1000
    qids = np.arange(nq)
    qrels = Qrels.from_pairs(qids, doc_ids[rng.integers(0, n, nq)])
    return docs, doc_ids, q, qids, qrels


def _score(store, docs, doc_ids, q, qids, qrels, measures, rescore=True):
    from imsearch_align.framework.ranking import RankingSettings, score_ranking

    return score_ranking(
        store, "c", "t2i", docs=docs, doc_ids=doc_ids, queries=q, query_ids=qids, qrels=qrels,
        settings=RankingSettings(k=5, measures=tuple(measures)), rescore=rescore,
    )  # fmt: skip


@pytest.mark.parametrize("sparse", [False, True])
def test_score_ranking_reports_it_per_query_from_the_vectors_not_the_scores(sparse):
    docs, doc_ids, q, qids, qrels = _space()
    if sparse:
        docs, q = sp.csr_matrix(docs), sp.csr_matrix(q)
    exact = _exact_store(docs, doc_ids)
    measures = ["P@5", "Diversity@5", "Diversity@2"]
    honest = _score(exact, docs, doc_ids, q, qids, qrels, measures)
    pq = honest.per_query.set_index("query_id")
    dense = docs.toarray() if sparse else docs
    where = {int(d): i for i, d in enumerate(doc_ids)}
    run = honest.run
    for i, qid in enumerate(run.query_ids):
        for k in (5, 2):
            top = [dense[where[int(d)]] for d in run.doc_ids[i, :k]]
            assert pq.loc[qid, f"Diversity@{k}"] == pytest.approx(_double_loop(top), abs=1e-12)
    r = honest.result
    assert r.metrics["Diversity@5"] == pytest.approx(pq["Diversity@5"].mean(), abs=1e-15)
    assert r.tie_rule["Diversity@5"] == pytest.approx(r.metrics["Diversity@5"], abs=1e-15)
    lo, hi = r.intervals["Diversity@5"]
    assert lo <= r.metrics["Diversity@5"] <= hi
    for how in ("rank", "equal"):  # a store whose scores lie: the same diversity
        lying = _score(_LyingStore(exact, how), docs, doc_ids, q, qids, qrels, measures)
        assert lying.result.metrics["Diversity@5"] == pytest.approx(
            r.metrics["Diversity@5"], abs=1e-12
        ), how
        np.testing.assert_allclose(
            lying.per_query["Diversity@5"], honest.per_query["Diversity@5"], rtol=0, atol=1e-12
        )


def test_score_ranking_refuses_it_where_the_ids_are_no_rows_of_the_documents():
    docs, doc_ids, q, qids, qrels = _space()
    store = _exact_store(docs, doc_ids)
    with pytest.raises(ValueError, match=r"Diversity@5: computed from the indexed vectors.*"
                       r"ids are not rows of the indexed documents"):  # fmt: skip
        _score(store, docs, doc_ids, q, qids, qrels, ["HitRate@5", "Diversity@5"], rescore=False)
    with pytest.raises(ValueError, match="needs at least one measure of the relevance judgements"):
        _score(store, docs, doc_ids, q, qids, qrels, ["Diversity@5"])


def test_an_experiment_reports_it_per_query_and_in_its_metrics(tmp_path, caplog):
    from imsearch_align.experiment import ExperimentConfig, ExperimentResult, run_experiment

    syn = {"n_images": 120, "captions_per_image": 2, "seed": 3, "d_image": 16, "d_text": 12}
    cfg = ExperimentConfig(
        dataset="synthetic", dataset_params=syn, image_encoder=None, text_encoder=None,
        method="procrustes", store="exact", n_support=60, cache_dir=None, k_values=(1, 5),
    )  # fmt: skip
    with caplog.at_level(logging.WARNING):
        res = run_experiment(cfg, output_dir=tmp_path / "out", progress=False)
    assert res.status.ok, res.status
    frame = pd.read_parquet(next((tmp_path / "out").glob("*.per_query.parquet")))
    for d in ("t2i", "i2t"):
        r = res.rankings[d]
        assert "Diversity@1" not in r.metrics
        value = res.metric(f"{d}/Diversity@5")
        assert 0 < value <= 2 and "Diversity@5" in r.tie_rule and "Diversity@5" in r.intervals
        col = frame.loc[frame["ranking"] == d, "Diversity@5"]
        assert len(col) == r.n_queries and col.mean() == pytest.approx(value, abs=1e-12)
    stored = ExperimentResult.load(next((tmp_path / "out").glob("*.json")))
    assert stored.metric("t2i/Diversity@5") == pytest.approx(res.metric("t2i/Diversity@5"))
