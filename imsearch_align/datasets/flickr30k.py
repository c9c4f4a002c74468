"""Flickr30k with the Karpathy split, from a local folder or the Hugging Face Hub.

Local layouts (auto-detected in this order, or chosen with ``layout=``):

* ``"karpathy"``: ``dataset_flickr30k.json`` (Karpathy's file: ``images[]``
  with ``filename``, ``split``, ``sentences[].raw``);
* ``"results"``: ``results.csv`` with header ``image_name| comment_number| comment``
  (the Kaggle ``flickr30k_images`` copy);
* ``"captions"``: ``captions.txt`` with header ``image,caption``.

plus an images folder (``flickr30k-images/``, ``flickr30k_images/``,
``Images/`` or ``images/``). With ``results.csv`` or ``captions.txt`` the
split comes from a ``dataset_flickr30k.json`` next to them when present
(Karpathy: 29,000 train / 1,014 val / 1,000 test), otherwise from a seeded
ratio over images (``test_fraction``, ``seed``).

Ids are the same in every layout: ``image_id`` is the numeric file stem
(``1000092795.jpg`` -> 1000092795) when every file name is numeric, else the
rank of the file name in sorted order; ``text_id = image_id * 100 + k`` for
the image's ``k``-th caption (in file order).
"""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets._local import (
    Skips,
    as_splits,
    check_images,
    check_root,
    find_first,
    hub_download,
    layout_error,
    read_text,
)
from imsearch_align.datasets.base import PairedDataset, seeded_split
from imsearch_align.framework.registry import DATASETS

__all__ = ["FLICKR30K_LAYOUT", "load_flickr30k", "records_to_dataset"]

FLICKR30K_LAYOUT = """\
  ROOT/
    flickr30k-images/  (or flickr30k_images/, Images/, images/)  1000092795.jpg ...
    and one of:
    dataset_flickr30k.json   Karpathy split + captions
    results.csv              image_name| comment_number| comment
    captions.txt             image,caption
    (dataset_flickr30k.json next to results.csv/captions.txt supplies the Karpathy split)"""

FLICKR30K_HOW = (
    "request Flickr30k at https://shannon.cs.illinois.edu/DenotationGraph/ or use the Kaggle copy "
    "'hsankesara/flickr-image-dataset' (results.csv); Karpathy's dataset_flickr30k.json is in "
    "https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip; or pass "
    "source='hub' when online; or generate offline data with "
    "imsearch_align.datasets.shapes.generate_shapes(root, n_images, seed=0)"
)

_IMAGE_DIRS = (
    "flickr30k-images",
    "flickr30k_images/flickr30k_images",
    "flickr30k_images",
    "Images",
    "images",
)
_KARPATHY = "dataset_flickr30k.json"
_LAYOUT_FILES = {"karpathy": _KARPATHY, "results": "results.csv", "captions": "captions.txt"}
_MAX_CAPTIONS = 100  # text_id = image_id * 100 + k


def _read_karpathy(
    path: Path, skips: Skips, skip_bad_captions: bool
) -> tuple[list[tuple[str, str | None, list[str]]], dict[str, str]]:
    try:
        data = json.loads(read_text(path))
        images = data["images"]
        recs = []
        for i, im in enumerate(images):
            fname, split = str(im["filename"]), str(im["split"])
            caps = []
            for k, sent in enumerate(im["sentences"]):
                raw = sent.get("raw") if isinstance(sent, dict) else None
                where = f"{str(path)!r} images[{i}] ({fname}) sentences[{k}]"
                c = skips.caption(raw, where, skip=skip_bad_captions)
                if c is not None:
                    caps.append(c)
            recs.append((fname, split, caps))
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f"{str(path)!r} is not a Karpathy caption file: expected "
            '{"images": [{"filename", "split", "sentences": [{"raw"}]}]} '
            f"({type(exc).__name__}: {exc})"
        ) from exc
    return recs, {f: s for f, s, _ in recs}


def _group(pairs: list[tuple[str, int, str]]) -> list[tuple[str, str | None, list[str]]]:
    """(file, order, caption) rows -> per-file records, files in first-seen order."""
    by_file: dict[str, list[tuple[int, str]]] = {}
    for f, order, cap in pairs:
        by_file.setdefault(f, []).append((order, cap))
    return [
        (f, None, [c for _, c in sorted(caps, key=lambda t: t[0])]) for f, caps in by_file.items()
    ]


def _read_results(
    path: Path, skips: Skips, skip_bad_captions: bool
) -> list[tuple[str, str | None, list[str]]]:
    pairs: list[tuple[str, int, str]] = []
    lines = read_text(path).splitlines()
    header = lines[0] if lines else ""
    if "image_name" not in header or "comment" not in header:
        raise ValueError(
            f"{str(path)!r} line 1: expected header 'image_name| comment_number| comment', "
            f"got {header.strip()!r}"
        )
    seen: set[str] = set()
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|", 2)]
        caption: str | None = parts[2] if len(parts) == 3 else None
        if len(parts) == 2:
            # The Kaggle copy has a row with a lost "|": "x.jpg| 4 A dog ...".
            num, _, rest = parts[1].partition(" ")
            parts = [parts[0], num, rest]
            caption = rest if rest.strip() else None
        if len(parts) != 3 or not parts[1].strip().isdigit() or not parts[0]:
            raise ValueError(
                f"{str(path)!r} line {lineno}: expected 'image_name| comment_number| comment', "
                f"got {line!r}"
            )
        seen.add(parts[0])
        c = skips.caption(caption, f"{str(path)!r} line {lineno}", skip=skip_bad_captions)
        if c is not None:
            pairs.append((parts[0], int(parts[1]), c))
    return _with_uncaptioned(_group(pairs), seen)


def _with_uncaptioned(
    records: list[tuple[str, str | None, list[str]]], files: set[str]
) -> list[tuple[str, str | None, list[str]]]:
    """Keep images whose every caption was skipped, with no captions (t2i distractors)."""
    have = {r[0] for r in records}
    return records + [(f, None, []) for f in sorted(files - have)]


def _read_captions_txt(
    path: Path, skips: Skips, skip_bad_captions: bool
) -> list[tuple[str, str | None, list[str]]]:
    pairs: list[tuple[str, int, str]] = []
    rows = csv.reader(io.StringIO(read_text(path), newline=""))
    header = next(rows, None)
    if header is None or [h.strip() for h in header[:2]] != ["image", "caption"]:
        raise ValueError(f"{str(path)!r} line 1: expected header 'image,caption', got {header!r}")
    seen: set[str] = set()
    for i, row in enumerate(rows):
        if not row or not any(c.strip() for c in row):
            continue
        where = f"{str(path)!r} line {rows.line_num}"
        if not row[0].strip():
            raise ValueError(f"{where}: expected 'image,caption', got no image name in {row!r}")
        seen.add(row[0].strip())
        # Unquoted captions may contain commas: everything after the first is caption.
        caption = ",".join(row[1:]) if len(row) > 1 else None
        c = skips.caption(caption, where, skip=skip_bad_captions)
        if c is not None:
            pairs.append((row[0].strip(), i, c))
    return _with_uncaptioned(_group(pairs), seen)


def _image_ids(files: Sequence[str]) -> np.ndarray:
    stems = [os.path.splitext(f)[0] for f in files]
    if all(s.isdigit() for s in stems) and len(set(stems)) == len(stems):
        return np.asarray([int(s) for s in stems], dtype=np.int64)
    order = {f: i for i, f in enumerate(sorted(files))}
    return np.asarray([order[f] for f in files], dtype=np.int64)


def records_to_dataset(
    records: list[tuple[str, str | None, list[str]]],
    *,
    name: str,
    folder: Path,
    root: Path | None,
    splits: Sequence[str] | None,
    max_captions: int | None,
    test_fraction: float,
    seed: int,
    verify_images: bool,
    skip_bad_images: bool,
    skips: Skips,
) -> PairedDataset:
    """Per-image records ``(file name, split or None, captions)`` -> :class:`PairedDataset`.

    Captions are already validated. Records without a split get a seeded
    ratio split over images; ``skips`` counts what was left out.
    """
    if not records:
        raise ValueError(f"{name}: the caption file lists no images")
    files = [r[0] for r in records]
    if len(set(files)) != len(files):
        dup = sorted({f for f in files if files.count(f) > 1})[:5]
        raise ValueError(f"{name}: image file names must be unique, got duplicates {dup}")
    image_ids = _image_ids(files)
    split = np.asarray([r[1] for r in records], dtype=object)
    if (split == None).any():  # noqa: E711 - elementwise comparison on an object array
        if not (split == None).all():  # noqa: E711
            raise ValueError(f"{name}: some images have an official split and some do not")
        split = seeded_split(len(records), test_fraction=test_fraction, seed=seed)
    split = np.asarray(
        ["train" if s == "restval" else "val" if s in ("validation", "dev") else s for s in split],
        dtype=object,
    )
    images = pd.DataFrame(
        {
            "image_id": image_ids,
            "path": [str(folder / f) for f in files],
            "file_name": files,
            "split": split,
        }
    )
    if splits is not None:
        images = images[images["split"].isin(list(splits))]
    images = check_images(
        images,
        dataset=name,
        folder=folder,
        verify=verify_images,
        skip_bad_images=skip_bad_images,
        skips=skips,
        hint="; or load only the splits you have (e.g. splits=test)",
    )
    keep = set(images["file_name"])
    cap_per = max_captions if max_captions is not None else _MAX_CAPTIONS
    t_img, t_id, t_cap = [], [], []
    for (f, _, caps), iid in zip(records, image_ids):
        if f not in keep:
            continue
        if len(caps) > _MAX_CAPTIONS:
            raise ValueError(
                f"{name}: image {f!r} has {len(caps)} captions, at most {_MAX_CAPTIONS} supported"
            )
        for k, c in enumerate(caps[:cap_per]):
            t_img.append(iid)
            t_id.append(int(iid) * _MAX_CAPTIONS + k)
            t_cap.append(c)
    texts = pd.DataFrame(
        {
            "text_id": np.asarray(t_id, np.int64),
            "image_id": np.asarray(t_img, np.int64),
            "caption": t_cap,
        }
    )
    return PairedDataset(
        name=name,
        images=images,
        texts=texts,
        root=str(root) if root else None,
        skipped=skips.as_dict(),
    )


def _load_hub(
    root: Path | None,
    *,
    repo_id: str,
    name: str,
    splits: Sequence[str] | None,
    skip_bad_captions: bool,
    skips: Skips,
    kwargs: dict[str, Any],
) -> PairedDataset:
    """nlphuji/flickr30k: ``flickr_annotations_30k.csv`` (columns raw, split, filename)
    + ``flickr30k-images.zip``, extracted next to the Hub cache (or into ``root``)."""
    hint = f"download Flickr30k and pass root=FOLDER with the layout\n{FLICKR30K_LAYOUT}"
    ann = Path(
        hub_download(repo_id, "flickr_annotations_30k.csv", what="Flickr30k", local_hint=hint)
    )
    target = Path(root).expanduser() if root is not None else ann.parent
    folder = target / "flickr30k-images"
    if not folder.is_dir():
        zpath = hub_download(repo_id, "flickr30k-images.zip", what="Flickr30k", local_hint=hint)
        with zipfile.ZipFile(zpath) as z:
            z.extractall(target)
    df = pd.read_csv(io.StringIO(read_text(ann)), dtype=str, keep_default_na=False)
    missing = {"raw", "split", "filename"} - set(df.columns)
    if missing:
        raise ValueError(
            f"{repo_id}: flickr_annotations_30k.csv lacks column(s) {sorted(missing)}; "
            f"got {list(df.columns)}"
        )
    records = []
    for row, (f, sp, raw) in enumerate(zip(df["filename"], df["split"], df["raw"])):
        caps = []
        for k, c in enumerate(json.loads(raw) if raw.strip() else []):
            where = f"{ann.name} line {row + 2} caption {k}"
            c = skips.caption(c, where, skip=skip_bad_captions)
            if c is not None:
                caps.append(c)
        records.append((str(f), str(sp), caps))
    return records_to_dataset(
        records, name=name, folder=folder, root=target, splits=splits, skips=skips, **kwargs
    )


@DATASETS.register("flickr30k")
def load_flickr30k(
    root: str | os.PathLike | None = None,
    *,
    layout: str = "auto",
    source: str = "local",
    splits: str | Sequence[str] | None = None,
    max_captions: int | None = 5,
    test_fraction: float = 0.3,
    seed: int = 42,
    verify_images: bool = True,
    skip_bad_images: bool = False,
    skip_bad_captions: bool = False,
    name: str = "flickr30k",
    repo_id: str = "nlphuji/flickr30k",
) -> PairedDataset:
    """Load Flickr30k (Karpathy split: 29,000 train, 1,014 val, 1,000 test) from a folder or the Hub.

    Args:
        root: the dataset folder holding an images folder and a caption file
            (layouts in the module docstring); with ``source="hub"``, where to
            extract the images (default: next to the Hub cache).
        layout: which caption file to read: ``"auto"`` (the first found of
            ``dataset_flickr30k.json``, ``results.csv``, ``captions.txt``),
            ``"karpathy"``, ``"results"`` or ``"captions"``.
        source: ``"local"`` (read ``root``) or ``"hub"`` (download ``repo_id``
            when online).
        splits: splits to keep, a list or a comma string (``"train,test"``);
            None keeps all (train is the support set, test the evaluation set).
        max_captions: captions kept per image, in file order (5 in the
            standard protocol); None keeps all.
        test_fraction: share of images in ``test`` when no Karpathy split
            file is present (a seeded ratio split over images).
        seed: seed of that ratio split.
        verify_images: decode-check every image file at load time (a
            truncated JPEG is caught here rather than at encoding).
        skip_bad_images: skip missing or unreadable image files and their
            captions (counted in ``dataset.skipped`` and warned) instead of raising.
        skip_bad_captions: skip caption rows with no caption or an empty one
            (counted and warned) instead of raising with file and line.
        name: dataset name, the dataset part of embedding cache keys.
        repo_id: Hub dataset read when ``source="hub"``.
    """
    splits = as_splits(splits)
    skips = Skips(name)
    kwargs = {
        "max_captions": max_captions,
        "test_fraction": test_fraction,
        "seed": seed,
        "verify_images": verify_images,
        "skip_bad_images": skip_bad_images,
    }
    if source == "hub":
        ds = _load_hub(
            None if root is None else Path(root),
            repo_id=repo_id,
            name=name,
            splits=splits,
            skip_bad_captions=skip_bad_captions,
            skips=skips,
            kwargs=kwargs,
        )
        skips.warn()
        return ds
    if source != "local":
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    if layout != "auto" and layout not in _LAYOUT_FILES:
        raise ValueError(f"layout must be 'auto' or one of {list(_LAYOUT_FILES)}, got {layout!r}")
    base = check_root(root, "flickr30k", FLICKR30K_LAYOUT, FLICKR30K_HOW)
    if layout == "auto":
        found = [lay for lay, f in _LAYOUT_FILES.items() if (base / f).is_file()]
        if not found:
            raise layout_error(
                f"flickr30k: no caption file ({', '.join(_LAYOUT_FILES.values())}) "
                f"in {str(base)!r}",
                base,
                FLICKR30K_LAYOUT,
                FLICKR30K_HOW,
            )
        layout = found[0]
    cap_file = base / _LAYOUT_FILES[layout]
    if not cap_file.is_file():
        raise layout_error(
            f"flickr30k: layout {layout!r} needs {cap_file.name!r}",
            base,
            FLICKR30K_LAYOUT,
            FLICKR30K_HOW,
        )
    folder = find_first(base, _IMAGE_DIRS)
    if folder is None or not folder.is_dir():
        raise layout_error(
            f"flickr30k: no images folder ({', '.join(_IMAGE_DIRS)}) in {str(base)!r}",
            base,
            FLICKR30K_LAYOUT,
            FLICKR30K_HOW,
        )
    if layout == "karpathy":
        records, _ = _read_karpathy(cap_file, skips, skip_bad_captions)
    else:
        reader = _read_results if layout == "results" else _read_captions_txt
        records = reader(cap_file, skips, skip_bad_captions)
        if (base / _KARPATHY).is_file():
            # Only the split is taken from the JSON: its captions are not checked here.
            _, split_of = _read_karpathy(base / _KARPATHY, Skips(name), True)
            missing = [f for f, _, _ in records if f not in split_of]
            if missing:
                raise ValueError(
                    f"flickr30k: {len(missing)} image(s) of {cap_file.name} are not in "
                    f"{_KARPATHY}, e.g. {missing[:5]}; remove the split file to use a seeded "
                    "ratio split"
                )
            records = [(f, split_of[f], caps) for f, _, caps in records]
    ds = records_to_dataset(
        records, name=name, folder=folder, root=base, splits=splits, skips=skips, **kwargs
    )
    skips.warn()
    return ds
