"""The checks that keep a collection honest: dimension, encoder, bad rows, id collisions.

Each raises :class:`DistractorError` (a ``ValueError``) whose message names
what was expected and what came: the two dimensions, the two encoder ids, the
count of NaN or all-zero rows with the first row ids, the colliding id.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "DistractorError",
    "bad_rows",
    "check_compatible",
    "check_disjoint_ids",
    "raise_bad_rows",
]


class DistractorError(ValueError):
    """Distractors that cannot join a dataset's collection (the message says why)."""


def bad_rows(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(nan, zero)``: boolean masks of the rows of ``block`` holding a NaN or
    infinity, and of the rows that are all zeros."""
    with np.errstate(invalid="ignore"):
        s = block.sum(axis=1, dtype=np.float64)
    nan = ~np.isfinite(s)
    if nan.any():  # a sum can overflow: recheck those rows entry by entry
        nan[nan] = ~np.isfinite(block[nan]).all(axis=1)
    zero = ~np.any(block != 0, axis=1)
    return nan, zero


def raise_bad_rows(what: str, counts: tuple[int, int], first: tuple[list, list]) -> None:
    """Raise naming the NaN / all-zero row counts and their first ids (if any)."""
    n_nan, n_zero = counts
    if not (n_nan or n_zero):
        return
    parts = []
    if n_nan:
        parts.append(f"{n_nan} row(s) with NaN or infinite values (first ids {first[0]})")
    if n_zero:
        parts.append(f"{n_zero} all-zero row(s) (first ids {first[1]})")
    raise DistractorError(
        f"{what}: expected finite, non-zero embedding rows, got " + " and ".join(parts)
    )


def check_compatible(
    source: Any,
    *,
    dim: int,
    encoder: str | None = None,
    modality: str | None = None,
    dataset: str = "the dataset",
) -> None:
    """Refuse distractors that do not live in the dataset's raw space.

    Args:
        source: a :class:`~imsearch_align.collection.sources.DistractorSource`.
        dim: the dimension of the dataset's raw embeddings of that modality.
        encoder: the dataset's encoder id (e.g. ``provider_key(provider)``);
            compared when the source records one too.
        modality: ``"image"`` or ``"text"``; compared when the source records one.
        dataset: the dataset's name, for the message.
    """
    if int(source.dim) != int(dim):
        raise DistractorError(
            f"distractors {source.name!r} have dimension {source.dim}, but the {modality or 'raw'} "
            f"embeddings of {dataset} have dimension {dim}; expected distractors from the "
            "same encoder"
        )
    if encoder is not None and source.encoder is not None and str(source.encoder) != str(encoder):
        raise DistractorError(
            f"distractors {source.name!r} come from encoder {source.encoder!r}, but {dataset} "
            f"was embedded with {encoder!r}; expected distractors from the same encoder"
        )
    if modality is not None and source.modality is not None and source.modality != modality:
        raise DistractorError(
            f"distractors {source.name!r} are {source.modality} embeddings, but {modality} "
            f"distractors were asked for ({dataset})"
        )


def check_disjoint_ids(source: Any, dataset_ids: Any, *, dataset: str = "the dataset") -> None:
    """Refuse a distractor id that is also a dataset id (naming the first such id)."""
    ids = np.asarray(dataset_ids, dtype=np.int64).ravel()
    if not ids.size or not source.n_rows:
        return
    lo, hi = source.id_range
    inside = ids[(ids >= lo) & (ids < hi)]
    if source.explicit_ids is not None and inside.size:
        inside = inside[np.isin(inside, source.explicit_ids)]
    if inside.size:
        raise DistractorError(
            f"distractor id {int(inside.min())} of {source.name!r} is also an id of {dataset} "
            f"({inside.size} colliding id(s)); distractor ids must lie outside the dataset's "
            f"ids: choose another id_base (distractor ids span [{lo}, {hi}))"
        )
