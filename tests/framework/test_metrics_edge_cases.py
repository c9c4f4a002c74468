"""Inputs where a number could differ from trec_eval's definition without an error."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.framework.metrics import Qrels, Run, evaluate
from imsearch_align.framework.ties import tie_aware_evaluate


@pytest.mark.parametrize("level", [0, 0.0, -1, float("nan"), True])
def test_a_relevance_level_at_or_below_zero_is_refused(level):
    """trec_eval's -l is positive: at 0, non-relevant judgements were counted
    in R but never as hits (R@2 = 0.5 where every definition gives 1)."""
    run = Run.from_arrays([1], np.array([[13, 10]]), np.array([[0.9, 0.8]]))
    qrels = Qrels.from_dict({1: {10: 1, 13: 0}})
    with pytest.raises(ValueError, match="relevance_level must be None or a number > 0"):
        evaluate(run, qrels, ["R@2"], relevance_level=level)
    with pytest.raises(ValueError, match="relevance_level must be None or a number > 0"):
        tie_aware_evaluate(run, qrels, ["R@2"], tol=0.0, relevance_level=level)


def test_query_ids_of_another_type_than_the_qrels_are_refused():
    """ "1" never equals 1: every query would score 0 with no other sign."""
    run = Run.from_arrays(np.arange(3), np.array([[0], [1], [2]]))
    qrels = Qrels(np.array(["0", "1", "2"], dtype=object), np.arange(3), np.ones(3))
    with pytest.raises(TypeError, match=r"query ids are int .* qrels' are str"):
        evaluate(run, qrels, ["HitRate@1"])


def test_a_no_hit_inside_a_ranking_takes_no_rank():
    """-1 is no hit, not a document: doc 10 is at rank 2 whether the row is
    given by column order, with scores, or as a long frame."""
    import pandas as pd
    import pytrec_eval

    qrels = Qrels.from_dict({1: {10: 1}})
    ms = ["RR@3", "HitRate@2", "P@2"]
    by_order = evaluate(Run.from_arrays([1], np.array([[5, -1, 10]])), qrels, ms).mean()
    frame = pd.DataFrame({"query_id": [1, 1, 1], "doc_id": [5, -1, 10], "score": [3.0, 2.0, 1.0]})
    by_frame = evaluate(Run.from_frame(frame), qrels, ms).mean()
    trec = pytrec_eval.RelevanceEvaluator({"1": {"10": 1}}, {"recip_rank", "P.2"}).evaluate(
        {"1": {"5": 3.0, "10": 1.0}}
    )["1"]
    for got in (by_order, by_frame):
        assert got["RR@3"] == pytest.approx(trec["recip_rank"]) == 0.5
        assert got["P@2"] == pytest.approx(trec["P_2"]) and got["HitRate@2"] == 1.0


def test_uint64_ids_above_int64_are_refused_not_wrapped_to_no_hit():
    with pytest.raises(ValueError, match="must fit int64"):
        Run.from_arrays([1], np.array([[2**64 - 1, 5]], dtype=np.uint64), np.array([[0.9, 0.8]]))
