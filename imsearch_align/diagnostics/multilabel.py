"""Multi-label classification quality: mean average precision (CLIP_benchmark).

Per class c, rank the N samples by score (descending), then
``AP_c = sum_{i: positive} precision@i / max(#pos_c, 1)`` with
``precision@i = #positives in the top i / i`` (torchnet's AP, which
CLIP_benchmark uses). A class with no positives scores 0 **and counts** in the
mean. On tie-free scores this equals scikit-learn's ``average_precision_score``
for every class that has a positive.

Tied scores (equal, or within ``tol`` relative, chained as the rest of the
harness ties) are not ordered by sample index: ``AP_c`` is its expected value
over every order of the tied samples (McSherry and Najork, ECIR 2008). In a
group of ``n`` samples after ``b`` others, holding ``r`` positives with ``R``
positives before it, position ``j`` is positive with probability ``r / n``,
and then ``(j - 1)(r - 1)/(n - 1)`` of the ``j - 1`` before it are, so the
group adds ``sum_j (r / n)(R + 1 + (j - 1)(r - 1)/(n - 1)) / (b + j)``.
(scikit-learn instead gives the whole group the precision at its end, torchnet
the order of the samples' indices: neither is the expected value.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_matrix

__all__ = ["MultiLabelResult", "multilabel_map"]


@dataclass(frozen=True)
class MultiLabelResult:
    """Mean average precision over classes.

    Attributes:
        mean_average_precision: mean of ``per_class_ap`` over all classes.
        per_class_ap: ``(C,)`` AP of each class (0 for a class without positives).
        n_classes_without_positives: classes that scored 0 for lack of positives.
    """

    mean_average_precision: float
    per_class_ap: np.ndarray
    n_classes_without_positives: int


def multilabel_map(scores: Any, targets: Any, *, tol: float = 0.0) -> MultiLabelResult:
    """CLIP_benchmark's multi-label mAP of ``scores (N, C)`` against binary
    ``targets (N, C)``, tie-aware (module docstring): scores within ``tol``
    relative (``0``: equal scores) tie."""
    from imsearch_align.framework.ties import _is_link

    s = check_matrix(scores, "scores", dtype=np.float64, min_rows=1)
    t = np.asarray(targets)
    if t.shape != s.shape:
        raise ValueError(f"targets must have the shape of scores {s.shape}, got {t.shape}")
    if t.dtype.kind not in "biuf" or not np.isin(t, (0, 1)).all():
        raise ValueError("targets must be binary (0/1 or bool)")
    if not (isinstance(tol, int | float) and tol >= 0):
        raise ValueError(f"tol must be a number >= 0, got {tol!r}")
    t = t.astype(np.float64)
    n = s.shape[0]
    pos = np.arange(n)
    ap = np.zeros(s.shape[1])
    for c in range(s.shape[1]):
        order = np.argsort(-s[:, c], kind="stable")
        sc, rel = s[order, c], t[order, c]
        start = np.ones(n, dtype=bool)  # a tie group starts where the link breaks
        start[1:] = ~_is_link(sc[:-1], sc[1:], float(tol))
        g = np.cumsum(start) - 1
        first = np.flatnonzero(start)
        size = np.diff(np.append(first, n))
        r = np.bincount(g, weights=rel)
        before = np.concatenate(([0.0], np.cumsum(r)[:-1]))
        j = pos - first[g]  # 0-based position in the group
        share = np.where(size[g] > 1, (r[g] - 1) / np.maximum(size[g] - 1, 1), 0.0)
        term = (r[g] / size[g]) * (before[g] + 1 + j * share) / (pos + 1)
        ap[c] = term.sum() / max(rel.sum(), 1.0)
    n_pos = t.sum(axis=0)
    return MultiLabelResult(float(ap.mean()), ap, int((n_pos == 0).sum()))
