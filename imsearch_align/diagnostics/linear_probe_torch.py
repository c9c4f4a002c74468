"""CLIP_benchmark's linear-probe procedure on CPU: a torch linear layer, AdamW, weight-decay search.

The ``procedure="clip_benchmark"`` half of
:func:`~imsearch_align.diagnostics.linear_probe.linear_probe`, on splits it has
already drawn. The algorithm is CLIP_benchmark's
(``clip_benchmark/metrics/linear_probe.py``), run in float32 without autocast:

* a ``torch.nn.Linear`` (as many outputs as training classes) trained with
  ``AdamW`` on cross-entropy, the learning rate following a cosine schedule
  without warm-up, set before every step; the batches come from a shuffled
  loader; ``torch.manual_seed(seed)`` before each training, so every weight
  decay starts from the same layer and sees the same batches;
* with a validation split, the weight decay is searched over
  ``numpy.logspace(-6, 2, 97)``: first its 7 decade points, then around the
  best one at spans 8, 4, 2, 1 (the left, the peak, the right), the first of
  the best validation top-1 winning (index 0 when none is above 0); the final
  layer is trained on train + val, or on the few-shot training samples only;
* without a validation split there is no search: weight decay 0;
* top-1 and, from 6 classes, top-5 accuracy (``topk``), the mean per-class
  recall of the ``argmax`` prediction.

The torch random state of the caller is left as it was.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.framework.optional import require

__all__ = ["WEIGHT_DECAYS", "TorchProbeScores", "clip_benchmark_probe", "require_torch"]

#: The weight decays searched on validation (CLIP_benchmark's grid).
WEIGHT_DECAYS: tuple[float, ...] = tuple(np.logspace(-6, 2, num=97).tolist())
#: The grid's points tried first: those equal to a decade of ``logspace(-6, 2, 7)``.
_COARSE: tuple[int, ...] = tuple(
    i for i, wd in enumerate(WEIGHT_DECAYS) if wd in np.logspace(-6, 2, num=7).tolist()
)


@dataclass(frozen=True)
class TorchProbeScores:
    """Test-split quality of the CLIP_benchmark probe.

    Attributes:
        acc1: top-1 accuracy.
        acc5: top-5 accuracy (nan with fewer than 6 classes).
        mean_per_class_recall: balanced accuracy of the top-1 prediction.
        weight_decay: the weight decay of the final layer (0 without validation).
        val_acc1: validation top-1 at that weight decay (nan without validation).
    """

    acc1: float
    acc5: float
    mean_per_class_recall: float
    weight_decay: float
    val_acc1: float


def require_torch() -> Any:
    """The ``torch`` module, or ImportError saying this procedure needs it and how to install it."""
    return require("torch", None, "linear probe procedure 'clip_benchmark'", pip="torch")


class _Rows:
    """Rows of ``(features, codes)`` served a batch of indices at a time."""

    def __init__(self, x: Any, y: Any) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx: list[int]) -> tuple[Any, Any]:
        return self.x[idx], self.y[idx]


def _shuffled_batches(x: Any, y: Any, batch_size: int) -> Any:
    """A loader of shuffled batches that draws from the global torch generator
    exactly as ``DataLoader(..., batch_size, shuffle=True)`` does."""
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    rows = _Rows(x, y)
    batches = BatchSampler(RandomSampler(rows), batch_size, drop_last=False)
    return DataLoader(rows, sampler=batches, batch_size=None)


def _train(
    torch: Any,
    x: Any,
    y: Any,
    n_classes: int,
    weight_decay: float,
    *,
    lr: float,
    epochs: int,
    batch_size: int,
    seed: int,
) -> Any:
    """A linear layer trained on ``(x, y)`` with AdamW and a cosine learning rate."""
    torch.manual_seed(seed)
    layer = torch.nn.Linear(x.shape[1], n_classes)
    opt = torch.optim.AdamW(layer.parameters(), lr=lr, weight_decay=weight_decay)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = _shuffled_batches(x, y, batch_size)
    per_epoch = len(loader)
    steps = epochs * per_epoch
    for epoch in range(epochs):
        for i, (xb, yb) in enumerate(loader):
            step_lr = 0.5 * (1 + np.cos(np.pi * (i + epoch * per_epoch) / steps)) * lr
            for group in opt.param_groups:
                group["lr"] = step_lr
            opt.zero_grad()
            loss_fn(layer(xb), yb).backward()
            opt.step()
    return layer


def _logits(torch: Any, layer: Any, x: Any, batch_size: int) -> Any:
    with torch.no_grad():
        return torch.cat([layer(x[i : i + batch_size]) for i in range(0, len(x), batch_size)])


def _topk(logits: Any, y: Any, k: int) -> float:
    """Share of rows whose label is among the ``k`` largest logits (``topk`` order)."""
    top = logits.topk(k, 1, True, True)[1]
    return int((top == y[:, None]).any(dim=1).sum()) / len(y)


def _search(
    torch: Any, train: tuple[Any, Any], val: tuple[Any, Any], **fit: Any
) -> tuple[int, float]:
    """``(index in WEIGHT_DECAYS, validation top-1)`` of the weight decay chosen
    on validation. Each weight decay is trained once (training is seeded)."""
    scores: dict[int, float] = {}

    def peak(candidates: Any) -> int:
        best, best_acc = 0, 0.0
        for idx in candidates:
            if idx not in scores:
                layer = _train(torch, *train, weight_decay=WEIGHT_DECAYS[idx], **fit)
                scores[idx] = _topk(_logits(torch, layer, val[0], fit["batch_size"]), val[1], 1)
            if scores[idx] > best_acc:
                best, best_acc = idx, scores[idx]
        return best

    best = peak(_COARSE)
    span = 8
    while span > 0:
        best = peak([max(best - span, 0), best, min(best + span, len(WEIGHT_DECAYS) - 1)])
        span //= 2
    return best, scores[best]  # index 0 is among the first points


def clip_benchmark_probe(
    train_x: np.ndarray,
    train_y: np.ndarray,
    val_x: np.ndarray | None,
    val_y: np.ndarray | None,
    test_x: np.ndarray,
    test_y: np.ndarray,
    *,
    n_classes: int,
    fewshot: bool,
    seed: int,
    lr: float = 0.1,
    epochs: int = 10,
    batch_size: int = 64,
) -> TorchProbeScores:
    """CLIP_benchmark's probe on drawn splits (features as given, labels coded ``0..n_classes-1``;
    a test label absent from training is coded -1).

    Args:
        val_x, val_y: the validation split, or None for no weight-decay search.
        fewshot: the training split is a few-shot sample: the final layer is
            trained on it alone, not on train + val.
        seed: ``torch.manual_seed`` before each training.
        lr, epochs, batch_size: AdamW's base learning rate, the epochs and the
            batch size of every training (CLIP_benchmark's defaults).
    """
    torch = require_torch()
    as_x = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))  # noqa: E731
    as_y = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))  # noqa: E731
    fit = {
        "n_classes": n_classes,
        "lr": lr,
        "epochs": epochs,
        "batch_size": batch_size,
        "seed": seed,
    }
    with torch.random.fork_rng(devices=[]):
        train = (as_x(train_x), as_y(train_y))
        if val_x is None:
            wd, val_acc1 = 0.0, float("nan")
        else:
            val = (as_x(val_x), as_y(val_y))
            best, val_acc1 = _search(torch, train, val, **fit)
            wd = WEIGHT_DECAYS[best]
            if not fewshot:
                train = (torch.cat([train[0], val[0]]), torch.cat([train[1], val[1]]))
        layer = _train(torch, *train, weight_decay=wd, **fit)
        logits = _logits(torch, layer, as_x(test_x), batch_size)
    yte = as_y(test_y)
    acc5 = _topk(logits, yte, 5) if n_classes >= 6 else float("nan")
    from sklearn.metrics import balanced_accuracy_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a predicted class absent from the test
        mpcr = float(balanced_accuracy_score(test_y, logits.argmax(dim=1).numpy()))
    return TorchProbeScores(_topk(logits, yte, 1), acc5, mpcr, float(wd), float(val_acc1))
