"""ImageNet-1k validation for zero-shot classification.

Local layouts (detected in this order):

* class folders, as left by the common ``valprep.sh`` script (or the
  train-style layout)::

    ROOT/val/n01440764/ILSVRC2012_val_00000293.JPEG ...   (or ROOT/ILSVRC/Data/CLS-LOC/val/,
                                                           or ROOT itself holding n*/ folders)

  The label is the folder's WordNet id; ``LOC_synset_mapping.txt`` is
  optional (without it, the standard 1,000 ids shipped with the package give
  each id its class index);
* the Kaggle "ImageNet Object Localization Challenge" copy::

    ROOT/LOC_synset_mapping.txt   n01440764 tench, Tinca tinca   (1,000 lines, class-index order)
    ROOT/LOC_val_solution.csv     ImageId,PredictionString       (label = first synset)
    ROOT/ILSVRC/Data/CLS-LOC/val/ILSVRC2012_val_00000001.JPEG   (or ROOT/val/)

  ``ImageId`` may carry a file suffix (``.JPEG``, ``.jpeg``...); files are
  matched by stem whatever their suffix's case.

The classes are those of the mapping file; without one, the standard
1,000 (in their standard order) when every folder is an ImageNet-1k id,
whichever of them are present, else the folders present, in WordNet-id
order. Image files beside the class folders are refused (they would be
left out). Class names are the curated CLIP names shipped in
``imsearch_align/data/imagenet_classnames.json`` for the standard synsets,
else the first WordNet lemma of the mapping; the 80 OpenAI prompt templates
ship in ``imagenet_templates.json``. The texts table pairs every image with
``caption_template`` filled with its class name: the paired data an
alignment method is fitted on when the support set comes from ImageNet
itself (a seeded ratio split over the validation images, ``test_fraction``).
That support set has labelled images of the very classes later classified;
the protocol of the CSA and ASIF papers fits on another dataset's pairs
instead (``test_fraction=1.0`` here, the support from e.g. COCO).

Ids: ``image_id`` is the number in the file name (``ILSVRC2012_val_00000293``
-> 293) when every file has a distinct one, else the rank of the file name.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from imsearch_align.datasets._local import Skips, check_images, check_root, find_first, read_text
from imsearch_align.datasets.base import PairedDataset
from imsearch_align.datasets.errors import BadAnnotationError, layout_error
from imsearch_align.datasets.splits import seeded_split
from imsearch_align.framework.registry import DATASETS

__all__ = [
    "IMAGENET_LAYOUT",
    "imagenet_classnames",
    "imagenet_templates",
    "imagenet_wnids",
    "load_imagenet",
]

IMAGENET_LAYOUT = """\
  ROOT/
    val/n01440764/ILSVRC2012_val_00000293.JPEG ...   class folders (valprep.sh), or
    LOC_synset_mapping.txt      n01440764 tench, Tinca tinca
    LOC_val_solution.csv        ImageId,PredictionString
    ILSVRC/Data/CLS-LOC/val/    ILSVRC2012_val_00000001.JPEG ...   (or val/)"""

IMAGENET_HOW = (
    "accept the ImageNet terms and download the Kaggle competition data "
    "'imagenet-object-localization-challenge' (kaggle competitions download -c "
    "imagenet-object-localization-challenge), or ILSVRC2012_img_val.tar from "
    "https://image-net.org/download.php and sort it into class folders with valprep.sh"
)

_VAL_DIRS = ("ILSVRC/Data/CLS-LOC/val", "val")
_WNID = re.compile(r"^n\d{8}$")
_IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png", ".webp", ".bmp")


@cache
def _data(name: str) -> dict:
    return json.loads(
        resources.files("imsearch_align").joinpath("data", name).read_text(encoding="utf-8")
    )


def imagenet_classnames() -> tuple[str, ...]:
    """The 1,000 ImageNet class names (CLIP's curated names) in class-index order."""
    return tuple(_data("imagenet_classnames.json")["classnames"])


def imagenet_templates() -> tuple[str, ...]:
    """The 80 OpenAI CLIP ImageNet prompt templates, each with a ``{c}`` placeholder."""
    return tuple(_data("imagenet_templates.json")["templates"])


def imagenet_wnids() -> tuple[str, ...]:
    """The 1,000 ImageNet-1k WordNet ids in class-index order (sorted)."""
    return tuple(_data("imagenet_wnids.json")["wnids"])


def _read_mapping(mapping: Path) -> tuple[list[str], list[str]]:
    wnids, lemmas = [], []
    for lineno, line in enumerate(read_text(mapping).splitlines(), start=1):
        if not line.strip():
            continue
        wnid, _, names = line.strip().partition(" ")
        if not _WNID.match(wnid):
            raise ValueError(
                f"{str(mapping)!r} line {lineno}: expected 'n01440764 tench, Tinca tinca', "
                f"got {line!r}"
            )
        wnids.append(wnid)
        lemmas.append(names.split(",")[0].strip() or wnid)
    if len(set(wnids)) != len(wnids):
        raise ValueError(f"{str(mapping)!r}: a WordNet id is listed twice")
    return wnids, lemmas


def _class_names(wnids: list[str], lemmas: list[str] | None) -> tuple[str, ...]:
    """Per synset: CLIP's curated name for a standard one (so 'crane' the bird and
    the machine keep their two names), else the mapping's first lemma."""
    std = {w: i for i, w in enumerate(imagenet_wnids())}
    clip = imagenet_classnames()
    odd = [w for w in wnids if w not in std]
    if odd and lemmas is None:
        raise ValueError(
            f"imagenet: folder(s) {odd[:5]} are not ImageNet-1k WordNet ids; add "
            "LOC_synset_mapping.txt ('n01440764 tench, Tinca tinca' per line) to name the classes"
        )
    return tuple(
        clip[std[w]] if w in std else lemmas[i]  # type: ignore[index]
        for i, w in enumerate(wnids)
    )


def _image_ids(stems: list[str]) -> np.ndarray:
    digits = [re.search(r"(\d+)$", s) for s in stems]
    nums = [int(m.group(1)) for m in digits if m]
    if len(nums) == len(stems) and len(set(nums)) == len(nums):
        return np.asarray(nums, dtype=np.int64)
    order = {s: i for i, s in enumerate(sorted(stems))}
    return np.asarray([order[s] for s in stems], dtype=np.int64)


def _is_image(name: str) -> bool:
    return os.path.splitext(name)[1].lower() in _IMAGE_SUFFIXES


def _class_folder_layout(base: Path) -> Path | None:
    """The folder holding ``n********/`` class folders, or None."""
    for cand in (*[base / d for d in _VAL_DIRS], base):
        if cand.is_dir() and any(e.is_dir() and _WNID.match(e.name) for e in os.scandir(cand)):
            return cand
    return None


def _from_class_folders(folder: Path, mapping: Path | None) -> tuple[pd.DataFrame, tuple[str, ...]]:
    present = sorted(e.name for e in os.scandir(folder) if e.is_dir() and _WNID.match(e.name))
    if mapping is not None:
        wnids, lemmas = _read_mapping(mapping)
        extra = sorted(set(present) - set(wnids))
        if extra:
            raise ValueError(
                f"imagenet: class folder(s) {extra[:5]} of {str(folder)!r} are not in "
                f"{mapping.name}"
            )
    elif set(present) <= set(imagenet_wnids()):
        # Standard ids: the 1,000-way problem in the standard order, whatever
        # folders are present (a partial extraction must not renumber the
        # classes or make the problem smaller).
        wnids, lemmas = list(imagenet_wnids()), None
    else:
        wnids, lemmas = present, None
    loose = sum(1 for e in os.scandir(folder) if e.is_file() and _is_image(e.name))
    if loose:
        raise layout_error(
            f"imagenet: {str(folder)!r} holds class folders and {loose:,} image file(s) beside "
            "them, outside any class folder (an interrupted valprep.sh?); those would be left "
            "out of the evaluation. Move them into their class folders, or remove the class "
            "folders and use LOC_val_solution.csv",
            folder,
            IMAGENET_LAYOUT,
            IMAGENET_HOW,
        )
    class_of = {w: i for i, w in enumerate(wnids)}
    files, labels = [], []
    for w in present:
        for e in sorted(os.scandir(folder / w), key=lambda e: e.name):
            if e.is_file() and _is_image(e.name):
                files.append(f"{w}/{e.name}")
                labels.append(class_of[w])
    if not files:
        raise layout_error(
            f"imagenet: the class folders in {str(folder)!r} hold no image files",
            folder,
            IMAGENET_LAYOUT,
            IMAGENET_HOW,
        )
    stems = [os.path.splitext(os.path.basename(f))[0] for f in files]
    images = pd.DataFrame(
        {
            "image_id": _image_ids(stems),
            "path": [str(folder / f) for f in files],
            "label": np.asarray(labels, dtype=np.int64),
        }
    )
    return images, _class_names(wnids, lemmas)


def _from_solution(
    base: Path,
    folder: Path,
    mapping: Path,
    solution: Path,
    skips: Skips,
    skip_bad_labels: bool,
) -> tuple[pd.DataFrame, tuple[str, ...]]:
    wnids, lemmas = _read_mapping(mapping)
    class_of = {w: i for i, w in enumerate(wnids)}
    rows = csv.reader(io.StringIO(read_text(solution), newline=""))
    header = next(rows, None)
    if header is None or [h.strip() for h in header[:2]] != ["ImageId", "PredictionString"]:
        raise ValueError(
            f"{str(solution)!r} line 1: expected header 'ImageId,PredictionString', got {header!r}"
        )
    # Files by stem, whatever their suffix or its case (ImageId may carry one too).
    on_disk = {
        os.path.splitext(e.name)[0]: e.name
        for e in os.scandir(folder)
        if e.is_file() and _is_image(e.name)
    }
    stems, labels, unknown = [], [], []
    for row in rows:
        if not row or not any(c.strip() for c in row):
            continue
        where = f"{str(solution)!r} line {rows.line_num}"
        image_id = row[0].strip()
        if os.path.splitext(image_id)[1].lower() in _IMAGE_SUFFIXES:
            image_id = os.path.splitext(image_id)[0]
        pred = row[1].split() if len(row) > 1 else []
        if not image_id:
            raise ValueError(f"{where}: no ImageId in {row!r}")
        if not pred:
            if not skip_bad_labels:
                raise BadAnnotationError(
                    f"{where}: image {image_id!r} has an empty PredictionString (no label); fix "
                    "the row, or pass skip_bad_labels=True to skip such images (counted)"
                )
            skips.add("missing_label", 1, where)
            continue
        if pred[0] not in class_of:
            unknown.append((where, pred[0]))
            continue
        stems.append(image_id)
        labels.append(class_of[pred[0]])
    if unknown:
        raise ValueError(
            f"imagenet: {len(unknown)} image(s) in {solution.name} have a first synset that is "
            f"not in {mapping.name}, e.g. {unknown[0][1]!r} at {unknown[0][0]}"
        )
    if len(set(stems)) != len(stems):
        raise ValueError(f"{str(solution)!r}: an ImageId is listed twice")
    order = np.argsort(np.asarray(stems, dtype=object), kind="stable")
    stems = [stems[i] for i in order]
    labels = [labels[i] for i in order]
    images = pd.DataFrame(
        {
            "image_id": _image_ids(stems),
            "path": [str(folder / on_disk.get(s, f"{s}.JPEG")) for s in stems],
            "label": np.asarray(labels, dtype=np.int64),
        }
    )
    return images, _class_names(wnids, lemmas)


def _read_layout(
    base: Path, skips: Skips, skip_bad_labels: bool
) -> tuple[Path, pd.DataFrame, tuple[str, ...]]:
    """``(image folder, images table with labels, class names)`` of either layout:
    class folders when there are any, else the Kaggle mapping and solution files."""
    mapping, solution = base / "LOC_synset_mapping.txt", base / "LOC_val_solution.csv"
    class_folder = _class_folder_layout(base)
    if class_folder is not None:
        images, class_names = _from_class_folders(
            class_folder, mapping if mapping.is_file() else None
        )
        return class_folder, images, class_names
    for f in (mapping, solution):
        if not f.is_file():
            raise layout_error(
                f"imagenet: no class folders (val/n01440764/...) and no {f.name!r}",
                base,
                IMAGENET_LAYOUT,
                IMAGENET_HOW,
            )
    folder = find_first(base, _VAL_DIRS)
    if folder is None:
        raise layout_error(
            "imagenet: no validation image folder (ILSVRC/Data/CLS-LOC/val/ or val/)",
            base,
            IMAGENET_LAYOUT,
            IMAGENET_HOW,
        )
    images, class_names = _from_solution(base, folder, mapping, solution, skips, skip_bad_labels)
    return folder, images, class_names


@DATASETS.register("imagenet")
def load_imagenet(
    root: str | os.PathLike | None = None,
    *,
    test_fraction: float = 0.3,
    seed: int = 42,
    caption_template: str = "a photo of a {c}.",
    verify_images: bool = True,
    skip_bad_images: bool = False,
    skip_bad_labels: bool = False,
    name: str = "imagenet1k-val",
) -> PairedDataset:
    """Load ImageNet-1k validation images with labels, class names and prompt templates.

    Args:
        root: the folder (class-folder or Kaggle layout, see the module docstring).
        test_fraction: share of images in ``test`` (a seeded ratio split);
            the rest is the ``train`` (support) split. ``1.0`` puts every
            image in test, for a support set taken from another dataset;
            ``0.0`` puts every image in train.
        seed: seed of the ratio split.
        caption_template: caption paired with each image, ``{c}`` = class name.
        verify_images: decode-check every image at load time (a truncated
            JPEG is caught here rather than at encoding).
        skip_bad_images: skip missing or unreadable image files (counted in
            ``dataset.skipped`` and warned) instead of raising.
        skip_bad_labels: skip images whose ``PredictionString`` is empty
            (counted and warned) instead of raising with file and line.
        name: dataset name, the dataset part of embedding cache keys.
    """
    if "{c}" not in caption_template:
        raise ValueError(f"caption_template must contain '{{c}}', got {caption_template!r}")
    base = check_root(root, "imagenet", IMAGENET_LAYOUT, IMAGENET_HOW)
    skips = Skips(name)
    folder, images, class_names = _read_layout(base, skips, skip_bad_labels)
    if images["image_id"].duplicated().any():
        images["image_id"] = np.arange(len(images), dtype=np.int64)
    images["split"] = seeded_split(len(images), test_fraction=test_fraction, seed=seed)
    images = check_images(
        images,
        dataset=name,
        folder=folder,
        verify=verify_images,
        skip_bad_images=skip_bad_images,
        skips=skips,
    )
    texts = pd.DataFrame(
        {
            "text_id": images["image_id"].to_numpy(),
            "image_id": images["image_id"].to_numpy(),
            "caption": [caption_template.format(c=class_names[k]) for k in images["label"]],
        }
    )
    ds = PairedDataset(
        name=name,
        images=images,
        texts=texts,
        class_names=class_names,
        templates=imagenet_templates(),
        root=str(base),
        skipped=skips.as_dict(),
    )
    skips.warn()
    return ds
