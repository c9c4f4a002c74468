"""A search's answer rows: no-hits, the tie rule and padding, closing the tie group at k.

* :func:`empty_result`: ``nq`` rows of ``k`` no-hits.
* :func:`finalize_rows`: pad to ``k`` and apply the tie rule *score
  descending, then doc id ascending* to each returned row.
* :func:`search_closing_ties`: ask an exact backend that orders equal scores
  arbitrarily for enough hits that the group tied at the k-th score is whole.

Plug-in authors import these from :mod:`imsearch_align.adapters.base`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from imsearch_align.framework.interfaces import SearchResult

__all__ = ["TIE_MARGIN", "empty_result", "finalize_rows", "search_closing_ties"]


def empty_result(nq: int, k: int) -> SearchResult:
    """``nq`` rows of ``k`` no-hits (id ``-1``, score ``-inf``)."""
    return SearchResult(
        ids=np.full((nq, k), -1, dtype=np.int64),
        scores=np.full((nq, k), -np.inf, dtype=np.float32),
    )


def finalize_rows(ids: np.ndarray, scores: np.ndarray, k: int) -> SearchResult:
    """Apply the tie rule to each row and pad it to ``k`` columns.

    Each row is reordered by (score descending, id ascending) with one
    vectorised ``np.lexsort`` (libraries such as faiss order equal scores
    arbitrarily); entries with id ``-1`` get score ``-inf`` and go last.
    Rows wider than ``k`` are cut to ``k``; narrower ones are padded.
    """
    ids = np.asarray(ids, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float32)
    if ids.shape[1] == k and ids.size and ids.min() >= 0 and (scores[:, :-1] > scores[:, 1:]).all():
        return SearchResult(ids=ids, scores=scores)  # full rows, strictly descending: as is
    scores = scores.copy()
    scores[ids < 0] = -np.inf
    if ids.shape[1]:
        # lexsort: last key is primary; mergesort keeps equal scores in id order.
        order = np.lexsort((ids, -scores), axis=1)
        ids = np.take_along_axis(ids, order, axis=1)
        scores = np.take_along_axis(scores, order, axis=1)
    ids, scores = ids[:, :k], scores[:, :k]
    if ids.shape[1] < k:
        pad = k - ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, pad)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, pad)), constant_values=-np.inf)
    return SearchResult(ids=ids, scores=scores)


#: Hits an exact store asks for beyond ``k`` (:func:`search_closing_ties`), so
#: that the group of documents tied at the k-th score is usually seen whole.
TIE_MARGIN = 8


def search_closing_ties(
    search: Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]],
    nq: int,
    n: int,
    k: int,
    *,
    max_limit: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Hits of an exact search whose backend orders equal scores arbitrarily.

    The tie rule chooses, among documents tied at the k-th score, those
    with the lowest ids; a backend that returns ``k`` hits has already
    chosen among them by its own order. So this asks ``search`` for
    ``k + TIE_MARGIN`` hits, and asks again with twice the limit for each
    row whose last returned score still equals its k-th score, until the
    group ends inside what came back, or every document has come back.
    :func:`finalize_rows` then orders the rows and keeps ``k``.

    Args:
        search: ``search(rows, limit)`` returns ``(ids, scores)`` of shape
            ``(len(rows), limit)`` (padded with ``-1`` / ``-inf``) for the
            query rows ``rows`` (int64 positions).
        nq: query rows.
        n: documents in the collection.
        k: hits wanted per row.
        max_limit: the backend's largest limit (a row still tied there
            keeps the backend's choice among the tied documents).

    Returns:
        ``(ids, scores)``, as wide as the widest limit asked.
    """
    cap = n if max_limit is None else min(n, max_limit)
    want = min(k, n)
    limit = max(1, min(cap, k + TIE_MARGIN))
    ids, scores = search(np.arange(nq, dtype=np.int64), limit)
    if limit <= want:
        return ids, scores
    todo = np.flatnonzero((scores[:, limit - 1] == scores[:, want - 1]) & (ids[:, limit - 1] >= 0))
    while todo.size and limit < cap:
        limit = min(cap, 2 * limit)
        more_ids, more_scores = search(todo, limit)
        width = ids.shape[1]
        ids = np.pad(ids, ((0, 0), (0, limit - width)), constant_values=-1)
        scores = np.pad(scores, ((0, 0), (0, limit - width)), constant_values=-np.inf)
        ids[todo], scores[todo] = more_ids, more_scores
        last = more_scores[:, limit - 1]
        todo = todo[(last == more_scores[:, want - 1]) & (more_ids[:, limit - 1] >= 0)]
    return ids, scores
