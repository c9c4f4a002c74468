"""MSCOCO with the Karpathy split (the standard 5k test), local or from the Hub.

Local layout: Karpathy's ``dataset_coco.json`` (``images[]`` with
``filepath`` (``val2014``/``train2014``), ``filename``, ``cocoid``, ``split``
in train/restval/val/test, ``sentences[].raw``) and the COCO 2014 image
folders under ``ROOT`` (or ``ROOT/images``). ``restval`` counts as ``train``
(the usual Karpathy practice). The protocol keeps the first 5 captions per
image (25,000 of 25,010 test captions).

Ids: ``image_id`` = ``cocoid``; ``text_id = cocoid * 100 + k``.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from imsearch_align.datasets._local import (
    check_images,
    check_root,
    find_first,
    hub_download,
    layout_error,
)
from imsearch_align.datasets.base import SPLITS, PairedDataset
from imsearch_align.framework.registry import DATASETS

__all__ = ["COCO_LAYOUT", "load_coco"]

COCO_LAYOUT = """\
  ROOT/
    dataset_coco.json        Karpathy split + captions
    val2014/COCO_val2014_000000391895.jpg ...   (filepath/filename from the JSON;
    train2014/...                                 also accepted under ROOT/images/)"""

COCO_HOW = (
    "download the 2014 images from https://cocodataset.org/#download and Karpathy's "
    "dataset_coco.json from https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip; "
    "or pass source='hub' when online"
)


def _coco_frame(
    rows: list[tuple[int, str, str, list[str]]],
    *,
    name: str,
    root: Path,
    folder: Path,
    splits: Sequence[str] | None,
    max_captions: int | None,
    verify_images: bool,
    skip_bad_images: bool,
) -> PairedDataset:
    ids = np.asarray([r[0] for r in rows], dtype=np.int64)
    images = pd.DataFrame(
        {
            "image_id": ids,
            "path": [str(folder / r[1]) for r in rows],
            "split": ["train" if r[2] == "restval" else r[2] for r in rows],
        }
    )
    if splits is not None:
        if any(s not in SPLITS for s in splits):
            raise ValueError(f"splits must be a subset of {list(SPLITS)}, got {list(splits)}")
        images = images[images["split"].isin(list(splits))]
    images = check_images(
        images, dataset=name, folder=folder, verify=verify_images, skip_bad_images=skip_bad_images
    )
    keep = set(images["image_id"].tolist())
    t_id, t_img, t_cap = [], [], []
    for cid, _, _, caps in rows:
        if cid not in keep:
            continue
        if len(caps) > 100:
            raise ValueError(f"{name}: image {cid} has {len(caps)} captions, at most 100 supported")
        for k, c in enumerate(caps if max_captions is None else caps[:max_captions]):
            t_id.append(cid * 100 + k)
            t_img.append(cid)
            t_cap.append(c)
    texts = pd.DataFrame(
        {
            "text_id": np.asarray(t_id, np.int64),
            "image_id": np.asarray(t_img, np.int64),
            "caption": t_cap,
        }
    )
    return PairedDataset(name=name, images=images, texts=texts, root=str(root))


@DATASETS.register("coco")
def load_coco(
    root: str | os.PathLike | None = None,
    *,
    source: str = "local",
    splits: Sequence[str] | None = ("test",),
    max_captions: int | None = 5,
    verify_images: bool = True,
    skip_bad_images: bool = False,
    name: str = "coco",
    repo_id: str = "nlphuji/mscoco_2014_5k_test_image_text_retrieval",
) -> PairedDataset:
    """Load MSCOCO (Karpathy split); by default the 5k test images only.

    Args:
        root: the folder (see the module docstring); for ``source="hub"`` the
            folder to extract images into (default: next to the Hub cache).
        source: ``"local"`` or ``"hub"`` (``repo_id``: ``test_5k_mscoco_2014.csv``
            + ``images_mscoco_2014_5k_test.zip``; test split only).
        splits: splits to keep; None keeps all (train includes restval).
        max_captions: captions per image (5 in the standard protocol); None keeps all.
        verify_images: decode-check every kept image at load time.
        skip_bad_images: drop unreadable images with a warning instead of raising.
        name: dataset name (cache key part).
        repo_id: Hub dataset for ``source="hub"``.
    """
    common = dict(
        splits=splits,
        max_captions=max_captions,
        verify_images=verify_images,
        skip_bad_images=skip_bad_images,
    )
    if source == "hub":
        hint = f"download COCO and pass root=FOLDER with the layout\n{COCO_LAYOUT}"
        ann = Path(
            hub_download(repo_id, "test_5k_mscoco_2014.csv", what="MSCOCO 5k test", local_hint=hint)
        )
        target = Path(root) if root is not None else ann.parent
        folder = target / "images_mscoco_2014_5k_test"
        if not folder.is_dir():
            z = hub_download(
                repo_id, "images_mscoco_2014_5k_test.zip", what="MSCOCO 5k test", local_hint=hint
            )
            with zipfile.ZipFile(z) as zf:
                zf.extractall(target)
        df = pd.read_csv(ann)
        need = {"raw", "filename"}
        if need - set(df.columns):
            raise ValueError(
                f"{repo_id}: expected columns {sorted(need)} in the CSV, got {list(df.columns)}"
            )
        idcol = next((c for c in ("cocoid", "img_id", "imgid") if c in df.columns), None)
        ids = df[idcol].astype(np.int64) if idcol else pd.Series(np.arange(len(df)))
        rows = [
            (int(i), str(f), "test", [str(c) for c in json.loads(r)])
            for i, f, r in zip(ids, df["filename"], df["raw"])
        ]
        return _coco_frame(rows, name=name, root=target, folder=folder, **common)
    if source != "local":
        raise ValueError(f"source must be 'local' or 'hub', got {source!r}")
    base = check_root(root, "coco", COCO_LAYOUT, COCO_HOW)
    ann = base / "dataset_coco.json"
    if not ann.is_file():
        raise layout_error(f"coco: missing {ann.name!r}", base, COCO_LAYOUT, COCO_HOW)
    try:
        data = json.loads(ann.read_text(encoding="utf-8"))
        rows = [
            (
                int(im["cocoid"]),
                os.path.join(im.get("filepath", ""), im["filename"]),
                str(im["split"]),
                [str(s["raw"]).strip() for s in im["sentences"]],
            )
            for im in data["images"]
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{str(ann)!r} is not Karpathy's dataset_coco.json: expected "
            '{"images": [{"cocoid", "filepath", "filename", "split", "sentences": [{"raw"}]}]} '
            f"({type(exc).__name__}: {exc})"
        ) from exc
    folder = base
    if rows and not (base / rows[0][1]).exists():
        folder = find_first(base, ("images",)) or base
    return _coco_frame(rows, name=name, root=base, folder=folder, **common)
