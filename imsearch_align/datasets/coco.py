"""MSCOCO with the Karpathy split, local or from the Hub.

Local layout: Karpathy's ``dataset_coco.json`` (``images[]`` with
``filepath`` (``val2014``/``train2014``), ``filename``, ``cocoid``, ``split``
in train/restval/val/test, ``sentences[].raw``) and the COCO 2014 image
folders under ``ROOT`` (or ``ROOT/images``, or all images in one flat
folder: the layout under which the images are found is used).

The default is the Karpathy protocol: the support set is ``train`` +
``restval`` (113,287 images; ``restval`` counts as ``train``), the test set
the 5,000 ``test`` images with their first 5 captions (25,000 of 25,010);
``val`` is left out. ``splits=`` changes that.

Ids: ``image_id`` = ``cocoid``; ``text_id = cocoid * 100 + k``.
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

from imsearch_align.datasets._local import (
    Skips,
    caption_table,
    check_images,
    check_root,
    hub_images,
    read_karpathy_json,
    read_text,
    sentence_captions,
)
from imsearch_align.datasets.base import PairedDataset
from imsearch_align.datasets.errors import layout_error
from imsearch_align.datasets.splits import SPLITS, as_splits
from imsearch_align.framework.registry import DATASETS

__all__ = ["COCO_LAYOUT", "load_coco"]

COCO_LAYOUT = """\
  ROOT/
    dataset_coco.json        Karpathy split + captions (images[].filepath, filename, cocoid,
                             split, sentences[].raw)
    train2014/COCO_train2014_000000000009.jpg ...
    val2014/COCO_val2014_000000000042.jpg ...
  The image folders may also sit under ROOT/images/ (images/train2014/, images/val2014/),
  or every image in one flat folder: ROOT/images/COCO_val2014_000000000042.jpg or ROOT/."""

COCO_HOW = (
    "download the 2014 images (train2014.zip, val2014.zip) from https://cocodataset.org/#download "
    "and Karpathy's dataset_coco.json from "
    "https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip; "
    "or pass source='hub' when online (the 5k test split only)"
)

#: Where an image of the JSON may be, in the order tried: (description, path under ROOT).
_IMAGE_LAYOUTS = (
    ("ROOT/<filepath>/<filename>", lambda fp, fn: os.path.join(fp, fn)),
    ("ROOT/images/<filepath>/<filename>", lambda fp, fn: os.path.join("images", fp, fn)),
    ("ROOT/images/<filename> (flat)", lambda fp, fn: os.path.join("images", fn)),
    ("ROOT/<filename> (flat)", lambda fp, fn: fn),
)
_Row = tuple[int, str, str, str, list[str]]  # cocoid, filepath, filename, split, captions


def _pick_layout(base: Path, rows: list[_Row]) -> int:
    """The index of the image layout under which most of a sample of ``rows`` exist."""
    if not rows:
        return 0
    sample = rows[:: max(1, len(rows) // 200)][:200]
    hits = [
        sum(os.path.isfile(base / make(fp, fn)) for _, fp, fn, _, _ in sample)
        for _, make in _IMAGE_LAYOUTS
    ]
    best = int(np.argmax(hits))
    if hits[best] == 0:
        _, fp, fn, _, _ = sample[0]
        tried = "\n".join(
            f"  {desc}: {str(base / make(fp, fn))!r}" for desc, make in _IMAGE_LAYOUTS
        )
        raise layout_error(
            f"coco: none of {len(sample)} sampled images of dataset_coco.json were found; "
            f"tried, for {fn!r}:\n{tried}\n",
            base,
            COCO_LAYOUT,
            COCO_HOW,
        )
    return best


def _coco_frame(
    rows: list[_Row],
    *,
    name: str,
    root: Path,
    layout: int,
    splits: Sequence[str] | None,
    max_captions: int | None,
    verify_images: bool,
    skip_bad_images: bool,
    skips: Skips,
) -> PairedDataset:
    make = _IMAGE_LAYOUTS[layout][1]
    images = pd.DataFrame(
        {
            "image_id": np.asarray([r[0] for r in rows], dtype=np.int64),
            "path": [str(root / make(r[1], r[2])) for r in rows],
            "split": ["train" if r[3] == "restval" else r[3] for r in rows],
        }
    )
    bad_split = sorted(set(images["split"]) - set(SPLITS))
    if bad_split:
        raise ValueError(
            f"{name}: dataset_coco.json has split(s) {bad_split}; expected train, restval, val, test"
        )
    if images["image_id"].duplicated().any():
        dup = images.loc[images["image_id"].duplicated(), "image_id"].unique()[:5].tolist()
        raise ValueError(f"{name}: cocoid must be unique, got duplicates {dup}")
    if splits is not None:
        images = images[images["split"].isin(list(splits))]
    images = check_images(
        images,
        dataset=name,
        folder=root,
        verify=verify_images,
        skip_bad_images=skip_bad_images,
        skips=skips,
        hint=f" (image layout used: {_IMAGE_LAYOUTS[layout][0]}); or load only the splits you "
        "have (e.g. splits=test)",
    )
    keep = set(images["image_id"].tolist())
    texts = caption_table(
        ((cid, str(cid), caps) for cid, _, _, _, caps in rows if cid in keep),
        name=name,
        max_captions=max_captions,
    )
    return PairedDataset(
        name=name, images=images, texts=texts, root=str(root), skipped=skips.as_dict()
    )


def _read_karpathy_coco(ann: Path, skips: Skips, skip_bad_captions: bool) -> list[_Row]:
    """One row per image entry of Karpathy's ``dataset_coco.json``, captions checked."""

    def record(i: int, im: Any) -> _Row:
        fn = str(im["filename"])
        caps = sentence_captions(
            im["sentences"],
            f"{str(ann)!r} images[{i}] (cocoid {im['cocoid']})",
            skips,
            skip=skip_bad_captions,
        )
        return int(im["cocoid"]), str(im.get("filepath", "")), fn, str(im["split"]), caps

    return read_karpathy_json(
        ann,
        record,
        what="Karpathy's dataset_coco.json",
        expected='{"images": [{"cocoid", "filepath", "filename", "split", "sentences": [{"raw"}]}]}',
    )


def _read_hub(
    root: Path | None, repo_id: str, skips: Skips, skip_bad_captions: bool
) -> tuple[Path, list[_Row]]:
    ann, target, folder = hub_images(
        repo_id,
        "test_5k_mscoco_2014.csv",
        "images_mscoco_2014_5k_test.zip",
        "images_mscoco_2014_5k_test",
        root,
        what="MSCOCO 5k test",
        local_hint=f"download COCO and pass root=FOLDER with the layout\n{COCO_LAYOUT}",
    )
    df = pd.read_csv(io.StringIO(read_text(ann)), dtype=str, keep_default_na=False)
    need = {"raw", "filename"}
    if need - set(df.columns):
        raise ValueError(
            f"{repo_id}: expected columns {sorted(need)} in the CSV, got {list(df.columns)}"
        )
    dup = df["filename"][df["filename"].duplicated()]
    if len(dup):  # one row per image, its captions a JSON list: else one image counts twice
        raise ValueError(
            f"{repo_id}: image {dup.iloc[0]!r} has {int((df['filename'] == dup.iloc[0]).sum())} "
            f"rows in the CSV ({dup.nunique()} image(s) repeat); expected one row per image with "
            "its captions as a JSON list in 'raw'"
        )
    idcol = next((c for c in ("cocoid", "img_id", "imgid") if c in df.columns), None)
    ids = df[idcol].astype(np.int64) if idcol else pd.Series(np.arange(len(df)))
    rows = []
    for line, (i, f, r) in enumerate(zip(ids, df["filename"], df["raw"]), start=2):
        caps = skips.captions(
            json.loads(r) if r.strip() else [],
            f"{ann.name} line {line}",
            "caption {k}",
            skip=skip_bad_captions,
        )
        rows.append((int(i), folder.name, str(f), "test", caps))
    return target, rows


@DATASETS.register("coco")
def load_coco(
    root: str | os.PathLike | None = None,
    *,
    source: str = "local",
    splits: str | Sequence[str] | None = None,
    max_captions: int | None = 5,
    verify_images: bool = True,
    skip_bad_images: bool = False,
    skip_bad_captions: bool = False,
    name: str = "coco",
    repo_id: str = "nlphuji/mscoco_2014_5k_test_image_text_retrieval",
) -> PairedDataset:
    """Load MSCOCO with the Karpathy split: support = train + restval (113,287 images), test = 5k.

    Args:
        root: the folder holding ``dataset_coco.json`` and the 2014 images
            (layouts in the module docstring); with ``source="hub"``, where to
            extract the images (default: next to the Hub cache).
        source: ``"local"`` (read ``root``) or ``"hub"`` (``repo_id``: the 5k
            test split only, downloaded when online).
        splits: splits to keep, a list or a comma string (``"train,test"``;
            ``restval`` counts as ``train``). None (default) runs the Karpathy
            protocol: train + test locally (val is left out), test from the Hub.
        max_captions: captions kept per image, in file order (5 in the
            standard protocol: 25,000 test captions); None keeps all.
        verify_images: decode-check every kept image at load time (a
            truncated JPEG is caught here rather than at encoding).
        skip_bad_images: skip missing or unreadable image files and their
            captions (counted in ``dataset.skipped`` and warned) instead of raising.
        skip_bad_captions: skip captions that are missing or empty (counted
            and warned) instead of raising with the file and entry.
        name: dataset name, the dataset part of embedding cache keys.
        repo_id: Hub dataset read when ``source="hub"``.
    """
    picked = as_splits(splits)
    skips = Skips(name)
    common = dict(
        max_captions=max_captions,
        verify_images=verify_images,
        skip_bad_images=skip_bad_images,
        skips=skips,
    )
    if source == "hub":
        target, rows = _read_hub(
            None if root is None else Path(root), repo_id, skips, skip_bad_captions
        )
        ds = _coco_frame(rows, name=name, root=target, layout=0, splits=picked, **common)
        skips.warn()
        return ds
    if source != "local":
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    base = check_root(root, "coco", COCO_LAYOUT, COCO_HOW)
    ann = base / "dataset_coco.json"
    if not ann.is_file():
        raise layout_error(f"coco: missing {ann.name!r}", base, COCO_LAYOUT, COCO_HOW)
    rows = _read_karpathy_coco(ann, skips, skip_bad_captions)
    if picked is None:
        picked = ("train", "test")
    kept = [r for r in rows if ("train" if r[3] == "restval" else r[3]) in picked]
    layout = _pick_layout(base, kept)
    ds = _coco_frame(rows, name=name, root=base, layout=layout, splits=picked, **common)
    skips.warn()
    return ds
