"""The ANN fidelity report: recall@k and score truth of a store's answer.

:func:`ann_recall` checks what a store returned against the truth
(:mod:`.truth`) entry by entry (stored id, repeat, zero inner product, score
within the tolerance, order, row length), scores recall with ann-benchmarks'
tie rule, and describes the first bad rows (:mod:`.causes`) in a
:class:`FidelityReport`; :func:`measure_fidelity` also times the search and
the truth. The rules are in :mod:`imsearch_align.framework.fidelity`.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imsearch_align.framework.fidelity.causes import _describe_row
from imsearch_align.framework.fidelity.legacy import _legacy_ann_recall
from imsearch_align.framework.fidelity.rule import tie_tolerant_recall
from imsearch_align.framework.fidelity.truth import _TINY, _Truth
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.validation import check_int

__all__ = ["FidelityReport", "ann_recall", "default_rtol", "measure_fidelity"]

_EPS32 = float(np.finfo(np.float32).eps)
#: Problems described in full in a report.
_MAX_PROBLEMS = 5


def default_rtol(dim: int) -> float:
    """The default score tolerance relative to ``||q|| * ||x||`` for dimension ``dim``.

    ``max(1e-5, 4 * eps32 * sqrt(dim))``: float32 dot products computed in
    different orders differ by about ``eps32 * sqrt(d)`` of that scale.
    """
    return max(1e-5, 4.0 * _EPS32 * float(np.sqrt(max(int(dim), 1))))


@dataclass(frozen=True)
class FidelityReport:
    """What a store returned, checked against the true inner products.

    Attributes:
        k: cut-off.
        per_query: ``(nq,)`` float64 recall of each query (see the module docstring).
        recall: mean of ``per_query`` (``recall@k``); NaN for no queries.
        store_seconds: wall time of the store's search (:func:`measure_fidelity`).
        exact_seconds: wall time of the truth computation (:func:`measure_fidelity`).
        recall_min: the worst query's recall.
        rtol: the score tolerance used (relative to ``||q|| * ||x||``).
        score_max_abs_error: largest ``|reported - true|`` over returned
            stored ids (0.0 when there are none).
        score_max_rel_error: the same relative to ``||q|| * ||x||``.
        n_score_mismatch: returned entries whose reported score differs from
            the true inner product by more than the tolerance.
        n_score_mismatch_rows: queries with at least one such entry.
        n_unknown_ids: returned ids (``>= 0``) that were never inserted.
        n_duplicate_ids: entries repeating an id already returned in the row.
        n_zero_ip_hits: sparse only: returned documents whose inner product
            with the query is zero (they must not be returned).
        n_short_rows: queries with fewer hits than ``m_i`` (dense:
            ``min(k, n)``; sparse: non-zero inner products, at most ``k``).
        n_misordered_rows: queries whose hits are not in descending order of
            true score (beyond the tolerance).
        problems: descriptions of the first problems, one per bad query, with
            a likely cause.
    """

    k: int
    per_query: np.ndarray
    recall: float
    store_seconds: float = float("nan")
    exact_seconds: float = float("nan")
    recall_min: float = float("nan")
    rtol: float = float("nan")
    score_max_abs_error: float = 0.0
    score_max_rel_error: float = 0.0
    n_score_mismatch: int = 0
    n_score_mismatch_rows: int = 0
    n_unknown_ids: int = 0
    n_duplicate_ids: int = 0
    n_zero_ip_hits: int = 0
    n_short_rows: int = 0
    n_misordered_rows: int = 0
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def n_queries(self) -> int:
        """Number of queries checked."""
        return int(self.per_query.shape[0])

    @property
    def ok(self) -> bool:
        """True when every returned entry is truthful (recall aside)."""
        return not (
            self.n_score_mismatch
            or self.n_unknown_ids
            or self.n_duplicate_ids
            or self.n_zero_ip_hits
            or self.n_short_rows
            or self.n_misordered_rows
        )

    @property
    def first_problem(self) -> str | None:
        """The first problem's description, or None when the result is truthful."""
        return self.problems[0] if self.problems else None

    def as_metrics(self) -> dict[str, float | int]:
        """JSON-ready values for a result, keyed with the cut-off.

        ``ann_recall@k``, ``ann_recall_min@k``, ``score_max_abs_error@k``,
        ``score_max_rel_error@k``, ``score_mismatch_rows@k``,
        ``invalid_hits@k`` (unknown + duplicate + zero inner product),
        ``short_rows@k``, ``misordered_rows@k``.
        """
        k = self.k
        return {
            f"ann_recall@{k}": float(self.recall),
            f"ann_recall_min@{k}": float(self.recall_min),
            f"score_max_abs_error@{k}": float(self.score_max_abs_error),
            f"score_max_rel_error@{k}": float(self.score_max_rel_error),
            f"score_mismatch_rows@{k}": int(self.n_score_mismatch_rows),
            f"invalid_hits@{k}": int(
                self.n_unknown_ids + self.n_duplicate_ids + self.n_zero_ip_hits
            ),
            f"short_rows@{k}": int(self.n_short_rows),
            f"misordered_rows@{k}": int(self.n_misordered_rows),
        }


def _check_result(res: Any, name: str, nq: int, k: int) -> None:
    if not isinstance(res, SearchResult):
        raise TypeError(f"{name} must be a SearchResult, got {type(res).__name__}")
    if res.nq != nq:
        raise ValueError(f"{name} has {res.nq} rows, queries has {nq}")
    if res.k < k:
        raise ValueError(f"{name} must have at least k={k} columns, got {res.k}")


@dataclass(frozen=True)
class _Verdicts:
    """Every check of the first ``k`` columns of a store's answer.

    ``(nq, k)`` arrays: ``ids``, ``rep`` (reported scores, float64), ``true``
    (NaN where the id is not stored), ``known`` (a stored id), ``dup`` (a
    repeat in its row), ``unknown``, ``zero_ip``, ``mismatch``, ``err``
    (``|reported - true|``), ``rel`` (``err`` relative to ``||q|| * ||x||``),
    ``tol_s`` (the score tolerance). ``(nq,)`` arrays: ``per_query`` (recall),
    ``m`` (hits expected), ``hits`` (hits returned), ``short``, ``misordered``.
    """

    ids: np.ndarray
    rep: np.ndarray
    true: np.ndarray
    known: np.ndarray
    dup: np.ndarray
    unknown: np.ndarray
    zero_ip: np.ndarray
    mismatch: np.ndarray
    err: np.ndarray
    rel: np.ndarray
    tol_s: np.ndarray
    per_query: np.ndarray
    m: np.ndarray
    hits: np.ndarray
    short: np.ndarray
    misordered: np.ndarray


def _repeats(ids: np.ndarray) -> np.ndarray:
    """True where an entry repeats an id already returned earlier in its row."""
    order = np.argsort(ids, axis=1, kind="stable")
    srt = np.take_along_axis(ids, order, axis=1)
    rep_sorted = np.zeros_like(srt, dtype=bool)
    rep_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
    dup = np.zeros_like(rep_sorted)
    np.put_along_axis(dup, order, rep_sorted, axis=1)
    return dup


def _recall(
    truth: _Truth, k: int, good: np.ndarray, true: np.ndarray, scale: np.ndarray, rtol: float
) -> tuple[np.ndarray, np.ndarray]:
    """``(per_query, m)``: each query's recall (ann-benchmarks' tie rule) and its hits expected."""
    t, m = truth.kth(k)
    return tie_tolerant_recall(np.where(good, true, -np.inf), t, m, scale, rtol), m


def _misordered(
    good: np.ndarray, true: np.ndarray, scale: np.ndarray, rtol: float, k: int
) -> np.ndarray:
    """Rows where a later hit is truly better than an earlier one, beyond the tolerance."""
    tv = np.where(good, true, np.nan)
    mis = np.zeros(true.shape[0], dtype=bool)
    if k > 1:
        a, b = tv[:, :-1], tv[:, 1:]
        tol_pair = rtol * np.maximum(scale[:, :-1], scale[:, 1:])
        with np.errstate(invalid="ignore"):
            mis = np.any(b > a + tol_pair, axis=1)
    return mis


def _verdicts(store_result: SearchResult, truth: _Truth, k: int, rtol: float) -> _Verdicts:
    """Check every entry of the first ``k`` columns against the truth (``truth.nq > 0``)."""
    nq = truth.nq
    ids = store_result.ids[:, :k]
    rep = store_result.scores[:, :k].astype(np.float64)
    qrows = np.arange(nq)
    pos = truth.positions(ids)
    real = ids >= 0
    known = pos >= 0
    true = truth.pair_scores(qrows, pos)
    xn = np.where(known, truth.xnorm[np.maximum(pos, 0)] if truth.n else 0.0, 0.0)
    scale = np.maximum(truth.qnorm[:, None] * xn, _TINY)

    dup = _repeats(ids) & real  # a later occurrence of an id in its row
    unknown = real & ~known
    zero_ip = (known & (true == 0.0)) if truth.sparse else np.zeros_like(known)
    good = known & ~dup & ~zero_ip
    per_query, m = _recall(truth, k, good, true, scale, rtol)

    err = np.where(known, np.abs(rep - np.where(known, true, 0.0)), 0.0)
    err = np.where(np.isfinite(err), err, np.inf)  # a -inf or NaN score on a hit
    tol_s = rtol * scale
    mismatch = known & (err > tol_s)
    rel = np.where(known, err / scale, 0.0)

    hits = np.count_nonzero(real, axis=1)
    return _Verdicts(
        ids=ids,
        rep=rep,
        true=true,
        known=known,
        dup=dup,
        unknown=unknown,
        zero_ip=zero_ip,
        mismatch=mismatch,
        err=err,
        rel=rel,
        tol_s=tol_s,
        per_query=per_query,
        m=m,
        hits=hits,
        short=hits < m,
        misordered=_misordered(good, true, scale, rtol, k),
    )


def _first_problems(truth: _Truth, v: _Verdicts, rtol: float, k: int) -> tuple[str, ...]:
    """Descriptions of the first ``_MAX_PROBLEMS`` bad rows, one per row."""
    bad_rows = np.flatnonzero(
        v.dup.any(axis=1)
        | v.unknown.any(axis=1)
        | v.zero_ip.any(axis=1)
        | v.mismatch.any(axis=1)
        | v.misordered
        | v.short
    )
    return tuple(
        _describe_row(
            truth, int(i), v.ids[i], v.rep[i], v.true[i], v.dup[i], v.unknown[i], v.zero_ip[i],
            v.mismatch[i], bool(v.misordered[i]), bool(v.short[i]), int(v.m[i]), int(v.hits[i]),
            v.tol_s[i], rtol, k,
        )
        for i in bad_rows[:_MAX_PROBLEMS]
    )  # fmt: skip


def _evaluate(
    store_result: SearchResult, truth: _Truth, k: int, rtol: float | None
) -> FidelityReport:
    """The :class:`FidelityReport` of ``store_result`` checked against ``truth``."""
    rtol = default_rtol(truth.eff_dim) if rtol is None else float(rtol)
    if not rtol >= 0:
        raise ValueError(f"rtol must be >= 0, got {rtol!r}")
    if truth.nq == 0:
        return FidelityReport(k=k, per_query=np.zeros(0), recall=float("nan"), rtol=rtol)
    v = _verdicts(store_result, truth, k, rtol)
    real_err = v.err[v.known]
    return FidelityReport(
        k=k,
        per_query=v.per_query.astype(np.float64),
        recall=float(v.per_query.mean()),
        recall_min=float(v.per_query.min()),
        rtol=rtol,
        score_max_abs_error=float(real_err.max()) if real_err.size else 0.0,
        score_max_rel_error=float(v.rel[v.known].max()) if real_err.size else 0.0,
        n_score_mismatch=int(v.mismatch.sum()),
        n_score_mismatch_rows=int(v.mismatch.any(axis=1).sum()),
        n_unknown_ids=int(v.unknown.sum()),
        n_duplicate_ids=int(v.dup.sum()),
        n_zero_ip_hits=int(v.zero_ip.sum()),
        n_short_rows=int(v.short.sum()),
        n_misordered_rows=int(v.misordered.sum()),
        problems=_first_problems(truth, v, rtol, k),
    )


def ann_recall(
    store_result: SearchResult,
    docs: Any,
    doc_ids: Any = None,
    queries: Any = None,
    k: int | None = None,
    *,
    rtol: float | None = None,
) -> Any:
    """Recall@k and score truth of a store's result, recomputed from the vectors.

    Args:
        store_result: what the store returned for ``queries`` (at least ``k``
            columns).
        docs: the vectors the store indexed, dense ``(n, d)`` or CSR.
        doc_ids: their ids, ``(n,)`` int64, unique.
        queries: the query vectors, ``(nq, d)``, dense or CSR like ``docs``.
        k: cut-off.
        rtol: score tolerance relative to ``||q|| * ||x||``;
            default :func:`default_rtol` of the dimension.

    Returns:
        A :class:`FidelityReport`.

    Deprecated form: ``ann_recall(store_result, exact_result, k, rtol=1e-5)``
    (a :class:`SearchResult` as the second argument) still returns
    ``(per_query, mean)`` but cannot check ids or scores against vectors; it
    emits a ``DeprecationWarning``.
    """
    if isinstance(docs, SearchResult):
        warnings.warn(
            "ann_recall(store_result, exact_result, k) trusts reported scores; pass the "
            "indexed vectors: ann_recall(store_result, docs, doc_ids, queries, k)",
            DeprecationWarning,
            stacklevel=2,
        )
        legacy_k = doc_ids if k is None else k
        return _legacy_ann_recall(store_result, docs, legacy_k, rtol=1e-5 if rtol is None else rtol)
    if doc_ids is None or queries is None or k is None:
        raise TypeError("ann_recall needs store_result, docs, doc_ids, queries and k")
    k = check_int(k, "k", low=1)
    truth = _Truth(docs, doc_ids, queries)
    _check_result(store_result, "store_result", truth.nq, k)
    return _evaluate(store_result, truth, k, rtol)


def measure_fidelity(
    store: Any,
    collection: str,
    docs: Any,
    doc_ids: Any,
    queries: Any,
    k: int,
    *,
    rtol: float | None = None,
) -> FidelityReport:
    """Search ``queries`` in ``store`` and check the result against the truth.

    Args:
        store: any ``VectorStoreAdapter`` holding ``docs`` under ``doc_ids``
            in ``collection``.
        collection: the collection to search.
        docs, doc_ids, queries, k, rtol: see :func:`ann_recall`.

    Returns:
        A :class:`FidelityReport` with ``store_seconds`` (the search) and
        ``exact_seconds`` (the brute-force truth) filled in.
    """
    k = check_int(k, "k", low=1)
    t0 = time.perf_counter()
    got = store.search(collection, queries, k)
    t1 = time.perf_counter()
    rep = ann_recall(got, docs, doc_ids, queries, k, rtol=rtol)
    t2 = time.perf_counter()
    return dataclasses.replace(rep, store_seconds=t1 - t0, exact_seconds=t2 - t1)
