"""An ANN setting scored against the collection's ground truth, from ids alone.

:func:`ann_recall_at_k`: as ann-benchmarks (and
:func:`imsearch_align.framework.fidelity.ann_recall`, which needs the indexed
vectors in memory; here the truth carries them as candidates), only the
*ids* an index returns are kept. A returned id is **found** when it is one
of the truth's candidates with a true score of at least ``t_k - tol``
(``t_k`` the true k-th score, ``tol = rtol * max(||q|| max||x||, |t_k|)``,
``rtol`` :func:`~imsearch_align.framework.fidelity.default_rtol` of the
dimension): a document tied with the k-th within float32 rounding is as good
an answer as the one the truth kept. Each id counts once; ``recall_i =
min(found_i, m_i) / m_i`` with ``m_i = min(k, n_docs)``. A row whose window
``t_k - tol`` reaches below the truth's floor (an unlisted document could be
inside it) or whose truth is open is counted ``uncertain``: its recall is a
lower bound.

:func:`compare_measures`: the task's measures on the exact ranking and on
the ANN run, both tie-aware, through the one scoring path of runs
(:func:`~imsearch_align.framework.ranking.score_against_exact`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.collection.truth_result import CollectionTruth
from imsearch_align.framework.fidelity import default_rtol
from imsearch_align.framework.fidelity.rule import tie_tolerant_recall
from imsearch_align.framework.measures import lookup
from imsearch_align.framework.metrics import Qrels, Run
from imsearch_align.framework.ranking import ReadTies, score_against_exact
from imsearch_align.framework.ties import default_tolerance
from imsearch_align.framework.validation import check_int

__all__ = ["AnnRecall", "ann_recall_at_k", "compare_measures"]


@dataclass(frozen=True)
class AnnRecall:
    """Recall@k of an ANN run against a :class:`CollectionTruth`.

    Attributes:
        k: the cut-off.
        per_query: ``(nq,)`` recall of each truth query, in the truth's order.
        mean: their mean.
        n_uncertain: rows whose recall is a lower bound (see the module docstring).
    """

    k: int
    per_query: np.ndarray
    mean: float
    n_uncertain: int


def _returned_ids(run_ann: Any, truth: CollectionTruth, k: int) -> np.ndarray:
    """The first ``k`` returned ids of each truth query, ``(nq, k)``, -1 padded."""
    nq = len(truth.run)
    out = np.full((nq, k), -1, dtype=np.int64)
    if isinstance(run_ann, Run):
        rows = pd.Index(truth.run.query_ids).get_indexer(np.asarray(run_ann.query_ids))
        if (rows < 0).any():
            bad = np.asarray(run_ann.query_ids)[rows < 0][0]
            raise ValueError(f"ann_recall_at_k: query {bad!r} of the ANN run is not in the truth")
        w = min(k, run_ann.k)
        out[rows, :w] = np.where(run_ann.empty[:, :w], -1, run_ann.doc_ids[:, :w])
        return out
    ids = np.asarray(getattr(run_ann, "ids", run_ann))
    if ids.ndim != 2 or ids.shape[0] != nq or ids.shape[1] < k:
        raise ValueError(
            f"ann_recall_at_k: expected ids (nq={nq}, >= {k}) in the truth's query order, got "
            f"shape {ids.shape}"
        )
    out[:] = ids[:, :k]
    return out


def _true_scores(got: np.ndarray, truth: CollectionTruth) -> np.ndarray:
    """``(nq, k)`` true scores of the returned ids, from the truth's candidates (``-inf`` for
    padding, a blanked repeat, or an id below the truth's floor)."""
    out = np.full(got.shape, -np.inf)
    cand_ids, cand_scores = truth.cand_ids, truth.cand_scores
    step = max(1, (1 << 22) // max(1, got.shape[1] * cand_ids.shape[1]))  # (rows, k, c) bools
    for a in range(0, len(got), step):
        g = got[a : a + step]
        eq = (g[:, :, None] == cand_ids[a : a + step, None, :]) & (g >= 0)[:, :, None]
        hit = eq.any(axis=2)
        pos = eq.argmax(axis=2)
        scores = np.take_along_axis(cand_scores[a : a + step], pos, axis=1)
        out[a : a + step] = np.where(hit, scores, -np.inf)
    return out


def ann_recall_at_k(
    run_ann: Any, truth: CollectionTruth, k: int | None = None, *, rtol: float | None = None
) -> AnnRecall:
    """Recall@k of ``run_ann`` from its ids, against ``truth``.

    Args:
        run_ann: a :class:`~imsearch_align.framework.metrics.Run` (matched by
            query id), a ``SearchResult`` or an ``(nq, >= k)`` id array in the
            truth's query order (``-1`` no hit).
        truth: the collection's ground truth.
        k: cut-off, at most ``truth.k`` (default ``truth.k``).
        rtol: tolerance relative to ``||q|| max||x||`` (default
            :func:`~imsearch_align.framework.fidelity.default_rtol` of the dimension).
    """

    k = truth.k if k is None else check_int(k, "k", low=1)
    if k > truth.k:
        raise ValueError(f"ann_recall_at_k: the truth is exact to rank {truth.k}, got k={k}")
    rtol = default_rtol(truth.dim) if rtol is None else float(rtol)
    got = _returned_ids(run_ann, truth, k)
    # Each id counts once: blank the repeats.
    order = np.argsort(got, axis=1, kind="stable")
    srt = np.take_along_axis(got, order, axis=1)
    rep = np.zeros_like(got, dtype=bool)
    rep[:, 1:] = srt[:, 1:] == srt[:, :-1]
    np.put_along_axis(got, order, np.where(rep, -1, srt), axis=1)
    nq = len(got)
    m = min(k, truth.n_docs)
    per = np.ones(nq)
    if m == 0 or nq == 0:
        return AnnRecall(k, per, float(per.mean()) if nq else 1.0, 0)
    tk = truth.cand_scores[:, m - 1]
    per = tie_tolerant_recall(_true_scores(got, truth), tk, m, truth.scale[:, None], rtol)
    thresh = tk - rtol * np.maximum(truth.scale, np.abs(tk))
    uncertain = (thresh <= truth.floor) | ~truth.closed
    return AnnRecall(k, per, float(per.mean()), int(uncertain.sum()))


def compare_measures(
    run_ann: Run,
    truth: CollectionTruth,
    qrels: Qrels,
    measures: Any,
    *,
    tol: float | None = None,
    relevance_level: float | None = None,
) -> dict[str, Any]:
    """The task's measures, exact versus approximate, both tie-aware.

    Args:
        run_ann: the ANN run (store scores, float32), as deep as the largest cut-off.
        truth: the collection's ground truth (exact at its ``k``).
        qrels: the judgements (distractors are never relevant: they are not in them).
        measures: canonical names (``HitRate@10``, ``nDCG@10``...), cut-offs <= ``truth.k``.
        tol: tie tolerance of the ANN run's scores (default
            :func:`~imsearch_align.framework.ties.default_tolerance` of the
            dimension: its scores are a store's float32).
        relevance_level: as in :func:`~imsearch_align.framework.metrics.evaluate`.

    Returns:
        ``{"exact": TieAwareResult, "approximate": TieAwareResult,
        "means": {measure: {"exact": float, "approximate": float}}}``; the
        approximate run's groups are taken as returned (``groups_closed=False``).
    """

    names = [measures] if isinstance(measures, str) else list(measures)
    deep = [m for m in names if lookup(m)[1] > truth.k]
    if deep:
        raise ValueError(
            f"compare_measures: the truth is exact to rank {truth.k}, got measures {deep} "
            "with a deeper cut-off"
        )
    scores = score_against_exact(
        run_ann, truth.run, qrels, names,
        approximate_ties=ReadTies(default_tolerance(truth.dim) if tol is None else tol),
        exact_ties=ReadTies(truth.tol, truth.groups_closed),
        relevance_level=relevance_level,
    )  # fmt: skip
    exact, approx = scores.exact, scores.approximate
    em, am = exact.mean(), approx.mean()
    return {
        "exact": exact,
        "approximate": approx,
        "means": {m: {"exact": em[m], "approximate": am[m]} for m in names},
    }
