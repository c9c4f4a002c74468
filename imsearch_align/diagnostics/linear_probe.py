"""Linear probe on frozen image embeddings (CLIP_benchmark's ``linear_probe`` task, on CPU).

Two procedures (:data:`PROCEDURES`), on the same splits:

* ``"sklearn"`` (the default): a multinomial scikit-learn
  ``LogisticRegression`` (lbfgs) is fitted on frozen (by default
  L2-normalised) features. The inverse regularisation ``C`` is chosen on a
  validation split (the given one, or a seeded stratified ``val_proportion``
  of the training data), then the probe is refitted on train + val with that
  ``C`` and scored on the test split. ``fewshot_k`` keeps ``k`` seeded
  samples per class of the training data (validation drawn from them when
  not given).
* ``"clip_benchmark"``: CLIP_benchmark's own procedure
  (:mod:`~imsearch_align.diagnostics.linear_probe_torch`): a torch linear
  layer trained with AdamW, its weight decay searched on the validation split
  (none and weight decay 0 with ``val_proportion=None`` and no ``val_x``);
  in few-shot mode the validation split is drawn before the ``k`` samples per
  class, and the final layer is trained on those alone.

Reported: ``acc1``, ``acc5`` (nan with fewer than 5 classes for ``sklearn``,
6 for ``clip_benchmark``) and ``mean_per_class_recall`` (scikit-learn
``balanced_accuracy_score``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_int, check_matrix

__all__ = ["DEFAULT_CS", "PROCEDURES", "LinearProbeResult", "check_procedure", "linear_probe"]

#: Candidate inverse regularisation strengths, swept on the validation split.
DEFAULT_CS: tuple[float, ...] = (0.01, 0.1, 1.0, 10.0, 100.0)

#: The probe procedures, each with its definition (as recorded in results).
PROCEDURES: dict[str, str] = {
    "sklearn": (
        "scikit-learn LogisticRegression (lbfgs, multinomial) on the frozen features; C chosen "
        "on the validation split among Cs, then refitted on train + val"
    ),
    "clip_benchmark": (
        "CLIP_benchmark's linear probe: a torch Linear layer trained with AdamW on "
        "cross-entropy (cosine learning rate from lr, default 0.1; 10 epochs, batches of 64 by "
        "default; seeded); weight decay searched on the validation split over "
        "logspace(-6, 2, 97), then trained on train + val (few-shot: validation drawn apart, "
        "final layer on the k shots only); weight decay 0 without validation; top-5 from 6 "
        "classes"
    ),
}


@dataclass(frozen=True)
class LinearProbeResult:
    """Test-split quality of the linear probe.

    Attributes:
        acc1: top-1 accuracy.
        acc5: top-5 accuracy (nan with fewer than 5 classes).
        mean_per_class_recall: mean over test classes of per-class recall.
        C: the regularisation chosen on validation (``sklearn``; nan otherwise).
        val_acc1: validation top-1 accuracy at that ``C`` or weight decay
            (nan without a validation split).
        n_train, n_val, n_test: split sizes (after few-shot sampling).
        fewshot_k: samples per class kept, or None for all.
        normalized: whether features were L2-normalised.
        procedure: the procedure (a key of :data:`PROCEDURES`).
        weight_decay: the weight decay chosen (``clip_benchmark``; nan otherwise).
    """

    acc1: float
    acc5: float
    mean_per_class_recall: float
    C: float
    val_acc1: float
    n_train: int
    n_val: int
    n_test: int
    fewshot_k: int | None
    normalized: bool
    procedure: str = "sklearn"
    weight_decay: float = float("nan")


def _features(x: Any, name: str, normalize: bool, dim: int | None = None) -> np.ndarray:
    m = check_matrix(x, name, dtype=np.float64, min_rows=1, dim=dim)
    if normalize:
        norms = np.linalg.norm(m, axis=1, keepdims=True)
        m = m / np.where(norms == 0, 1.0, norms)
    return m


def _labels(y: Any, name: str, n: int) -> np.ndarray:
    arr = np.asarray(y)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    return arr


def _fewshot(y: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    keep = []
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        if len(idx) < k:
            raise ValueError(
                f"fewshot_k = {k} but class {c.item()!r} has only {len(idx)} training samples"
            )
        keep.append(rng.choice(idx, k, replace=False))
    return np.sort(np.concatenate(keep))


def _split_validation(
    X: np.ndarray, y: np.ndarray, n_classes: int, val_proportion: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, X_val, y_train, y_val)``: a seeded ``val_proportion`` of the
    training data held out, stratified when every class has two samples."""
    from sklearn.model_selection import train_test_split

    if not 0.0 < val_proportion < 1.0:
        raise ValueError(f"val_proportion must be in (0, 1), got {val_proportion!r}")
    _, counts = np.unique(y, return_counts=True)
    # Stratify when every class can give one sample to each side.
    strat = y if counts.min() >= 2 else None
    n_val = max(n_classes, round(val_proportion * len(y))) if strat is not None else None
    return train_test_split(
        X,
        y,
        test_size=n_val if n_val is not None else val_proportion,
        random_state=int(rng.integers(2**31 - 1)),
        stratify=strat,
    )


def _fit(X: np.ndarray, y: np.ndarray, C: float, max_iter: int) -> Any:
    """A multinomial logistic regression fitted on ``(X, y)``, convergence warnings silenced."""
    from sklearn.linear_model import LogisticRegression

    clf = LogisticRegression(C=C, max_iter=max_iter)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*converge.*")
        return clf.fit(X, y)


def _choose_c(
    Xtr: np.ndarray,
    ytr: np.ndarray,
    Xva: np.ndarray,
    yva: np.ndarray,
    Cs: Sequence[float],
    max_iter: int,
) -> tuple[float, float]:
    """``(C, validation top-1)`` of the best ``C``; ascending ``C``, so on equal
    validation accuracy the stronger regularisation wins."""
    best_c, best_acc = None, -1.0
    for C in sorted(float(c) for c in Cs):
        acc = float(np.mean(_fit(Xtr, ytr, C, max_iter).predict(Xva) == yva))
        if acc > best_acc:
            best_c, best_acc = C, acc
    return best_c, best_acc


def _score_test(clf: Any, Xte: np.ndarray, yte: np.ndarray) -> tuple[float, float, float]:
    """``(acc1, acc5, mean per-class recall)`` of the fitted probe on the test split."""
    from sklearn.metrics import balanced_accuracy_score

    proba = clf.predict_proba(Xte)
    rank = np.argsort(-proba, axis=1, kind="stable")
    pred = clf.classes_[rank[:, 0]]
    acc1 = float(np.mean(pred == yte))
    n_cls = len(clf.classes_)
    acc5 = (
        float(np.mean((clf.classes_[rank[:, :5]] == yte[:, None]).any(axis=1)))
        if n_cls >= 5
        else float("nan")
    )
    with warnings.catch_warnings():
        # A class predicted but absent from the test labels is not an error here.
        warnings.simplefilter("ignore", UserWarning)
        mpcr = float(balanced_accuracy_score(yte, pred))
    return acc1, acc5, mpcr


def check_procedure(procedure: Any) -> str:
    """``procedure`` if it names one of :data:`PROCEDURES`, else ValueError with the list."""
    if not isinstance(procedure, str) or procedure not in PROCEDURES:
        raise ValueError(
            f"procedure must be one of {', '.join(map(repr, PROCEDURES))}, got {procedure!r}"
        )
    return procedure


#: ``(X, y)`` of a split.
_Split = tuple[np.ndarray, np.ndarray]


def _sklearn_probe(
    train: _Split,
    given_val: Any,
    test: _Split,
    n_classes: int,
    rng: np.random.Generator,
    *,
    fewshot_k: int | None,
    val_proportion: float,
    Cs: Sequence[float],
    max_iter: int,
) -> tuple[dict[str, float], int, int]:
    """The ``sklearn`` procedure: ``(scores, n_train, n_val)``; validation (when
    ``given_val()`` is None) drawn from the few-shot training samples."""
    Xtr, ytr = train
    if fewshot_k is not None:
        keep = _fewshot(ytr, fewshot_k, rng)
        Xtr, ytr = Xtr[keep], ytr[keep]
    val = given_val()
    if val is None and val_proportion is None:
        raise ValueError(
            "val_proportion=None (no validation split) is for procedure 'clip_benchmark'; "
            "'sklearn' chooses C on a validation split"
        )
    if val is None:
        Xtr, Xva, ytr, yva = _split_validation(Xtr, ytr, n_classes, val_proportion, rng)
    else:
        Xva, yva = val
    if len(np.unique(ytr)) < 2:
        raise ValueError("the training split holds a single class after the validation split")
    best_c, best_acc = _choose_c(Xtr, ytr, Xva, yva, Cs, max_iter)
    clf = _fit(np.vstack([Xtr, Xva]), np.concatenate([ytr, yva]), best_c, max_iter)
    acc1, acc5, mpcr = _score_test(clf, *test)
    scores = {"acc1": acc1, "acc5": acc5, "mean_per_class_recall": mpcr}
    return scores | {"C": float(best_c), "val_acc1": best_acc}, len(ytr), len(yva)


def _codes(classes: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Index of each label in ``classes`` (sorted), -1 for a label not among them."""
    pos = np.minimum(np.searchsorted(classes, y), len(classes) - 1)
    return np.where(classes[pos] == y, pos, -1)


def _clip_benchmark_probe(
    train: _Split,
    given_val: Any,
    test: _Split,
    classes: np.ndarray,
    rng: np.random.Generator,
    *,
    fewshot_k: int | None,
    val_proportion: float | None,
    seed: int,
    **torch_params: Any,
) -> tuple[dict[str, float], int, int]:
    """The ``clip_benchmark`` procedure: ``(scores, n_train, n_val)``; validation
    (when ``given_val()`` is None) drawn from the training data before the
    few-shot samples, or none with ``val_proportion=None``."""
    from imsearch_align.diagnostics.linear_probe_torch import clip_benchmark_probe

    Xtr, ytr = train
    val = given_val()
    if val is None and val_proportion is not None:
        Xtr, Xva, ytr, yva = _split_validation(Xtr, ytr, len(classes), val_proportion, rng)
        val = (Xva, yva)
    if fewshot_k is not None:
        keep = _fewshot(ytr, fewshot_k, rng)
        Xtr, ytr = Xtr[keep], ytr[keep]
    if len(np.unique(ytr)) < 2:
        raise ValueError("the training split holds a single class after the validation split")
    r = clip_benchmark_probe(
        Xtr,
        _codes(classes, ytr),
        None if val is None else val[0],
        None if val is None else _codes(classes, val[1]),
        test[0],
        _codes(classes, test[1]),
        n_classes=len(classes),
        fewshot=fewshot_k is not None,
        seed=seed,
        **torch_params,
    )
    scores = {"acc1": r.acc1, "acc5": r.acc5, "mean_per_class_recall": r.mean_per_class_recall}
    scores |= {"weight_decay": r.weight_decay, "val_acc1": r.val_acc1}
    return scores, len(ytr), 0 if val is None else len(val[1])


def linear_probe(
    train_x: Any,
    train_y: Any,
    test_x: Any,
    test_y: Any,
    *,
    val_x: Any = None,
    val_y: Any = None,
    seed: int,
    fewshot_k: int | None = None,
    val_proportion: float | None = 0.2,
    Cs: Sequence[float] = DEFAULT_CS,
    normalize: bool = True,
    max_iter: int = 1000,
    procedure: str = "sklearn",
    lr: float = 0.1,
    epochs: int = 10,
    batch_size: int = 64,
) -> LinearProbeResult:
    """Fit a linear probe by ``procedure``, choosing its regularisation on validation; score on test.

    ``Cs`` and ``max_iter`` are the ``sklearn`` procedure's; ``lr``, ``epochs``
    and ``batch_size`` the ``clip_benchmark`` one's (CLIP_benchmark's defaults).
    ``val_proportion=None`` (no validation: weight decay 0) is for ``clip_benchmark``.

    Raises:
        ValueError: an unknown procedure, fewer than two classes in the training
            labels, a class with fewer than ``fewshot_k`` samples, bad shapes or
            parameters.
        ImportError: ``clip_benchmark`` without torch installed.
    """
    check_procedure(procedure)
    Xtr = _features(train_x, "train_x", normalize)
    d = Xtr.shape[1]
    ytr = _labels(train_y, "train_y", len(Xtr))
    Xte = _features(test_x, "test_x", normalize, dim=d)
    yte = _labels(test_y, "test_y", len(Xte))
    classes = np.unique(ytr)
    if len(classes) < 2:
        raise ValueError(
            f"train_y must contain at least 2 classes, got a single class {classes.tolist()}"
        )
    if procedure == "sklearn" and (not Cs or any(not (c > 0) for c in Cs)):
        raise ValueError(f"Cs must be a non-empty sequence of positive numbers, got {Cs!r}")
    if (val_x is None) != (val_y is None):
        raise ValueError("val_x and val_y must be given together")
    rng = np.random.default_rng(seed)
    k = None if fewshot_k is None else check_int(fewshot_k, "fewshot_k", low=1)

    def given_val() -> _Split | None:
        if val_x is None:
            return None
        Xva = _features(val_x, "val_x", normalize, dim=d)
        return Xva, _labels(val_y, "val_y", len(Xva))

    splits = ((Xtr, ytr), given_val, (Xte, yte))
    if procedure == "sklearn":
        scores, n_train, n_val = _sklearn_probe(
            *splits,
            len(classes),
            rng,
            fewshot_k=k,
            val_proportion=val_proportion,
            Cs=Cs,
            max_iter=max_iter,
        )
    else:
        scores, n_train, n_val = _clip_benchmark_probe(
            *splits,
            classes,
            rng,
            fewshot_k=k,
            val_proportion=val_proportion,
            seed=seed,
            lr=float(lr),
            epochs=check_int(epochs, "epochs", low=1),
            batch_size=check_int(batch_size, "batch_size", low=1),
        )
    return LinearProbeResult(
        acc1=scores["acc1"],
        acc5=scores["acc5"],
        mean_per_class_recall=scores["mean_per_class_recall"],
        C=scores.get("C", float("nan")),
        val_acc1=scores["val_acc1"],
        n_train=n_train,
        n_val=n_val,
        n_test=len(yte),
        fewshot_k=None if fewshot_k is None else int(fewshot_k),
        normalized=normalize,
        procedure=procedure,
        weight_decay=scores.get("weight_decay", float("nan")),
    )
