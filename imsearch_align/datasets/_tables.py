"""The checks :class:`~imsearch_align.datasets.base.PairedDataset` runs on construction.

:func:`checked_tables` validates the ``images`` and ``texts`` tables (their
columns, ids, splits, labels) and returns new copies: ids as int64, every
image with a split (``test`` by default), every caption with its image's
split. :func:`checked_skipped`, :func:`checked_class_names` and
:func:`checked_templates` validate the other fields. Every message starts
with ``PairedDataset:`` and names the field, what was expected and what was got.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets.errors import SKIP_REASONS
from imsearch_align.datasets.splits import SPLITS, TEST_SPLIT

__all__ = ["checked_class_names", "checked_skipped", "checked_tables", "checked_templates"]


def _as_int64_column(df: pd.DataFrame, col: str, table: str) -> pd.Series:
    s = df[col]
    if not pd.api.types.is_integer_dtype(s.dtype):
        raise TypeError(f"PairedDataset: {table}.{col} must be integers, got dtype {s.dtype}")
    s = s.astype(np.int64)
    if len(s) and int(s.min()) < 0:
        raise ValueError(f"PairedDataset: {table}.{col} must be >= 0, got {int(s.min())}")
    return s


def checked_skipped(skipped: Any) -> dict[str, int]:
    """``skipped`` as ``{reason: count}``: reasons among :data:`SKIP_REASONS`, counts >= 0."""
    if not isinstance(skipped, Mapping):
        raise TypeError(
            f"PairedDataset: skipped must be a mapping reason -> count, got {skipped!r}"
        )
    bad = [
        k
        for k, v in skipped.items()
        if k not in SKIP_REASONS or isinstance(v, bool) or not isinstance(v, int | np.integer)
    ]
    if bad or any(int(v) < 0 for v in skipped.values()):
        raise ValueError(
            f"PairedDataset: skipped must map reasons in {list(SKIP_REASONS)} to counts >= 0, "
            f"got {dict(skipped)!r}"
        )
    return {str(k): int(v) for k, v in skipped.items()}


def _check_columns_and_ids(images: pd.DataFrame, texts: pd.DataFrame) -> None:
    """Required columns present; ids int64, >= 0, unique; every caption's image known.
    Converts the id columns in place (the tables are the caller's copies)."""
    for tname, df, cols in (
        ("images", images, ("image_id",)),
        ("texts", texts, ("text_id", "image_id", "caption")),
    ):
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(
                f"PairedDataset: {tname} is missing column(s) {missing}; "
                f"got columns {list(df.columns)}"
            )
    images["image_id"] = _as_int64_column(images, "image_id", "images")
    texts["text_id"] = _as_int64_column(texts, "text_id", "texts")
    texts["image_id"] = _as_int64_column(texts, "image_id", "texts")
    for tname, df, col in (("images", images, "image_id"), ("texts", texts, "text_id")):
        dup = df[col].duplicated()
        if dup.any():
            raise ValueError(
                f"PairedDataset: {tname}.{col} must be unique, got duplicate(s) "
                f"{df.loc[dup, col].unique()[:5].tolist()}"
            )
    known = texts["image_id"].isin(images["image_id"])
    if not known.all():
        bad = texts.loc[~known, "image_id"].unique()
        raise ValueError(
            f"PairedDataset: {int((~known).sum())} caption(s) reference unknown image_id(s) "
            f"{bad[:5].tolist()}{' ...' if len(bad) > 5 else ''}; every texts.image_id must "
            "appear in images.image_id"
        )


def _check_splits(images: pd.DataFrame, texts: pd.DataFrame) -> None:
    """Every image in a known split (``test`` when the table has none); every
    caption in its image's split. Sets the split columns in place."""
    if "split" not in images.columns:
        images["split"] = TEST_SPLIT
    images["split"] = images["split"].astype(str)
    bad_split = ~images["split"].isin(SPLITS)
    if bad_split.any():
        raise ValueError(
            f"PairedDataset: images.split must be one of {list(SPLITS)}, got "
            f"{sorted(images.loc[bad_split, 'split'].unique())[:5]}"
        )
    # A caption's split is its image's split by construction: that is what
    # makes a support/test leak impossible.
    img_split = texts["image_id"].map(
        pd.Series(images["split"].to_numpy(), index=images["image_id"])
    )
    if "split" in texts.columns:
        differs = texts["split"].astype(str).to_numpy() != img_split.to_numpy()
        if differs.any():
            i = int(np.flatnonzero(differs)[0])
            raise ValueError(
                f"PairedDataset: text_id {int(texts['text_id'].iloc[i])} has split "
                f"{texts['split'].iloc[i]!r} but its image {int(texts['image_id'].iloc[i])} "
                f"is in {img_split.iloc[i]!r}; a caption must share its image's split"
            )
    texts["split"] = img_split.astype(str).to_numpy()


def checked_tables(images: Any, texts: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """New, validated copies of the two tables (columns in the module docstring
    of :mod:`imsearch_align.datasets.base`)."""
    for tname, table in (("images", images), ("texts", texts)):
        if not isinstance(table, pd.DataFrame):
            raise TypeError(
                f"PairedDataset: {tname} must be a pandas DataFrame, got {type(table).__name__}"
            )
    images = images.reset_index(drop=True).copy()
    texts = texts.reset_index(drop=True).copy()
    _check_columns_and_ids(images, texts)
    _check_splits(images, texts)
    if "label" in images.columns:
        images["label"] = _as_int64_column(images, "label", "images")
    return images, texts


def checked_class_names(class_names: Sequence[str], images: pd.DataFrame) -> tuple[str, ...]:
    """Class names as strings; every ``images.label`` must index one."""
    names = tuple(str(c) for c in class_names)
    n_cls = len(names)
    if "label" in images.columns and len(images) and int(images["label"].max()) >= n_cls:
        raise ValueError(
            f"PairedDataset: images.label must be < len(class_names) = {n_cls}, "
            f"got {int(images['label'].max())}"
        )
    return names


def checked_templates(templates: Sequence[str]) -> tuple[str, ...]:
    """Prompt templates as strings, each with a ``{c}`` placeholder."""
    tpl = tuple(str(t) for t in templates)
    no_slot = [t for t in tpl if "{c}" not in t]
    if no_slot:
        raise ValueError(f"PairedDataset: every template must contain '{{c}}', got {no_slot[:3]}")
    return tpl
