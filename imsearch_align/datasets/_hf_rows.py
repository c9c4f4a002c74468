"""The rows of ``hf`` data: images, their sameness, splits and captions, into the two tables.

Each function takes the one frame of every row (:meth:`Source.frame
<imsearch_align.datasets._hf_source.Source.frame>`) and a ``where(i)`` that
names row ``i``'s split in messages: :func:`image_rows` (each row's image,
bad ones raised or skipped), :func:`same_image_rows` (rows holding one image),
:func:`row_splits`, :func:`image_table`, :func:`caption_rows`. The rules are in
:mod:`imsearch_align.datasets.hf`.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets._hf_source import ALIAS
from imsearch_align.datasets._local import Skips, readable
from imsearch_align.datasets.splits import SPLITS, seeded_split

__all__ = [
    "caption_column_names",
    "caption_rows",
    "check_columns",
    "image_cell",
    "image_rows",
    "image_table",
    "row_splits",
    "same_image_rows",
]


def image_cell(v: Any) -> tuple[bytes | None, str | None]:
    """``(bytes, path)`` of one image cell; ``(None, None)`` when it holds no image."""
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return None, None
    if isinstance(v, dict):
        b, p = v.get("bytes"), v.get("path")
        if b is None and not p:
            return None, None
        return (bytes(b) if b is not None else None), (str(p) if b is None else None)
    if isinstance(v, bytes | bytearray):
        return bytes(v), None
    if isinstance(v, str):
        return (None, v) if v.strip() else (None, None)
    if isinstance(v, os.PathLike):
        return None, os.fspath(v)
    if hasattr(v, "save"):  # a PIL image: re-encode losslessly once
        buf = io.BytesIO()
        v.save(buf, format="PNG")
        return buf.getvalue(), None
    raise TypeError(f"holds {type(v).__name__}; expected a PIL image, bytes, a dict or a path")


def caption_column_names(caption_columns: str | Sequence[str]) -> list[str]:
    """Caption column names from a name, a comma string or a list."""
    if isinstance(caption_columns, str):
        return [c.strip() for c in caption_columns.split(",") if c.strip()]
    return list(caption_columns)


def check_columns(df: pd.DataFrame, needed: list[str], what: str) -> None:
    """Every ``needed`` column is in ``df``, or ValueError with did-you-mean."""
    missing = [c for c in needed if c not in df.columns]
    if missing:
        names = [str(c) for c in df.columns]
        close = {m: difflib.get_close_matches(m, names, n=1, cutoff=0.6) for m in missing}
        hint = "".join(f"; did you mean {v[0]!r} for {k!r}?" for k, v in close.items() if v)
        raise ValueError(
            f"from_hf: missing column(s) {missing} in {what}; got columns {list(df.columns)}{hint}"
        )


def image_rows(
    column: pd.Series,
    name: str,
    folder: Path | None,
    where: Any,
    *,
    verify: bool,
    skip: bool,
    skips: Skips,
) -> tuple[list[tuple[bytes | None, str | None]], np.ndarray]:
    """``(bytes, path)`` per row and the mask of rows kept (bad images raise or are skipped)."""
    cells: list[tuple[bytes | None, str | None]] = []
    bad_rows: list[tuple[int, str, str]] = []
    for i, v in enumerate(column):
        try:
            b, p = image_cell(v)
        except TypeError as exc:
            raise TypeError(f"image column {name!r} row {i}{where(i)} {exc}") from None
        if p is not None and folder is not None and not os.path.isabs(p):
            p = str(folder / p) if (folder / p).exists() else p
        cells.append((b, p))
        if b is None and p is None:
            bad_rows.append((i, "missing_image", "has no image"))
        elif p is not None and not os.path.isfile(p):
            bad_rows.append((i, "missing_image", f"names image file {p!r}, which does not exist"))
        elif verify or skip:
            err = readable(b if b is not None else p)
            if err is not None:
                bad_rows.append((i, "unreadable_image", f"holds an unreadable image ({err})"))
    keep = np.ones(len(cells), bool)
    if bad_rows:
        i, _, why = bad_rows[0]
        if not skip:
            more = f" (and {len(bad_rows) - 1} more)" if len(bad_rows) > 1 else ""
            raise ValueError(
                f"from_hf: image column {name!r} row {i}{where(i)} {why}{more}; pass "
                "skip_bad_images=True to skip such rows (counted)"
            )
        keep[[i for i, _, _ in bad_rows]] = False
        for reason in ("missing_image", "unreadable_image"):
            rows = [i for i, r, _ in bad_rows if r == reason]
            if rows:
                skips.add(reason, len(rows), f"row {rows[0]}{where(rows[0])}")
    return cells, keep


def same_image_rows(
    cells: list[tuple[bytes | None, str | None]], keep: np.ndarray, column: pd.Series
) -> np.ndarray:
    """For each row, the first kept row holding the same image; a row is its
    own when no earlier row holds its image, and every row not kept is its own.

    The same image: the same file (resolved path), or the same bytes under the
    same original file name (a ``{"bytes", "path"}`` cell's ``path``, when it
    has one). Two files with equal bytes under different names stay two
    images, as the published protocols count duplicate photos."""
    out = np.arange(len(cells), dtype=np.int64)
    first: dict[tuple[Any, ...], int] = {}
    for i in np.flatnonzero(keep):
        b, p = cells[i]
        if b is not None:
            v = column.iat[i]
            name = v.get("path") if isinstance(v, dict) else None
            key: tuple[Any, ...] = ("bytes", hashlib.blake2b(b, digest_size=20).digest(), name)
        else:
            key = ("path", os.path.realpath(str(p)))
        out[i] = first.setdefault(key, int(i))
    return out


def one_split_per_image(
    split: np.ndarray, image_of_row: np.ndarray, column: str | None, where: Any
) -> np.ndarray:
    """Each row's split, checked to be its image's: an image in two splits leaks."""
    split = np.asarray(split, dtype=object)
    bad = np.flatnonzero(split != split[image_of_row])
    if bad.size:
        i = int(bad[0])
        j = int(image_of_row[i])
        src = f"split column {column!r}" if column else "the dataset's own splits"
        raise ValueError(
            f"from_hf: row {i}{where(i)} holds the same image as row {j}{where(j)}, but "
            f"{src} gives row {i} {split[i]!r} and row {j} {split[j]!r} ({bad.size} such "
            "row(s)); "
            "an image in two splits would be trained on and evaluated at once. Expected "
            "every row of an image in one split"
        )
    return split


def row_splits(
    df: pd.DataFrame,
    split_column: str | None,
    own_split: np.ndarray | None,
    image_of_row: np.ndarray,
    where: Callable[[int], str],
    *,
    test_fraction: float,
    seed: int,
) -> np.ndarray:
    """Each row's split: from ``split_column``, else the dataset's own
    (``own_split``, when the rows keep it), else a seeded ratio split drawn per
    image. Every row of one image must get one split."""
    if split_column:
        sp = df[split_column].astype(str).replace(ALIAS)
        bad = ~sp.isin(SPLITS)
        if bad.any():
            raise ValueError(
                f"from_hf: split column {split_column!r} has values "
                f"{sorted(sp[bad].unique())[:5]}, expected {list(SPLITS)}"
            )
        return one_split_per_image(sp.to_numpy(), image_of_row, split_column, where)
    if own_split is not None:
        return one_split_per_image(own_split, image_of_row, None, where)
    # drawn per image (per row when no image repeats: the same draw as ever)
    heads = image_of_row == np.arange(len(image_of_row))
    per_head = seeded_split(int(heads.sum()), test_fraction=test_fraction, seed=seed)
    return per_head[np.cumsum(heads)[image_of_row] - 1]


def image_table(
    cells: list[tuple[bytes | None, str | None]],
    keep: np.ndarray,
    image_of_row: np.ndarray,
    split: np.ndarray,
    *,
    name: str,
) -> pd.DataFrame:
    """The images table: one row per distinct kept image (its first row's id),
    with ``bytes`` and/or ``path`` (a column no image uses is dropped) and split.
    Rows merged into one image are warned about (attributed to the loader's caller)."""
    heads = image_of_row == np.arange(len(cells))
    images = pd.DataFrame(
        {
            "image_id": np.arange(len(cells), dtype=np.int64),
            "bytes": [b for b, _ in cells],
            "path": [p for _, p in cells],
        }
    )
    images["split"] = split
    images = images[keep & heads]
    n_kept = int(keep.sum())
    if len(images) < n_kept:
        warnings.warn(
            f"from_hf: {name}: {n_kept:,} rows hold {len(images):,} distinct images (rows "
            "with the same image file or bytes are one image, with all their captions)",
            stacklevel=3,
        )
    if images["path"].isna().all():
        images = images.drop(columns=["path"])
    elif images["bytes"].isna().all():
        images = images.drop(columns=["bytes"])
    return images


def caption_rows(
    df: pd.DataFrame,
    cols: list[str],
    keep: np.ndarray,
    image_of_row: np.ndarray,
    what: str,
    where: Any,
    *,
    skip: bool,
    skips: Skips,
) -> pd.DataFrame:
    """The texts table: every caption of every kept row, in row, column, list
    order, each with the id of its row's image (``image_of_row``)."""
    t_img, t_cap = [], []
    for i in np.flatnonzero(keep):
        img = int(image_of_row[i])
        for c in cols:
            v = df[c].iat[i]
            if isinstance(v, np.ndarray):
                v = v.tolist()
            is_list = isinstance(v, list | tuple)
            for k, cap in enumerate(v if is_list else [v]):
                loc = f"{what} row {i}{where(i)} column {c!r}" + (f" item {k}" if is_list else "")
                cap = skips.caption(cap, loc, skip=skip)
                if cap is not None:
                    t_img.append(img)
                    t_cap.append(cap)
    return pd.DataFrame(
        {
            "text_id": np.arange(len(t_cap), dtype=np.int64),
            "image_id": np.asarray(t_img, np.int64),
            "caption": t_cap,
        }
    )
