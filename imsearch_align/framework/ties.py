"""Tie-aware ranking measures: the expected value over every order of tied documents.

Exact stores compute the same inner products with different summation
orders, so two documents whose scores agree to a few ulps can come back in
either order, and a tie-rule metric (:func:`~imsearch_align.framework.metrics.evaluate`,
ties broken by doc id) then depends on the store. This module scores a
:class:`~imsearch_align.framework.metrics.Run` so that the result does not
depend on that order:

* **Tie groups** (:func:`tie_groups`). In each ranked row, neighbours whose
  scores differ by at most ``tol * max(1, |s_i|, |s_{i+1}|)`` are linked, and
  a tie group is a maximal chain of links (single linkage on the sorted
  scores). The grouping is a function of the set of scores alone: it does
  not depend on a scan direction or on which member comes first, which an
  "anchor on the group's first score" rule would (the anchor is itself a
  rounded score, so the boundary would move with it). A chain may span more
  than ``tol``; each link is a pair that float32 rounding cannot order. The
  comparison is made in float64 on the stored scores (the difference of two
  float32 scores is exact there), so it is deterministic. No-hit cells (doc
  ``-1``) are not documents and are never in a group. The default tolerance
  is :func:`default_tolerance`.
* **Expected measures** (:func:`tie_aware_evaluate`). Each measure is
  averaged over all orderings of the members of every tie group, each
  ordering equally likely and groups independent (McSherry and Najork,
  "Computing Information Retrieval Performance Measures Efficiently in the
  Presence of Tied Scores", ECIR 2008). Closed forms (``p_i = r_G/m_G`` the
  chance that rank ``i`` holds a relevant doc, for ``i`` in group ``G`` with
  ``m_G`` members of which ``r_G`` are relevant, ``e_i = S_G/m_G`` its
  expected gain, ``S_G`` the sum of the group's gains):

  - ``P@k = sum_{i<=k} p_i / k`` and ``R@k = sum_{i<=k} p_i / R``;
  - ``nDCG@k = sum_{i<=k} e_i / log2(i+1) / IDCG@k``;
  - ``AP@k = (1/R) sum_{i<=k} [p_i (1 + B_G) + (i - a_G) q_G] / i`` with
    ``B_G`` the relevant docs in groups ranked above ``G``, ``a_G`` the rank
    just above ``G`` and ``q_G = r_G (r_G - 1) / (m_G (m_G - 1))`` the chance
    that two given ranks of ``G`` both hold relevant docs (linearity of
    expectation on ``sum_i rel_i sum_{j<=i} rel_j / i``);
  - ``RR@k = sum_j P(J = j) / (a_G + 1 + j)`` over the first group ``G``
    holding a relevant doc, ``J`` the offset of its first relevant doc:
    ``P(J = j) = C(m-1-j, r-1) / C(m, r)``, for ranks ``a_G + 1 + j <= k``;
  - ``HitRate@k`` is 1 when a group wholly inside the top k holds a relevant
    doc, else ``1 - C(m-r, c) / C(m, c)`` for the group cut by ``k`` (``c``
    of its ranks inside); ``Accuracy`` is ``HitRate@1``.

  Everything else is :mod:`~imsearch_align.framework.metrics`' semantics
  exactly (trec_eval definitions, relevance ``> 0`` or ``>= relevance_level``,
  graded nDCG gains, qrels queries absent from the run and queries without
  relevant docs score 0). A row without ties keeps the tie-rule value
  unchanged (bit for bit): the closed forms are evaluated only for rows that
  hold a tie group reaching a cut-off.
* **Bounds**. Per query, ``low`` and ``high`` are the values with ties
  broken against and for the relevant documents (each group ordered by gain
  ascending, resp. descending). Both orders are extreme for every measure at
  once (an adjacent swap that moves a higher gain up never lowers any of
  them), so ``low``/``high`` are the smallest and largest values any store's
  tie order can give, and each is attained. A query is *tie-dependent* for a
  measure when ``high - low > 1e-12``.
* **Groups cut by the end of the run**. A store returns ``K`` columns; if the
  last returned documents tie with each other, the group may go on past
  column ``K`` and the store chose which members to show. With
  ``groups_closed=False`` (an ANN store, or a run not extended) such a group
  is taken as its returned members: the expectation is over their orders,
  the unreturned members (if any) are assumed non-relevant and ranked after
  them, and the query is flagged ``truncated`` for every measure whose
  cut-off the group reaches. With ``groups_closed=True`` the caller states
  that the run was extended until every group reaching a cut-off closed (an
  exact store searched deeper, see :func:`open_tie_groups`); this is checked:
  a full row that does not show the group holding the largest cut-off
  closing (a later returned score outside it) raises. A full row whose last
  returned document is alone in its group may still tie with the first
  unreturned one; the run cannot show that, so it is not flagged (only
  ``groups_closed=True``, which demands the closing score, rules it out).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from numbers import Integral, Real

import numpy as np
import pandas as pd

from imsearch_align.framework.metrics import (
    EvaluationResult,
    Qrels,
    Run,
    evaluate,
    evaluate_lenient,
    parse_measure,
    py_scalar,
    valid_measure_names,
)

__all__ = [
    "EPS_F32",
    "TIE_AWARE_FAMILIES",
    "TieAwareResult",
    "ambiguous_rows",
    "default_tolerance",
    "open_tie_groups",
    "tie_aware_evaluate",
    "tie_groups",
]

#: float32 machine epsilon, ``2**-23`` (twice the unit roundoff ``u``).
EPS_F32 = float(np.finfo(np.float32).eps)
#: Confidence parameter of the probabilistic rounding bound behind :func:`default_tolerance`.
TOL_LAMBDA = 7.0
#: Measure families with a closed tie-aware form (``Accuracy`` is ``HitRate@1``).
TIE_AWARE_FAMILIES = ("P", "R", "nDCG", "AP", "RR", "HitRate")
#: ``high - low`` above this marks a query as tie-dependent (values are in [0, 1];
#: the same order summed two ways differs by ~k * 1e-16, far below).
DEPENDENCE_EPS = 1e-12
#: Rows per block in the tie scan, so the temporaries of a block stay in cache.
_BLOCK_CELLS = 4096 * 64


# ----------------------------------------------------------------------------- tolerance


def default_tolerance(dim: int, *, worst_case: bool = False) -> float:
    """Default tie tolerance for inner products of unit vectors of dimension ``dim``.

    Two stores computing the same exact score ``s = x . y`` of float32 unit
    vectors differ only by their rounding errors (summation order, blocking,
    FMA). With ``u = EPS_F32 / 2`` the unit roundoff:

    * **default, probabilistic** (Higham and Mary, "A new approach to
      probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5),
      2019, Thm 3.1): if the rounding errors are independent with mean zero,
      a computed inner product, in any summation order, satisfies
      ``|fl(x . y) - s| <= g sum|x_i y_i| <= g`` (Cauchy-Schwarz) with
      ``g = exp(lambda sqrt(d) u + d u^2 / (1 - u)) - 1 ~ lambda sqrt(d) u``,
      with probability at least ``1 - 2 d exp(-lambda^2 (1 - u)^2 / 2)``.
      ``lambda = 7`` makes that ``>= 1 - 5e-8`` for ``d <= 1024``
      (``1 - 2e-7`` at ``d = 4096``). Two stores then differ by at most
      ``2 g``; ``2 u`` more covers rounding a score accumulated in higher
      precision to float32. So ``tol = 2 g + 2 u ~ EPS_F32 (7 sqrt(d) + 1)``:
      1.9e-5 at ``d = 512``.
    * ``worst_case=True``, deterministic, any order (Higham, *Accuracy and
      Stability of Numerical Algorithms*, 2nd ed., 2002, §3.1):
      ``|fl(x . y) - s| <= gamma_d = d u / (1 - d u)``, so
      ``tol = 2 gamma_d + 2 u = EPS_F32 (d / (1 - d u) + 1)``, about
      ``d * EPS_F32`` (6.1e-5 at ``d = 512``).

    Measured (numpy/OpenBLAS sgemm, FAISS ``IndexFlatIP`` and sequential
    float32 sums against float64, 2M scores of unit vectors, d = 64..1024):
    the largest difference between two implementations was
    ``0.5 EPS_F32 sqrt(d)``, 14 times below the default. The worst-case
    bound, ``sqrt(d)/7`` times wider again, would group scores that no real
    store confuses. Scores are compared relative to ``max(1, |s|)``; for
    vectors that are not unit, scale ``tol`` by ``max ||x|| ||y||``. For
    sparse vectors pass the largest number of non-zeros as ``dim``.
    """
    if isinstance(dim, bool) or not isinstance(dim, Integral) or dim < 1:
        raise ValueError(
            f"dim must be a positive integer (the vector dimension), got {py_scalar(dim)!r}"
        )
    d = int(dim)
    u = EPS_F32 / 2
    if worst_case:
        if d * u >= 1:
            raise ValueError(f"dim must be < {int(1 / u)} for the worst-case bound, got {d}")
        return EPS_F32 * (d / (1 - d * u) + 1)
    g = math.expm1(TOL_LAMBDA * math.sqrt(d) * u + d * u * u / (1 - u))
    return 2 * g + 2 * u


def _resolve_tolerance(tol: float | None, dim: int | None, where: str) -> float:
    """``tol`` checked, or the default for ``dim``; one of the two is required."""
    if tol is None:
        if dim is None:
            raise ValueError(
                f"{where}: give tol (the tie tolerance) or dim (the vector dimension, "
                "for default_tolerance(dim)), got neither"
            )
        return default_tolerance(dim)
    if isinstance(tol, bool) or not isinstance(tol, Real):
        raise TypeError(f"{where}: tol must be a real number, got {type(tol).__name__}")
    t = float(tol)
    if not math.isfinite(t) or t < 0:
        raise ValueError(f"{where}: tol must be a finite number >= 0, got {t}")
    return t


# ----------------------------------------------------------------------------- tie groups


def _is_link(a: np.ndarray, b: np.ndarray, tol: float) -> np.ndarray:
    """The tie rule for neighbours ``a >= b``, in float64 (exact and deterministic)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    with np.errstate(invalid="ignore"):  # -inf - -inf in no-hit padding: NaN, no link
        return (a - b) <= tol * np.maximum(np.maximum(a, -b), 1.0)


def _link_matrix(scores: np.ndarray, empty: np.ndarray, tol: float) -> np.ndarray:
    """``(n, K-1)`` bool: columns ``i`` and ``i+1`` are both hits and tie within ``tol``."""
    n, K = scores.shape
    if K < 2:
        return np.zeros((n, max(K - 1, 0)), dtype=bool)
    link = _is_link(scores[:, :-1], scores[:, 1:], tol)
    link &= ~empty[:, 1:]
    link &= ~empty[:, :-1]
    return link


def _sparse_links(scores: np.ndarray, empty: np.ndarray, tol: float):
    """Every tie link of a run as ``(row, i)`` pairs in row-major order (``i`` joins ``i, i+1``).

    Most rows hold no tie, so a prefilter scans the scores once, in
    cache-sized row blocks, in their own dtype: for float32 scores with the
    threshold widened by ``1e-6`` (relative), far more than the float32
    rounding of the gap and of ``tol * scale`` (``2**-24`` each), so it never
    misses a link. The exact float64 rule then decides each candidate pair.
    """
    n, K = scores.shape
    none = np.zeros(0, dtype=np.int64)
    if K < 2 or n == 0:
        return none, none
    if scores.dtype == np.float32:
        thr = tol * (1 + 1e-6)
    else:
        thr = tol
        if scores.dtype != np.float64:
            scores = scores.astype(np.float64)
    step = max(1, _BLOCK_CELLS // K)
    rows, cols = [], []
    for b0 in range(0, n, step):
        blk = scores[b0 : b0 + step]
        a, b = blk[:, :-1], blk[:, 1:]
        with np.errstate(invalid="ignore"):
            gap = a - b
            cand = gap <= thr
            # The relative term matters only where |s| > 1. Rows are sorted:
            # column 0 holds each row's largest score, the last column its
            # smallest unless the row is padded (then look at every hit).
            last = blk[:, -1]
            big = blk[:, 0].max() > 1 or (
                last.min() < -1
                and (
                    np.isfinite(last).all()
                    or np.min(blk, where=np.isfinite(blk), initial=np.inf) < -1
                )
            )
            if big:
                cand |= gap <= thr * np.maximum(np.maximum(a, -b), 1.0)
        # Rows first: nonzero over a whole block costs more than the scan.
        hit_rows = np.flatnonzero(cand.any(axis=1))
        if 4 * len(hit_rows) > len(blk):  # most rows tie: no gather
            r, c = np.nonzero(cand)
            rows.append(r + b0)
            cols.append(c)
        elif len(hit_rows):
            r, c = np.nonzero(cand[hit_rows])
            rows.append(hit_rows[r] + b0)
            cols.append(c)
    if not rows:
        return none, none
    r, c = np.concatenate(rows), np.concatenate(cols)
    keep = _is_link(scores[r, c], scores[r, c + 1], tol) & ~empty[r, c] & ~empty[r, c + 1]
    return r[keep].astype(np.int64), c[keep].astype(np.int64)


def ambiguous_rows(run: Run, tol: float, error: float) -> np.ndarray:
    """Rows whose tie groups the run's own scores cannot decide: sorted row indices.

    A store's score is the true inner product give or take its rounding, and
    two stores' gaps between the same two documents differ by up to
    ``error`` (relative, as ``tol``; :func:`default_tolerance` of the
    dimension bounds it). A gap ``<= tol - error`` is then a link in every
    store and one ``> tol + error`` in none, so only rows holding a gap in
    between (or, with ``tol < error``, any gap ``<= tol + error``) may group
    differently from store to store: those need their scores recomputed in
    float64 before grouping. No-hit cells never link.
    """
    if not isinstance(run, Run):
        raise TypeError(f"ambiguous_rows: run must be a Run, got {type(run).__name__}")
    t = _resolve_tolerance(tol, None, "ambiguous_rows")
    e = _resolve_tolerance(error, None, "ambiguous_rows (error)")
    r, c = _sparse_links(run.scores, run.empty, t + e)
    if not len(r):
        return r
    a = run.scores[r, c].astype(np.float64)
    b = run.scores[r, c + 1].astype(np.float64)
    sure = (a - b) <= (t - e) * np.maximum(np.maximum(a, -b), 1.0)
    return np.unique(r[~sure])


def _link_runs(lr: np.ndarray, li: np.ndarray):
    """Tie groups of two or more members from row-major links: ``(row, a, b)``, columns ``[a, b)``."""
    if not len(lr):
        return lr, li, li
    new = np.ones(len(lr), dtype=bool)
    new[1:] = (lr[1:] != lr[:-1]) | (li[1:] != li[:-1] + 1)
    starts = np.flatnonzero(new)
    ends = np.append(starts[1:], len(lr)) - 1
    return lr[starts], li[starts], li[ends] + 2


def tie_groups(run: Run, *, tol: float | None = None, dim: int | None = None) -> np.ndarray:
    """Tie group of every cell of ``run``: ``(nq, k)`` int64, the group's first column.

    Cells ``i`` and ``i+1`` of a row are in the same group when both are hits
    and ``s_i - s_{i+1} <= tol * max(1, |s_i|, |s_{i+1}|)`` (computed in
    float64); groups are the maximal chains of such links. No-hit cells get
    ``-1``. ``tol`` defaults to :func:`default_tolerance` of ``dim``.
    """
    if not isinstance(run, Run):
        raise TypeError(f"tie_groups: run must be a Run, got {type(run).__name__}")
    t = _resolve_tolerance(tol, dim, "tie_groups")
    link = _link_matrix(run.scores, run.empty, t)
    n, K = run.doc_ids.shape
    start = np.ones((n, K), dtype=bool)
    start[:, 1:] = ~link
    col = np.broadcast_to(np.arange(K, dtype=np.int64), (n, K))
    label = np.maximum.accumulate(np.where(start, col, 0), axis=1) if K else col.copy()
    return np.where(run.empty, -1, label)


def _open_rows(run: Run, tol: float, k: int) -> np.ndarray:
    """See :func:`open_tie_groups`."""
    n, K = run.doc_ids.shape
    if K == 0:
        return np.zeros(n, dtype=bool)
    full = ~run.empty[:, -1]
    if K < k:
        return full
    tail = run.scores[:, k - 1 :]
    if tail.shape[1] < 2:
        return full
    link = _link_matrix(tail, run.empty[:, k - 1 :], tol)
    return full & link.all(axis=1)


def open_tie_groups(
    run: Run, k: int, *, tol: float | None = None, dim: int | None = None
) -> np.ndarray:
    """``(nq,)`` bool: rows whose ranking may continue the tie group at rank ``k``.

    True where the row is full (its last column is a hit) and the tie group
    holding rank ``k`` reaches the last column, or the row has fewer than
    ``k`` columns: the store may hold more members of that group than it
    returned, and a deeper search is needed to close it. An exact store can
    be asked for ``k + 1`` or more results, then again deeper for the rows
    this marks, until none is marked; such a run may be scored with
    ``groups_closed=True``. A row ending in a singleton at column ``k`` is
    open too: only the next score can show it is not tied.
    """
    if not isinstance(run, Run):
        raise TypeError(f"open_tie_groups: run must be a Run, got {type(run).__name__}")
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise ValueError(f"open_tie_groups: k must be a positive integer, got {py_scalar(k)!r}")
    return _open_rows(run, _resolve_tolerance(tol, dim, "open_tie_groups"), int(k))


# ----------------------------------------------------------------------------- result


@dataclass(frozen=True, eq=False)
class TieAwareResult:
    """Tie-aware per-query values beside the tie-rule ones.

    Every per-query array is ``(n_queries,)``, aligned with ``query_ids``
    (every qrels query, in order of first appearance, as in
    :class:`~imsearch_align.framework.metrics.EvaluationResult`).

    Attributes:
        measures: the measure names, in the requested order.
        query_ids: every qrels query.
        values: measure -> expected value over the orders of tied documents.
        low: measure -> value with ties broken against the relevant documents.
        high: measure -> value with ties broken for them.
        tie_dependent: measure -> bool, ``high - low > DEPENDENCE_EPS``.
        truncated: measure -> bool, the run ends inside a tie group (of two
            or more returned documents) that reaches the measure's cut-off, so
            the store returned only part of it; always False when
            ``groups_closed``.
        plain: the tie-rule result (:func:`~imsearch_align.framework.metrics.evaluate`).
        tol: the tolerance used.
        groups_closed: whether the run was declared (and checked) extended
            until the tie groups reaching a cut-off closed.
    """

    measures: tuple[str, ...]
    query_ids: np.ndarray
    values: dict[str, np.ndarray]
    low: dict[str, np.ndarray]
    high: dict[str, np.ndarray]
    tie_dependent: dict[str, np.ndarray]
    truncated: dict[str, np.ndarray]
    plain: EvaluationResult = field(repr=False)
    tol: float = 0.0
    groups_closed: bool = False

    def _mean(self, d: dict[str, np.ndarray]) -> dict[str, float]:
        n = len(self.query_ids)
        return {m: (float(d[m].mean()) if n else float("nan")) for m in self.measures}

    def mean(self) -> dict[str, float]:
        """Mean expected value of each measure over every qrels query."""
        return self._mean(self.values)

    def low_mean(self) -> dict[str, float]:
        """Lowest mean reachable by breaking ties against the relevant documents."""
        return self._mean(self.low)

    def high_mean(self) -> dict[str, float]:
        """Highest mean reachable by breaking ties for the relevant documents."""
        return self._mean(self.high)

    @property
    def n_tie_dependent(self) -> dict[str, int]:
        """Number of queries whose value depends on the order of tied documents."""
        return {m: int(self.tie_dependent[m].sum()) for m in self.measures}

    @property
    def n_truncated(self) -> dict[str, int]:
        """Number of queries flagged ``truncated`` for each measure."""
        return {m: int(self.truncated[m].sum()) for m in self.measures}

    def summary(self) -> dict[str, dict[str, float | int]]:
        """Per measure: tie-rule, expected, low and high means and the two counts (JSON-ready)."""
        plain, mean, lo, hi = self.plain.mean(), self.mean(), self.low_mean(), self.high_mean()
        dep, trunc = self.n_tie_dependent, self.n_truncated
        return {
            m: {
                "tie_rule": plain[m],
                "expected": mean[m],
                "low": lo[m],
                "high": hi[m],
                "n_tie_dependent": dep[m],
                "n_truncated": trunc[m],
            }
            for m in self.measures
        }

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: ``query_id``, then per measure ``m`` (expected),
        ``m tie_rule``, ``m low``, ``m high``, ``m truncated``."""
        df = pd.DataFrame({"query_id": self.query_ids})
        for m in self.measures:
            df[m] = self.values[m]
            df[f"{m} tie_rule"] = self.plain.values[m]
            df[f"{m} low"] = self.low[m]
            df[f"{m} high"] = self.high[m]
            df[f"{m} truncated"] = self.truncated[m]
        return df


# ----------------------------------------------------------------------------- closed forms


def _check_measures(measures: Sequence[str] | str) -> list[str]:
    if isinstance(measures, str):
        measures = [measures]
    measures = list(dict.fromkeys(measures))
    if not measures:
        raise ValueError(
            f"tie_aware_evaluate: measures is empty; expected some of {valid_measure_names()}"
        )
    for name in measures:
        try:
            fam, _ = parse_measure(name)
        except ValueError as e:
            k = name.rsplit("@", 1)[-1] if isinstance(name, str) and "@" in name else "10"
            names = [f"{f}@{k}" for f in TIE_AWARE_FAMILIES] + ["Accuracy"]
            close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.5)
            hint = f"; did you mean {close[0]!r}?" if close and "did you mean" not in str(e) else ""
            raise ValueError(f"tie_aware_evaluate: {e}{hint}") from e
        if fam not in TIE_AWARE_FAMILIES:
            raise ValueError(
                f"tie_aware_evaluate: measure {name!r} has no tie-aware form; tie-aware mode "
                f"supports {', '.join(f + '@k' for f in TIE_AWARE_FAMILIES)} and Accuracy"
            )
    return measures


class _Judgements:
    """The qrels as the closed forms need them: query codes, positive judgements."""

    def __init__(self, qrels: Qrels) -> None:
        self.qrels = qrels
        # Codes in order of first appearance: the rows of ``qrels.queries``.
        self.qidx = pd.factorize(qrels.query_ids)[0].astype(np.int64)
        keep = qrels.relevance > 0
        jq, jd, jg = self.qidx[keep], qrels.doc_ids[keep], qrels.relevance[keep]
        order = np.argsort(jq, kind="stable")
        self.jq, self.jd, self.jg = jq[order], jd[order], jg[order]

    def hits(
        self, qrows: np.ndarray, D: np.ndarray, empty: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Positive judgements found in ``D`` (row ``i`` ranks for qrels row ``qrows[i]``).

        Returns ``(row, col, gain, dup_rows)``: the hits sorted by (row, col),
        and the rows in which a relevant doc appears twice (their hits left out).
        """
        none = np.zeros(0, dtype=np.int64)
        n, W = D.shape
        if not len(self.jq) or n == 0 or W == 0:
            return none, none, np.zeros(0), none
        # Only the judgements of these queries, by local row.
        loc = np.full(len(self.qrels.queries), -1, dtype=np.int64)
        loc[qrows] = np.arange(n)
        jl = loc[self.jq]
        mine = jl >= 0
        jl, jd, jg = jl[mine], self.jd[mine], self.jg[mine]
        if not len(jl):
            return none, none, np.zeros(0), none
        order = np.argsort(jl, kind="stable")
        jl, jd, jg = jl[order], jd[order], jg[order]
        counts = np.bincount(jl, minlength=n)
        found = None
        if D.dtype != object and jd.dtype != object and counts.max() <= self.COMPARE_MAX:
            lo = int(D.min())
            if lo > np.iinfo(np.int64).min:
                found = self._compare(jl, jd, jg, counts, D, empty, lo - 1)
        if found is None:
            found = self._hash(jl, jd, jg, D, empty)
        r, c, g, key = found
        if not len(r):
            return none, none, np.zeros(0), none
        order = np.lexsort((c, r))
        r, c, g, key = r[order], c[order], g[order], key[order]
        # A judgement found twice in its row: that row repeats a relevant doc.
        ko = np.argsort(key, kind="stable")
        twice = key[ko][1:] == key[ko][:-1]
        dup_rows = np.unique(r[ko][1:][twice])
        if len(dup_rows):
            keep = ~np.isin(r, dup_rows)
            r, c, g = r[keep], c[keep], g[keep]
        return r.astype(np.int64), c.astype(np.int64), g, dup_rows.astype(np.int64)

    #: Up to this many relevant docs per query, each is compared with its row
    #: (a few passes over an int32/int64 block, no hashing, as metrics does).
    COMPARE_MAX = 8

    @staticmethod
    def _compare(jl, jd, jg, counts, D, empty, sentinel):
        """Hits as ``(row, col, gain, judgement key)``, comparing each judgement with its row."""
        n, W = D.shape
        rank = np.arange(len(jl)) - np.repeat(np.cumsum(counts) - counts, counts)
        r_max = int(counts.max())
        rel_doc = np.full((n, r_max), sentinel, dtype=np.int64)  # never in D
        rel_g = np.zeros((n, r_max))
        rel_doc[jl, rank] = jd
        rel_g[jl, rank] = jg
        if sentinel >= np.iinfo(np.int32).min and int(D.max()) <= np.iinfo(np.int32).max:
            D, rel_doc = D.astype(np.int32), rel_doc.astype(np.int32)  # half the traffic
        parts = []
        for j in range(r_max):
            p = np.flatnonzero(D == rel_doc[:, j : j + 1])
            if len(p):
                r, c = np.divmod(p, W)
                ok = ~empty[r, c]
                r, c = r[ok], c[ok]
                parts.append((r, c, rel_g[r, j], r * r_max + j))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        return tuple(np.concatenate(x) for x in zip(*parts))

    @staticmethod
    def _hash(jl, jd, jg, D, empty):
        """Hits as ``(row, col, gain, judgement key)``, hashing doc ids into the judged ones."""
        n, W = D.shape
        vocab = pd.Index(pd.unique(jd))
        nv = len(vocab)
        jkey = jl * nv + vocab.get_indexer(jd)
        order = np.argsort(jkey, kind="stable")
        jkey, jg = jkey[order], jg[order]
        codes = vocab.get_indexer(D.ravel()).reshape(n, W)
        codes[empty] = -1
        r, c = np.nonzero(codes >= 0)
        keys = r * nv + codes[r, c]
        pos = np.minimum(np.searchsorted(jkey, keys), len(jkey) - 1)
        hit = jkey[pos] == keys
        return r[hit], c[hit], jg[pos[hit]], pos[hit]

    def totals(
        self, qrows: np.ndarray, relevance_level: float | None, ndcg_ks: Sequence[int]
    ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """``R`` (relevant judgements) and ideal DCG@k of the qrels rows ``qrows``.

        As :mod:`~imsearch_align.framework.metrics` defines them: ``R`` counts
        judgements ``> 0`` (or ``>= relevance_level``), the ideal DCG uses all
        positive gains sorted descending.
        """
        nQ = len(self.qrels.queries)
        rel = self.qrels.relevance
        keep = rel > 0 if relevance_level is None else rel >= relevance_level
        R = np.bincount(self.qidx[keep], minlength=nQ).astype(np.float64)[qrows]
        idcg: dict[int, np.ndarray] = {}
        if ndcg_ks:
            mine = np.isin(self.jq, qrows)
            jq, g = self.jq[mine], self.jg[mine]
            order = np.lexsort((-g, jq))
            jq, g = jq[order], g[order]
            starts = np.concatenate([[0], np.cumsum(np.bincount(jq, minlength=nQ))[:-1]])
            rank = np.arange(len(jq)) - starts[jq]
            for k in ndcg_ks:
                w = rank < k
                idcg[k] = np.bincount(jq[w], weights=g[w] / np.log2(rank[w] + 2.0), minlength=nQ)[
                    qrows
                ]
        return R, idcg


def _no_hit_chance(m: np.ndarray, r: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``C(m-r, c) / C(m, c)``: no relevant doc among ``c`` draws from ``m`` holding ``r``.

    Product form over ``min(r, c)`` factors (``C(m-r,c)/C(m,c) = C(m-c,r)/C(m,r)``).
    """
    m, r, c = (np.asarray(x, dtype=np.int64) for x in (m, r, c))
    use_r = r <= c
    n_f = np.where(use_r, r, c)
    other = np.where(use_r, c, r)  # factor t: (m - other - t) / (m - t)
    out = np.ones(len(m))
    for t in range(int(n_f.max()) if len(m) else 0):
        act = t < n_f
        out[act] *= (m[act] - other[act] - t) / (m[act] - t)
    return np.where(r + c > m, 0.0, out)


def _group_values(
    n: int,
    g_row: np.ndarray,
    g_a: np.ndarray,
    g_m: np.ndarray,
    g_r: np.ndarray,
    g_s: np.ndarray,
    measures: Sequence[str],
    R: np.ndarray,
    idcg: dict[int, np.ndarray],
) -> dict[str, np.ndarray]:
    """Expected measures of ``n`` rows from their tie groups (closed forms, module docstring).

    Each group: row, first column ``a`` (0-based), size ``m``, relevant docs
    ``r`` (binary) and gain sum ``s``. Groups without a positive gain add
    nothing and may be left out, so a row is described by its relevant
    singletons and the tie groups holding relevant docs. With every group a
    singleton this is the tie-rule value (to rounding).
    """
    key = g_row * (int(g_a.max(initial=0)) + 1) + g_a
    if len(key) > 1 and np.any(key[1:] < key[:-1]):
        order = np.argsort(key, kind="stable")
        g_row, g_a, g_m, g_r, g_s = (x[order] for x in (g_row, g_a, g_m, g_r, g_s))
    g_mf = g_m.astype(np.float64)
    ng = len(g_row)
    new_row = np.ones(ng, dtype=bool)
    new_row[1:] = g_row[1:] != g_row[:-1]
    seg = np.cumsum(new_row) - 1
    excl = np.cumsum(g_r) - g_r
    above = excl - excl[new_row][seg]  # relevant docs in the groups above, same row
    q = np.where(g_m > 1, g_r * (g_r - 1) / np.maximum(g_mf * (g_mf - 1), 1.0), 0.0)
    safe_R = np.where(R > 0, R, 1.0)
    fams = {parse_measure(m)[0] for m in measures}

    cells = None
    if fams & {"AP", "nDCG"}:
        # Every rank of every group: p = r/m relevant, e = s/m gain expected there.
        cg = np.repeat(np.arange(ng), g_m)
        off = np.arange(len(cg)) - np.repeat(np.cumsum(g_m) - g_m, g_m)
        pos = g_a[cg] + off
        crow = g_row[cg]
        cells = (cg, off, pos, crow)

    out: dict[str, np.ndarray] = {}
    for name in measures:
        fam, k = parse_measure(name)
        c = np.clip(k - g_a, 0, g_m)  # ranks of each group inside the cut-off
        if fam in ("P", "R"):
            cnt = np.bincount(g_row, weights=g_r * c / g_mf, minlength=n)
            v = cnt / k if fam == "P" else np.where(R > 0, cnt / safe_R, 0.0)
        elif fam == "HitRate":
            v = np.zeros(n)
            rel = np.flatnonzero((g_r > 0) & (c > 0))
            if len(rel):
                prob = 1.0 - _no_hit_chance(g_m[rel], g_r[rel].astype(np.int64), c[rel])
                # Rows are sorted: the largest chance per row (groups wholly
                # inside give 1; one group at most is cut by k).
                rr = g_row[rel]
                seg = np.flatnonzero(np.append(True, rr[1:] != rr[:-1]))
                v[rr[seg]] = np.maximum.reduceat(prob, seg)
        elif fam == "RR":
            v = np.zeros(n)
            rel = np.flatnonzero(g_r > 0)
            if len(rel):
                first = np.ones(len(rel), dtype=bool)
                first[1:] = g_row[rel][1:] != g_row[rel][:-1]
                gf = rel[first]
                a, m = g_a[gf], g_mf[gf]
                r = g_r[gf]
                jmax = np.minimum(g_m[gf] - r.astype(np.int64), k - 1 - a)
                prob = r / m  # P(first relevant at offset 0)
                acc = np.where(jmax >= 0, prob / (a + 1.0), 0.0)
                t = np.flatnonzero(jmax > 0)  # groups whose first relevant may come later
                if len(t):
                    pt, at, mt, rt, jt = prob[t], a[t], m[t], r[t], jmax[t]
                    add = np.zeros(len(t))
                    for j in range(int(jt.max())):
                        pt = pt * (mt - j - rt) / np.maximum(mt - 1 - j, 1.0)
                        add += np.where(j + 1 <= jt, pt / (at + j + 2.0), 0.0)
                    acc[t] += add
                v[g_row[gf]] = acc
        else:
            cg, off, pos, crow = cells
            w = pos < k
            if fam == "nDCG":
                ideal = idcg[k]
                e = (g_s / g_mf)[cg[w]]
                dcg = np.bincount(crow[w], weights=e / np.log2(pos[w] + 2.0), minlength=n)
                v = np.where(ideal > 0, dcg / np.where(ideal > 0, ideal, 1.0), 0.0)
            else:  # AP
                gw = cg[w]
                t = (g_r[gw] / g_mf[gw]) * (1.0 + above[gw]) + off[w] * q[gw]
                s = np.bincount(crow[w], weights=t / (pos[w] + 1.0), minlength=n)
                v = np.where(R > 0, s / safe_R, 0.0)
        out[name] = v
    return out


def _arranged_hits(
    hr: np.ndarray,
    hc: np.ndarray,
    hg: np.ndarray,
    idx: np.ndarray,
    inside: np.ndarray,
    g_a: np.ndarray,
    g_b: np.ndarray,
    descending: bool,
) -> np.ndarray:
    """Columns of the hits once each tie group is ordered by gain.

    Descending: a group's relevant docs take its first ranks, highest gain
    first; ascending: its last ranks, highest gain last.
    """
    col = hc.copy()
    w = np.flatnonzero(inside)
    if not len(w):
        return col
    gi = idx[w]
    order = np.lexsort((-hg[w] if descending else hg[w], gi))
    w, gi = w[order], gi[order]
    first = np.ones(len(w), dtype=bool)
    first[1:] = gi[1:] != gi[:-1]
    seg_start = np.flatnonzero(first)
    counts = np.diff(np.append(seg_start, len(w)))
    rank = np.arange(len(w)) - np.repeat(seg_start, counts)
    n_pos = np.repeat(counts, counts)
    col[w] = g_a[gi] + rank if descending else g_b[gi] - n_pos + rank
    return col


# ----------------------------------------------------------------------------- evaluate


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
        value; see the module docstring for the definitions and formulas.

    Cost: one pass over the scores finds the ties; the closed forms then run
    on the rows holding a tie group that starts above the largest cut-off,
    in time proportional to their relevant docs and tied ranks.
    """
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
    if lenient:
        plain, _ = evaluate_lenient(
            run, qrels, measures, relevance_level=relevance_level, failed_queries=failed_queries
        )
    else:
        plain = evaluate(
            run, qrels, measures, relevance_level=relevance_level, failed_queries=failed_queries
        )
    ks = {m: parse_measure(m)[1] for m in measures}
    kmax = max(ks.values())
    nQ = len(qrels.queries)
    n_run, K = run.doc_ids.shape

    # Qrels row of each run row (-1: not judged, ignored as evaluate does).
    q_of_run = np.full(n_run, -1, dtype=np.int64)
    if n_run and nQ:
        run_row = pd.Index(run.query_ids).get_indexer(qrels.queries).astype(np.int64)
        found = run_row >= 0
        q_of_run[run_row[found]] = np.flatnonzero(found)

    # Tie groups of two or more returned docs (row-major); those starting
    # below the largest cut-off can change no value.
    lr, li = _sparse_links(run.scores, run.empty, t)
    judged = q_of_run[lr] >= 0
    g_run, g_a, g_b = _link_runs(lr[judged], li[judged])
    keep = g_a < kmax
    g_run, g_a, g_b = g_run[keep], g_a[keep], g_b[keep]

    if groups_closed and n_run and K:
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

    values = {m: plain.values[m].copy() for m in measures}
    low = {m: plain.values[m].copy() for m in measures}
    high = {m: plain.values[m].copy() for m in measures}
    dep = {m: np.zeros(nQ, dtype=bool) for m in measures}
    trunc = {m: np.zeros(nQ, dtype=bool) for m in measures}
    if not len(g_run):
        return TieAwareResult(
            tuple(measures), qrels.queries, values, low, high, dep, trunc, plain, t, groups_closed
        )

    # Candidate rows (local index 0..n-1), their qrels rows, the columns to read.
    crow = np.unique(g_run)
    cq = q_of_run[crow]
    n = len(crow)
    g_row = np.searchsorted(crow, g_run)
    W = int(min(K, max(kmax, int(g_b.max()))))
    jud = _Judgements(qrels)
    if n == n_run:  # every row: read the run in place, no (n, W) copy
        D, E = run.doc_ids[:, :W], run.empty[:, :W]
    else:
        D, E = run.doc_ids[crow, :W], run.empty[crow, :W]
    hr, hc, hg, dup_rows = jud.hits(cq, D, E)
    if len(dup_rows):
        if not lenient:
            raise ValueError(
                "Run: a relevant doc appears twice in the ranking of query "
                f"{py_scalar(qrels.queries[cq[dup_rows[0]]])!r}"
            )
        # As evaluate_lenient: such a query fails, scores 0 and is listed.
        dq = cq[dup_rows]
        extra = qrels.queries[dq][~np.isin(qrels.queries[dq], plain.failed_queries)]
        for m in measures:
            plain.values[m][dq] = 0.0
        plain = dataclasses.replace(
            plain,
            failed_queries=np.concatenate([plain.failed_queries, extra]).astype(object),
        )
    hb = hg > 0 if relevance_level is None else (hg > 0) & (hg >= relevance_level)
    hbf = hb.astype(np.float64)
    ndcg_ks = sorted({k for m, k in ks.items() if parse_measure(m)[0] == "nDCG"})
    R, idcg = jud.totals(cq, relevance_level, ndcg_ks)

    # The tie group (if any) of each hit.
    g_key = g_row * W + g_a
    h_key = hr * W + hc
    idx = np.searchsorted(g_key, h_key, side="right") - 1
    inside = idx >= 0
    inside[inside] = h_key[inside] < g_row[idx[inside]] * W + g_b[idx[inside]]
    ng = len(g_row)
    g_m = g_b - g_a
    g_r = np.bincount(idx[inside], weights=hbf[inside], minlength=ng)
    g_s = np.bincount(idx[inside], weights=hg[inside], minlength=ng)
    tied = g_s > 0
    single = ~inside
    ones = np.ones(int(single.sum()), dtype=np.int64)

    exp = _group_values(
        n,
        np.concatenate([hr[single], g_row[tied]]),
        np.concatenate([hc[single], g_a[tied]]),
        np.concatenate([ones, g_m[tied]]),
        np.concatenate([hbf[single], g_r[tied]]),
        np.concatenate([hg[single], g_s[tied]]),
        measures,
        R,
        idcg,
    )
    # Both bounds in one pass: rows n..2n-1 are the "for" arrangement.
    col_lo = _arranged_hits(hr, hc, hg, idx, inside, g_a, g_b, descending=False)
    col_hi = _arranged_hits(hr, hc, hg, idx, inside, g_a, g_b, descending=True)
    both = _group_values(
        2 * n,
        np.concatenate([hr, hr + n]),
        np.concatenate([col_lo, col_hi]),
        np.ones(2 * len(hr), dtype=np.int64),
        np.tile(hbf, 2),
        np.tile(hg, 2),
        measures,
        np.tile(R, 2),
        {k: np.tile(v, 2) for k, v in idcg.items()},
    )
    lo = {m: v[:n] for m, v in both.items()}
    hi = {m: v[n:] for m, v in both.items()}
    for m in measures:
        values[m][cq] = exp[m]
        low[m][cq] = lo[m]
        high[m][cq] = hi[m]
        dep[m][cq] = hi[m] - lo[m] > DEPENDENCE_EPS
    if not groups_closed:
        # A group reaching the last column of a (thus full) row may go on.
        cut = g_b == K
        for m in measures:
            trunc[m][cq[g_row[cut]]] |= g_a[cut] < ks[m]
    if len(dup_rows):
        dq = cq[dup_rows]
        for d in (values, low, high):
            for m in measures:
                d[m][dq] = 0.0
        for d in (dep, trunc):
            for m in measures:
                d[m][dq] = False

    return TieAwareResult(
        tuple(measures), qrels.queries, values, low, high, dep, trunc, plain, t, groups_closed
    )
