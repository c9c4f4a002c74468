"""The steps of :meth:`PairedDataset.from_arrays <imsearch_align.datasets.base.PairedDataset.from_arrays>`:
embedding-only data (image rows, text rows, the image of each text) into the two tables.

:func:`checked_pairing` validates the per-row arrays, :func:`merge_repeated_images`
makes rows holding the same image embedding one image (rows given as
(image, text) pairs), :func:`array_tables` builds the ``images`` and ``texts``
tables (captions None: the vectors are the data).
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets.splits import seeded_split

__all__ = ["array_tables", "checked_pairing", "merge_repeated_images"]


def _distinct_rows(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(heads, image_of_row)``: the first row of each distinct row of ``X``
    (ascending) and, per row, the index of its distinct row in ``heads``.
    Rows are compared by a 160-bit digest of their bytes, one row at a time
    (no copy of ``X``). All-zero rows (missing embeddings, warned elsewhere)
    are each their own."""
    first: dict[Any, int] = {}
    image_of_row = np.empty(X.shape[0], dtype=np.int64)
    for i in range(X.shape[0]):
        row = X[i]
        key = hashlib.blake2b(row.tobytes(), digest_size=20).digest() if row.any() else i
        image_of_row[i] = first.setdefault(key, len(first))
    if len(first) == X.shape[0]:
        return np.arange(X.shape[0], dtype=np.int64), image_of_row
    # distinct rows are numbered in order of first appearance: heads ascend
    heads = np.unique(image_of_row, return_index=True)[1].astype(np.int64)
    return heads, image_of_row


def checked_pairing(
    n_img: int, n_txt: int, text_image: Any, split: Any, labels: Any
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """``(text_image, split, labels)`` as arrays, checked against the row counts.

    ``text_image`` None pairs text row ``j`` with image row ``j`` (the counts
    must then be equal); ``split`` and ``labels`` stay None when not given.
    """
    if text_image is None:
        if n_txt != n_img:
            raise ValueError(
                f"text_image is required when text_emb has a different number of rows "
                f"({n_txt}) than image_emb ({n_img})"
            )
        text_image = np.arange(n_txt)
    ti = np.asarray(text_image)
    if ti.shape != (n_txt,) or (ti.size and ti.dtype.kind not in "iu"):
        raise ValueError(
            f"text_image must be {n_txt} integer image indices (one per text_emb row), "
            f"got shape {ti.shape} dtype {ti.dtype}"
        )
    if ti.size and (ti.min() < 0 or ti.max() >= n_img):
        raise ValueError(
            f"text_image must index image_emb rows in [0, {n_img - 1}], "
            f"got values in [{int(ti.min())}, {int(ti.max())}]"
        )
    if split is not None:
        split = np.asarray(split, dtype=object)
        if split.shape != (n_img,):
            raise ValueError(
                f"split must have one entry per image ({n_img}), got shape {split.shape}"
            )
    lab = None
    if labels is not None:
        lab = np.asarray(labels)
        if lab.shape != (n_img,):
            raise ValueError(f"labels must have shape ({n_img},), got {lab.shape}")
    return ti, split, lab


def merge_repeated_images(
    X: np.ndarray,
    ti: np.ndarray,
    split: np.ndarray | None,
    lab: np.ndarray | None,
    *,
    name: str,
    stacklevel: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Rows paired by position are (image, text) pairs: rows with the same image
    embedding are one image (the first such row, warned) with all their texts.

    Returns ``(X, text_image, split, labels)`` re-indexed to the distinct
    images; a ``split`` or ``labels`` that differs within one image raises.
    """
    n_img = X.shape[0]
    heads, image_of_row = _distinct_rows(X)
    if len(heads) == n_img:
        return X, ti, split, lab
    for what, per_row in (("split", split), ("labels", lab)):
        if (
            per_row is not None
            and (bad := np.flatnonzero(per_row != per_row[heads][image_of_row])).size
        ):
            i = int(bad[0])
            j = int(heads[image_of_row[i]])
            raise ValueError(
                f"image_emb rows {j} and {i} hold the same embedding (one image) but "
                f"{what} gives them {per_row[j]!r} and {per_row[i]!r}; expected one "
                f"{what} value per image"
            )
    warnings.warn(
        f"{name}: {n_img:,} image rows hold {len(heads):,} distinct embeddings; rows "
        "with the same embedding are one image (the first such row), with the texts of "
        "every such row",
        stacklevel=stacklevel + 1,
    )
    return (
        X[heads],
        image_of_row[ti],
        None if split is None else split[heads],
        None if lab is None else lab[heads],
    )


def array_tables(
    n_img: int,
    ti: np.ndarray,
    split: np.ndarray | None,
    lab: np.ndarray | None,
    *,
    test_fraction: float,
    seed: int,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(images, texts)``: image ids ``0..n_img-1`` with their split (a seeded
    ratio when ``split`` is None) and labels, text ids ``0..len(ti)-1``."""
    if split is None:
        split = seeded_split(n_img, test_fraction=test_fraction, seed=seed)
    images = pd.DataFrame({"image_id": np.arange(n_img, dtype=np.int64), "split": split})
    if lab is not None:
        images["label"] = lab.astype(np.int64)
    n_txt = len(ti)
    texts = pd.DataFrame(
        {
            "text_id": np.arange(n_txt, dtype=np.int64),
            "image_id": ti.astype(np.int64),
            "caption": pd.Series([None] * n_txt, dtype=object),
        }
    )
    return images, texts
