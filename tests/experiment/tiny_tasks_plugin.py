"""A plug-in module for the task tests: a tiny dataset with known answers and a
bag-of-words text encoder (``--plugin tiny_tasks_plugin`` with this folder on
PYTHONPATH, or imported by the tests directly).

``tiny-tasks`` (``kind="classes"``): images are one-hot (or, for label sets,
normalised multi-hot) vectors over the class words; captions and prompts are
encoded by ``bow-test``, which maps each known word to its one-hot vector.
With the ``identity`` method every task has a known answer: zero-shot
accuracy 1, multi-label mAP 1, a linear probe that separates the classes.

``kind="items"``: with ``twins``, image ``2j`` and ``2j+1`` are the same vector
``e_j`` and both have the caption ``"a photo of itemj"``: the nearest caption
of another image is the twin's identical caption (BLEU-4 = 100). Without
twins each test image is a distinct item: one-to-one matching is exact.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets.base import PairedDataset
from imsearch_align.datasets.vectors import PrecomputedEmbeddings
from imsearch_align.framework.registry import DATASETS, ENCODERS

CLASSES = ("red", "blue", "green", "yellow", "black", "white")
ENCODE_CALLS: list[int] = []


def _vocab(kind: str, n: int) -> list[str]:
    return list(CLASSES) if kind == "classes" else [f"item{j}" for j in range(n)]


@ENCODERS.register("bow-test")
class BagOfWords:
    """Sum of one-hot word vectors over a fixed vocabulary, L2-normalised."""

    modality = "text"

    def __init__(self, kind: str = "classes", n_items: int = 20) -> None:
        self.vocab = {w: i for i, w in enumerate(_vocab(kind, n_items))}
        self.id = f"bow-test:{kind}:{n_items}"

    @property
    def dim(self) -> int:
        return len(self.vocab)

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        ENCODE_CALLS.append(len(items))
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        for r, text in enumerate(items):
            for w in re.findall(r"[a-z0-9]+", str(text).lower()):
                if w in self.vocab:
                    out[r, self.vocab[w]] += 1.0
        n = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(n > 0, n, 1.0)


def _classes_dataset(n_per_class: int, multi: bool, seed: int) -> tuple[PairedDataset, Any]:
    rng = np.random.default_rng(seed)
    C = len(CLASSES)
    labels = np.tile(np.arange(C), n_per_class)
    n = len(labels)
    sets = [tuple(sorted({int(c), int((c + 1 + rng.integers(C - 1)) % C)})) for c in labels]
    X = np.zeros((n, C), dtype=np.float32)
    for i, s in enumerate(sets if multi else [(int(c),) for c in labels]):
        X[i, list(s)] = 1.0
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    split = np.where((np.arange(n) // C) % 2 == 0, "train", "test")  # every class on both sides
    images = pd.DataFrame({"image_id": np.arange(n), "split": split, "label": labels})
    if multi:
        images["label_set"] = sets
    caps = (
        [" and ".join(CLASSES[c] for c in s) + " things" for s in sets]
        if multi
        else [f"a {CLASSES[c]} thing" for c in labels]
    )
    texts = pd.DataFrame(
        {"text_id": np.arange(n), "image_id": np.arange(n), "caption": caps, "split": split}
    )
    ds = PairedDataset(
        "tiny-tasks",
        images,
        texts,
        class_names=CLASSES,
        templates=("a photo of a {c}.", "a {c} thing."),
    )
    return ds, PrecomputedEmbeddings(np.arange(n), X, modality="image", name="tiny-classes")


def _items_dataset(n_items: int, twins: bool) -> tuple[PairedDataset, Any]:
    n = 2 * n_items
    item = np.arange(n) // 2 if twins else np.arange(n) % n_items
    X = np.zeros((n, n_items), dtype=np.float32)
    X[np.arange(n), item] = 1.0
    split = np.where(np.arange(n) < n // 2, "train", "test")
    images = pd.DataFrame({"image_id": np.arange(n), "split": split})
    texts = pd.DataFrame(
        {
            "text_id": np.arange(n),
            "image_id": np.arange(n),
            "caption": [f"a photo of item{j}" for j in item],
            "split": split,
        }
    )
    ds = PairedDataset("tiny-items", images, texts)
    return ds, PrecomputedEmbeddings(np.arange(n), X, modality="image", name="tiny-items")


@DATASETS.register("tiny-tasks")
def load_tiny_tasks(
    kind: str = "classes",
    n_per_class: int = 8,
    multi: bool = False,
    n_items: int = 20,
    twins: bool = True,
    seed: int = 0,
):
    """A tiny dataset with known answers for every task.

    Args:
        kind: ``classes`` (labelled images) or ``items`` (twin images with identical captions).
        n_per_class: images per class (``classes``).
        multi: label sets of two classes per image (``classes``).
        n_items: distinct items (``items``): with ``twins`` two consecutive
            images per item (identical vectors and captions); without, the
            test images are items 0..n_items-1 once each (train: the same items).
        seed: seed of the label sets.
    """
    if kind == "classes":
        ds, img = _classes_dataset(n_per_class, multi, seed)
    else:
        ds, img = _items_dataset(n_items, twins)
    return ds, img, None
