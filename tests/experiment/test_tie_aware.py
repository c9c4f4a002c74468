"""Tie groups formed from float64 scores of the vectors where a store's float32
scores cannot decide them (:class:`imsearch_align.framework.ranking.tie_aware.Rescorer`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.framework.fidelity import TrueScores
from imsearch_align.framework.metrics import Qrels, Run
from imsearch_align.framework.ranking.tie_aware import Rescorer
from imsearch_align.framework.ties import default_tolerance, tie_groups


def _space(rng, n=60, nq=40, d=24):
    """Documents in groups of 4 whose score gaps sit near the default tolerance."""
    c = rng.standard_normal((n // 4, d))
    docs = np.repeat(c, 4, axis=0) + 1e-5 * rng.standard_normal((n, d))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    q = docs[rng.integers(0, n, nq)] + 0.2 * rng.standard_normal((nq, d))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return docs.astype(np.float32), q.astype(np.float32)


def _store_run(docs, ids, q, qids, k, wobble):
    """What a store with rounding error ``wobble(ids)`` returns: its top ``k``."""
    s = q @ docs.T
    s = (s + wobble(ids)[None, :]).astype(np.float32)
    top = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    return Run.from_arrays(qids, ids[top], np.take_along_axis(s, top, axis=1))


def test_true_scores_are_float64_inner_products_of_the_ids():
    rng = np.random.default_rng(0)
    docs, q = _space(rng)
    ids = np.arange(100, 100 + len(docs))
    pick = rng.integers(0, len(docs), (len(q), 5))
    asked = ids[pick]
    asked[0, 4] = -1
    asked[1, 3] = 7  # never indexed
    got = TrueScores(docs, ids, q)(np.arange(len(q)), asked)
    want = np.einsum("qd,qkd->qk", q.astype(np.float64), docs[pick].astype(np.float64))
    want[0, 4] = want[1, 3] = np.nan
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    sparse = TrueScores(sp.csr_matrix(docs), ids, sp.csr_matrix(q))(np.arange(len(q)), asked)
    np.testing.assert_allclose(sparse, want, rtol=1e-13, atol=1e-15)
    with pytest.raises(ValueError, match="query_rows"):
        TrueScores(docs, ids, q)(np.array([len(q)]), asked[:1])


@pytest.mark.parametrize("sparse", [False, True])
def test_true_scores_of_a_large_request_split_over_threads_keep_row_order(sparse):
    """A request large enough to run on two threads (4,000 x 80 pairs of 600-d
    vectors) returns every row in its place: against a float64 matrix product."""
    from imsearch_align.framework import metrics

    rng = np.random.default_rng(5)
    docs = rng.standard_normal((500, 600)).astype(np.float32)
    q = rng.standard_normal((4000, 600)).astype(np.float32)
    if sparse:
        docs[rng.random(docs.shape) < 0.7] = 0
        q[rng.random(q.shape) < 0.7] = 0
    ids = np.arange(500) + 7
    pick = rng.integers(0, 500, (4000, 80))
    qrows = rng.permutation(4000)
    calls = []
    real = metrics._map_row_chunks
    spy = lambda fn, n_rows, n_cells: calls.append(n_cells) or real(fn, n_rows, n_cells)  # noqa: E731
    mp = pytest.MonkeyPatch()
    mp.setattr(metrics, "_map_row_chunks", spy)
    try:
        truth = TrueScores(sp.csr_matrix(docs) if sparse else docs, ids,
                           sp.csr_matrix(q) if sparse else q)  # fmt: skip
        got = truth(qrows, ids[pick])
    finally:
        mp.undo()
    assert calls and calls[0] >= metrics._PARALLEL_MIN_CELLS  # the two-thread path ran
    want = np.take_along_axis(q[qrows].astype(np.float64) @ docs.T.astype(np.float64), pick, 1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_stores_rounding_differently_give_the_groups_of_the_float64_scores():
    """Two stores whose scores differ by up to 0.45 tol each (gaps by up to 0.9
    tol) group differently on their own scores; rescored, both give the groups
    of the float64 scores of the same documents, in the same order."""
    rng = np.random.default_rng(1)
    docs, q = _space(rng)
    d = docs.shape[1]
    tol = default_tolerance(d)
    ids = np.arange(len(docs)) * 3 + 5
    qids = np.arange(len(q)) + 1000
    stores = [
        lambda x: np.zeros(len(x)),
        lambda x: 0.9 * tol * (((x * 2654435761) % 1000) / 1000.0 - 0.5),
    ]
    runs = [_store_run(docs, ids, q, qids, 10, w) for w in stores]
    own = [tie_groups(r, tol=tol) for r in runs]
    assert any(len(np.unique(a[:6])) != len(np.unique(b[:6])) for a, b in zip(*own)), (
        "the stores must group differently on their own scores"
    )
    exact = q.astype(np.float64) @ docs.astype(np.float64).T
    for r in runs:
        rescorer = Rescorer(docs, ids, q, qids, tol)
        out = rescorer(r)
        assert rescorer.n_rescored > 0
        pos = (out.doc_ids - 5) // 3
        truth = Run.from_arrays(qids, out.doc_ids, np.take_along_axis(exact, pos, axis=1))
        g_out, g_truth = tie_groups(out, tol=tol), tie_groups(truth, tol=tol)
        # Same groups over the first 6 ranks (members as sets; beyond, the stores
        # returned different tails).
        for i in range(len(q)):
            for c in range(6):
                a = set(out.doc_ids[i][g_out[i] == g_out[i, c]])
                b = set(truth.doc_ids[i][g_truth[i] == g_truth[i, c]])
                assert a == b, (i, c)


def test_rows_the_store_scores_decide_are_left_alone():
    rng = np.random.default_rng(2)
    docs = rng.standard_normal((50, 16)).astype(np.float32)
    q = rng.standard_normal((20, 16)).astype(np.float32)
    ids = np.arange(50)
    run = _store_run(docs, ids, q, np.arange(20), 8, lambda x: np.zeros(len(x)))
    rescorer = Rescorer(docs, ids, q, np.arange(20), default_tolerance(16))
    assert rescorer(run) is run and rescorer.n_rescored == 0


# ----------------------------------------------------------------------------- close_groups


def _exact_store(docs, ids):
    from imsearch_align.adapters.exact import ExactStore

    s = ExactStore()
    s.create_collection("c", docs.shape[1])
    s.insert("c", docs, ids)
    return s


def _qrels(qids, rel):
    from imsearch_align.framework.metrics import Qrels

    return Qrels.from_pairs(qids, rel)


@pytest.mark.parametrize(("probe_rows", "block_rows"), [(256, None), (5, None), (5, 3)])
def test_close_groups_widens_only_as_far_as_the_groups_need(probe_rows, block_rows, monkeypatch):
    """Groups of 3 near-copies straddling rank k close a few columns past it:
    the extended run is narrower than the depth searched, and its tie-aware
    values equal those of a run searched to the full depth (with every open
    row in the probe, with a probe of 5 rows and the rest searched after,
    and with the rest searched 3 rows a block, each block as wide as its own
    groups need)."""
    from imsearch_align.framework.ranking import tie_aware
    from imsearch_align.framework.ranking.tie_aware import EXTEND_FACTOR, close_groups
    from imsearch_align.framework.ties import open_tie_groups, tie_aware_evaluate

    monkeypatch.setattr(tie_aware, "PROBE_ROWS", probe_rows)
    if block_rows is not None:
        monkeypatch.setattr(tie_aware, "DEEPER_BLOCK_CELLS", block_rows * EXTEND_FACTOR * 5)

    rng = np.random.default_rng(3)
    d, k = 16, 4
    c = rng.standard_normal((40, d))
    docs = np.repeat(c, 3, axis=0) + 1e-9 * rng.standard_normal((120, d))
    docs = (docs / np.linalg.norm(docs, axis=1, keepdims=True)).astype(np.float32)
    q = (c[rng.integers(0, 40, 60)] + 0.9 * rng.standard_normal((60, d))).astype(np.float32)
    ids, qids = np.arange(120), np.arange(60)
    store = _exact_store(docs, ids)
    tol = default_tolerance(d)
    r = store.search("c", q, k + 1)
    run = Run.from_arrays(qids, r.ids, r.scores)
    assert open_tie_groups(run, k, tol=tol).any()
    ext, searched, still_open, _ = close_groups(store, "c", run, q, qids, k, tol, 120)
    depth = EXTEND_FACTOR * (k + 1)
    assert searched > min(probe_rows, 5) and still_open == 0  # the probe and the rest
    assert run.k < ext.k < depth
    assert not open_tie_groups(ext, k, tol=tol).any()
    full = store.search("c", q, depth)
    ref = Run.from_arrays(qids, full.ids, full.scores)
    qrels = _qrels(qids, 3 * (qids % 40))
    ms = ["P@4", "nDCG@4", "AP@4", "RR@4", "HitRate@4"]
    a = tie_aware_evaluate(ext, qrels, ms, tol=tol, groups_closed=True)
    b = tie_aware_evaluate(ref, qrels, ms, tol=tol, groups_closed=True)
    for m in ms:
        np.testing.assert_allclose(a.values[m], b.values[m], rtol=0, atol=1e-12, err_msg=m)


def test_window_search_keeps_only_the_true_groups_at_k():
    """Scores crowded within the error bound (distinct in float64): every row is
    searched deeper, rescored and re-sorted, yet the extended run keeps only
    the k-th's group (one document) and the closing column, and its top k is
    the float64 brute-force top k (the first k + 1 of the store's float32
    order are not: the true order differs within float32 rounding)."""
    from imsearch_align.framework.ranking.tie_aware import EXACT_TIE_TOL, close_groups, open_windows

    rng = np.random.default_rng(11)
    d, k, n = 16, 5, 400
    b = rng.standard_normal(d)
    b /= np.linalg.norm(b)
    docs = (b + 2e-7 * rng.standard_normal((n, d))).astype(np.float32)
    q = (b + 2e-7 * rng.standard_normal((30, d))).astype(np.float32)
    ids, qids = np.arange(n) * 7 + 3, np.arange(30)
    store = _exact_store(docs, ids)
    e = default_tolerance(d)
    r = store.search("c", q, k + 1)
    rescore = Rescorer(docs, ids, q, qids, EXACT_TIE_TOL)
    run = rescore(Run.from_arrays(qids, r.ids, r.scores))
    assert open_windows(run, k, e).all()
    ext, searched, still_open, _ = close_groups(
        store, "c", run, q, qids, k, e, n, rescore, window=True, group_tol=EXACT_TIE_TOL
    )
    # searched 48 deep (every document is within the window: all rows stay
    # open, scored on what came back in true order), kept k + 1 columns
    assert searched == 30 and still_open == 30 and ext.k == run.k
    true = q.astype(np.float64) @ docs.astype(np.float64).T
    want = ids[np.argsort(-true, axis=1, kind="stable")[:, :k]]
    np.testing.assert_array_equal(ext.doc_ids[:, :k], want)
    np.testing.assert_allclose(ext.scores[:, :k], np.sort(true, axis=1)[:, ::-1][:, :k], rtol=1e-13)


def test_rows_holding_every_document_are_closed_not_open():
    """count = k + 1: the first search returns every document; a group running
    to the end is closed by the no-hit column, and no row is counted open."""
    from imsearch_align.framework.ranking.tie_aware import EXACT_TIE_TOL, close_groups, error_bound

    k, n, d = 3, 4, 8
    docs = np.tile(np.eye(d, dtype=np.float32)[:1], (n, 1))
    q = docs[:2].copy()
    ids, qids = np.arange(n), np.arange(2)
    store = _exact_store(docs, ids)
    r = store.search("c", q, k + 1)
    rescore = Rescorer(docs, ids, q, qids, EXACT_TIE_TOL)
    run = rescore(Run.from_arrays(qids, r.ids, r.scores))
    ext, searched, still_open, _ = close_groups(
        store, "c", run, q, qids, k, error_bound(q), n, rescore, window=True
    )
    assert (searched, still_open) == (0, 0)
    assert ext.k == n + 1 and (ext.doc_ids[:, -1] == -1).all()


def test_groups_deeper_search_cannot_close_are_all_scored_truncated():
    """Every document scores the same: no depth closes a group, so no row is
    extended and every open row is flagged truncated."""
    from imsearch_align.framework.ranking.tie_aware import close_groups
    from imsearch_align.framework.ties import tie_aware_evaluate

    d, k = 8, 3
    docs = np.tile(np.eye(d, dtype=np.float32)[:1], (400, 1))
    q = np.tile(np.eye(d, dtype=np.float32)[:1], (30, 1))
    ids, qids = np.arange(400), np.arange(30)
    store = _exact_store(docs, ids)
    tol = default_tolerance(d)
    r = store.search("c", q, k + 1)
    run = Run.from_arrays(qids, r.ids, r.scores)
    ext, searched, still_open, _ = close_groups(store, "c", run, q, qids, k, tol, 400)
    assert ext.k == run.k and searched == 30 and still_open == 30
    ta = tie_aware_evaluate(ext, _qrels(qids, qids + 100), ["HitRate@3"], tol=tol)
    assert ta.n_truncated["HitRate@3"] == 30


class _FixedStore:
    """Answers query row ``i`` (its vector is ``[i]``) with fixed ids and scores."""

    def __init__(self, ids, scores):
        self.ids, self.scores = np.asarray(ids, np.int64), np.asarray(scores, np.float32)

    def search(self, collection, q, k):
        from imsearch_align.framework.interfaces import SearchResult

        rows = np.asarray(q)[:, 0].astype(int)
        return SearchResult(self.ids[rows, :k].copy(), self.scores[rows, :k].copy())


@pytest.mark.parametrize("repeat", [False, True])
def test_score_ranking_scores_each_run_once_with_the_values_of_the_two_passes(repeat):
    """The ranking call equals the store's run scored by the evaluator (tie rule,
    failures) beside the tie-aware pass over it, whether the tie-aware pass's
    tie-rule evaluation is reused (no document repeats) or the store's run is
    scored apart (a relevant document again past the cut-off, inside a tie
    group: only the tie-aware pass fails that query)."""
    from imsearch_align.framework.evaluator import BenchmarkEvaluator
    from imsearch_align.framework.ranking import RankingSettings, score_ranking
    from imsearch_align.framework.ranking.tie_aware import tolerance_for
    from imsearch_align.framework.ties import tie_aware_evaluate

    last = 9 if repeat else 11
    ids = [[5, 1, 2], [3, 4, 7], [8, 9, last], [1, 2, 3]]
    scores = [[0.9, 0.5, 0.1], [0.9, 0.7, 0.7], [0.9, 0.6, 0.6], [0.8, 0.8, 0.8]]
    store = _FixedStore(ids, scores)
    q = np.arange(4, dtype=np.float32)[:, None]
    qids = np.array([10, 11, 12, 13])
    qrels = Qrels(np.array([10, 11, 12, 13, 13]), np.array([1, 7, 9, 2, 3]), np.ones(5))
    measures = ("P@2", "HitRate@2", "nDCG@2", "RR@2")
    doc_ids = np.arange(12)
    got = score_ranking(
        store, "c", "t2i", docs=np.zeros((12, 1), np.float32), doc_ids=doc_ids, queries=q,
        query_ids=qids, qrels=qrels, settings=RankingSettings(k=2, measures=measures),
        rescore=False,
    )  # fmt: skip
    res = BenchmarkEvaluator(store, "c", k=3, measures=measures, progress=False).evaluate(
        q, qrels, query_ids=qids, collection_ids=doc_ids
    )
    ta = tie_aware_evaluate(
        res.run,
        qrels,
        list(measures),
        tol=tolerance_for(None, q, rescored=False),
        failed_queries=list(res.errors),
        lenient=True,
    )
    r = got.result
    assert r.tie_rule == pytest.approx(res.mean(), abs=1e-15)
    assert r.metrics == pytest.approx(ta.mean(), abs=1e-15)
    assert r.n_failed == res.n_failed and r.errors == tuple(dict.fromkeys(res.errors.values()))
    # query 12: the tie-rule value stands; the tie-aware pass fails it only on a repeat
    assert res.evaluation.values["P@2"][2] == 0.5 and bool(ta.values["P@2"][2] == 0.0) is repeat
    for m in measures:
        np.testing.assert_array_equal(got.per_query[m].to_numpy(), ta.values[m])
    np.testing.assert_array_equal(got.run.doc_ids, res.run.doc_ids)
