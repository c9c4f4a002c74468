"""The data model every loader returns: :class:`PairedDataset`.

A dataset is data only: two tables, optional class metadata, and the split.
Embeddings are *not* part of it; they are what an
:class:`~imsearch_align.framework.interfaces.EmbeddingProvider` produces from
it (see :func:`imsearch_align.embedding.embed`), cached on disk.

Tables (pandas, built once by a loader, read by the experiment):

``images``
    ``image_id`` (int64, unique), ``path`` (str, absolute) and/or ``bytes``
    (encoded image file) - or neither for embedding-only data -, ``split``
    (str), and where the task has them ``label`` (int64 class index) or
    ``label_set`` (tuple of int64 class indices, multi-label).
``texts``
    ``text_id`` (int64, unique), ``image_id`` (int64, must exist in
    ``images``), ``caption`` (str), ``split`` (str, always the split of the
    caption's image, so a pair never straddles two splits).

Splits: ``"train"`` is the *support* set an alignment method is fitted on;
``"test"`` is what search is evaluated on; ``"val"`` is held out. Loaders
follow the official split where one exists (Karpathy for Flickr30k and COCO)
and otherwise a seeded ratio over images (:meth:`PairedDataset.resplit`).
Splitting by image keeps all captions of an image on one side, so no test
pair can leak into the support set.

Around it: the split names in :mod:`~imsearch_align.datasets.splits` (re-exported
here), the construction checks in ``_tables``, the steps of
:meth:`PairedDataset.from_arrays` in ``_arrays``, content digests in ``_digest``.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from imsearch_align.datasets._arrays import array_tables, checked_pairing, merge_repeated_images
from imsearch_align.datasets._digest import feed_column, feed_value
from imsearch_align.datasets._tables import (
    checked_class_names,
    checked_skipped,
    checked_tables,
    checked_templates,
)
from imsearch_align.datasets.splits import SPLITS, SUPPORT_SPLIT, TEST_SPLIT, seeded_split
from imsearch_align.datasets.vectors import PrecomputedEmbeddings
from imsearch_align.framework.metrics import Qrels
from imsearch_align.framework.validation import check_matrix

__all__ = [
    "SPLITS",
    "SUPPORT_SPLIT",
    "TEST_SPLIT",
    "EmbeddedDataset",
    "PairedDataset",
    "seeded_split",
]

_DIRECTIONS = ("t2i", "i2t")


@dataclass(frozen=True, eq=False)
class PairedDataset:
    """Paired image-text data with a split, relevance judgements and class metadata.

    Build one with a loader (``DATASETS.get("flickr30k")(root=...)``), with
    :meth:`from_arrays` for embedding-only data, or directly from two tables
    (see the module docstring for their columns). The constructor validates
    the tables and stores its own copies, so a dataset never changes after
    construction.

    Attributes:
        name: dataset identifier, also the dataset part of embedding cache keys.
        images: images table.
        texts: texts table.
        class_names: class names by class index (classification datasets).
        templates: prompt templates with a ``{c}`` placeholder for a class name.
        root: the folder the data was read from, if any (informational).
        skipped: items the loader left out, ``{reason: count}`` (reasons in
            :data:`imsearch_align.datasets.SKIP_REASONS`: ``missing_image``,
            ``unreadable_image``, ``missing_caption``, ``empty_caption``,
            ``missing_label``); empty when nothing was skipped. JSON-ready.
    """

    name: str
    images: pd.DataFrame
    texts: pd.DataFrame
    class_names: tuple[str, ...] | None = None
    templates: tuple[str, ...] | None = None
    root: str | None = field(default=None, compare=False)
    skipped: Mapping[str, int] = field(default_factory=dict, compare=False)
    _fingerprint: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "skipped", checked_skipped(self.skipped))
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"PairedDataset: name must be a non-empty string, got {self.name!r}")
        images, texts = checked_tables(self.images, self.texts)
        if self.class_names is not None:
            object.__setattr__(self, "class_names", checked_class_names(self.class_names, images))
        if self.templates is not None:
            object.__setattr__(self, "templates", checked_templates(self.templates))
        object.__setattr__(self, "images", images)
        object.__setattr__(self, "texts", texts)

    # -- constructors
    @classmethod
    def from_arrays(
        cls,
        image_emb: Any,
        text_emb: Any,
        text_image: Any = None,
        labels: Any = None,
        *,
        name: str = "arrays",
        split: Any = None,
        test_fraction: float = 0.3,
        seed: int = 0,
        class_names: Sequence[str] | None = None,
    ) -> EmbeddedDataset:
        """Wrap embedding-only data into a dataset and two precomputed providers.

        Args:
            image_emb: ``(n_images, d_img)`` image embeddings; row ``i`` is image id ``i``.
                Without ``text_image`` (rows are (image, text) pairs), rows
                holding the same embedding are one image (the first such
                row, warned) with the texts of every such row, so pairs
                exported one per row give each image once.
            text_emb: ``(n_texts, d_txt)`` text embeddings; row ``j`` is text id ``j``.
            text_image: ``(n_texts,)`` image index of each text row; default
                ``arange(n_texts)`` (one text per image, ``n_texts == n_images``).
            labels: optional ``(n_images,)`` class index per image.
            name: dataset name (cache key part).
            split: optional ``(n_images,)`` split name per image; default a
                seeded ratio (``test_fraction``, ``seed``).
            test_fraction: fraction of images in ``test`` when ``split`` is None.
            seed: seed of the ratio split.
            class_names: names of the classes ``labels`` index into.

        Returns:
            ``EmbeddedDataset(dataset, image, text)``: a named tuple that
            unpacks as ``(PairedDataset, PrecomputedEmbeddings, PrecomputedEmbeddings)``.
        """
        X = check_matrix(image_emb, "image_emb", min_rows=1)
        Y = check_matrix(text_emb, "text_emb", min_rows=1)
        ti, split, lab = checked_pairing(X.shape[0], Y.shape[0], text_image, split, labels)
        if text_image is None:
            # Paired by row: each row is an (image, text) pair, and rows with the
            # same image embedding are one image with all its texts. With
            # text_image the image rows are the images, duplicates included
            # (two ids of one picture tie, as in the published protocols).
            X, ti, split, lab = merge_repeated_images(X, ti, split, lab, name=name, stacklevel=2)
        images, texts = array_tables(
            X.shape[0], ti, split, lab, test_fraction=test_fraction, seed=seed
        )
        ds = cls(
            name=name,
            images=images,
            texts=texts,
            class_names=tuple(class_names) if class_names is not None else None,
        )
        return EmbeddedDataset(
            ds,
            PrecomputedEmbeddings(
                images["image_id"].to_numpy(), X, modality="image", name=f"{name}-image"
            ),
            PrecomputedEmbeddings(
                texts["text_id"].to_numpy(), Y, modality="text", name=f"{name}-text"
            ),
        )

    # -- views
    @property
    def labels(self) -> np.ndarray | None:
        """``(n_images,)`` int64 class index per image row, or None."""
        if "label" not in self.images.columns:
            return None
        return self.images["label"].to_numpy(dtype=np.int64)

    @property
    def label_sets(self) -> tuple[tuple[int, ...], ...] | None:
        """Class indices per image row for multi-label data, or None."""
        if "label_set" not in self.images.columns:
            return None
        return tuple(tuple(int(c) for c in s) for s in self.images["label_set"])

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the dataset's content, stable across processes and machines.

        Covers, in id order: image ids, splits, labels / label sets, image
        paths (relative to :attr:`root` when under it, so the same folder
        copied elsewhere keeps its fingerprint), a SHA-256 of each image's
        bytes; text ids, their image ids and captions; class names and
        templates. Not the name, not file contents behind paths (the
        embedding cache keys those by size and time). Two datasets that
        differ in any covered value have different fingerprints.
        """
        if self._fingerprint is None:
            h = hashlib.sha256(b"PairedDataset/1;")
            img = self.images.sort_values("image_id", kind="stable")
            txt = self.texts.sort_values("text_id", kind="stable")
            cols: list[tuple[str, Any]] = [
                (f"images.{c}", img[c]) for c in ("image_id", "split", "label") if c in img
            ]
            if "label_set" in img:
                cols.append(("images.label_set", img["label_set"]))
            if "path" in img:
                cols.append(("images.path", self._relative_paths(img["path"])))
            if "bytes" in img:
                cols.append(("images.bytes", img["bytes"]))
            cols += [(f"texts.{c}", txt[c]) for c in ("text_id", "image_id", "caption")]
            for cname, col in cols:
                h.update(f"{cname}:{len(col)};".encode())
                if isinstance(col, pd.Series) and col.dtype.kind in "iu":
                    h.update(np.ascontiguousarray(col.to_numpy(np.int64)).tobytes())
                else:
                    feed_column(h, col)
            feed_value(h, list(self.class_names) if self.class_names is not None else None)
            feed_value(h, list(self.templates) if self.templates is not None else None)
            object.__setattr__(self, "_fingerprint", h.hexdigest())
        return str(self._fingerprint)

    def _relative_paths(self, paths: pd.Series) -> list[Any]:
        """Paths under :attr:`root` made relative to it (others unchanged)."""
        vals = paths.tolist()
        if not self.root:
            return vals
        for prefix in dict.fromkeys(
            (os.path.abspath(self.root) + os.sep, self.root.rstrip(os.sep) + os.sep)
        ):
            n = len(prefix)
            vals = [p[n:] if isinstance(p, str) and p.startswith(prefix) else p for p in vals]
        return vals

    def uncaptioned_image_ids(self, split: str | None = TEST_SPLIT) -> np.ndarray:
        """Image ids of ``split`` that have no caption (never an i2t query; t2i distractors)."""
        self._check_split(split)
        df = self.images if split is None else self.images[self.images["split"] == split]
        has = df["image_id"].isin(self.texts["image_id"])
        return df.loc[~has, "image_id"].to_numpy(dtype=np.int64)

    def _check_split(self, split: str | None) -> None:
        if split is not None and split not in SPLITS:
            raise ValueError(f"split must be one of {list(SPLITS)} or None (all), got {split!r}")

    def split_ids(self, split: str | None = TEST_SPLIT, modality: str = "image") -> np.ndarray:
        """Ids of one split, in table order: image ids or (``modality="text"``) text ids.

        ``split=None`` gives every id.
        """
        self._check_split(split)
        if modality not in ("image", "text"):
            raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
        df, col = (self.images, "image_id") if modality == "image" else (self.texts, "text_id")
        if split is not None:
            df = df[df["split"] == split]
        return df[col].to_numpy(dtype=np.int64)

    def qrels(self, direction: str, split: str | None = TEST_SPLIT) -> Qrels:
        """Binary relevance judgements on a split.

        ``"t2i"``: query id = ``text_id``, the caption's one image (``image_id``)
        is relevant. ``"i2t"``: query id = ``image_id``, every caption of the
        image (``text_id``) is relevant; images without a caption
        (:meth:`uncaptioned_image_ids`) have no judgement, so they are not
        queries: a warning gives their count. ``split=None`` judges all rows.
        """
        if direction not in _DIRECTIONS:
            raise ValueError(f"direction must be one of {list(_DIRECTIONS)}, got {direction!r}")
        self._check_split(split)
        t = self.texts if split is None else self.texts[self.texts["split"] == split]
        if direction == "t2i":
            return Qrels.from_pairs(t["text_id"].to_numpy(), t["image_id"].to_numpy())
        t = t.sort_values(["image_id", "text_id"], kind="stable")
        lone = self.uncaptioned_image_ids(split)
        if len(lone):
            # Such an image has no relevant caption, so it cannot be an i2t query.
            warnings.warn(
                f"dataset {self.name!r}: {len(lone)} image(s) of split {split!r} have no caption "
                f"and are ignored as image-to-text queries (they stay text-to-image documents), "
                f"e.g. image_id {lone[:5].tolist()}",
                UserWarning,
                stacklevel=2,
            )
        return Qrels.from_pairs(t["image_id"].to_numpy(), t["text_id"].to_numpy())

    def label_qrels(self, split: str | None = TEST_SPLIT) -> Qrels:
        """Classification judgements: query id = ``image_id``, doc id = class index.

        Single-label data uses ``label``, multi-label data ``label_set``;
        Accuracy is then HitRate@1 over class ids.
        """
        self._check_split(split)
        df = self.images if split is None else self.images[self.images["split"] == split]
        if "label" in df.columns:
            return Qrels.from_pairs(df["image_id"].to_numpy(), df["label"].to_numpy())
        if "label_set" in df.columns:
            q = [i for i, s in zip(df["image_id"], df["label_set"]) for _ in s]
            d = [int(c) for s in df["label_set"] for c in s]
            return Qrels.from_pairs(np.asarray(q, dtype=np.int64), np.asarray(d, dtype=np.int64))
        raise ValueError(
            f"dataset {self.name!r} has no label or label_set column (not a classification dataset)"
        )

    def resplit(
        self, *, test_fraction: float, seed: int, val_fraction: float = 0.0
    ) -> PairedDataset:
        """A copy with a seeded ratio split over images (captions follow their image)."""
        split = seeded_split(
            len(self.images), test_fraction=test_fraction, seed=seed, val_fraction=val_fraction
        )
        images = self.images.assign(split=split)
        return replace(self, images=images, texts=self.texts.drop(columns=["split"]))

    def subset(self, splits: Sequence[str]) -> PairedDataset:
        """A copy with only the images (and their captions) of ``splits``."""
        for s in splits:
            self._check_split(s)
        images = self.images[self.images["split"].isin(list(splits))]
        texts = self.texts[self.texts["image_id"].isin(images["image_id"])]
        return replace(self, images=images, texts=texts)

    def __len__(self) -> int:
        return len(self.images)

    def __repr__(self) -> str:
        counts = self.images["split"].value_counts().to_dict()
        return (
            f"PairedDataset(name={self.name!r}, images={len(self.images)}, texts={len(self.texts)}, "
            f"splits={counts}, classes={len(self.class_names) if self.class_names else 0})"
        )


class EmbeddedDataset(NamedTuple):
    """A dataset with the providers that hold its precomputed embeddings.

    Unpacks as ``dataset, image_provider, text_provider``.
    """

    dataset: PairedDataset
    image: PrecomputedEmbeddings
    text: PrecomputedEmbeddings
