"""ImageNet-1k validation for zero-shot classification.

Local layout (the Kaggle "ImageNet Object Localization Challenge" copy)::

    ROOT/LOC_synset_mapping.txt   n01440764 tench, Tinca tinca   (1,000 lines, class-index order)
    ROOT/LOC_val_solution.csv     ImageId,PredictionString       (label = first synset)
    ROOT/ILSVRC/Data/CLS-LOC/val/ILSVRC2012_val_00000001.JPEG   (or ROOT/val/)

Class names are the curated CLIP names shipped in
``imsearch_align/data/imagenet_classnames.json`` (when the mapping has the
standard 1,000 synsets), else the first WordNet lemma of each synset; the 80
OpenAI prompt templates ship in ``imagenet_templates.json``. The texts table
pairs every image with ``caption_template`` filled with its class name, which
is the paired data an alignment method is fitted on. The split is a seeded
ratio over images (validation has no official support split).
"""

from __future__ import annotations

import json
import os
from functools import cache
from importlib import resources

import numpy as np
import pandas as pd

from imsearch_align.datasets._local import check_images, check_root, find_first, layout_error
from imsearch_align.datasets.base import PairedDataset, seeded_split
from imsearch_align.framework.registry import DATASETS

__all__ = ["IMAGENET_LAYOUT", "imagenet_classnames", "imagenet_templates", "load_imagenet"]

IMAGENET_LAYOUT = """\
  ROOT/
    LOC_synset_mapping.txt      n01440764 tench, Tinca tinca
    LOC_val_solution.csv        ImageId,PredictionString
    ILSVRC/Data/CLS-LOC/val/    ILSVRC2012_val_00000001.JPEG ...   (or val/)"""

IMAGENET_HOW = (
    "accept the ImageNet terms and download the Kaggle competition data "
    "'imagenet-object-localization-challenge' (kaggle competitions download -c "
    "imagenet-object-localization-challenge), or https://image-net.org/download.php"
)


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


@DATASETS.register("imagenet")
def load_imagenet(
    root: str | os.PathLike | None = None,
    *,
    test_fraction: float = 0.3,
    seed: int = 42,
    caption_template: str = "a photo of a {c}.",
    verify_images: bool = True,
    skip_bad_images: bool = False,
    name: str = "imagenet1k-val",
) -> PairedDataset:
    """Load ImageNet-1k validation images with labels, class names and templates.

    Args:
        root: the folder (see the module docstring).
        test_fraction, seed: seeded ratio split over images.
        caption_template: caption paired with each image, ``{c}`` = class name.
        verify_images: decode-check every image at load time.
        skip_bad_images: drop unreadable images with a warning instead of raising.
        name: dataset name (cache key part).
    """
    if "{c}" not in caption_template:
        raise ValueError(f"caption_template must contain '{{c}}', got {caption_template!r}")
    base = check_root(root, "imagenet", IMAGENET_LAYOUT, IMAGENET_HOW)
    mapping, solution = base / "LOC_synset_mapping.txt", base / "LOC_val_solution.csv"
    for f in (mapping, solution):
        if not f.is_file():
            raise layout_error(f"imagenet: missing {f.name!r}", base, IMAGENET_LAYOUT, IMAGENET_HOW)
    folder = find_first(base, ("ILSVRC/Data/CLS-LOC/val", "val"))
    if folder is None:
        raise layout_error(
            "imagenet: no validation image folder", base, IMAGENET_LAYOUT, IMAGENET_HOW
        )
    wnids, lemmas = [], []
    for lineno, line in enumerate(mapping.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        wnid, _, names = line.strip().partition(" ")
        if not (wnid.startswith("n") and wnid[1:].isdigit()):
            raise ValueError(
                f"{str(mapping)!r} line {lineno}: expected 'n01440764 tench, Tinca tinca', got {line!r}"
            )
        wnids.append(wnid)
        lemmas.append(names.split(",")[0].strip() or wnid)
    class_of = {w: i for i, w in enumerate(wnids)}
    class_names = imagenet_classnames() if len(wnids) == 1000 else tuple(lemmas)
    sol = pd.read_csv(solution, dtype=str)
    if list(sol.columns[:2]) != ["ImageId", "PredictionString"]:
        raise ValueError(
            f"{str(solution)!r}: expected header 'ImageId,PredictionString', got {list(sol.columns)}"
        )
    sol = sol.sort_values("ImageId", kind="stable").reset_index(drop=True)
    first = sol["PredictionString"].str.split().str[0]
    unknown = ~first.isin(class_of)
    if unknown.any():
        raise ValueError(
            f"imagenet: {int(unknown.sum())} image(s) in {solution.name} have synsets not in "
            f"{mapping.name}, e.g. {first[unknown].unique()[:5].tolist()}"
        )
    # ILSVRC2012_val_00000001 -> 1: stable ids equal to the official image number.
    digits = sol["ImageId"].str.extract(r"(\d+)$")[0]
    ids = (
        digits.astype(np.int64)
        if digits.notna().all() and not digits.duplicated().any()
        else pd.Series(np.arange(len(sol)))
    )
    labels = first.map(class_of).astype(np.int64)
    images = pd.DataFrame(
        {
            "image_id": ids.to_numpy(np.int64),
            "path": [str(folder / f"{i}.JPEG") for i in sol["ImageId"]],
            "split": seeded_split(len(sol), test_fraction=test_fraction, seed=seed),
            "label": labels.to_numpy(),
        }
    )
    images = check_images(
        images, dataset=name, folder=folder, verify=verify_images, skip_bad_images=skip_bad_images
    )
    texts = pd.DataFrame(
        {
            "text_id": images["image_id"].to_numpy(),
            "image_id": images["image_id"].to_numpy(),
            "caption": [caption_template.format(c=class_names[k]) for k in images["label"]],
        }
    )
    return PairedDataset(
        name=name,
        images=images,
        texts=texts,
        class_names=class_names,
        templates=imagenet_templates(),
        root=str(base),
    )
