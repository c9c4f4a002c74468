"""Metrics: differential tests against trec_eval (pytrec_eval) plus hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from imsearch_align import Qrels, Run, evaluate
from imsearch_align.framework.metrics import bootstrap_ci, parse_measure

pytrec_eval = pytest.importorskip("pytrec_eval")

KS = (1, 5, 10, 100)
TREC = {
    "P": "P_{k}",
    "R": "recall_{k}",
    "nDCG": "ndcg_cut_{k}",
    "AP": "map_cut_{k}",
    "HitRate": "success_{k}",
}


def _random_case(seed: int, nq: int = 250, ndoc: int = 400, depth: int = 100):
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    for q in range(nq):
        docs = rng.choice(ndoc, size=int(rng.integers(1, 25)), replace=False)
        rel = rng.integers(0, 4, size=len(docs))
        if q % 7 == 0:
            rel[:] = 0  # a query with judgements but no relevant document
        qrels[f"q{q}"] = {f"d{d}": int(r) for d, r in zip(docs, rel)}
    ids = np.empty((nq, depth), dtype=object)
    scores = np.empty((nq, depth))
    for q in range(nq):
        width = depth if q % 11 else int(rng.integers(1, depth))  # some short rankings
        docs = rng.choice(ndoc, size=width, replace=False)
        s = rng.permutation(width) + rng.random(width) * 0.5  # tie-free
        ids[q, :width] = [f"d{d}" for d in docs]
        scores[q, :width] = s
        ids[q, width:] = -1
        scores[q, width:] = -np.inf
    return qrels, ids, scores


def _trec_run(ids, scores, nq):
    run = {}
    for q in range(nq):
        run[f"q{q}"] = {d: float(s) for d, s in zip(ids[q], scores[q]) if d != -1}
    return run


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_measure_matches_trec_eval(seed):
    qrels, ids, scores = _random_case(seed)
    nq = ids.shape[0]
    ks = ",".join(map(str, KS))
    ev = pytrec_eval.RelevanceEvaluator(
        qrels, {f"P.{ks}", f"recall.{ks}", f"ndcg_cut.{ks}", f"map_cut.{ks}", f"success.{ks}"}
    )
    ref = ev.evaluate(_trec_run(ids, scores, nq))
    measures = [f"{f}@{k}" for f in TREC for k in KS]
    res = evaluate(
        Run.from_arrays([f"q{q}" for q in range(nq)], ids, scores), Qrels.from_dict(qrels), measures
    )
    pq = res.per_query.set_index("query_id")
    for m in measures:
        fam, k = parse_measure(m)
        want = np.array([ref[f"q{q}"][TREC[fam].format(k=k)] for q in range(nq)])
        got = pq.loc[[f"q{q}" for q in range(nq)], m].to_numpy()
        np.testing.assert_allclose(got, want, atol=1e-9, rtol=0, err_msg=m)
        assert res.mean()[m] == pytest.approx(want.mean(), abs=1e-12)


@pytest.mark.parametrize("k", KS)
def test_rr_at_k_matches_trec_recip_rank_on_truncated_run(k):
    qrels, ids, scores = _random_case(3)
    nq = ids.shape[0]
    run = Run.from_arrays([f"q{q}" for q in range(nq)], ids, scores)
    trunc = {}
    for q in range(nq):
        trunc[f"q{q}"] = {
            d: float(s) for d, s in zip(run.doc_ids[q, :k], run.scores[q, :k]) if d != -1
        }
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(trunc)
    got = evaluate(run, Qrels.from_dict(qrels), [f"RR@{k}"]).per_query.set_index("query_id")
    want = np.array([ref[f"q{q}"]["recip_rank"] for q in range(nq)])
    np.testing.assert_allclose(got.loc[[f"q{q}" for q in range(nq)], f"RR@{k}"], want, atol=1e-12)


def test_int_ids_from_arrays_equal_string_ids_from_frame():
    qrels, ids, scores = _random_case(4, nq=60)
    measures = ["P@5", "nDCG@10", "AP@100", "RR@10", "R@10", "HitRate@5", "Accuracy"]
    a = evaluate(
        Run.from_arrays([f"q{q}" for q in range(60)], ids, scores), Qrels.from_dict(qrels), measures
    )
    # Same data as a long frame with integer ids.
    rows = [(q, int(d[1:]), s) for q in range(60) for d, s in zip(ids[q], scores[q]) if d != -1]
    run_df = pd.DataFrame(rows, columns=["query_id", "doc_id", "score"]).sample(
        frac=1, random_state=0
    )
    qrows = [(int(q[1:]), int(d[1:]), r) for q, docs in qrels.items() for d, r in docs.items()]
    q_df = pd.DataFrame(qrows, columns=["query_id", "doc_id", "relevance"])
    b = evaluate(Run.from_frame(run_df), Qrels.from_frame(q_df), measures)
    for m in measures:
        assert a.mean()[m] == pytest.approx(b.mean()[m], abs=1e-12)


# --------------------------------------------------------------------------- hand-computed cases


def test_ties_are_broken_by_ascending_doc_id():
    qrels = Qrels.from_frame(pd.DataFrame({"query_id": [1], "doc_id": [30], "relevance": [1]}))
    run = Run.from_arrays([1], np.array([[30, 10, 20]]), np.array([[0.5, 0.5, 0.5]]))
    assert run.doc_ids.tolist() == [[10, 20, 30]]
    res = evaluate(run, qrels, ["RR@3", "P@1", "HitRate@2", "HitRate@3"]).mean()
    assert res["RR@3"] == pytest.approx(1 / 3)
    assert res["P@1"] == 0.0 and res["HitRate@2"] == 0.0 and res["HitRate@3"] == 1.0
    # Relevant doc with the smallest id among ties wins rank 1.
    q2 = Qrels.from_frame(pd.DataFrame({"query_id": [1], "doc_id": [10], "relevance": [1]}))
    assert evaluate(run, q2, ["RR@3"]).mean()["RR@3"] == 1.0


def test_ties_with_string_ids_and_order_of_input_irrelevant():
    run_a = Run.from_arrays(
        ["q"], np.array([["b", "a", "c"]], dtype=object), np.array([[1.0, 1.0, 2.0]])
    )
    assert run_a.doc_ids.tolist() == [["c", "a", "b"]]
    df = pd.DataFrame({"query_id": ["q"] * 3, "doc_id": ["a", "c", "b"], "score": [1.0, 2.0, 1.0]})
    assert Run.from_frame(df).doc_ids.tolist() == [["c", "a", "b"]]


def test_missing_query_scores_zero_and_counts():
    qrels = Qrels.from_frame(
        pd.DataFrame({"query_id": [1, 2], "doc_id": [5, 6], "relevance": [1, 1]})
    )
    run = Run.from_arrays([1], np.array([[5, 7]]), np.array([[0.9, 0.1]]))
    res = evaluate(run, qrels, ["P@1", "Accuracy"])
    assert res.mean() == {"P@1": 0.5, "Accuracy": 0.5}
    assert res.missing_queries.tolist() == [2]
    assert res.per_query.set_index("query_id").loc[2, "missing"]


def test_query_without_relevant_docs_scores_zero_and_counts():
    qrels = Qrels.from_frame(
        pd.DataFrame({"query_id": [1, 2], "doc_id": [5, 6], "relevance": [1, 0]})
    )
    run = Run.from_arrays([1, 2], np.array([[5], [6]]), np.array([[1.0], [1.0]]))
    res = evaluate(run, qrels, ["nDCG@1", "R@1", "AP@1", "RR@1"]).mean()
    assert res == {"nDCG@1": 0.5, "R@1": 0.5, "AP@1": 0.5, "RR@1": 0.5}


def test_run_query_absent_from_qrels_is_ignored_and_reported():
    qrels = Qrels.from_frame(pd.DataFrame({"query_id": [1], "doc_id": [5], "relevance": [1]}))
    run = Run.from_arrays([1, 99], np.array([[5], [5]]), np.array([[1.0], [1.0]]))
    res = evaluate(run, qrels, ["P@1"])
    assert res.mean() == {"P@1": 1.0}
    assert res.ignored_queries.tolist() == [99]
    assert len(res.per_query) == 1


def test_precision_divides_by_k_even_when_fewer_results():
    qrels = Qrels.from_pairs([1, 1], [5, 6])
    run = Run.from_arrays(
        [1], np.array([[5, 6, -1, -1, -1]]), np.array([[2.0, 1.0, -np.inf, -np.inf, -np.inf]])
    )
    res = evaluate(run, qrels, ["P@5", "P@10", "R@5", "AP@5"]).mean()
    assert res["P@5"] == pytest.approx(2 / 5)
    assert res["P@10"] == pytest.approx(2 / 10)
    assert res["R@5"] == 1.0 and res["AP@5"] == 1.0


def test_ndcg_ideal_comes_from_qrels_not_the_returned_list():
    # 10 relevant docs, only one retrieved, at rank 1 (imsearch_eval reports 1.0 here).
    qrels = Qrels.from_pairs([0] * 10, list(range(10)))
    run = Run.from_arrays([0], np.array([[3, *range(100, 109)]]), np.linspace(1, 0, 10)[None])
    idcg = sum(1 / math.log2(i + 2) for i in range(10))
    assert evaluate(run, qrels, ["nDCG@10"]).mean()["nDCG@10"] == pytest.approx(1 / idcg)


def test_graded_ndcg_by_hand():
    qrels = Qrels.from_frame(
        pd.DataFrame({"query_id": [0] * 4, "doc_id": [1, 2, 3, 4], "relevance": [3, 2, 0, 1]})
    )
    run = Run.from_arrays([0], np.array([[3, 1, 4, 2]]), np.array([[4.0, 3.0, 2.0, 1.0]]))
    dcg = 0 / math.log2(2) + 3 / math.log2(3) + 1 / math.log2(4)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    assert evaluate(run, qrels, ["nDCG@3"]).mean()["nDCG@3"] == pytest.approx(dcg / idcg)
    # This is the value trec_eval / ranx report in the reference study.
    assert dcg / idcg == pytest.approx(0.5025, abs=1e-4)


def test_negative_relevance_is_not_relevant():
    qrels = Qrels.from_frame(
        pd.DataFrame({"query_id": [0, 0], "doc_id": [1, 2], "relevance": [-2, 1]})
    )
    run = Run.from_arrays([0], np.array([[1, 2]]), np.array([[2.0, 1.0]]))
    res = evaluate(run, qrels, ["P@1", "nDCG@2", "RR@2"]).mean()
    assert res["P@1"] == 0 and res["RR@2"] == 0.5
    assert res["nDCG@2"] == pytest.approx((1 / math.log2(3)) / 1.0)


def test_no_hit_cells_are_not_relevant_and_sort_last():
    qrels = Qrels.from_pairs([0], [7])
    run = Run.from_arrays([0], np.array([[-1, 7]]), np.array([[-np.inf, 0.3]]))
    assert run.doc_ids.tolist() == [[7, -1]]
    assert evaluate(run, qrels, ["Accuracy"]).mean()["Accuracy"] == 1.0


def test_accuracy_equals_hitrate_at_1():
    qrels, ids, scores = _random_case(5, nq=50)
    r = evaluate(
        Run.from_arrays([f"q{q}" for q in range(50)], ids, scores),
        Qrels.from_dict(qrels),
        ["Accuracy", "HitRate@1"],
    )
    np.testing.assert_array_equal(r.values["Accuracy"], r.values["HitRate@1"])


def test_inputs_are_not_mutated():
    ids = np.array([[3, 1, 2]])
    scores = np.array([[0.1, 0.9, 0.5]])
    Run.from_arrays([0], ids, scores)
    assert ids.tolist() == [[3, 1, 2]] and scores.tolist() == [[0.1, 0.9, 0.5]]


def test_bootstrap_interval_is_seeded_and_brackets_the_mean():
    v = np.random.default_rng(0).random((500, 2))
    lo1, hi1 = bootstrap_ci(v, seed=3)
    lo2, _ = bootstrap_ci(v, seed=3)
    np.testing.assert_array_equal(lo1, lo2)
    assert np.all(lo1 < v.mean(0)) and np.all(v.mean(0) < hi1)
    # Normal approximation: half-width ~ 1.96 * sd / sqrt(n).
    half = 1.96 * v.std(0, ddof=1) / np.sqrt(500)
    np.testing.assert_allclose((hi1 - lo1) / 2, half, rtol=0.15)


# --------------------------------------------------------------------------- bad input


def test_unknown_measure_lists_valid_names():
    qrels = Qrels.from_pairs([0], [1])
    run = Run.from_arrays([0], np.array([[1]]), np.array([[1.0]]))
    with pytest.raises(ValueError, match=r"unknown measure 'MAP@10'.*P@k, R@k, nDCG@k"):
        evaluate(run, qrels, ["MAP@10"])


def test_k_zero_in_measure_is_rejected():
    with pytest.raises(ValueError, match=r"k in 'P@0' must be in \[1, "):
        parse_measure("P@0")


def test_qrels_without_required_columns():
    with pytest.raises(ValueError, match=r"missing required column\(s\) \['relevance'\]"):
        Qrels.from_frame(pd.DataFrame({"query_id": [1], "doc_id": [2]}))


def test_run_frame_without_required_columns():
    with pytest.raises(ValueError, match=r"missing required column\(s\) \['score'\]"):
        Run.from_frame(pd.DataFrame({"query_id": [1], "doc_id": [2]}))


def test_nan_score_names_the_query():
    with pytest.raises(ValueError, match="NaN score for query 'b'"):
        Run.from_arrays(["a", "b"], np.array([[1], [2]]), np.array([[0.1], [np.nan]]))


def test_duplicate_relevant_doc_in_a_ranking_is_an_error():
    qrels = Qrels.from_pairs([0], [1])
    run = Run.from_arrays([0], np.array([[1, 1]]), np.array([[1.0, 0.5]]))
    with pytest.raises(ValueError, match="appears twice in the ranking of query 0"):
        evaluate(run, qrels, ["P@2"])


def test_duplicate_judgement_is_an_error():
    with pytest.raises(ValueError, match="duplicate judgement for query 0, doc 1"):
        Qrels.from_pairs([0, 0], [1, 1])


def test_compare_and_hash_lookup_paths_agree():
    # <= 8 relevant per query with int ids takes the compare path; object ids the hash path.
    rng = np.random.default_rng(7)
    nq, depth = 300, 50
    ids = np.stack([rng.choice(1000, depth, replace=False) for _ in range(nq)]).astype(np.int64)
    scores = rng.random((nq, depth))
    qq, dd, rr = [], [], []
    for q in range(nq):
        for d in rng.choice(ids[q], int(rng.integers(0, 6)), replace=False):
            qq.append(q), dd.append(int(d)), rr.append(int(rng.integers(0, 4)))
        qq.append(q), dd.append(2000 + q), rr.append(1)  # relevant, never retrieved
    measures = ["P@5", "R@50", "nDCG@10", "AP@50", "RR@50", "HitRate@1"]
    a = evaluate(
        Run.from_arrays(np.arange(nq), ids, scores),
        Qrels(np.array(qq), np.array(dd), np.array(rr)),
        measures,
    )
    b = evaluate(
        Run.from_arrays(np.arange(nq), ids.astype(str).astype(object), scores),
        Qrels(np.array(qq), np.array(dd).astype(str).astype(object), np.array(rr)),
        measures,
    )
    for m in measures:
        np.testing.assert_allclose(a.values[m], b.values[m], atol=1e-15)


def test_compute_measures_on_a_dense_gain_matrix_by_hand():
    from imsearch_align.framework.metrics import compute_measures

    gain = np.array([[0, 2, 0, 1], [0, 0, 0, 0]], dtype=float)
    ideal = np.array([[2, 1, 1, 0], [0, 0, 0, 0]], dtype=float)
    v = compute_measures(gain, np.array([3, 0]), ideal, ["P@2", "AP@4", "RR@4", "nDCG@4"])
    assert v["P@2"].tolist() == [0.5, 0]
    assert v["AP@4"][0] == pytest.approx((1 / 2 + 2 / 4) / 3)
    assert v["RR@4"].tolist() == [0.5, 0]
    idcg = 2 + 1 / math.log2(3) + 1 / math.log2(4)
    assert v["nDCG@4"][0] == pytest.approx((2 / math.log2(3) + 1 / math.log2(5)) / idcg)


def test_run_keeps_caller_arrays_writeable_and_unchanged():
    ids = np.array([[1, 2, 3]])
    scores = np.array([[0.3, 0.2, 0.1]])
    run = Run.from_arrays([0], ids, scores)
    assert ids.flags.writeable and scores.flags.writeable
    assert not run.doc_ids.flags.writeable


# --------------------------------------------------------------------------- ids (issue 11.9)


def test_qrels_doc_id_minus_one_is_rejected():
    # trec_eval gives P@2 = 0 here; matching -1 against the run's no-hit padding gave 0.5.
    with pytest.raises(ValueError, match=r"doc id -1 is the run's no-hit marker.*query 0"):
        Qrels.from_pairs([0, 1], [-1, 4])
    with pytest.raises(ValueError, match=r"no-hit marker.*query 'a' and 1 more"):
        Qrels(np.array(["a", "b"], dtype=object), np.array([-1, -1], dtype=object), np.ones(2))
    Qrels(
        np.array(["a"], dtype=object), np.array(["-1"], dtype=object), np.ones(1)
    )  # a str is fine


@pytest.mark.parametrize(
    "relevant, retrieved",
    [
        (-(2**32) + 7, 7),  # wraps to 7 in int32
        (2**32 + 7, 7),
        (7, 2**32 + 7),
        (-(2**31) - 1, 2**31 - 1),  # wraps to 2**31 - 1 in int32
        (2**31, -(2**31)),
        (2**62 + 3, 3),
    ],
)
def test_ids_outside_int32_never_wrap(relevant, retrieved):
    # Query 0 retrieves `retrieved` (not relevant to it, but equal to its relevant doc once cut
    # to int32) first and its other relevant doc third; query 1 retrieves its own first.
    qrels_d = {"0": {str(relevant): 1, "11": 1}, "1": {str(retrieved): 1}}
    run_ids = np.array([[retrieved, 5, 11, 12], [retrieved, 5, 6, 8]], dtype=np.int64)
    scores = np.array([[4.0, 3, 2, 1], [4.0, 3, 2, 1]])
    measures = ["P@1", "P@3", "RR@4", "nDCG@4", "AP@4", "HitRate@1"]
    res = evaluate(
        Run.from_arrays([0, 1], run_ids, scores),
        Qrels.from_dict(
            {int(q): {int(d): r for d, r in docs.items()} for q, docs in qrels_d.items()}
        ),
        measures,
    ).per_query.set_index("query_id")
    trun = {str(q): {str(d): float(s) for d, s in zip(run_ids[q], scores[q])} for q in range(2)}
    ref = pytrec_eval.RelevanceEvaluator(
        qrels_d, {"P.1,3", "ndcg_cut.4", "map_cut.4", "success.1", "recip_rank"}
    ).evaluate(trun)
    keys = {
        "P@1": "P_1",
        "P@3": "P_3",
        "RR@4": "recip_rank",
        "nDCG@4": "ndcg_cut_4",
        "AP@4": "map_cut_4",
        "HitRate@1": "success_1",
    }
    for m in measures:
        for q in (0, 1):
            assert res.loc[q, m] == pytest.approx(ref[str(q)][keys[m]], abs=1e-12), (m, q)
    assert res.loc[0, "P@1"] == 0.0 and res.loc[0, "RR@4"] == pytest.approx(1 / 3)


def test_unused_relevant_slots_never_match_a_run_id():
    # Query 0 has two relevant docs, query 1 one: query 1's second slot is unused. Whatever
    # id the run holds (here -2, twice), it must neither count nor look like a duplicate.
    qrels = Qrels.from_pairs([0, 0, 1], [3, 4, 9])
    run = Run.from_arrays([0, 1], np.array([[3, 4, 1], [-2, -2, 9]]), np.array([[3.0, 2, 1]] * 2))
    res = evaluate(run, qrels, ["P@3", "RR@3"]).values
    assert res["P@3"].tolist() == pytest.approx([2 / 3, 1 / 3])
    assert res["RR@3"].tolist() == pytest.approx([1.0, 1 / 3])


def test_string_qrels_doc_ids_against_int_run_ids_raise():
    qrels = Qrels.from_frame(
        pd.DataFrame({"query_id": [0, 1], "doc_id": ["5", "6"], "relevance": [1, 1]})
    )
    run = Run.from_arrays([0, 1], np.array([[5], [6]]), np.array([[1.0], [1.0]]))
    with pytest.raises(TypeError, match=r"relevant doc ids are str \(e.g. '5'\).*are int"):
        evaluate(run, qrels, ["P@1"])
    # And the reverse: string run ids against integer qrels.
    run_s = Run.from_arrays([0, 1], np.array([["5"], ["6"]], dtype=object), np.ones((2, 1)))
    with pytest.raises(TypeError, match="relevant doc ids are int"):
        evaluate(run_s, Qrels.from_pairs([0, 1], [5, 6]), ["P@1"])


def test_mixed_doc_id_types_warn_with_counts():
    qrels = Qrels(np.array([0, 1]), np.array([5, "6"], dtype=object), np.ones(2))
    run = Run.from_arrays([0, 1], np.array([[5], [6]]), np.array([[1.0], [1.0]]))
    from imsearch_align.framework.metrics import IdTypeWarning

    with pytest.warns(IdTypeWarning, match="1 of 2 relevant qrels doc ids and 0 of 2 run doc ids"):
        res = evaluate(run, qrels, ["P@1"])
    assert res.values["P@1"].tolist() == [1.0, 0.0]


def test_unknown_docs_counts_relevant_judgements_outside_the_index():
    qrels = Qrels.from_frame(
        pd.DataFrame({"query_id": [0, 0, 1, 1], "doc_id": [1, 2, 3, 4], "relevance": [1, 1, 0, 2]})
    )
    assert qrels.unknown_docs([1, 2, 3, 4]) == 0
    assert qrels.unknown_docs([1, 3]) == 2  # docs 2 and 4 (doc 3 is not relevant)
    sq = Qrels.from_pairs(["a", "b"], ["x", "y"])
    assert sq.unknown_docs(np.array(["x", "z"], dtype=object)) == 1


def test_lenient_evaluation_fails_only_the_query_with_a_repeated_relevant_doc():
    from imsearch_align.framework.metrics import evaluate_lenient

    qrels = Qrels.from_pairs([0, 1, 2], [1, 2, 3])
    ids = np.array([[1, 1, 4], [2, 5, 6], [7, 3, 8]])
    run = Run.from_arrays([0, 1, 2], ids, np.array([[3.0, 2, 1]] * 3))
    res, dups = evaluate_lenient(run, qrels, ["P@3", "RR@3"])
    assert dups.tolist() == [0]
    assert res.failed_queries.tolist() == [0]
    assert res.values["P@3"].tolist() == pytest.approx([0.0, 1 / 3, 1 / 3])
    assert res.values["RR@3"].tolist() == pytest.approx([0.0, 1.0, 0.5])
    # The hash path (string ids) agrees.
    s_run = Run.from_arrays(
        ["a", "b", "c"], ids.astype(str).astype(object), np.array([[3.0, 2, 1]] * 3)
    )
    s_qrels = Qrels.from_pairs(["a", "b", "c"], ["1", "2", "3"])
    res_s, dups_s = evaluate_lenient(s_run, s_qrels, ["P@3", "RR@3"])
    assert dups_s.tolist() == ["a"]
    np.testing.assert_array_equal(res_s.values["RR@3"], res.values["RR@3"])
