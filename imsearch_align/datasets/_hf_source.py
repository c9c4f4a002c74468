"""Where ``hf`` data comes from: a path, a Hub name or a table, resolved into split parts.

:func:`resolve` turns ``data`` (a ``save_to_disk`` folder, a data file or glob,
another data folder, a Hub name, an in-memory ``Dataset`` / ``DatasetDict`` /
DataFrame) into a :class:`Source`: its parts (split name or None, table),
the folder it came from (relative image paths), how messages name it, and the
dataset name. :func:`own_split_names` reads ``splits=``; :func:`use_own_splits`
decides whether rows keep the dataset's own splits. The rules are in
:mod:`imsearch_align.datasets.hf`.
"""

from __future__ import annotations

import difflib
import glob
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets.errors import HubUnreachableError
from imsearch_align.datasets.splits import SPLITS

__all__ = ["ALIAS", "Source", "hf_datasets", "own_split_names", "resolve", "use_own_splits"]

_BUILDER_FOR = {
    ".parquet": "parquet",
    ".csv": "csv",
    ".tsv": "csv",
    ".json": "json",
    ".jsonl": "json",
    ".arrow": "arrow",
}
#: Split names of Hub datasets that mean one of ours.
ALIAS = {"restval": "train", "validation": "val", "valid": "val", "dev": "val"}


def hf_datasets() -> Any:
    """The ``datasets`` module, or ImportError with the install line."""
    try:
        import datasets as hfd
    except ImportError as exc:  # pragma: no cover - guarded by the hub extra
        raise ImportError(
            "Hugging Face datasets input needs: pip install 'imsearch-align[hub]'"
        ) from exc
    return hfd


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
    hfd = hf_datasets()
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


def own_split_names(splits: Any) -> dict[str, str] | None:
    """``splits`` as ``{dataset split name: our split}``, or None for all."""
    if splits is None:
        return None
    if isinstance(splits, Mapping):
        out = {str(k): ALIAS.get(str(v), str(v)) for k, v in splits.items()}
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
    return {n: ALIAS.get(n, n) for n in names}


def _pick_splits(dd: Any, wanted: dict[str, str] | None, what: str) -> list[tuple[str, Any]]:
    """``[(our split name, Dataset)]`` chosen from a ``DatasetDict``."""
    available = list(dd.keys())
    if wanted is None:
        return [(ALIAS.get(k, k), dd[k]) for k in available]
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


def to_frame(data: Any, image_column: str) -> pd.DataFrame:
    """A table (DataFrame or ``datasets.Dataset``) as a DataFrame, images not decoded."""
    if isinstance(data, pd.DataFrame):
        return data
    hfd = hf_datasets()
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
    hfd = hf_datasets()
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


class Source:
    """What ``data`` turned out to be: its parts (split name or None, table), where it
    came from (for relative image paths), how to name it in messages, the dataset name."""

    def __init__(
        self, parts: list[tuple[str | None, Any]], folder: Path | None, what: str, name: str
    ) -> None:
        self.parts, self.folder, self.what, self.name = parts, folder, what, name

    @property
    def own_splits(self) -> list[str | None]:
        """The split name of each part (None: a table with no split of its own)."""
        return [sp for sp, _ in self.parts]

    def frame(self, image_column: str) -> tuple[pd.DataFrame, np.ndarray]:
        """Every part's rows in one frame (parts in order) and each row's own split
        (``""`` for none); image columns keep their encoded bytes."""
        frames = [(sp, to_frame(d, image_column)) for sp, d in self.parts]
        df = (
            pd.concat([f for _, f in frames], ignore_index=True)
            if len(frames) > 1
            else frames[0][1]
        )
        own_split = np.concatenate([np.full(len(f), sp or "", dtype=object) for sp, f in frames])
        return df.reset_index(drop=True), own_split


def resolve(data: Any, wanted: dict[str, str] | None, name: str | None) -> Source:
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
    if not isinstance(data, pd.DataFrame) and isinstance(data, hf_datasets().DatasetDict):
        if (
            folder is not None
            and list(data.keys()) == ["train"]
            and not (folder / "dataset_dict.json").is_file()
        ):
            # data_files / folder inference: one table that datasets calls "train".
            if wanted is not None:
                raise ValueError(one_table)
            return Source([(None, data["train"])], folder, what, ds_name)
        return Source(list(_pick_splits(data, wanted, what)), folder, what, ds_name)
    if wanted is not None:
        raise ValueError(one_table)
    return Source([(None, data)], folder, what, ds_name)


def use_own_splits(src: Source, wanted: Any, n_rows: int, ratio: str) -> bool:
    """Whether rows keep their dataset split; warns when a split dataset is re-split
    (attributed to the caller of the loader that asks)."""
    own = src.own_splits
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
