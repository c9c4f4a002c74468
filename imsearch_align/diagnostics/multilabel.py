"""Multi-label classification quality: mean average precision (CLIP_benchmark).

Per class c, rank the N samples by score (descending; ties by ascending
sample index), then ``AP_c = sum_{i: positive} precision@i / max(#pos_c, 1)``
with ``precision@i = #positives in the top i / i`` (torchnet's AP, which
CLIP_benchmark uses). A class with no positives scores 0 **and counts** in the
mean. On tie-free scores this equals scikit-learn's ``average_precision_score``
for every class that has a positive (sklearn groups tied scores, so with ties
the two differ).
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


def multilabel_map(scores: Any, targets: Any) -> MultiLabelResult:
    """CLIP_benchmark's multi-label mAP of ``scores (N, C)`` against binary ``targets (N, C)``."""
    s = check_matrix(scores, "scores", dtype=np.float64, min_rows=1)
    t = np.asarray(targets)
    if t.shape != s.shape:
        raise ValueError(f"targets must have the shape of scores {s.shape}, got {t.shape}")
    if t.dtype.kind not in "biuf" or not np.isin(t, (0, 1)).all():
        raise ValueError("targets must be binary (0/1 or bool)")
    t = t.astype(np.float64)
    order = np.argsort(-s, axis=0, kind="stable")
    tp = np.take_along_axis(t, order, axis=0)
    precision = np.cumsum(tp, axis=0) / np.arange(1, s.shape[0] + 1)[:, None]
    n_pos = t.sum(axis=0)
    ap = (precision * tp).sum(axis=0) / np.maximum(n_pos, 1.0)
    return MultiLabelResult(float(ap.mean()), ap, int((n_pos == 0).sum()))
