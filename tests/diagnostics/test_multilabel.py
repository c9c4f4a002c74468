"""CLIP_benchmark multi-label mAP against scikit-learn and hand cases."""

from __future__ import annotations

import itertools

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
    # Tied scores: the expected AP over both orders, whichever sample comes first
    # in the table ((1/2 + 1) / 2; torchnet's index order gave 0.5 or 1.0).
    assert multilabel_map([[0.5], [0.5]], [[0], [1]]).per_class_ap[0] == 0.75
    assert multilabel_map([[0.5], [0.5]], [[1], [0]]).per_class_ap[0] == 0.75


def _brute_force_ap(scores, rel, tol):
    """Mean AP over every order of the tied samples (equal within tol, chained)."""
    from imsearch_align.framework.ties import _is_link

    order = np.argsort(-scores, kind="stable")
    sc, rl = scores[order], rel[order]
    groups, cur = [], [0]
    for i in range(1, len(sc)):
        if _is_link(sc[i - 1], sc[i], tol):
            cur.append(i)
        else:
            groups.append(cur)
            cur = [i]
    groups.append(cur)
    aps = []
    for perm in itertools.product(*(itertools.permutations(g) for g in groups)):
        seq = rl[[i for g in perm for i in g]]
        hits = np.cumsum(seq)
        aps.append(float((seq * hits / np.arange(1, len(seq) + 1)).sum() / max(seq.sum(), 1)))
    return float(np.mean(aps))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tol", [0.0, 1e-6])
def test_tied_scores_give_the_expected_ap_over_every_order(seed, tol):
    """Against brute force over every order of every tie group, and the same
    whatever order the samples come in."""
    rng = np.random.default_rng(seed)
    n = 8
    scores = rng.integers(0, 3, n).astype(np.float64)  # groups of equal scores
    scores += rng.choice([0.0, 1e-7, 0.25], n) * (tol > 0)  # near-ties chain within tol
    rel = (rng.random(n) < 0.5).astype(float)
    got = multilabel_map(scores[:, None], rel[:, None], tol=tol).per_class_ap[0]
    assert got == pytest.approx(_brute_force_ap(scores, rel, tol), abs=1e-12)
    p = rng.permutation(n)
    again = multilabel_map(scores[p, None], rel[p, None], tol=tol).per_class_ap[0]
    assert again == pytest.approx(got, abs=1e-12)


def test_bad_targets():
    with pytest.raises(ValueError, match="targets must have the shape"):
        multilabel_map(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="binary"):
        multilabel_map(np.zeros((3, 2)), np.full((3, 2), 2))
