"""CLIP_benchmark multi-label mAP against scikit-learn and hand cases."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from imsearch_align.diagnostics.multilabel import multilabel_map


def test_equals_sklearn_on_tie_free_scores_and_empty_class_counts_zero():
    rng = np.random.default_rng(0)
    scores = rng.random((200, 12))
    targets = rng.random((200, 12)) < 0.2
    targets[:, 5] = False  # a class with no positives
    res = multilabel_map(scores, targets)
    for c in range(12):
        want = 0.0 if c == 5 else average_precision_score(targets[:, c], scores[:, c])
        assert res.per_class_ap[c] == pytest.approx(want, abs=1e-12)
    assert res.mean_average_precision == pytest.approx(res.per_class_ap.sum() / 12, abs=1e-15)
    assert res.n_classes_without_positives == 1


def test_hand_cases():
    # Ranking 1, 0, 1: AP = (1/1 + 2/3) / 2.
    assert multilabel_map([[0.9], [0.8], [0.7]], [[1], [0], [1]]).per_class_ap[0] == pytest.approx(
        (1 + 2 / 3) / 2
    )
    # Tied scores rank by ascending sample index (sklearn would give 0.5 too here,
    # but for the reason of grouping: index order is the documented rule).
    assert multilabel_map([[0.5], [0.5]], [[0], [1]]).per_class_ap[0] == 0.5
    assert multilabel_map([[0.5], [0.5]], [[1], [0]]).per_class_ap[0] == 1.0


def test_bad_targets():
    with pytest.raises(ValueError, match="targets must have the shape"):
        multilabel_map(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="binary"):
        multilabel_map(np.zeros((3, 2)), np.full((3, 2), 2))
