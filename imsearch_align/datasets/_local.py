"""Helpers shared by the loaders: folders, text files, bad rows, image checks, Hub access.

Bad input is handled the same way in every loader:

* a caption row without a caption field, or with an empty or
  whitespace-only caption, raises :class:`BadAnnotationError` naming the
  file and line (or row), unless the loader's ``skip_bad_captions=True``,
  which skips it;
* a missing or unreadable (corrupt, truncated) image file raises, unless
  ``skip_bad_images=True``, which skips the image and its captions;
* every skip is counted by reason (:data:`SKIP_REASONS`) in
  :attr:`PairedDataset.skipped <imsearch_align.datasets.base.PairedDataset.skipped>`
  and reported in one warning per reason with the count and an example.

The errors themselves are in :mod:`imsearch_align.datasets.errors`.

Text files are read as UTF-8; a leading byte-order mark (an Excel export)
is dropped, and a byte that is not UTF-8 is an error naming the file and line.
"""

from __future__ import annotations

import io
import json
import os
import warnings
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from imsearch_align.datasets.errors import (
    SKIP_REASONS,
    BadAnnotationError,
    BadImageError,
    HubUnreachableError,
    LayoutError,
    layout_error,
)

__all__ = [
    "MAX_CAPTIONS",
    "Skips",
    "caption_table",
    "check_images",
    "check_root",
    "find_first",
    "hub_download",
    "hub_images",
    "read_karpathy_json",
    "read_text",
    "readable",
    "sentence_captions",
]

T = TypeVar("T")

#: Captions per image that caption ids leave room for: ``text_id = image_id * MAX_CAPTIONS + k``.
MAX_CAPTIONS = 100


def find_first(root: Path, candidates: Sequence[str]) -> Path | None:
    """The first ``root / c`` that exists, or None."""
    for c in candidates:
        p = root / c
        if p.exists():
            return p
    return None


def check_root(root: Any, name: str, layout: str, how: str) -> Path:
    """``root`` as an existing folder, or a :class:`LayoutError`."""
    if root is None:
        raise layout_error(
            f"{name}: root is None; pass the folder that holds the data", None, layout, how
        )
    p = Path(root).expanduser()
    if not p.is_dir():
        raise layout_error(f"{name}: folder {str(p)!r} does not exist", p, layout, how)
    return p


def read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` without a leading byte-order mark.

    Raises ValueError naming the file, line and column of the first byte that
    is not UTF-8 (a Latin-1 or Windows-1252 export, say).
    """
    data = path.read_bytes()
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        col = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ValueError(
            f"{str(path)!r} line {line} column {col}: byte 0x{data[exc.start]:02x} is not valid "
            "UTF-8; re-save the file as UTF-8 (e.g. iconv -f cp1252 -t utf-8)"
        ) from None


def read_karpathy_json(
    path: Path, record: Callable[[int, Any], T], *, what: str, expected: str
) -> list[T]:
    """``record(i, entry)`` of every ``images[]`` entry of a Karpathy caption JSON.

    A file that is not JSON, or an entry without a field ``record`` reads,
    raises ValueError: ``path`` is not ``what``, with the ``expected`` shape.
    """
    try:
        data = json.loads(read_text(path))
        return [record(i, im) for i, im in enumerate(data["images"])]
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"{str(path)!r} is not {what}: expected {expected} ({type(exc).__name__}: {exc})"
        ) from exc


class Skips:
    """Counts of items a loader left out, by reason, with one example each.

    A loader creates one, passes it to the checks, then calls :meth:`warn`
    and stores :meth:`as_dict` in the dataset it returns.
    """

    def __init__(self, dataset: str) -> None:
        self.dataset = dataset
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, str] = {}

    def add(self, reason: str, n: int, example: str) -> None:
        """Record ``n`` items left out for ``reason`` (a :data:`SKIP_REASONS` key)."""
        if reason not in SKIP_REASONS:
            raise ValueError(f"skip reason must be one of {list(SKIP_REASONS)}, got {reason!r}")
        if n > 0:
            self.counts[reason] += int(n)
            self.examples.setdefault(reason, example)

    def caption(self, value: Any, where: str, *, skip: bool) -> str | None:
        """A caption stripped of surrounding whitespace, or None when it is skipped.

        ``value`` None means the row has no caption field. A bad caption
        raises :class:`BadAnnotationError` naming ``where`` unless ``skip``.
        """
        if value is None or (isinstance(value, float | type(pd.NA)) and pd.isna(value)):
            reason = "missing_caption"
        elif not isinstance(value, str):
            raise BadAnnotationError(
                f"{where}: caption must be a string, got {type(value).__name__} {value!r}"
            )
        elif not value.strip():
            reason = "empty_caption"
        else:
            return value.strip()
        if not skip:
            raise BadAnnotationError(
                f"{where}: {SKIP_REASONS[reason]}; fix the row, or pass skip_bad_captions=True "
                "to skip such captions (they are counted in the result)"
            )
        self.add(reason, 1, where)
        return None

    def captions(self, values: Iterable[Any], where: str, item: str, *, skip: bool) -> list[str]:
        """The kept :meth:`caption` of each value, in order; the ``k``-th is named
        ``f"{where} {item}"`` with ``{k}`` in ``item`` filled (``"sentences[{k}]"``)."""
        out = []
        for k, value in enumerate(values):
            c = self.caption(value, f"{where} {item.format(k=k)}", skip=skip)
            if c is not None:
                out.append(c)
        return out

    def warn(self, stacklevel: int = 3) -> None:
        """One warning per reason with the count and an example."""
        for reason, n in sorted(self.counts.items()):
            warnings.warn(
                f"{self.dataset}: skipped {n} item(s): {SKIP_REASONS[reason]} ({reason}), "
                f"e.g. {self.examples[reason]}",
                UserWarning,
                stacklevel=stacklevel,
            )

    def as_dict(self) -> dict[str, int]:
        """``{reason: count}`` for the reasons that occurred, sorted by reason."""
        return {k: int(v) for k, v in sorted(self.counts.items())}


def _jpeg_ends_with_eoi(item: str | bytes) -> bool:
    if isinstance(item, bytes):
        tail = item[-64:]
    else:
        with open(item, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 64))
            tail = fh.read()
    return tail.rstrip(b"\x00\r\n ").endswith(b"\xff\xd9")


def readable(item: str | bytes) -> str | None:
    """None when the image (a file path or encoded bytes) is sound, else why not.

    ``verify()`` checks a PNG's chunks but not a JPEG's scan data, so a JPEG
    also needs its end-of-image marker; one without it is decoded fully to
    tell a truncated file (an error) from one with trailing bytes (fine).
    """
    from PIL import Image

    def src() -> Any:
        return io.BytesIO(item) if isinstance(item, bytes) else item

    try:
        with Image.open(src()) as im:
            fmt = im.format
            im.verify()
        if fmt == "JPEG" and not _jpeg_ends_with_eoi(item):
            with Image.open(src()) as im:
                im.load()
    except Exception as exc:  # PIL raises many types for a bad file
        return f"{type(exc).__name__}: {exc}"
    return None


def check_images(
    images: pd.DataFrame,
    *,
    dataset: str,
    folder: Path,
    verify: bool,
    skip_bad_images: bool,
    skips: Skips,
    hint: str = "",
) -> pd.DataFrame:
    """The rows of ``images`` whose ``path`` exists and (when checked) decodes.

    A missing file raises ValueError and an unreadable one
    :class:`BadImageError`, each naming the file and how many more, unless
    ``skip_bad_images``: then the rows are dropped and counted in ``skips``.
    Files are decode-checked when ``verify`` or ``skip_bad_images`` (a
    skip that only covered missing files would let a truncated JPEG abort
    the run at encoding). ``hint`` is appended to the missing-file error
    (e.g. how to load fewer splits, for loaders that take ``splits``).
    If no listed file exists at all, the layout is wrong: LayoutError.
    """
    paths = images["path"].tolist()
    exists = np.fromiter((os.path.isfile(p) for p in paths), bool, len(paths))
    if len(paths) and not exists.any():
        raise LayoutError(
            f"{dataset}: none of the {len(paths)} image file(s) the captions name exist under "
            f"{str(folder)!r}, e.g. {paths[0]!r}; check root and the images folder layout"
        )
    if not exists.all():
        miss = [p for p, e in zip(paths, exists) if not e]
        rel = [os.path.relpath(p, folder) for p in miss[:5]]
        if not skip_bad_images:
            raise ValueError(
                f"{dataset}: {len(miss)} image file(s) named by the captions do not exist under "
                f"{str(folder)!r}, e.g. {rel}; check the images folder, or pass "
                f"skip_bad_images=True to skip them and their captions (counted){hint}"
            )
        skips.add("missing_image", len(miss), repr(rel[0]))
        images = images[exists]
        paths = images["path"].tolist()
    if not (verify or skip_bad_images):
        return images
    from tqdm.auto import tqdm

    # File reads dominate and PIL releases the GIL while reading: a few threads help.
    with ThreadPoolExecutor(max_workers=8) as pool:
        it = pool.map(readable, paths, chunksize=64)
        errors = list(
            tqdm(
                it,
                total=len(paths),
                desc=f"{dataset}: checking images",
                unit="img",
                disable=len(paths) < 2000,
            )
        )
    bad = [i for i, e in enumerate(errors) if e is not None]
    if not bad:
        return images
    if not skip_bad_images:
        raise BadImageError(
            f"{dataset}: cannot read image {paths[bad[0]]!r} ({errors[bad[0]]})"
            + (f" and {len(bad) - 1} more" if len(bad) > 1 else "")
            + "; pass skip_bad_images=True to skip unreadable images and their captions (counted)"
        )
    skips.add("unreadable_image", len(bad), repr(os.path.relpath(paths[bad[0]], folder)))
    keep = np.ones(len(images), bool)
    keep[bad] = False
    return images[keep]


def sentence_captions(sentences: Any, where: str, skips: Skips, *, skip: bool) -> list[str]:
    """The checked captions (``raw``) of one Karpathy entry's ``sentences``,
    the ``k``-th named ``f"{where} sentences[{k}]"``."""
    raws = [s.get("raw") if isinstance(s, dict) else None for s in sentences]
    return skips.captions(raws, where, "sentences[{k}]", skip=skip)


def caption_table(
    captions: Iterable[tuple[int, str, Sequence[str]]], *, name: str, max_captions: int | None
) -> pd.DataFrame:
    """The texts table of per-image captions ``(image_id, label, captions)``.

    Keeps the first ``max_captions`` captions of each image (all when None),
    ``text_id = image_id * MAX_CAPTIONS + k`` for the ``k``-th; an image with
    more than :data:`MAX_CAPTIONS` captions raises, named by ``label``.
    """
    cap_per = MAX_CAPTIONS if max_captions is None else max_captions
    t_id, t_img, t_cap = [], [], []
    for image_id, label, caps in captions:
        if len(caps) > MAX_CAPTIONS:
            raise ValueError(
                f"{name}: image {label} has {len(caps)} captions, at most {MAX_CAPTIONS} supported"
            )
        for k, c in enumerate(caps[:cap_per]):
            t_id.append(int(image_id) * MAX_CAPTIONS + k)
            t_img.append(image_id)
            t_cap.append(c)
    return pd.DataFrame(
        {
            "text_id": np.asarray(t_id, np.int64),
            "image_id": np.asarray(t_img, np.int64),
            "caption": t_cap,
        }
    )


def hub_download(repo_id: str, filename: str, *, what: str, local_hint: str) -> str:
    """``hf_hub_download`` of a dataset file, or :class:`HubUnreachableError` with a way out."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise ImportError(
            f"{what} from the Hub needs huggingface_hub: pip install 'imsearch-align[hub]'"
        ) from exc
    try:
        return hf_hub_download(repo_id=repo_id, filename=filename, repo_type="dataset")
    except Exception as exc:  # offline mode, DNS, HTTP and missing-repo errors all end here
        raise HubUnreachableError(
            f"{what}: could not fetch {filename!r} from the Hugging Face Hub dataset {repo_id!r} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}). "
            f"The Hub is unreachable or offline (HF_HUB_OFFLINE=1?). Use a local copy instead: "
            f"{local_hint}; or load precomputed embeddings (DATASETS.get('precomputed'))."
        ) from exc


def hub_images(
    repo_id: str,
    annotations: str,
    archive: str,
    folder_name: str,
    root: Path | None,
    *,
    what: str,
    local_hint: str,
) -> tuple[Path, Path, Path]:
    """``(annotations file, target, images folder)`` of a Hub dataset of images.

    Downloads ``annotations`` and, unless ``target / folder_name`` exists,
    the zip ``archive``, extracted into ``target``: ``root`` when given, else
    the folder of the downloaded annotations (next to the Hub cache).
    """
    ann = Path(hub_download(repo_id, annotations, what=what, local_hint=local_hint))
    target = Path(root).expanduser() if root is not None else ann.parent
    folder = target / folder_name
    if not folder.is_dir():
        zpath = hub_download(repo_id, archive, what=what, local_hint=local_hint)
        with zipfile.ZipFile(zpath) as z:
            z.extractall(target)
    return ann, target, folder
