"""Linear probe: beats chance on synthetic classes, selects C on val, errors."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import balanced_accuracy_score

from imsearch_align.diagnostics.linear_probe import linear_probe


def _classes(n_per: int, n_cls: int, d: int, seed: int, spread: float = 1.0):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).standard_normal((n_cls, d))
    y = np.repeat(np.arange(n_cls), n_per)
    return centres[y] + spread * rng.standard_normal((len(y), d)), y


def test_beats_chance_and_matches_a_direct_refit():
    Xtr, ytr = _classes(40, 6, 16, 0)
    Xva, yva = _classes(10, 6, 16, 1)
    Xte, yte = _classes(30, 6, 16, 2)
    res = linear_probe(Xtr, ytr, Xte, yte, val_x=Xva, val_y=yva, seed=0)
    assert res.acc1 > 0.6  # chance is 1/6
    assert res.acc5 >= res.acc1
    assert (res.n_train, res.n_val, res.n_test) == (240, 60, 180)
    # Oracle: sklearn refit on train + val with the chosen C, normalised rows.
    norm = lambda a: a / np.linalg.norm(a, axis=1, keepdims=True)  # noqa: E731
    clf = LogisticRegression(C=res.C, max_iter=1000).fit(
        norm(np.vstack([Xtr, Xva])), np.r_[ytr, yva]
    )
    pred = clf.predict(norm(Xte))
    assert res.acc1 == pytest.approx(np.mean(pred == yte))
    assert res.mean_per_class_recall == pytest.approx(balanced_accuracy_score(yte, pred))


def test_fewshot_is_seeded_and_acc5_nan_below_five_classes():
    X, y = _classes(30, 3, 8, 3)
    Xte, yte = _classes(20, 3, 8, 4)
    other = linear_probe(X, y, Xte, yte, seed=6, fewshot_k=4)
    a = linear_probe(X, y, Xte, yte, seed=5, fewshot_k=4)
    b = linear_probe(X, y, Xte, yte, seed=5, fewshot_k=4)
    assert a.acc1 == b.acc1 and a.C == b.C and a.mean_per_class_recall == b.mean_per_class_recall
    assert a.n_train + a.n_val == 12 and a.fewshot_k == 4
    assert np.isnan(a.acc5)
    assert (other.acc1, other.val_acc1) != (a.acc1, a.val_acc1)  # another sample
    assert a.acc1 > 1 / 3


def test_single_class_raises():
    X, _ = _classes(10, 2, 4, 0)
    with pytest.raises(ValueError, match="at least 2 classes, got a single class"):
        linear_probe(X, np.zeros(len(X), int), X, np.zeros(len(X), int), seed=0)


def test_fewshot_larger_than_a_class_raises():
    X, y = _classes(3, 2, 4, 0)
    with pytest.raises(ValueError, match="fewshot_k = 5 but class 0 has only 3"):
        linear_probe(X, y, X, y, seed=0, fewshot_k=5)


def test_bad_shapes_raise():
    X, y = _classes(5, 2, 4, 0)
    with pytest.raises(ValueError, match="train_y must have shape"):
        linear_probe(X, y[:-1], X, y, seed=0)
    with pytest.raises(ValueError, match="test_x must have dimension 4"):
        linear_probe(X, y, X[:, :3], y, seed=0)
