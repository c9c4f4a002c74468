"""Ids: conversion and checks of query and doc ids, shared by runs, judgements and scoring.

Ids are int64 or object (strings) arrays; ``-1`` (or ``None``) in a run is
the no-hit marker. Also the DataFrame column check both constructors share
and :func:`_id_kind`, which the run/qrels id type check of
:mod:`~imsearch_align.framework.metrics.evaluation` builds on. This room
knows neither :class:`Run` nor :class:`Qrels`: both build on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["IdTypeWarning", "py_scalar"]


class IdTypeWarning(UserWarning):
    """Some doc ids are strings on one side and integers on the other (they never match)."""


def py_scalar(x: Any) -> Any:
    """A numpy scalar as a plain Python value, so messages read ``0``, not ``np.int64(0)``."""
    return x.item() if isinstance(x, np.generic) else x


def _as_id_array(values: Iterable, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(
            f"{what} must fit int64, got {int(arr.max())} (above 2**63 - 1: it would wrap "
            "to a negative id, and -1 means no hit)"
        )
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind in "OUS":
        return arr.astype(object)
    if (
        arr.dtype.kind == "f"
        and arr.size
        and np.all(np.isfinite(arr))
        and np.all(arr == np.round(arr))
    ):
        return arr.astype(np.int64)
    raise TypeError(f"{what} must be integers or strings, got dtype {arr.dtype}")


def _index_of(vocab: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each value in ``vocab`` (unique), -1 where absent."""
    if len(vocab) == len(values) and vocab.dtype == values.dtype and np.array_equal(vocab, values):
        return np.arange(len(values), dtype=np.int64)
    if vocab.dtype == object or values.dtype == object:
        # One hash pass over both: several times faster than an object
        # Index's get_indexer (pandas converts it to arrow strings first).
        codes, _ = pd.factorize(np.concatenate([vocab.astype(object), values.astype(object)]))
        codes = codes[len(vocab) :].astype(np.int64, copy=False)
        codes[codes >= len(vocab)] = -1
        return codes
    return pd.Index(vocab).get_indexer(values).astype(np.int64, copy=False)


def _first_duplicate_pair(q: np.ndarray, d: np.ndarray) -> int | None:
    """Index of the first repeated ``(q, d)`` pair, or None (vectorised)."""
    if len(q) < 2:
        return None
    # One exact int64 key per pair. Object ids, and integer ids spread too
    # widely for the key to fit (Python ints: no int64 wrap-around), are
    # replaced by their dense codes first.
    if q.dtype == object or int(q.max()) - int(q.min()) >= 2**31:
        q = pd.factorize(q)[0].astype(np.int64)
    if d.dtype == object or int(d.max()) - int(d.min()) >= 2**31:
        d = pd.factorize(d)[0].astype(np.int64)
    qs, ds = q - q.min(), d - d.min()
    dup = pd.Series(qs * (int(ds.max()) + 1) + ds).duplicated().to_numpy()
    return int(np.argmax(dup)) if dup.any() else None


def _check_frame(df: Any, where: str, columns: Sequence[str]) -> None:
    """Raise unless ``df`` is a DataFrame holding every one of ``columns``."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{where}: df must be a pandas DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(
            f"{where}: df is missing required column(s) {missing}; expected columns "
            f"{list(columns)}, got {list(df.columns)}"
        )


def _id_kind(ids: np.ndarray) -> str:
    """``"int"``, ``"str"``, ``"mixed"`` (both) or ``"empty"`` for an id array."""
    if ids.size == 0:
        return "empty"
    if ids.dtype != object:
        return "int"
    kind = pd.api.types.infer_dtype(ids.ravel(), skipna=True)
    if kind == "integer":
        return "int"
    if kind == "string":
        return "str"
    return "mixed"


def _no_hit_mask(d: np.ndarray) -> np.ndarray:
    """True where a cell holds the no-hit marker (-1, or None in object arrays)."""
    if d.dtype != object:
        return d == -1
    flat = d.ravel()
    mask = np.fromiter(
        (x is None or (isinstance(x, int | np.integer) and x == -1) for x in flat), bool, len(flat)
    )
    return mask.reshape(d.shape)


def _is_member(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """``values`` that are in ``members`` (bool), by hashing for object ids."""
    if not len(members):
        return np.zeros(len(values), dtype=bool)
    members = np.asarray(members)
    if values.dtype != object and members.dtype != object:
        return np.isin(values, members)
    return _index_of(pd.unique(members.astype(object)), values.astype(object)) >= 0
