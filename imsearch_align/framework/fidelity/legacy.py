"""The deprecated form ``ann_recall(store_result, exact_result, k)``: recall from reported scores.

It trusts the scores both results report, so it cannot check ids or scores
against the vectors; :func:`~imsearch_align.framework.fidelity.ann_recall`
still answers it, with a ``DeprecationWarning``, for old callers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.validation import check_int


def _legacy_ann_recall(
    store_result: SearchResult, exact_result: SearchResult, k: Any, *, rtol: float
) -> tuple[np.ndarray, float]:
    """The deprecated score-based recall, with ties limited to ``[t - tol, t + tol]``.

    A returned id counts when it is in the exact top-k, or when its reported
    score is within ``tol`` of the exact k-th score (a tie). A reported score
    *above* the k-th exact score for an id outside the exact top-k is a lie
    (such a document would be in the exact top-k), so it no longer counts.
    """
    for name, res in (("store_result", store_result), ("exact_result", exact_result)):
        if not isinstance(res, SearchResult):
            raise TypeError(f"{name} must be a SearchResult, got {type(res).__name__}")
    k = check_int(k, "k", low=1)
    if store_result.nq != exact_result.nq:
        raise ValueError(
            f"store_result has {store_result.nq} queries, exact_result has {exact_result.nq}"
        )
    for name, res in (("store_result", store_result), ("exact_result", exact_result)):
        if res.k < k:
            raise ValueError(f"{name} must have at least k={k} columns, got {res.k}")
    if not rtol >= 0:
        raise ValueError(f"rtol must be >= 0, got {rtol!r}")
    nq = store_result.nq
    if nq == 0:
        return np.zeros(0), float("nan")
    e_ids, e_sc = exact_result.ids[:, :k], exact_result.scores[:, :k]
    s_ids, s_sc = store_result.ids[:, :k], store_result.scores[:, :k]
    e_real = e_ids >= 0
    m = e_real.sum(axis=1)
    t = np.where(m > 0, e_sc[np.arange(nq), np.maximum(m - 1, 0)], np.inf).astype(np.float64)
    tol = rtol * np.maximum(1.0, np.abs(np.where(np.isfinite(t), t, 0.0)))
    order = np.argsort(s_ids, axis=1, kind="stable")
    ids_sorted = np.take_along_axis(s_ids, order, axis=1)
    sc_sorted = np.take_along_axis(s_sc, order, axis=1).astype(np.float64)
    first = np.ones_like(ids_sorted, dtype=bool)
    first[:, 1:] = ids_sorted[:, 1:] != ids_sorted[:, :-1]
    valid = first & (ids_sorted >= 0)
    in_exact = np.empty_like(valid)
    step = max(1, (1 << 24) // (k * k))
    for q0 in range(0, nq, step):
        sl = slice(q0, q0 + step)
        hit = ids_sorted[sl, :, None] == np.where(e_real[sl], e_ids[sl], -2)[:, None, :]
        in_exact[sl] = hit.any(axis=2)
    tied = np.abs(sc_sorted - t[:, None]) <= tol[:, None]
    found = np.count_nonzero(valid & (in_exact | tied), axis=1)
    per_query = np.where(m > 0, np.minimum(found, m) / np.maximum(m, 1), 1.0)
    return per_query, float(per_query.mean())
