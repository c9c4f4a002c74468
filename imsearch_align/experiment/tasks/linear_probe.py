"""Linear probe: a linear classifier on frozen image embeddings, raw and aligned.

CLIP_benchmark's linear probe: fit a linear classifier on the training
split's image embeddings and labels (its regularisation chosen on a
validation part of it), report top-1 and top-5 accuracy and the mean
per-class recall on the test split. ``procedure`` picks the classifier:
scikit-learn's logistic regression (``sklearn``, the default) or
CLIP_benchmark's own AdamW-trained layer and weight-decay search
(``clip_benchmark``); each is recorded in results with its definition.
Run twice, on the raw encoder embeddings and on the aligned ones, so the
table shows what the alignment keeps of the class information.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.result import TaskResult
from imsearch_align.experiment.tasks.base import Task, TaskUnsupportedError, require_labels
from imsearch_align.framework.registry import TASKS
from imsearch_align.framework.validation import is_sparse

__all__ = ["LinearProbe"]

#: Aligned sparse spaces are densified for the probe up to this many cells.
MAX_DENSE_CELLS = 200_000_000


def _labels(ds: Any, ids: np.ndarray) -> np.ndarray:
    return pd.Series(ds.labels, index=ds.images["image_id"].to_numpy()).loc[ids].to_numpy()


def _dense(m: Any, what: str) -> np.ndarray:
    if not is_sparse(m):
        return np.asarray(m)
    if m.shape[0] * m.shape[1] > MAX_DENSE_CELLS:
        raise ValueError(
            f"linear_probe: the aligned {what} space is sparse {m.shape}; densifying it would need "
            f"{m.shape[0] * m.shape[1] * 4 / 2**30:.1f} GiB: use fewer anchors (method_params)"
        )
    return m.toarray()


def _count(name: str, v: Any, *, optional: bool = False) -> None:
    """An integer >= 1 (None where optional), else a ConfigError naming the parameter."""
    from imsearch_align.framework.errors import ConfigError

    if optional and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ConfigError(
            f"task 'linear_probe' parameter {name} must be an integer >= 1, got {v!r}"
        )


def _number(
    name: str, v: Any, *, low: float, high: float | None = None, low_open: bool = False
) -> None:
    """A finite number in its range, else a ConfigError naming the parameter and the range."""
    from imsearch_align.framework.errors import ConfigError

    ok = isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v)
    ok = ok and (v > low if low_open else v >= low) and (high is None or v < high)
    if not ok:
        rng = f"{'(' if low_open else '['}{low:g}, {'inf' if high is None else f'{high:g}'})"
        raise ConfigError(f"task 'linear_probe' parameter {name} must be in {rng}, got {v!r}")


@TASKS.register("linear_probe")
class LinearProbe(Task):
    """Linear probe on raw and aligned image embeddings (CLIP_benchmark): sklearn or its own.

    Args:
        fewshot_k: training samples per class (None = all).
        Cs: inverse regularisation strengths tried on the validation split (``sklearn``).
        max_iter: solver iterations (``sklearn``).
        normalize: L2-normalise features first.
        procedure: ``"sklearn"`` (logistic regression) or ``"clip_benchmark"``
            (CLIP_benchmark's AdamW layer and weight-decay search, needs torch).
        lr, epochs, batch_size: the ``clip_benchmark`` procedure's training
            (CLIP_benchmark's defaults 0.1, 10, 64).
        val_proportion: share of the training images held out to choose the
            regularisation (0.2; in (0, 1)).

    Every value is checked when the task is made, before any data is loaded.
    """

    name = "linear_probe"
    measures = "raw_acc1, raw_acc5, aligned_acc1, aligned_acc5, *_mean_per_class_recall"
    source = "CLIP_benchmark linear probe"

    def __init__(
        self,
        fewshot_k: int | None = None,
        Cs: Sequence[float] | None = None,
        max_iter: int = 1000,
        normalize: bool = True,
        procedure: str = "sklearn",
        lr: float = 0.1,
        epochs: int = 10,
        batch_size: int = 64,
        val_proportion: float = 0.2,
    ) -> None:
        from imsearch_align.diagnostics.linear_probe import DEFAULT_CS, check_procedure
        from imsearch_align.experiment.config import ConfigError

        try:  # refused before any data is loaded
            self.procedure = check_procedure(procedure)
        except ValueError as exc:
            raise ConfigError(f"task 'linear_probe' parameter {exc}") from None

        _count("fewshot_k", fewshot_k, optional=True)
        _count("max_iter", max_iter)
        _count("epochs", epochs)
        _count("batch_size", batch_size)
        _number("lr", lr, low=0.0, low_open=True)
        _number("val_proportion", val_proportion, low=0.0, high=1.0, low_open=True)
        self.fewshot_k = fewshot_k
        self.Cs = tuple(float(c) for c in (Cs if Cs is not None else DEFAULT_CS))
        self.max_iter = int(max_iter)
        self.normalize = bool(normalize)
        self.lr, self.epochs, self.batch_size = float(lr), int(epochs), int(batch_size)
        self.val_proportion = float(val_proportion)

    def params(self) -> dict[str, Any]:
        return {
            "fewshot_k": self.fewshot_k,
            "Cs": list(self.Cs),
            "max_iter": self.max_iter,
            "normalize": self.normalize,
            "procedure": self.procedure,
            "lr": self.lr,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "val_proportion": self.val_proportion,
        }

    def check(self, data: Any, config: Any) -> None:
        ds = data.dataset
        require_labels(ds, self.name)
        for split in ("train", "test"):
            if len(ds.split_ids(split, "image")) == 0:
                raise TaskUnsupportedError(
                    f"task 'linear_probe' trains on the 'train' split's labelled images and tests on "
                    f"'test'; dataset {ds.name!r} has no {split!r} images"
                )
        if self.procedure == "clip_benchmark":
            from imsearch_align.diagnostics.linear_probe_torch import require_torch

            try:
                require_torch()
            except ImportError as exc:
                raise TaskUnsupportedError(str(exc)) from None

    def run(self, ctx: Any) -> TaskResult:
        from imsearch_align.diagnostics.linear_probe import PROCEDURES, linear_probe

        ds = ctx.dataset
        train_ids, test_ids = ctx.ids("image", "train"), ctx.ids("image", "test")
        y_train, y_test = _labels(ds, train_ids), _labels(ds, test_ids)
        spaces = {
            "raw": (ctx.raw("image", "train"), ctx.raw("image", "test")),
            "aligned": (
                _dense(ctx.transform("image", ctx.raw("image", "train")), "train"),
                _dense(ctx.aligned("image"), "test"),
            ),
        }
        metrics: dict[str, float] = {}
        details: dict[str, Any] = {"params": self.params(), "procedure": PROCEDURES[self.procedure]}
        for space, (Xtr, Xte) in spaces.items():
            with ctx.clock("probe_s"):
                r = linear_probe(
                    Xtr,
                    y_train,
                    Xte,
                    y_test,
                    seed=ctx.config.seed,
                    fewshot_k=self.fewshot_k,
                    Cs=self.Cs,
                    normalize=self.normalize,
                    max_iter=self.max_iter,
                    procedure=self.procedure,
                    lr=self.lr,
                    epochs=self.epochs,
                    batch_size=self.batch_size,
                    val_proportion=self.val_proportion,
                )
            metrics[f"{space}_acc1"] = r.acc1
            metrics[f"{space}_acc5"] = r.acc5
            metrics[f"{space}_mean_per_class_recall"] = r.mean_per_class_recall
            details[space] = {
                **({"C": r.C} if self.procedure == "sklearn" else {"weight_decay": r.weight_decay}),
                "val_acc1": r.val_acc1,
                "n_train": r.n_train,
                "n_val": r.n_val,
                "n_test": r.n_test,
            }
        return TaskResult(self.name, {}, metrics, details)
