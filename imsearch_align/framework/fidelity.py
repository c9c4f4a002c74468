"""ANN fidelity: recall@k of a store's results against exact search.

Definition (tie-tolerant, as ann-benchmarks and faiss contrib do it). For
query ``i`` let ``E_i`` be the exact top-k ids (the real hits among the
first ``k`` columns of the exact result, ``m_i = |E_i| = min(k, n)``) and
``t_i`` the exact score of the last of them. A distinct id returned by the
store in its first ``k`` columns counts as found if it is in ``E_i``, or if
the score the store reports for it is at least ``t_i - tol_i`` with
``tol_i = rtol * max(1, |t_i|)``: a doc tied with the k-th neighbour is as
good an answer as the one exact search happened to keep. Then

    recall_i = min(found_i, m_i) / m_i      (1.0 when m_i = 0: nothing to find)

and ``recall@k`` is the mean over queries. ``rtol`` absorbs float32
rounding between libraries that sum in a different order (about 1e-6
relative for 512-d dot products).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.validation import check_int

__all__ = ["FidelityReport", "ann_recall", "measure_fidelity"]


@dataclass(frozen=True)
class FidelityReport:
    """Recall@k of a store against exact search on the same queries.

    Attributes:
        k: cut-off.
        per_query: ``(nq,)`` float64 recall of each query.
        recall: mean of ``per_query`` (``recall@k``).
        store_seconds: wall time of the store's search.
        exact_seconds: wall time of the exact search.
    """

    k: int
    per_query: np.ndarray
    recall: float
    store_seconds: float = float("nan")
    exact_seconds: float = float("nan")


def ann_recall(
    store_result: SearchResult, exact_result: SearchResult, k: int, *, rtol: float = 1e-5
) -> tuple[np.ndarray, float]:
    """Tie-tolerant recall@k per query and its mean (see the module docstring).

    Args:
        store_result: the store's result, at least ``k`` columns.
        exact_result: exact search of the same queries, at least ``k`` columns.
        k: cut-off.
        rtol: relative score tolerance for ties at the k-th exact score.

    Returns:
        ``(per_query, mean)``: ``(nq,)`` float64 recalls and their mean.
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
    last = np.maximum(m - 1, 0)
    t = np.where(m > 0, e_sc[np.arange(nq), last], np.inf).astype(np.float64)
    tol = rtol * np.maximum(1.0, np.abs(np.where(np.isfinite(t), t, 0.0)))

    # distinct, real returned ids only: sort each row and drop repeats
    order = np.argsort(s_ids, axis=1, kind="stable")
    ids_sorted = np.take_along_axis(s_ids, order, axis=1)
    sc_sorted = np.take_along_axis(s_sc, order, axis=1).astype(np.float64)
    first = np.ones_like(ids_sorted, dtype=bool)
    first[:, 1:] = ids_sorted[:, 1:] != ids_sorted[:, :-1]
    valid = first & (ids_sorted >= 0)

    # membership in the exact row, in query blocks to bound the (b, k, k) cube
    in_exact = np.empty_like(valid)
    step = max(1, (1 << 24) // (k * k))
    for q0 in range(0, nq, step):
        sl = slice(q0, q0 + step)
        hit = ids_sorted[sl, :, None] == np.where(e_real[sl], e_ids[sl], -2)[:, None, :]
        in_exact[sl] = hit.any(axis=2)
    tied = sc_sorted >= (t - tol)[:, None]
    found = np.count_nonzero(valid & (in_exact | tied), axis=1)
    per_query = np.where(m > 0, np.minimum(found, m) / np.maximum(m, 1), 1.0)
    return per_query, float(per_query.mean())


def measure_fidelity(
    store: Any,
    collection: str,
    exact_store: Any,
    exact_collection: str,
    queries: Any,
    k: int,
    *,
    rtol: float = 1e-5,
) -> FidelityReport:
    """Search ``queries`` in both stores and report the store's recall@k.

    Args:
        store: the store under test (any ``VectorStoreAdapter``).
        collection: its collection.
        exact_store: a store with exact search, normally ``ExactStore``,
            holding the same vectors and ids.
        exact_collection: its collection.
        queries: query vectors (dense or CSR, as the collections expect).
        k: cut-off.
        rtol: see :func:`ann_recall`.
    """
    k = check_int(k, "k", low=1)
    t0 = time.perf_counter()
    got = store.search(collection, queries, k)
    t1 = time.perf_counter()
    ref = exact_store.search(exact_collection, queries, k)
    t2 = time.perf_counter()
    per_query, mean = ann_recall(got, ref, k, rtol=rtol)
    return FidelityReport(
        k=k, per_query=per_query, recall=mean, store_seconds=t1 - t0, exact_seconds=t2 - t1
    )
