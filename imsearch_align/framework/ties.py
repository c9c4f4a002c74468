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
  comparison is made in float64 on the stored scores, so it is exact and
  deterministic. No-hit cells (doc ``-1``) are not documents and are never
  in a group. The default tolerance is :func:`default_tolerance`.
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
  a row that shows no score outside the group after it, while full, raises.
  A full row whose last returned document is alone in its group may still
  tie with the first unreturned one; the run cannot show that, so it is not
  flagged (only ``groups_closed=True``, which demands the closing score,
  rules it out).
"""

from __future__ import annotations

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
    parse_measure,
    py_scalar,
    valid_measure_names,
)

__all__ = [
    "EPS_F32",
    "TIE_AWARE_FAMILIES",
    "TieAwareResult",
    "default_tolerance",
    "open_tie_groups",
    "tie_aware_evaluate",
    "tie_groups",
]

#: float32 machine epsilon, ``2**-23`` (twice the unit roundoff ``u``).
EPS_F32 = float(np.finfo(np.float32).eps)
#: Confidence parameter of the probabilistic rounding bound behind :func:`default_tolerance`.
TOL_LAMBDA = 4.0
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
    vectors differ only by their rounding errors. With ``u = EPS_F32 / 2``:

    * worst case, any summation order (Higham, *Accuracy and Stability of
      Numerical Algorithms*, 2002, §3.1): ``|fl(x . y) - s| <= gamma_d
      sum|x_i y_i| <= gamma_d``, ``gamma_d = d u / (1 - d u)``, plus ``u`` for
      rounding the reported score; two stores differ by at most
      ``2 gamma_d + 2 u``. ``worst_case=True`` returns that,
      ``EPS_F32 * (d / (1 - d u) + 1)``, about ``d * EPS_F32``.
    * probabilistic (Higham and Mary, SIAM J. Sci. Comput. 41(5), 2019,
      Thm 3.1): with independent mean-zero rounding errors the error is at
      most ``lambda sqrt(d) u sum|x_i y_i|`` (to first order) with
      probability at least ``1 - 2 d exp(-lambda^2 / 2)``-ish; two stores
      differ by at most ``lambda sqrt(d) EPS_F32``. The default takes
      ``lambda = 4``: ``tol = 4 * EPS_F32 * sqrt(d)``, at least
      ``4 * EPS_F32`` (it covers the two final roundings for any ``d``).

    Measured (numpy/OpenBLAS sgemm, FAISS ``IndexFlatIP`` and sequential
    float32 sums against float64, 2M scores, d = 64..1024): the largest
    difference between two implementations was 0.5 ``EPS_F32 sqrt(d)``, so the
    default has a margin of 8. The worst-case bound is ~``sqrt(d)/4`` times
    wider (6e-5 at d = 512) and would group scores that no real store
    confuses. Scores of non-unit vectors are compared relative to
    ``max(1, |s|)``; scale ``tol`` by ``max ||x|| ||y||`` for them. For sparse
    vectors pass the largest number of non-zeros as ``dim``.
    """
    if isinstance(dim, bool) or not isinstance(dim, Integral) or dim < 1:
        raise ValueError(
            f"dim must be a positive integer (the vector dimension), got {py_scalar(dim)!r}"
        )
    d = int(dim)
    if worst_case:
        u = EPS_F32 / 2
        if d * u >= 1:
            raise ValueError(f"dim must be < {int(1 / u)} for the worst-case bound, got {d}")
        return EPS_F32 * (d / (1 - d * u) + 1)
    return TOL_LAMBDA * EPS_F32 * math.sqrt(d)


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


def _link_matrix(scores: np.ndarray, empty: np.ndarray, tol: float) -> np.ndarray:
    """``(n, K-1)`` bool: columns ``i`` and ``i+1`` are both hits and tie within ``tol``."""
    n, K = scores.shape
    if K < 2:
        return np.zeros((n, max(K - 1, 0)), dtype=bool)
    a = scores[:, :-1].astype(np.float64)
    b = scores[:, 1:].astype(np.float64)
    with np.errstate(invalid="ignore"):  # -inf - -inf in no-hit padding
        thr = tol * np.maximum(np.maximum(a, -b), 1.0)
        link = (a - b) <= thr
    link &= ~empty[:, 1:]
    link &= ~empty[:, :-1]
    return link


def _rows_with_link(scores: np.ndarray, tol: float, width: int) -> np.ndarray:
    """Rows holding a tie link among their first ``width`` links (a fast, unmasked scan).

    No-hit padding has score ``-inf``; a gap to or between ``-inf`` is
    ``inf`` or NaN, never a link, so no mask is needed here. A run whose
    no-hit cells carry finite scores may give extra rows, which the exact
    (masked) :func:`_link_matrix` then clears.
    """
    n, K = scores.shape
    width = min(width, K - 1)
    out = np.zeros(n, dtype=bool)
    if width <= 0 or n == 0:
        return out
    step = max(1, _BLOCK_CELLS // (width + 1))
    for b0 in range(0, n, step):
        blk = scores[b0 : b0 + step, : width + 1]
        a = blk[:, :-1].astype(np.float64)
        b = blk[:, 1:].astype(np.float64)
        with np.errstate(invalid="ignore"):
            gap = a - b
            link = gap <= tol
            # The relative term matters only where |s| > 1 (a row is sorted, so
            # its first column is its largest score, its last hit its smallest).
            if (blk[:, 0] > 1).any() or ((blk < -1) & (blk > -np.inf)).any():
                link |= gap <= tol * np.maximum(np.maximum(a, -b), 1.0)
        out[b0 : b0 + len(blk)] = link.any(axis=1)
    return out


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
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"tie_aware_evaluate: {e}{hint}") from e
        if fam not in TIE_AWARE_FAMILIES:
            raise ValueError(
                f"tie_aware_evaluate: measure {name!r} has no tie-aware form; tie-aware mode "
                f"supports {', '.join(f + '@k' for f in TIE_AWARE_FAMILIES)} and Accuracy"
            )
    return measures


def _gains(
    qrels: Qrels, qrows: np.ndarray, D: np.ndarray, empty: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Graded gain (> 0 judgements only) of every cell of ``D``, and whether any doc repeats.

    ``qrows[i]`` is the qrels row of ``D[i]``. Returns ``(gain (n, K), dup_row or -1)``.
    """
    n, K = D.shape
    gain = np.zeros((n, K))
    keep = qrels.relevance > 0
    if not keep.any() or n == 0 or K == 0:
        return gain, -1
    jq = pd.Index(qrels.queries).get_indexer(qrels.query_ids[keep]).astype(np.int64)
    jd = qrels.doc_ids[keep]
    jg = qrels.relevance[keep]
    vocab = pd.Index(pd.unique(jd))
    nv = len(vocab)
    jkey = jq * nv + vocab.get_indexer(jd)
    order = np.argsort(jkey, kind="stable")
    jkey, jg = jkey[order], jg[order]
    codes = vocab.get_indexer(D.ravel()).reshape(n, K)
    codes[empty] = -1
    r, c = np.nonzero(codes >= 0)
    if not len(r):
        return gain, -1
    keys = qrows[r] * nv + codes[r, c]
    pos = np.minimum(np.searchsorted(jkey, keys), len(jkey) - 1)
    hit = jkey[pos] == keys
    found = pos[hit]
    if len(np.unique(found)) != len(found):
        dup = int(np.flatnonzero(np.bincount(found) > 1)[0])
        return gain, int(r[hit][np.flatnonzero(found == dup)[0]])
    gain[r[hit], c[hit]] = jg[found]
    return gain, -1


def _relevance_totals(
    qrels: Qrels, qrows: np.ndarray, relevance_level: float | None, ndcg_ks: Sequence[int]
) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """``R`` (relevant docs in the qrels) and ideal DCG@k of the queries ``qrows``.

    As :mod:`metrics` defines them: ``R`` counts judgements ``> 0`` (or
    ``>= relevance_level``), the ideal DCG all positive gains sorted descending.
    """
    nQ = len(qrels.queries)
    qidx = pd.Index(qrels.queries).get_indexer(qrels.query_ids).astype(np.int64)
    rel = qrels.relevance
    keep = rel > 0 if relevance_level is None else rel >= relevance_level
    R = np.bincount(qidx[keep], minlength=nQ).astype(np.float64)[qrows]
    idcg: dict[int, np.ndarray] = {}
    if ndcg_ks:
        pos = rel > 0
        jq, g = qidx[pos], rel[pos]
        order = np.lexsort((-g, jq))
        jq, g = jq[order], g[order]
        starts = np.concatenate([[0], np.cumsum(np.bincount(jq, minlength=nQ))[:-1]])
        rank = np.arange(len(jq)) - starts[jq]
        for k in ndcg_ks:
            w = rank < k
            idcg[k] = np.bincount(jq[w], weights=g[w] / np.log2(rank[w] + 2.0), minlength=nQ)[qrows]
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


def _expected(
    G: np.ndarray,
    B: np.ndarray,
    link: np.ndarray,
    measures: Sequence[str],
    R: np.ndarray,
    idcg: dict[int, np.ndarray],
) -> dict[str, np.ndarray]:
    """Closed-form expected measures of ``n`` ranked rows with tie links (module docstring).

    ``G`` ``(n, W)`` graded gains (0 = not relevant / no hit), ``B`` binary
    relevance, ``link`` ``(n, W-1)``, ``R`` relevant docs per row in the qrels,
    ``idcg`` ideal DCG per nDCG cut-off. With no links this is the tie-rule value.
    """
    n, W = G.shape
    start = np.ones((n, W), dtype=bool)
    if W > 1:
        start[:, 1:] = ~link
    sflat = np.flatnonzero(start.ravel())  # group starts, in (row, column) order
    gid = (np.cumsum(start.ravel()) - 1).reshape(n, W)
    g_row, g_a = np.divmod(sflat, W)
    g_m = np.diff(np.append(sflat, n * W))
    g_r = np.add.reduceat(B.ravel().astype(np.float64), sflat) if n * W else np.zeros(0)
    g_s = np.add.reduceat(G.ravel(), sflat) if n * W else np.zeros(0)
    # Relevant docs in the groups above each group, within its row.
    excl = np.cumsum(g_r) - g_r
    g_first = gid[:, 0] if W else np.zeros(n, dtype=np.int64)
    g_above = excl - excl[g_first[g_row]]
    g_q = np.where(g_m > 1, g_r * (g_r - 1) / np.maximum(g_m * (g_m - 1), 1), 0.0)

    col = np.arange(W)
    p = (g_r / g_m)[gid]
    inv_rank = 1.0 / (col + 1.0)
    safe_R = np.where(R > 0, R, 1.0)
    fams = {parse_measure(m)[0] for m in measures}
    cum_p = np.cumsum(p, axis=1) if fams & {"P", "R"} else None
    cum_ap = None
    if "AP" in fams:
        off = col[None, :] - g_a[gid]
        cum_ap = np.cumsum((p * (1.0 + g_above[gid]) + off * g_q[gid]) * inv_rank, axis=1)
    cum_dcg = None
    if "nDCG" in fams:
        disc = 1.0 / np.log2(col + 2.0)
        cum_dcg = np.cumsum((g_s / g_m)[gid] * disc, axis=1)
    out: dict[str, np.ndarray] = {}
    for name in measures:
        fam, k = parse_measure(name)
        kk = min(k, W)
        if kk == 0:
            out[name] = np.zeros(n)
            continue
        if fam == "P":
            v = cum_p[:, kk - 1] / k
        elif fam == "R":
            v = np.where(R > 0, cum_p[:, kk - 1] / safe_R, 0.0)
        elif fam == "AP":
            v = np.where(R > 0, cum_ap[:, kk - 1] / safe_R, 0.0)
        elif fam == "nDCG":
            ideal = idcg[k]
            v = np.where(ideal > 0, cum_dcg[:, kk - 1] / np.where(ideal > 0, ideal, 1.0), 0.0)
        elif fam == "HitRate":
            gx = gid[:, kk - 1]  # the group holding the last rank inside the cut-off
            a, m, r = g_a[gx], g_m[gx], g_r[gx]
            c = np.minimum(k - a, m)  # its ranks inside the cut-off
            v = np.where(g_above[gx] > 0, 1.0, 0.0)
            rest = (g_above[gx] == 0) & (r > 0)
            if rest.any():
                v[rest] = 1.0 - _no_hit_chance(m[rest], r[rest], c[rest])
        else:  # RR: the first group holding a relevant doc
            v = np.zeros(n)
            has = g_r > 0
            grp = np.flatnonzero(has)
            if len(grp):
                fr, first = np.unique(g_row[grp], return_index=True)
                gf = grp[first]
                a, m, r = g_a[gf], g_m[gf], g_r[gf]
                jmax = np.minimum(m - r, k - 1 - a)  # last offset of the first relevant doc
                prob = r / m  # P(J = 0)
                acc = np.where(jmax >= 0, prob / (a + 1.0), 0.0)
                for j in range(int(jmax.max()) if len(jmax) else 0):
                    prob = prob * (m - j - r) / np.maximum(m - 1 - j, 1)
                    acc = acc + np.where(j + 1 <= jmax, prob / (a + j + 2.0), 0.0)
                v[fr] = acc
        out[name] = v
    return out


def _arranged(G: np.ndarray, link: np.ndarray, descending: bool) -> np.ndarray:
    """``G`` with each tie group's gains sorted (ascending, or descending)."""
    n, W = G.shape
    start = np.ones((n, W), dtype=bool)
    if W > 1:
        start[:, 1:] = ~link
    col = np.arange(W)
    a = np.maximum.accumulate(np.where(start, col, 0), axis=1)
    row = np.broadcast_to(np.arange(n)[:, None], (n, W))
    g = G.ravel()
    order = np.lexsort((-g if descending else g, a.ravel(), row.ravel()))
    return g[order].reshape(n, W)


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

    Returns:
        :class:`TieAwareResult`: expected values, low/high bounds,
        tie-dependence and truncation flags per query, and the tie-rule
        result. Rows without a tie group reaching a cut-off keep the tie-rule
        value; see the module docstring for the definitions and formulas.
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
    plain = evaluate(
        run, qrels, measures, relevance_level=relevance_level, failed_queries=failed_queries
    )
    ks = {m: parse_measure(m)[1] for m in measures}
    kmax = max(ks.values())
    nQ = len(qrels.queries)
    n_run, K = run.doc_ids.shape

    # Run row of each qrels query (-1: absent, scored 0 by evaluate).
    run_row = (
        pd.Index(run.query_ids).get_indexer(qrels.queries).astype(np.int64)
        if n_run
        else np.full(nQ, -1, dtype=np.int64)
    )
    scored = np.flatnonzero(run_row >= 0)

    if groups_closed and len(scored):
        still_open = _open_rows(run, t, kmax)[run_row[scored]]
        if still_open.any():
            first = int(np.flatnonzero(still_open)[0])
            raise ValueError(
                "tie_aware_evaluate: groups_closed=True, but the ranking of query "
                f"{py_scalar(qrels.queries[scored[first]])!r} (and {int(still_open.sum()) - 1} "
                f"more) is full and does not show the tie group at rank {kmax} closing: the "
                "store may hold more of it. Search deeper for those queries "
                "(open_tie_groups) or pass groups_closed=False"
            )

    values = {m: plain.values[m].copy() for m in measures}
    low = {m: plain.values[m].copy() for m in measures}
    high = {m: plain.values[m].copy() for m in measures}
    dep = {m: np.zeros(nQ, dtype=bool) for m in measures}
    trunc = {m: np.zeros(nQ, dtype=bool) for m in measures}

    # Only rows holding a tie link that reaches a cut-off (link i joins ranks
    # i+1 and i+2, so links i < kmax can matter) need the closed forms.
    cand = np.zeros(0, dtype=np.int64)
    if len(scored) and K > 1:
        rr = run_row[scored]
        has = _rows_with_link(run.scores[rr] if len(rr) != n_run else run.scores, t, kmax)
        if len(rr) == n_run:
            has = has[rr]
        cand = scored[has]
    if len(cand):
        rr = run_row[cand]
        S, E, D = run.scores[rr], run.empty[rr], run.doc_ids[rr]
        link = _link_matrix(S, E, t)
        real = link[:, : min(kmax, K - 1)].any(axis=1)
        cand, rr, S, E, D, link = cand[real], rr[real], S[real], E[real], D[real], link[real]
    if len(cand):
        G, dup = _gains(qrels, cand, D, E)
        if dup >= 0:
            raise ValueError(
                "Run: a relevant doc appears twice in the ranking of query "
                f"{py_scalar(qrels.queries[cand[dup]])!r}"
            )
        ndcg_ks = sorted({k for m, k in ks.items() if parse_measure(m)[0] == "nDCG"})
        R, idcg = _relevance_totals(qrels, cand, relevance_level, ndcg_ks)

        def binary(g: np.ndarray) -> np.ndarray:
            return g > 0 if relevance_level is None else (g > 0) & (g >= relevance_level)

        exp = _expected(G, binary(G), link, measures, R, idcg)
        no_link = np.zeros_like(link)
        G_lo, G_hi = _arranged(G, link, False), _arranged(G, link, True)
        lo = _expected(G_lo, binary(G_lo), no_link, measures, R, idcg)
        hi = _expected(G_hi, binary(G_hi), no_link, measures, R, idcg)
        for m in measures:
            values[m][cand] = exp[m]
            low[m][cand] = lo[m]
            high[m][cand] = hi[m]
            dep[m][cand] = hi[m] - lo[m] > DEPENDENCE_EPS
        if not groups_closed and K > 1:
            # Full rows ending in a tie group of >= 2 returned docs: its start
            # column, compared with each cut-off.
            ends_tied = ~E[:, -1] & link[:, -1]
            if ends_tied.any():
                w = np.flatnonzero(ends_tied)
                brk = ~link[w]
                last_break = np.where(brk.any(axis=1), K - 2 - np.argmax(brk[:, ::-1], axis=1), -1)
                a_last = last_break + 1  # 0-based first column of the last group
                for m in measures:
                    trunc[m][cand[w]] = a_last < ks[m]

    return TieAwareResult(
        measures=tuple(measures),
        query_ids=qrels.queries,
        values=values,
        low=low,
        high=high,
        tie_dependent=dep,
        truncated=trunc,
        plain=plain,
        tol=t,
        groups_closed=groups_closed,
    )
