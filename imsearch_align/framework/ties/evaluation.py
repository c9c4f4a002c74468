"""Tie-aware evaluation: :func:`tie_aware_evaluate`, one call from a run to :class:`TieAwareResult`.

The tie-rule result (:func:`~imsearch_align.framework.metrics.evaluate`)
comes first; then the rows holding a tie group (of two or more returned
docs) that starts above the largest cut-off are read again, as far as their
groups go, and get each measure's expected value and bounds
(:mod:`~imsearch_align.framework.ties.expected`). Every other row keeps its
tie-rule value bit for bit.

**Groups cut by the end of the run**. A store returns ``K`` columns; if the
last returned documents tie with each other, the group may go on past
column ``K`` and the store chose which members to show. With
``groups_closed=False`` (an ANN store, or a run not extended) such a group
is taken as its returned members: the expectation is over their orders,
the unreturned members (if any) are assumed non-relevant and ranked after
them, and the query is flagged ``truncated`` for every measure whose
cut-off the group reaches. With ``groups_closed=True`` the caller states
that the run was extended until every group reaching a cut-off closed (an
exact store searched deeper, see
:func:`~imsearch_align.framework.ties.open_tie_groups`); this is checked: a
full row that does not show the group holding the largest cut-off closing
(a later returned score outside it) raises. A full row whose last returned
document is alone in its group may still tie with the first unreturned one;
the run cannot show that, so it is not flagged (only ``groups_closed=True``,
which demands the closing score, rules it out).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Sequence

import numpy as np
import pandas as pd

from imsearch_align.framework.measures import lookup, lookup_tie_kernel, tie_aware_names
from imsearch_align.framework.metrics import (
    EvaluationResult,
    Qrels,
    Run,
    evaluate,
    evaluate_lenient,
    py_scalar,
    valid_measure_names,
)
from imsearch_align.framework.ties.expected import TiedHits, bounds, expected_values
from imsearch_align.framework.ties.groups import _link_runs, _resolve_tolerance, _sparse_links
from imsearch_align.framework.ties.judgements import _Judgements
from imsearch_align.framework.ties.result import TieAwareResult

__all__ = ["DEPENDENCE_EPS", "tie_aware_evaluate"]

#: ``high - low`` above this marks a query as tie-dependent (values are in [0, 1];
#: the same order summed two ways differs by ~k * 1e-16, far below).
DEPENDENCE_EPS = 1e-12


def tie_aware_evaluate(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str] | str,
    *,
    tol: float | None = None,
    dim: int | None = None,
    groups_closed: bool = False,
    relevance_level: float | None = None,
    failed_queries: Sequence | None = None,
    lenient: bool = False,
) -> TieAwareResult:
    """Score ``run`` with each measure's expected value over the orders of tied documents.

    Args:
        run: the ranked results (rows in canonical order, as :class:`Run` keeps them).
        qrels: graded judgements; every qrels query is scored.
        measures: canonical names (``P@k``, ``R@k``, ``nDCG@k``, ``AP@k``,
            ``RR@k``, ``HitRate@k``, ``Accuracy``).
        tol: tie tolerance (relative to ``max(1, |s|)``); default
            :func:`default_tolerance` of ``dim``. One of ``tol``/``dim`` is required.
        dim: dimension of the vectors behind the scores, for the default tolerance.
        groups_closed: True when the run was extended until every tie group
            reaching the largest cut-off closed (see :func:`open_tie_groups`);
            checked, a full row still open there raises. False (default): a
            group cut by the end of the run is scored over its returned
            members and the query flagged ``truncated``.
        relevance_level, failed_queries: as in
            :func:`~imsearch_align.framework.metrics.evaluate`.
        lenient: as :func:`~imsearch_align.framework.metrics.evaluate_lenient`:
            a ranking holding a relevant doc twice fails only its query (0
            everywhere, listed in ``plain.failed_queries``) instead of raising.
            The tie-aware scan reads past the largest cut-off through a group
            crossing it, so it may find repeats the tie rule does not see.

    Returns:
        :class:`TieAwareResult`: expected values, low/high bounds,
        tie-dependence and truncation flags per query, and the tie-rule
        result. Rows without a tie group reaching a cut-off keep the tie-rule
        value; see :mod:`imsearch_align.framework.ties` for the definitions and
        :mod:`imsearch_align.framework.tie_kernels` for the formulas.

    Cost: one pass over the scores finds the ties; the closed forms then run
    on the rows holding a tie group that starts above the largest cut-off,
    in time proportional to their relevant docs and tied ranks.
    """
    measures, t = _checked_arguments(run, qrels, measures, tol, dim, groups_closed, lenient)
    if lenient:
        plain, _ = evaluate_lenient(
            run, qrels, measures, relevance_level=relevance_level, failed_queries=failed_queries
        )
    else:
        plain = evaluate(
            run, qrels, measures, relevance_level=relevance_level, failed_queries=failed_queries
        )
    ks = {m: lookup(m)[1] for m in measures}
    kmax = max(ks.values())
    q_of_run = _qrels_row_of_run(run, qrels)
    groups = _groups_above(run, q_of_run, t, kmax)
    if groups_closed and len(run) and run.k:
        _check_closed(run, q_of_run, groups, kmax)
    out = _PerQuery.of(plain, measures)
    if len(groups[0]):
        plain = _score_tied_rows(
            out, run, qrels, plain, ks, groups, q_of_run, relevance_level, lenient, groups_closed
        )
    return TieAwareResult(
        tuple(measures),
        qrels.queries,
        out.values,
        out.low,
        out.high,
        out.dep,
        out.trunc,
        plain,
        t,
        groups_closed,
    )


def _checked_arguments(run, qrels, measures, tol, dim, groups_closed, lenient):
    """``(measures, tol)`` checked, in the order the messages have always come."""
    if not isinstance(run, Run):
        raise TypeError(f"tie_aware_evaluate: run must be a Run, got {type(run).__name__}")
    if not isinstance(qrels, Qrels):
        raise TypeError(f"tie_aware_evaluate: qrels must be a Qrels, got {type(qrels).__name__}")
    if not isinstance(groups_closed, bool):
        raise TypeError(
            f"tie_aware_evaluate: groups_closed must be a bool, got {type(groups_closed).__name__}"
        )
    measures = _check_measures(measures)
    t = _resolve_tolerance(tol, dim, "tie_aware_evaluate")
    if not isinstance(lenient, bool):
        raise TypeError(f"tie_aware_evaluate: lenient must be a bool, got {type(lenient).__name__}")
    return measures, t


def _check_measures(measures: Sequence[str] | str) -> list[str]:
    """The measure names, de-duplicated; each must have a tie kernel in the measure table."""
    if isinstance(measures, str):
        measures = [measures]
    measures = list(dict.fromkeys(measures))
    if not measures:
        raise ValueError(
            f"tie_aware_evaluate: measures is empty; expected some of {valid_measure_names()}"
        )
    for name in measures:
        try:
            lookup(name)
        except ValueError as e:
            k = name.rsplit("@", 1)[-1] if isinstance(name, str) and "@" in name else "10"
            close = difflib.get_close_matches(str(name), tie_aware_names(k), n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close and "did you mean" not in str(e) else ""
            raise ValueError(f"tie_aware_evaluate: {e}{hint}") from e
        try:
            lookup_tie_kernel(name)
        except ValueError as e:
            raise ValueError(f"tie_aware_evaluate: {e}") from None
    return measures


def _qrels_row_of_run(run: Run, qrels: Qrels) -> np.ndarray:
    """Qrels row of each run row (-1: not judged, ignored as evaluate does)."""
    n_run, nQ = len(run), len(qrels.queries)
    q_of_run = np.full(n_run, -1, dtype=np.int64)
    if n_run and nQ:
        run_row = pd.Index(run.query_ids).get_indexer(qrels.queries).astype(np.int64)
        found = run_row >= 0
        q_of_run[run_row[found]] = np.flatnonzero(found)
    return q_of_run


def _groups_above(run: Run, q_of_run: np.ndarray, tol: float, kmax: int):
    """Tie groups ``(run row, a, b)`` of two or more returned docs of judged rows, row-major.

    Groups starting below the largest cut-off change no value and are left out.
    """
    lr, li = _sparse_links(run.scores, run.empty, tol)
    judged = q_of_run[lr] >= 0
    g_run, g_a, g_b = _link_runs(lr[judged], li[judged])
    keep = g_a < kmax
    return g_run[keep], g_a[keep], g_b[keep]


def _check_closed(run: Run, q_of_run: np.ndarray, groups, kmax: int) -> None:
    """Raise when a full row may continue the tie group at rank ``kmax`` (``groups_closed``)."""
    g_run, g_a, g_b = groups
    K = run.k
    # Open: full, and the group holding rank kmax may go on past the last column.
    if K <= kmax:
        open_rows = np.flatnonzero(~run.empty[:, -1] & (q_of_run >= 0))
    else:
        open_rows = np.unique(g_run[(g_a <= kmax - 1) & (g_b == K)])
    if len(open_rows):
        more = f" (and {len(open_rows) - 1} more)" if len(open_rows) > 1 else ""
        raise ValueError(
            "tie_aware_evaluate: groups_closed=True, but the ranking of query "
            f"{py_scalar(run.query_ids[open_rows[0]])!r}{more} "
            f"is full and does not show the tie group at rank {kmax} closing: the store "
            "may hold more of it. Search deeper for those queries (open_tie_groups) "
            "or pass groups_closed=False"
        )


@dataclasses.dataclass
class _PerQuery:
    """The per-query arrays of a :class:`TieAwareResult` while they are filled in."""

    values: dict[str, np.ndarray]
    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    dep: dict[str, np.ndarray]
    trunc: dict[str, np.ndarray]

    @classmethod
    def of(cls, plain: EvaluationResult, measures: Sequence[str]) -> _PerQuery:
        """Tie-rule values everywhere, no query tie-dependent or truncated."""
        nQ = len(plain.query_ids)
        return cls(
            {m: plain.values[m].copy() for m in measures},
            {m: plain.values[m].copy() for m in measures},
            {m: plain.values[m].copy() for m in measures},
            {m: np.zeros(nQ, dtype=bool) for m in measures},
            {m: np.zeros(nQ, dtype=bool) for m in measures},
        )

    def zero(self, qrows: np.ndarray) -> None:
        """Queries that failed: 0 everywhere, never tie-dependent or truncated."""
        for d in (self.values, self.low, self.high):
            for v in d.values():
                v[qrows] = 0.0
        for d in (self.dep, self.trunc):
            for v in d.values():
                v[qrows] = False


def _score_tied_rows(
    out: _PerQuery,
    run: Run,
    qrels: Qrels,
    plain: EvaluationResult,
    ks: dict[str, int],
    groups,
    q_of_run: np.ndarray,
    relevance_level: float | None,
    lenient: bool,
    groups_closed: bool,
) -> EvaluationResult:
    """Expected values and bounds of the rows holding a tie group into ``out``; the tie-rule
    result, with the queries whose read-ahead found a repeated relevant doc failed."""
    g_run, g_a, g_b = groups
    measures = list(ks)
    K = run.k
    # Candidate rows (local index 0..n-1), their qrels rows, the columns to read.
    crow = np.unique(g_run)
    cq = q_of_run[crow]
    n = len(crow)
    g_row = np.searchsorted(crow, g_run)
    W = int(min(K, max(max(ks.values()), int(g_b.max()))))
    jud = _Judgements(qrels)
    if n == len(run):  # every row: read the run in place, no (n, W) copy
        D, E = run.doc_ids[:, :W], run.empty[:, :W]
    else:
        D, E = run.doc_ids[crow, :W], run.empty[crow, :W]
    hr, hc, hg, dup_rows = jud.hits(cq, D, E)
    if len(dup_rows):
        plain = _fail_repeats(plain, qrels, cq[dup_rows], lenient)
    hits = TiedHits.locate(n, (hr, hc, hg), (g_row, g_a, g_b), W, relevance_level)
    R, ideal = jud.n_relevant(cq, relevance_level), jud.ideal_dcg(cq)
    exp = expected_values(hits, measures, R, ideal)
    lo, hi = bounds(hits, measures, R, ideal)
    for m in measures:
        out.values[m][cq] = exp[m]
        out.low[m][cq] = lo[m]
        out.high[m][cq] = hi[m]
        out.dep[m][cq] = hi[m] - lo[m] > DEPENDENCE_EPS
    if not groups_closed:
        # A group reaching the last column of a (thus full) row may go on.
        cut = g_b == K
        for m in measures:
            out.trunc[m][cq[g_row[cut]]] |= g_a[cut] < ks[m]
    if len(dup_rows):
        out.zero(cq[dup_rows])
    return plain


def _fail_repeats(
    plain: EvaluationResult, qrels: Qrels, dq: np.ndarray, lenient: bool
) -> EvaluationResult:
    """Queries (qrels rows ``dq``) whose ranking repeats a relevant doc: raise, or (lenient)
    fail them as :func:`~imsearch_align.framework.metrics.evaluate_lenient` does."""
    if not lenient:
        raise ValueError(
            "Run: a relevant doc appears twice in the ranking of query "
            f"{py_scalar(qrels.queries[dq[0]])!r}"
        )
    # As evaluate_lenient: such a query fails, scores 0 and is listed.
    extra = qrels.queries[dq][~np.isin(qrels.queries[dq], plain.failed_queries)]
    for m in plain.measures:
        plain.values[m][dq] = 0.0
    return dataclasses.replace(
        plain,
        failed_queries=np.concatenate([plain.failed_queries, extra]).astype(object),
    )
