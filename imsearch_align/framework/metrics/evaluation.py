"""Evaluation: :func:`evaluate` a run against judgements with the measure table's kernels.

Checks that the run's and the qrels' ids can match (strings never equal
integers), maps the run's rows to the qrels queries, finds the hits
(:mod:`~imsearch_align.framework.metrics.hits`) and dispatches every
measure to its kernel through :func:`imsearch_align.framework.measures.compute`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from imsearch_align.framework import measures as _measures
from imsearch_align.framework.measures import lookup, valid_measure_names
from imsearch_align.framework.metrics.hits import _find_hits, _Hits
from imsearch_align.framework.metrics.ids import IdTypeWarning, _id_kind, _index_of, py_scalar
from imsearch_align.framework.metrics.qrels import Qrels
from imsearch_align.framework.metrics.result import EvaluationResult
from imsearch_align.framework.metrics.run import Run

__all__ = ["check_relevance_level", "compute_measures", "evaluate", "evaluate_lenient"]


def _map_run(run: Run, qrels: Qrels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``run_row`` per qrels query (-1 if absent), missing and ignored query ids."""
    qq = qrels.queries
    run_row = np.full(len(qq), -1, dtype=np.int64)
    rq_pos = _index_of(qq, run.query_ids) if len(run) else np.zeros(0, dtype=np.int64)
    present = rq_pos >= 0
    run_row[rq_pos[present]] = np.flatnonzero(present)
    return run_row, qq[run_row < 0], run.query_ids[~present]


def _count_str(ids: np.ndarray) -> int:
    return int(sum(isinstance(x, str) for x in ids.ravel().tolist()))


def _check_id_types(run: Run, qrels: Qrels) -> None:
    """Raise when run and qrels doc ids share no type; warn with counts when some differ.

    A store answers with integer ids; qrels read from a CSV or built from
    strings may hold ``"12"`` for ``12``. They never compare equal, so every
    query would score 0 with no other sign.
    """
    rq, qq = _id_kind(np.asarray(run.query_ids)), _id_kind(np.asarray(qrels.queries))
    if {rq, qq} == {"int", "str"}:
        raise TypeError(
            f"evaluate: the run's query ids are {rq} (e.g. {py_scalar(run.query_ids[0])!r}) but "
            f"the qrels' are {qq} (e.g. {py_scalar(qrels.queries[0])!r}); they can never match "
            "and every query would score 0. Convert one side"
        )
    qk = qrels._doc_kind
    if qk == "empty" or (qk == "int" and run.doc_ids.dtype != object):
        return
    if run.doc_ids.dtype != object:
        rk = "int"
        cells = run.doc_ids
    else:
        cells = run.doc_ids[~run.empty] if run.empty.any() else run.doc_ids.ravel()
        rk = _id_kind(cells)
    if rk == "empty" or (qk == rk and qk != "mixed"):
        return
    rel = qrels._positive[1]
    if {qk, rk} == {"int", "str"}:
        qex, rex = py_scalar(rel[0]), py_scalar(cells.ravel()[0])
        raise TypeError(
            f"evaluate: the qrels' relevant doc ids are {qk} (e.g. {qex!r}) but the run's doc ids "
            f"are {rk} (e.g. {rex!r}); they can never match and every query would score 0. "
            "Convert one side (e.g. Qrels(query_ids, doc_ids.astype(int), relevance))"
        )
    n_str_q, n_str_r = _count_str(rel), _count_str(cells)
    warnings.warn(
        f"evaluate: doc id types differ: {n_str_q} of {len(rel)} relevant qrels doc ids and "
        f"{n_str_r} of {cells.size} run doc ids are strings, the rest integers; a string id "
        "never matches an integer id",
        IdTypeWarning,
        stacklevel=3,
    )


def _duplicate_error(qid) -> ValueError:
    return ValueError(
        f"Run: a relevant doc appears twice in the ranking of query {py_scalar(qid)!r}"
    )


def _ideal_dcg(qrels: Qrels, k: int) -> np.ndarray:
    """Ideal DCG@k per qrels query from its positive gains (trec_eval)."""
    jq, rank, w = qrels._ideal_weights
    if len(rank) and int(rank.max()) < k:  # every positive gain is inside the cutoff
        return np.bincount(jq, weights=w, minlength=len(qrels.queries))
    keep = rank < k
    return np.bincount(jq[keep], weights=w[keep], minlength=len(qrels.queries))


def _measures_from_hits(
    hits: _Hits,
    n_queries: int,
    n_relevant: np.ndarray,
    ideal_dcg: Any,
    measures: Sequence[str],
    relevance_level: float | None,
) -> dict[str, np.ndarray]:
    """Every measure's kernel (from the table in :mod:`.measures`) over the sparse hits."""
    ctx = _measures.Hits(
        hits.rows,
        hits.cols,
        hits.gains,
        n_queries=n_queries,
        n_relevant=n_relevant,
        ideal_dcg=ideal_dcg,
        relevance_level=relevance_level,
    )
    return _measures.compute(ctx, measures)


def compute_measures(
    gain: np.ndarray,
    n_relevant: np.ndarray,
    ideal: np.ndarray,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
) -> dict[str, np.ndarray]:
    """All measures from an ``(n_queries, K)`` gain matrix, vectorised.

    Args:
        gain: graded relevance of the doc at each rank (0 = not relevant or
            no hit); columns beyond ``K`` count as non-relevant.
        n_relevant: ``(n_queries,)`` number of relevant docs per query in the qrels.
        ideal: ``(n_queries, K')`` positive qrels gains sorted descending
            (zero padded), ``K'`` >= the largest nDCG cutoff.
        measures: canonical names.
        relevance_level: binary relevance threshold for P/R/AP/RR/HitRate;
            ``None`` means ``gain > 0``.

    Formulas (``rel_i`` binary relevance at rank i, ``R`` = ``n_relevant``):

    * ``P@k = sum_{i<=k} rel_i / k``
    * ``R@k = sum_{i<=k} rel_i / R`` (0 when ``R = 0``)
    * ``HitRate@k = 1[sum_{i<=k} rel_i > 0]``
    * ``RR@k = 1 / min{i <= k : rel_i}`` (0 when none)
    * ``AP@k = (1/R) sum_{i<=k} rel_i * P@i``
    * ``nDCG@k = sum_{i<=k} g_i / log2(i+1) / sum_{i<=k} g*_i / log2(i+1)``
      with ``g`` the graded gain and ``g*`` the ideal gains (0 when the
      ideal DCG is 0).

    The kernels (one per entry of :data:`.measures.MEASURES`) work on the
    non-zero cells of ``gain`` (segment sums with ``np.bincount``), so their
    cost grows with the number of relevant hits.
    """
    gain = np.asarray(gain, dtype=np.float64)
    ideal = np.asarray(ideal, dtype=np.float64)

    def ideal_dcg(k: int) -> np.ndarray:
        disc = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
        cut = ideal[:, :k]
        return cut @ disc[: cut.shape[1]]

    return _measures_from_hits(
        _Hits.from_dense(gain),
        gain.shape[0],
        np.asarray(n_relevant, dtype=np.float64),
        ideal_dcg,
        measures,
        relevance_level,
    )


def check_relevance_level(relevance_level: Any) -> float | None:
    """``None`` (relevance > 0 is relevant) or a positive number (trec_eval's
    ``-l``): a level <= 0 would count non-relevant and negative judgements in
    R but never as hits, a number neither trec_eval nor this package defines."""
    if relevance_level is None:
        return None
    if (
        isinstance(relevance_level, bool)
        or not isinstance(relevance_level, int | float | np.integer | np.floating)
        or not np.isfinite(relevance_level)
        or relevance_level <= 0
    ):
        raise ValueError(
            "relevance_level must be None or a number > 0 (a judged document with relevance "
            f">= level is relevant, as trec_eval -l), got {relevance_level!r}"
        )
    return float(relevance_level)


def _n_relevant(qrels: Qrels, relevance_level: float | None) -> np.ndarray:
    relevance_level = check_relevance_level(relevance_level)
    nQ = len(qrels.queries)
    if relevance_level is None:
        return np.bincount(qrels._positive[0], minlength=nQ).astype(np.float64)
    keep = qrels.relevance >= relevance_level
    return np.bincount(qrels._codes[0][keep], minlength=nQ).astype(np.float64)


def _check_measures(measures: Sequence[str] | str) -> list[str]:
    if isinstance(measures, str):
        measures = [measures]
    measures = list(dict.fromkeys(measures))
    if not measures:
        raise ValueError(f"evaluate: measures is empty; expected some of {valid_measure_names()}")
    for m in measures:
        lookup(m)
    return measures


def evaluate(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
    failed_queries: Sequence | None = None,
) -> EvaluationResult:
    """Score ``run`` against ``qrels`` with the named measures.

    ``measures`` are canonical names (``"P@10"``, ``"nDCG@10"``, ``"AP@10"``,
    ``"RR@10"``, ``"R@10"``, ``"HitRate@5"``, ``"Accuracy"``; see
    :data:`imsearch_align.framework.measures.MEASURES`). Every qrels query is
    scored; see the module docstring for the full semantics.
    ``failed_queries`` are queries whose search failed: they must not be in
    the run, score 0, count, and are listed in the result.

    Raises ``ValueError`` when a relevant doc appears twice in one ranking
    (:class:`~imsearch_align.framework.evaluator.BenchmarkEvaluator` records
    such queries as failed instead) and ``TypeError`` when the run's and the
    qrels' doc ids share no type (strings against integers).
    """
    result, dups = evaluate_lenient(
        run, qrels, measures, relevance_level=relevance_level, failed_queries=failed_queries
    )
    if len(dups):
        raise _duplicate_error(dups[0])
    return result


def evaluate_lenient(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
    failed_queries: Sequence | None = None,
) -> tuple[EvaluationResult, np.ndarray]:
    """:func:`evaluate`, but a ranking that holds a relevant doc twice fails only its query.

    Returns the result and the ids of those queries: they score 0, count in
    the means and are listed in ``failed_queries`` with the others.
    """
    if not isinstance(run, Run):
        raise TypeError(f"evaluate: run must be a Run, got {type(run).__name__}")
    if not isinstance(qrels, Qrels):
        raise TypeError(f"evaluate: qrels must be a Qrels, got {type(qrels).__name__}")
    measures = _check_measures(measures)
    _check_id_types(run, qrels)
    K = max(lookup(m)[1] for m in measures)
    run_row, missing, ignored = _map_run(run, qrels)
    hits, dup_rows = _find_hits(run, qrels, K, run_row)
    values = _measures_from_hits(
        hits,
        len(qrels.queries),
        _n_relevant(qrels, relevance_level),
        lambda k: _ideal_dcg(qrels, k),
        measures,
        relevance_level,
    )
    failed = list(failed_queries) if failed_queries is not None else []
    dup_ids = qrels.queries[dup_rows]
    if len(dup_ids):
        failed += [py_scalar(q) for q in dup_ids]
    result = EvaluationResult(
        measures=tuple(measures),
        query_ids=qrels.queries,
        values=values,
        missing_queries=missing,
        ignored_queries=ignored,
        failed_queries=np.asarray(failed, dtype=object),
    )
    return result, dup_ids
