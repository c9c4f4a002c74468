"""Any Hugging Face ``datasets`` dataset, a local file of one, or a DataFrame, with image and captions.

``data`` may be:

* a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``
  (read with ``datasets.load_from_disk``);
* a ``.parquet``, ``.csv``, ``.tsv``, ``.json`` / ``.jsonl`` or ``.arrow``
  file, or a glob of them (``data/*.parquet``; read with
  ``datasets.load_dataset(<format>, data_files=...)``);
* any other folder: ``datasets.load_dataset(folder)`` (an ``imagefolder``
  with ``metadata.csv``/``metadata.jsonl``, or a folder of data files);
* a Hub dataset name (``owner/name``), loaded when online;
* an in-memory ``datasets.Dataset`` / ``DatasetDict`` or a pandas DataFrame.

The image column may hold PIL images, ``{"bytes", "path"}`` dicts (a
``datasets.Image`` column), encoded bytes, or file paths (relative paths are
taken relative to the data file's folder when ``data`` is a path). Caption
columns hold a string or a list of strings per row. Images are stored as
bytes or paths, never decoded at load time.

Splits: a dataset with its own ``train`` and ``test`` splits (``restval``
counts as train, ``validation``/``dev`` as val) keeps them; splits chosen
with ``splits=`` are used as named (``splits=test`` makes every row a test
row); a dataset with other splits gets a seeded ratio split over all rows
(``test_fraction``, ``seed``) with a warning saying so, a single table (a
file, a ``Dataset``, a DataFrame) gets it silently; ``split_column`` takes
the split from a column instead.

Rows that hold the same image (the same file, or the same bytes under the
same original name) are one image, with the captions of every such row: data with one row per (image,
caption) pair gives each image once, with all its captions, and never the
same image under two ids (it would tie with itself in text-to-image search,
count one caption of five as relevant in image-to-text search, and could sit
in train and test at once). The ratio split is drawn per image; an image
whose rows carry different splits (``split_column`` or the dataset's own) is
refused.

Ids: ``image_id`` is the row number of the image's first row (splits
concatenated in the dataset's order); ``text_id`` a running index in row,
column, list order.
"""

from __future__ import annotations

import difflib
import glob
import hashlib
import io
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets._local import HubUnreachableError, Skips, readable
from imsearch_align.datasets.base import SPLITS, PairedDataset, seeded_split
from imsearch_align.framework.registry import DATASETS

__all__ = ["from_hf"]

_BUILDER_FOR = {
    ".parquet": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".arrow": "arrow",
}
_ALIAS = {"restval": "train", "validation": "val", "valid": "val", "dev": "val"}


def _hfd() -> Any:
    try:
        import datasets as hfd
    except ImportError as exc:  # pragma: no cover - guarded by the hub extra
        raise ImportError(
            "Hugging Face datasets input needs: pip install 'imsearch-align[hub]'"
        ) from exc
    return hfd


def _image_cell(v: Any) -> tuple[bytes | None, str | None]:
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


def _is_unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) says the Hub could not be reached."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        text = f"{type(e).__name__} {e}".lower()
        if (
            isinstance(e, ConnectionError | TimeoutError)
            or "offline" in text
            or "couldn't reach" in text
            or "connection" in text
        ):
            return True
        e = e.__cause__ or e.__context__
    return False


def _looks_like_path(s: str) -> bool:
    if s.startswith((".", "/", "~")) or os.sep in s.strip("/").replace("/", "", 1):
        return True
    parent = os.path.dirname(s)
    if parent and os.path.isdir(parent):  # "data/pairs" next to a local data/ folder
        return True
    if any(ch in s for ch in "*?["):
        return True
    return os.path.splitext(s)[1].lower() in _BUILDER_FOR


def _no_such_path(s: str) -> FileNotFoundError:
    p = Path(s).expanduser()
    parent = p.parent if p.parent.is_dir() else None
    hint = ""
    if parent is not None:
        close = difflib.get_close_matches(p.name, os.listdir(parent), n=3, cutoff=0.6)
        if close:
            hint = f"; did you mean {', '.join(repr(str(parent / c)) for c in close)}?"
    where = (
        f"folder {str(parent)!r} exists" if parent else f"folder {str(p.parent)!r} does not exist"
    )
    return FileNotFoundError(
        f"hf: data={s!r} is neither an existing file, folder or glob match ({where}){hint}; "
        "pass a save_to_disk folder, a .parquet/.csv/.json(l)/.arrow file or glob, or a Hub "
        "dataset name 'owner/name'"
    )


def _load_path(s: str) -> tuple[Any, Path]:
    """A ``Dataset``/``DatasetDict`` from a local path or glob, and the folder it came from."""
    hfd = _hfd()
    p = Path(s).expanduser()
    if p.is_dir():
        if (p / "dataset_dict.json").is_file() or (p / "state.json").is_file():
            return hfd.load_from_disk(str(p)), p
        try:
            return hfd.load_dataset(str(p)), p
        except Exception as exc:
            raise ValueError(
                f"hf: folder {str(p)!r} is not a save_to_disk folder (no dataset_dict.json or "
                "state.json) and datasets.load_dataset could not read it "
                f"({type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''})"
            ) from exc
    files = sorted(glob.glob(str(p))) if any(ch in s for ch in "*?[") else []
    if not p.is_file() and not files:
        raise _no_such_path(s)
    suffixes = {os.path.splitext(f)[1].lower() for f in (files or [str(p)])}
    builders = {_BUILDER_FOR.get(x) for x in suffixes}
    if None in builders or len(builders) != 1:
        raise ValueError(
            f"hf: data={s!r} matches files with suffix(es) {sorted(suffixes)}; expected one "
            f"format among {sorted(_BUILDER_FOR)}"
        )
    builder = builders.pop()
    kw: dict[str, Any] = {"delimiter": "\t"} if suffixes == {".tsv"} else {}
    try:
        table = hfd.load_dataset(builder, data_files=files or str(p), split="train", **kw)
    except Exception as exc:
        raise ValueError(
            f"hf: could not read {s!r} as {builder} ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0][:300] if str(exc) else ''})"
        ) from exc
    # data_files gives one split named "train" by convention: it is one table, not a train split.
    return table, (p.parent if p.is_file() else Path(os.path.dirname(str(p)) or "."))


def _own_split_names(splits: Any) -> dict[str, str] | None:
    """``splits`` as ``{dataset split name: our split}``, or None for all."""
    if splits is None:
        return None
    if isinstance(splits, Mapping):
        out = {str(k): _ALIAS.get(str(v), str(v)) for k, v in splits.items()}
        bad = [v for v in out.values() if v not in SPLITS]
        if bad:
            raise ValueError(
                f"splits maps dataset splits to {bad}; map them to one of {list(SPLITS)}"
            )
        return out
    if isinstance(splits, str):
        names = [x.strip() for x in splits.split(",") if x.strip()]
    elif isinstance(splits, Sequence) and all(isinstance(x, str) for x in splits):
        names = list(splits)
    else:
        raise TypeError(
            "splits must be a list of the dataset's split names, a comma string like "
            f"'train,test', or a mapping {{'validation': 'test'}}, got {splits!r}"
        )
    if not names:
        raise ValueError(f"splits names no split, got {splits!r}")
    return {n: _ALIAS.get(n, n) for n in names}


def _pick_splits(dd: Any, wanted: dict[str, str] | None, what: str) -> list[tuple[str, Any]]:
    """``[(our split name, Dataset)]`` chosen from a ``DatasetDict``."""
    available = list(dd.keys())
    if wanted is None:
        return [(_ALIAS.get(k, k), dd[k]) for k in available]
    out = []
    for own, ours in wanted.items():
        if own not in dd:
            close = difflib.get_close_matches(own, available, n=2, cutoff=0.5)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ValueError(
                f"hf: split {own!r} is not a split of {what}; available: {available}{hint}"
            )
        if ours not in SPLITS:
            raise ValueError(
                f"hf: split {own!r} of {what} has no meaning here; name it in a mapping, e.g. "
                f"splits={{'{own}': 'test'}} (one of {list(SPLITS)})"
            )
        out.append((ours, dd[own]))
    return out


def _to_frame(data: Any, image_column: str) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        return data
    hfd = _hfd()
    if isinstance(data, hfd.Dataset):
        if image_column in data.column_names and isinstance(
            data.features.get(image_column), hfd.Image
        ):
            # Keep the encoded bytes: decoding every image here would cost minutes and memory.
            data = data.cast_column(image_column, hfd.Image(decode=False))
        return data.to_pandas()
    raise TypeError(
        "data must be a pandas DataFrame, a datasets.Dataset or DatasetDict, a path or a Hub "
        f"name, got {type(data).__name__}"
    )


def _load_hub(name: str, wanted: dict[str, str] | None) -> Any:
    hfd = _hfd()
    try:
        if wanted is None:
            return hfd.load_dataset(name)
        return hfd.DatasetDict({own: hfd.load_dataset(name, split=own) for own in wanted})
    except ImportError:
        raise
    except Exception as exc:
        msg = str(exc).splitlines()[0][:300] if str(exc) else ""
        if _is_unreachable(exc):
            raise HubUnreachableError(
                f"could not load Hugging Face dataset {name!r} ({type(exc).__name__}: {msg}). "
                f"No local file or folder {name!r} exists either. "
                "The Hub is unreachable or offline (HF_HUB_OFFLINE=1?): save it once with "
                "save_to_disk and pass that folder, pass a .parquet file, the Dataset or a "
                "DataFrame, use a local loader with root=..., or precomputed embeddings "
                "(DATASETS.get('precomputed'))."
            ) from exc
        raise ValueError(
            f"hf: could not load Hub dataset {name!r}: {type(exc).__name__}: {msg}"
        ) from exc


class _Source:
    """What ``data`` turned out to be: its parts (split name or None, table), where it
    came from (for relative image paths), how to name it in messages, the dataset name."""

    def __init__(
        self, parts: list[tuple[str | None, Any]], folder: Path | None, what: str, name: str
    ) -> None:
        self.parts, self.folder, self.what, self.name = parts, folder, what, name


def _resolve(data: Any, wanted: dict[str, str] | None, name: str | None) -> _Source:
    """Load ``data`` (path, Hub name, or in-memory) into split parts."""
    folder: Path | None = None
    what = "the dataset"
    if isinstance(data, os.PathLike):
        data = os.fspath(data)
    if isinstance(data, str):
        if not data.strip():
            raise ValueError("hf: data is an empty string; pass a path, a Hub name or a table")
        p = Path(data).expanduser()
        if p.exists() or _looks_like_path(data):
            data, folder = _load_path(data)
            what, ds_name = repr(str(p)), name or f"hf-{p.stem or p.name}"
        else:
            what, ds_name = f"Hub dataset {data!r}", name or data.replace("/", "__")
            data = _load_hub(data, wanted)
    else:
        ds_name = name or "hf"
    one_table = (
        f"hf: {what} is one table with no splits of its own; drop splits=, or use "
        "split_column= / test_fraction="
    )
    if not isinstance(data, pd.DataFrame) and isinstance(data, _hfd().DatasetDict):
        if (
            folder is not None
            and list(data.keys()) == ["train"]
            and not (folder / "dataset_dict.json").is_file()
        ):
            # data_files / folder inference: one table that datasets calls "train".
            if wanted is not None:
                raise ValueError(one_table)
            return _Source([(None, data["train"])], folder, what, ds_name)
        return _Source(list(_pick_splits(data, wanted, what)), folder, what, ds_name)
    if wanted is not None:
        raise ValueError(one_table)
    return _Source([(None, data)], folder, what, ds_name)


def _use_own_splits(
    src: _Source, own: list[str | None], wanted: Any, n_rows: int, ratio: str
) -> bool:
    """Whether rows keep their dataset split; warns when a split dataset is re-split."""
    # Splits the user chose are used as named; otherwise the dataset's own only when it
    # has both a support and a test split (else one pool, re-split by ratio).
    if (wanted is not None and all(own)) or {"train", "test"} <= {s for s in own if s}:
        return True
    bad = [s for s in own if s is not None and s not in SPLITS]
    if bad:
        raise ValueError(
            f"hf: {src.what} has split(s) {bad} that are not train/val/test; choose with "
            "splits= (e.g. splits={'" + bad[0] + "': 'test'})"
        )
    if any(s is not None for s in own):
        warnings.warn(
            f"hf: {src.what} has split(s) {[s for s in own if s]} but not both train and test; "
            f"all {n_rows} rows get a seeded ratio split ({ratio})",
            UserWarning,
            stacklevel=3,
        )
    return False


def _check_columns(df: pd.DataFrame, needed: list[str], what: str) -> None:
    missing = [c for c in needed if c not in df.columns]
    if missing:
        names = [str(c) for c in df.columns]
        close = {m: difflib.get_close_matches(m, names, n=1, cutoff=0.6) for m in missing}
        hint = "".join(f"; did you mean {v[0]!r} for {k!r}?" for k, v in close.items() if v)
        raise ValueError(
            f"from_hf: missing column(s) {missing} in {what}; got columns {list(df.columns)}{hint}"
        )


def _image_rows(
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
            b, p = _image_cell(v)
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


def _same_image_rows(
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


def _one_split_per_image(
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


def _caption_rows(
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


@DATASETS.register("hf")
def from_hf(
    data: Any,
    *,
    image_column: str = "image",
    caption_columns: str | Sequence[str] = "caption",
    split_column: str | None = None,
    splits: str | Sequence[str] | Mapping[str, str] | None = None,
    test_fraction: float = 0.3,
    seed: int = 42,
    verify_images: bool = False,
    skip_bad_images: bool = False,
    skip_bad_captions: bool = False,
    name: str | None = None,
) -> PairedDataset:
    """Build a :class:`PairedDataset` from a ``datasets`` dataset, a local file of one, or a DataFrame.

    Args:
        data: a ``save_to_disk`` folder (Dataset or DatasetDict), a
            ``.parquet``/``.csv``/``.tsv``/``.json``/``.jsonl``/``.arrow``
            file or glob, another data folder, a Hub name ``owner/name``, or
            an in-memory ``datasets.Dataset``/``DatasetDict``/pandas DataFrame.
        image_column: column holding the image (PIL image, bytes,
            ``{"bytes", "path"}`` dict or file path).
        caption_columns: caption column(s), a name, a list or a comma string;
            each cell a string or a list of strings.
        split_column: column with ``train``/``val``/``test`` per row
            (``validation``/``restval``/``dev`` are mapped); overrides the
            dataset's own splits.
        splits: which of the dataset's own splits to load, used as named: a
            list or comma string of its split names (``"train,test"``;
            ``restval`` is train, ``validation``/``dev`` val), or a mapping to
            ours (``{"validation": "test"}``). None loads every split and uses
            them when there are both train and test, else re-splits by ratio.
        test_fraction: share of rows in ``test`` when the data has no
            train and test splits of its own and no ``split_column``.
        seed: seed of that ratio split.
        verify_images: decode-check every image at load time.
        skip_bad_images: skip rows with no image, a missing image file or an
            unreadable image (skipping implies the decode check), counted in
            ``dataset.skipped`` and warned, instead of raising.
        skip_bad_captions: skip captions that are missing or empty (counted
            and warned) instead of raising with the row and column.
        name: dataset name (embedding cache key part); default the Hub name,
            ``hf-<file or folder name>`` for a path, else ``"hf"``.
    """
    wanted = _own_split_names(splits)
    src = _resolve(data, wanted, name)
    frames = [(sp, _to_frame(d, image_column)) for sp, d in src.parts]
    own = [sp for sp, _ in frames]
    df = pd.concat([f for _, f in frames], ignore_index=True) if len(frames) > 1 else frames[0][1]
    df = df.reset_index(drop=True)
    use_own = split_column is None and _use_own_splits(
        src, own, wanted, len(df), f"test_fraction={test_fraction}, seed={seed}"
    )
    own_split = np.concatenate([np.full(len(f), sp or "", dtype=object) for sp, f in frames])
    cols = (
        [c.strip() for c in caption_columns.split(",") if c.strip()]
        if isinstance(caption_columns, str)
        else list(caption_columns)
    )
    _check_columns(df, [image_column, *cols, *([split_column] if split_column else [])], src.what)
    skips = Skips(src.name)

    def where(i: int) -> str:
        return f" ({own_split[i]} split)" if len(frames) > 1 else ""

    cells, keep = _image_rows(
        df[image_column],
        image_column,
        src.folder,
        where,
        verify=verify_images,
        skip=skip_bad_images,
        skips=skips,
    )
    image_of_row = _same_image_rows(cells, keep, df[image_column])
    heads = image_of_row == np.arange(len(df))
    images = pd.DataFrame(
        {
            "image_id": np.arange(len(df), dtype=np.int64),
            "bytes": [b for b, _ in cells],
            "path": [p for _, p in cells],
        }
    )
    if split_column:
        sp = df[split_column].astype(str).replace(_ALIAS)
        bad = ~sp.isin(SPLITS)
        if bad.any():
            raise ValueError(
                f"from_hf: split column {split_column!r} has values "
                f"{sorted(sp[bad].unique())[:5]}, expected {list(SPLITS)}"
            )
        images["split"] = _one_split_per_image(sp.to_numpy(), image_of_row, split_column, where)
    elif use_own:
        images["split"] = _one_split_per_image(own_split, image_of_row, None, where)
    else:
        # drawn per image (per row when no image repeats: the same draw as ever)
        per_head = seeded_split(int(heads.sum()), test_fraction=test_fraction, seed=seed)
        images["split"] = per_head[np.cumsum(heads)[image_of_row] - 1]
    images = images[keep & heads]
    n_kept = int(keep.sum())
    if len(images) < n_kept:
        warnings.warn(
            f"from_hf: {src.name}: {n_kept:,} rows hold {len(images):,} distinct images (rows "
            "with the same image file or bytes are one image, with all their captions)",
            stacklevel=2,
        )
    if images["path"].isna().all():
        images = images.drop(columns=["path"])
    elif images["bytes"].isna().all():
        images = images.drop(columns=["bytes"])
    texts = _caption_rows(
        df, cols, keep, image_of_row, src.what, where, skip=skip_bad_captions, skips=skips
    )
    ds = PairedDataset(
        name=src.name,
        images=images,
        texts=texts,
        root=str(src.folder) if src.folder is not None else None,
        skipped=skips.as_dict(),
    )
    skips.warn()
    return ds
