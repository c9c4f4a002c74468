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

import io
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets._flickr_captions import (
    Record,
    read_captions_txt,
    read_karpathy,
    read_results,
)
from imsearch_align.datasets._local import (
    Skips,
    caption_table,
    check_images,
    check_root,
    find_first,
    hub_images,
    read_text,
)
from imsearch_align.datasets.base import PairedDataset
from imsearch_align.datasets.errors import layout_error
from imsearch_align.datasets.splits import as_splits, seeded_split
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


def _image_ids(files: Sequence[str]) -> np.ndarray:
    stems = [os.path.splitext(f)[0] for f in files]
    if all(s.isdigit() for s in stems) and len(set(stems)) == len(stems):
        return np.asarray([int(s) for s in stems], dtype=np.int64)
    order = {f: i for i, f in enumerate(sorted(files))}
    return np.asarray([order[f] for f in files], dtype=np.int64)


def records_to_dataset(
    records: list[Record],
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
    texts = caption_table(
        ((iid, repr(f), caps) for (f, _, caps), iid in zip(records, image_ids) if f in keep),
        name=name,
        max_captions=max_captions,
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
    ann, target, folder = hub_images(
        repo_id,
        "flickr_annotations_30k.csv",
        "flickr30k-images.zip",
        "flickr30k-images",
        root,
        what="Flickr30k",
        local_hint=f"download Flickr30k and pass root=FOLDER with the layout\n{FLICKR30K_LAYOUT}",
    )
    df = pd.read_csv(io.StringIO(read_text(ann)), dtype=str, keep_default_na=False)
    missing = {"raw", "split", "filename"} - set(df.columns)
    if missing:
        raise ValueError(
            f"{repo_id}: flickr_annotations_30k.csv lacks column(s) {sorted(missing)}; "
            f"got {list(df.columns)}"
        )
    records = []
    for row, (f, sp, raw) in enumerate(zip(df["filename"], df["split"], df["raw"])):
        caps = skips.captions(
            json.loads(raw) if raw.strip() else [],
            f"{ann.name} line {row + 2}",
            "caption {k}",
            skip=skip_bad_captions,
        )
        records.append((str(f), str(sp), caps))
    return records_to_dataset(
        records, name=name, folder=folder, root=target, splits=splits, skips=skips, **kwargs
    )


def _local_files(base: Path, layout: str) -> tuple[Path, Path]:
    """``(caption file, images folder)`` of a local copy; ``layout="auto"`` takes
    the first caption file found. A missing one is a :class:`LayoutError`."""
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
    return cap_file, folder


def _read_local(
    cap_file: Path, base: Path, name: str, skips: Skips, skip_bad_captions: bool
) -> list[Record]:
    """The records of a local caption file; a ``results.csv`` or ``captions.txt``
    takes its split from a ``dataset_flickr30k.json`` beside it when there is one."""
    if cap_file.name == _KARPATHY:
        records, _ = read_karpathy(cap_file, skips, skip_bad_captions)
        return records
    reader = read_results if cap_file.name == _LAYOUT_FILES["results"] else read_captions_txt
    records = reader(cap_file, skips, skip_bad_captions)
    if not (base / _KARPATHY).is_file():
        return records
    # Only the split is taken from the JSON: its captions are not checked here.
    _, split_of = read_karpathy(base / _KARPATHY, Skips(name), True)
    missing = [f for f, _, _ in records if f not in split_of]
    if missing:
        raise ValueError(
            f"flickr30k: {len(missing)} image(s) of {cap_file.name} are not in "
            f"{_KARPATHY}, e.g. {missing[:5]}; remove the split file to use a seeded "
            "ratio split"
        )
    return [(f, split_of[f], caps) for f, _, caps in records]


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
    cap_file, folder = _local_files(base, layout)
    records = _read_local(cap_file, base, name, skips, skip_bad_captions)
    ds = records_to_dataset(
        records, name=name, folder=folder, root=base, splits=splits, skips=skips, **kwargs
    )
    skips.warn()
    return ds
