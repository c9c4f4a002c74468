"""Precomputed embeddings from local files or Hub repositories.

Formats (by file suffix):

* ``.npy``: one ``(n, d)`` array (``allow_pickle=False``: never executes code);
* ``.parquet``: an ``embedding`` list column (or every numeric column as
  one dimension), optional ``id`` column;
* ``.safetensors``: tensor ``embeddings`` (or the only tensor), optional ``ids``;
* ``.pkl`` / ``.pickle`` (e.g. the MMA benchmark's ``ridalefdali/flickr30k_embeddings``):
  **only with ``allow_pickle=True``**. Unpickling runs arbitrary code from the
  file, so a downloaded pickle is as dangerous as a downloaded script; opt
  in only for sources you trust.

Pairing of text rows to images: ``text_image`` (one image row index per
text row), or a text array of ``n_images * k`` rows (``k`` captions per
image, image-major), or a 3-D ``(n_images, k, d)`` text array.

A file that cannot be what its parameter needs (no rows, ragged rows, ids
that do not match the rows) raises :class:`~imsearch_align.framework.errors.ConfigError`
(a ValueError) naming the file, what was expected and what came: the command
line answers it with exit 2 before any encoding.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.datasets._local import hub_download
from imsearch_align.datasets.base import EmbeddedDataset, PairedDataset
from imsearch_align.datasets.vectors import check_zero_rows
from imsearch_align.framework.errors import ConfigError
from imsearch_align.framework.registry import DATASETS

__all__ = ["load_precomputed", "read_embeddings"]

_PICKLE_WHY = (
    "it is a pickle, and unpickling runs arbitrary code stored in the file; pass allow_pickle=True "
    "only if you trust its source (or convert it once to .npy/.safetensors/.parquet)"
)


def _bad_input(message: str) -> ValueError:
    """A bad input file as the package's usage error (exit 2 on the command line)."""
    # Imported on use: the experiment package imports the datasets.

    return ConfigError(message)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _stack_rows(column: Any, p: Path, name: str) -> np.ndarray:
    """A list column as an ``(n, d)`` float32 array; rows of different lengths
    (or missing) are refused naming the file, the column, the first row whose
    length differs from the most common one, and every length seen."""
    values = column.to_numpy()
    if len(values) == 0:
        return np.empty((0, 0), dtype=np.float32)
    try:
        return np.stack(values).astype(np.float32)
    except (ValueError, TypeError):
        lengths = [None if v is None else len(v) if hasattr(v, "__len__") else -1 for v in values]
        counts: dict[int | None, int] = {}
        for n in lengths:
            counts[n] = counts.get(n, 0) + 1
        if -1 in counts or (len(counts) == 1 and None not in counts):
            raise  # not rows of differing lengths: the values themselves are not numbers
    common = max(counts, key=lambda n: (n is not None, counts[n]))
    row = next((i for i, n in enumerate(lengths) if n != common), 0)
    got = "no value" if lengths[row] is None else _plural(lengths[row], "value")
    most = "" if common is None else f" where most rows have {common}"
    seen = ", ".join(
        f"{'null' if n is None else n} ({_plural(c, 'row')})"
        for n, c in sorted(counts.items(), key=lambda kv: -kv[1])
    )
    raise _bad_input(
        f"{str(p)!r}: column {name!r} must hold rows of one length; row {row} has {got}{most} "
        f"(lengths seen: {seen})"
    )


def _checked_ids(ids: Any, arr: Any, p: Path) -> np.ndarray | None:
    """The ids stored beside the embeddings, one per embedding row (a 3-D
    array: one per row or one per image block); another length is refused."""
    if ids is None:
        return None
    ids, shape = np.asarray(ids), np.shape(arr)
    if len(shape) < 2:
        return ids
    per_row = int(np.prod(shape[:-1]))
    if ids.size in (per_row, shape[0]):
        return ids
    want = f"{per_row} (one per embedding row)"
    if len(shape) == 3:
        want = f"{shape[0]} (one per image block) or {want}"
    raise _bad_input(f"{str(p)!r}: 'ids' has {ids.size} entries, expected {want}")


def _from_pickled(obj: Any, path: Path) -> tuple[np.ndarray | None, np.ndarray]:
    if isinstance(obj, dict):
        for k in ("embeddings", "embedding", "emb", "features", "vectors"):
            if k in obj:
                ids = obj.get("ids")
                return (None if ids is None else np.asarray(ids)), np.asarray(obj[k])
        arrays = [v for v in obj.values() if hasattr(v, "shape") or isinstance(v, list)]
        if len(arrays) == 1:
            return None, np.asarray(arrays[0])
        raise ValueError(
            f"{str(path)!r}: pickled dict has no 'embeddings' key; keys are {list(obj)[:10]}"
        )
    if hasattr(obj, "detach"):  # a torch tensor
        obj = obj.detach().cpu().numpy()
    return None, np.asarray(obj)


def _read_npy(p: Path, allow_pickle: bool = False) -> np.ndarray:
    """A ``.npy`` file's array; an object array (a pickle: loaded only with
    ``allow_pickle``) and a damaged file (bad header, truncated data) are
    refused, each with its own reason."""
    try:
        with p.open("rb") as fh:
            fmt = np.lib.format
            version = fmt.read_magic(fh)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            _, _, dtype = read(fh)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(f"{str(p)!r} is not a readable .npy file (bad header): {exc}") from exc
    if dtype.hasobject and not allow_pickle:
        raise ValueError(f"{str(p)!r} holds Python objects, not a numeric array: {_PICKLE_WHY}")
    try:
        return np.load(p, allow_pickle=dtype.hasobject)
    except (ValueError, OSError, EOFError) as exc:
        raise ValueError(
            f"{str(p)!r} could not be read as a .npy array (a truncated or damaged copy?): {exc}"
        ) from exc


def read_embeddings(
    path: str | os.PathLike, *, allow_pickle: bool = False
) -> tuple[np.ndarray | None, np.ndarray]:
    """Read ``(ids or None, vectors)`` from a ``.npy``, ``.parquet``, ``.safetensors`` or pickle file."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(
            f"precomputed embeddings file {str(p)!r} does not exist; expected a .npy, .parquet, "
            ".safetensors (or, with allow_pickle=True, .pkl) file"
        )
    suf = p.suffix.lower()
    if suf == ".npy":
        arr = _read_npy(p, allow_pickle)
        if arr.dtype.hasobject:  # a pickle in a .npy, allowed: read as a .pkl is
            ids, arr = _from_pickled(arr.item() if arr.ndim == 0 else arr, p)
            return _checked_ids(ids, arr, p), arr
        return None, arr
    if suf == ".parquet":
        import pandas as pd

        df = pd.read_parquet(p)
        ids = df["id"].to_numpy() if "id" in df.columns else None
        if "embedding" in df.columns:
            return ids, _stack_rows(df["embedding"], p, "embedding")
        num = df.drop(columns=[c for c in ("id",) if c in df.columns]).select_dtypes("number")
        if num.shape[1] == 0:
            raise ValueError(
                f"{str(p)!r}: expected an 'embedding' list column or numeric columns, got {list(df.columns)}"
            )
        return ids, num.to_numpy(np.float32)
    if suf == ".safetensors":
        from safetensors.numpy import load_file

        t = load_file(str(p))
        ids = t.pop("ids", None)
        key = "embeddings" if "embeddings" in t else (next(iter(t)) if len(t) == 1 else None)
        if key is None:
            raise ValueError(
                f"{str(p)!r}: expected a tensor named 'embeddings' (or exactly one tensor), got {sorted(t)}"
            )
        return _checked_ids(ids, t[key], p), t[key]
    if suf in (".pkl", ".pickle"):
        if not allow_pickle:
            raise ValueError(f"refusing to load {str(p)!r}: {_PICKLE_WHY}")
        import pickle

        with p.open("rb") as fh:
            obj = pickle.load(fh)
        ids, arr = _from_pickled(obj, p)
        return _checked_ids(ids, arr, p), arr
    raise ValueError(
        f"unsupported embeddings file {p.name!r}: expected .npy, .parquet, .safetensors or .pkl"
    )


def _resolve(path: str | os.PathLike, repo_id: str | None) -> Path:
    if repo_id is None:
        return Path(path)
    return Path(
        hub_download(
            repo_id,
            str(path),
            what="precomputed embeddings",
            local_hint="download the files and pass their local paths",
        )
    )


def _int_array(value: Any, name: str, allow_pickle: bool) -> np.ndarray | None:
    """``value`` as a 1-D integer array; a str/path is read as a ``.npy``/``.parquet`` file."""
    if value is None:
        return None
    if isinstance(value, str | os.PathLike):
        _, arr = read_embeddings(Path(value).expanduser(), allow_pickle=allow_pickle)
        value = np.asarray(arr).reshape(-1)
    arr = np.asarray(value)
    if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iuf"):
        raise ValueError(
            f"{name} must be a 1-D list of integers, got shape {arr.shape} {arr.dtype}"
        )
    if arr.dtype.kind == "f":
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"{name} must hold integers, got non-integral values")
        arr = arr.astype(np.int64)
    return arr


def _check_stored_ids(
    img_ids: Any, txt_ids: Any, text_image: np.ndarray, n_images: int, iname: str, tname: str
) -> None:
    """Refuse files whose own ids contradict the pairing by row position.

    Rows are paired by position (``text_image``, or image-major), not by the
    ids a file may carry. When both files carry ids and every text id is an
    image id, the text ids name each text row's image: a text row whose id
    is not the id of the image row it is paired with means the files are in
    different orders, and every metric would be computed on wrong pairs.
    (Text ids that are not all image ids are caption ids: nothing to check.)
    """
    if img_ids is None or txt_ids is None:
        return
    img_ids, txt_ids = np.asarray(img_ids).reshape(-1), np.asarray(txt_ids).reshape(-1)
    if len(img_ids) != n_images or len(txt_ids) != len(text_image):
        return
    if len(text_image) and not 0 <= text_image.min() <= text_image.max() < n_images:
        return  # refused with its own message by PairedDataset.from_arrays
    if len(np.unique(img_ids)) != n_images or not np.isin(txt_ids, img_ids).all():
        return
    bad = np.flatnonzero(img_ids[text_image] != txt_ids)
    if bad.size:
        j = int(bad[0])
        raise ValueError(
            f"text row {j} of {tname!r} has id {txt_ids[j].tolist()!r}, an image id, but it is paired "
            f"by position with image row {int(text_image[j])} of {iname!r}, whose id is "
            f"{img_ids[text_image[j]].tolist()!r} ({bad.size} such rows): the files' rows are in "
            "different orders. Expected text rows in the image file's order, or pass "
            "text_image (the image row of each text row)"
        )


def _check_has_rows(arr: np.ndarray, param: str, p: Path) -> None:
    """Refuse an embeddings array without a row (a 3-D one: without a caption row)."""
    if arr.ndim in (2, 3) and int(np.prod(arr.shape[:-1])) == 0:
        raise _bad_input(
            f"{param} {str(p)!r} holds no embedding rows: expected at least one row, "
            f"got shape {arr.shape}"
        )


@DATASETS.register("precomputed")
def load_precomputed(
    image_path: str | os.PathLike,
    text_path: str | os.PathLike,
    *,
    text_image: Any = None,
    labels: Any = None,
    repo_id: str | None = None,
    allow_pickle: bool = False,
    test_fraction: float = 0.3,
    seed: int = 42,
    name: str | None = None,
) -> EmbeddedDataset:
    """Load image and text embeddings into ``(dataset, image_provider, text_provider)``.

    Args:
        image_path: file of image embeddings, one row per image (with
            ``repo_id``: a file name in that Hub dataset repository).
        text_path: file of text embeddings, one row per caption, or a 3-D
            ``(n_images, k, d)`` array (same rules as ``image_path``).
        text_image: image row index of each text row, a list or a ``.npy``
            file; default: texts are image-major, ``n_texts / n_images`` each.
        labels: class index per image row, a list or a ``.npy`` file; None: no labels.
        repo_id: a Hub dataset repository such as ``"ridalefdali/flickr30k_embeddings"``
            to download the files from; None reads local files.
        allow_pickle: allow ``.pkl`` files (unpickling runs code: trusted sources only).
        test_fraction: share of images in ``test`` (a seeded ratio split;
            ``0.0`` makes every pair a support pair, ``1.0`` every image a test image).
        seed: seed of that ratio split.
        name: dataset name (embedding cache key part); default the image file's stem.
    """
    ip, tp = _resolve(image_path, repo_id), _resolve(text_path, repo_id)
    img_ids, X = read_embeddings(ip, allow_pickle=allow_pickle)
    txt_ids, Y = read_embeddings(tp, allow_pickle=allow_pickle)
    X = np.asarray(X)
    Y = np.asarray(Y)
    text_image = _int_array(text_image, "text_image", allow_pickle)
    labels = _int_array(labels, "labels", allow_pickle)
    if X.ndim != 2:
        raise ValueError(f"image embeddings in {ip.name!r} must be 2-D (n, d), got shape {X.shape}")
    _check_has_rows(X, "image_path", ip)
    _check_has_rows(Y, "text_path", tp)
    if Y.ndim == 3:
        if Y.shape[0] != X.shape[0]:
            raise ValueError(
                f"3-D text embeddings {Y.shape} need one block per image ({X.shape[0]})"
            )
        text_image = (
            np.repeat(np.arange(X.shape[0]), Y.shape[1]) if text_image is None else text_image
        )
        Y = Y.reshape(-1, Y.shape[2])
    if Y.ndim != 2:
        raise ValueError(f"text embeddings in {tp.name!r} must be 2-D or 3-D, got shape {Y.shape}")
    if text_image is None and Y.shape[0] != X.shape[0]:
        if Y.shape[0] % X.shape[0]:
            raise ValueError(
                f"cannot pair {Y.shape[0]} text rows with {X.shape[0]} image rows: pass text_image "
                "(one image row index per text row)"
            )
        text_image = np.repeat(np.arange(X.shape[0]), Y.shape[0] // X.shape[0])
    # Rows are the ids (image row i is image_id i); ids stored in the files
    # are checked against the pairing by position when they can be.
    paired = np.arange(Y.shape[0]) if text_image is None else text_image
    _check_stored_ids(img_ids, txt_ids, paired, X.shape[0], ip.name, tp.name)
    check_zero_rows(X, None, f"precomputed image embeddings {ip.name!r}")
    check_zero_rows(Y, None, f"precomputed text embeddings {tp.name!r}")
    ds_name = name or Path(str(image_path)).stem
    return PairedDataset.from_arrays(
        X, Y, text_image, labels, name=ds_name, test_fraction=test_fraction, seed=seed
    )
