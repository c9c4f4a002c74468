"""ann-benchmarks' recall rule, written once (:func:`tie_tolerant_recall`)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["tie_tolerant_recall"]


def tie_tolerant_recall(
    true: np.ndarray, kth: np.ndarray, m: Any, scale: Any, rtol: float
) -> np.ndarray:
    """ann-benchmarks' recall rule, written once for every caller (the store check here,
    the collection study's :func:`~imsearch_align.collection.recall.ann_recall_at_k`).

    A returned entry is found when its true score is at least
    ``t_k - rtol * max(|t_k|, scale)``: a document tied with the true k-th
    within float rounding is as good an answer. ``recall_i = min(found_i, m_i) / m_i``
    (1 where ``m_i = 0``).

    Args:
        true: ``(nq, k)`` true scores of the returned entries; ``-inf`` for an entry
            that cannot count (padding, a repeat, an unknown id, below the truth).
        kth: ``(nq,)`` the true k-th score of each query.
        m: hits expected per query (an int or ``(nq,)``).
        scale: the score scale ``||q|| ||x||``, broadcastable to ``true``.
        rtol: the tolerance relative to the scale.
    """
    tol = rtol * np.maximum(np.abs(np.where(np.isfinite(kth), kth, 0.0))[:, None], scale)
    found = true >= (kth[:, None] - tol)
    n_found = np.count_nonzero(found, axis=1)
    m = np.broadcast_to(np.asarray(m), n_found.shape)
    return np.where(m > 0, np.minimum(n_found, m) / np.maximum(m, 1), 1.0)
