"""Fixture builders that write data in the *published* formats, never from a loader's output.

* COCO: Karpathy's ``dataset_coco.json`` (``{"images": [{"filepath", "sentids",
  "filename", "imgid", "split", "sentences": [{"tokens", "raw", "imgid",
  "sentid"}], "cocoid"}], "dataset": "coco"}``, raw captions with their
  trailing space) and the ``train2014/`` / ``val2014/`` JPEG folders.
* ImageNet: the Kaggle LOC files (``LOC_synset_mapping.txt``,
  ``LOC_val_solution.csv`` with boxes in ``PredictionString``,
  ``ILSVRC/Data/CLS-LOC/val/*.JPEG``) and the ``valprep.sh`` class folders
  (``val/<wnid>/ILSVRC2012_val_*.JPEG``).
* Flickr30k: ``results.csv`` of the Kaggle copy (``image_name| comment_number| comment``).

Each image encodes its index in its pixel colour, so a test can tell which
file a row points to.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

#: Five real ImageNet-1k synsets (class indices 0, 1, 2, 3 and 999).
REAL_WNIDS = ("n01440764", "n01443537", "n01484850", "n01491361", "n15075141")


def jpeg(path: Path, index: int, size: int = 16) -> Path:
    """A small JPEG whose top-left pixel's red value encodes ``index`` (to within 3);
    the rest is seeded noise, so the file has real scan data to truncate."""
    path.parent.mkdir(parents=True, exist_ok=True)
    px = np.random.default_rng(index).integers(0, 256, (size, size, 3), dtype=np.uint8)
    px[:8, :8] = (index % 251, (index * 7) % 251, 128)
    Image.fromarray(px).save(path, "JPEG", quality=95, subsampling=0)
    return path


def truncate(path: Path, drop: float = 0.3) -> None:
    """Cut the last ``drop`` of a file's bytes (a partly downloaded JPEG: the
    header is intact, so opening it works, the scan data and end marker are gone)."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * (1 - drop))])


class Published:
    """Builders of data folders in their published formats."""

    REAL_WNIDS = REAL_WNIDS
    jpeg = staticmethod(jpeg)
    truncate = staticmethod(truncate)

    @staticmethod
    def coco(
        root: Path,
        splits: Sequence[str] = ("train", "restval", "val", "test", "test"),
        *,
        layout: str = "split_folders",
        captions: int = 5,
        raw: dict[tuple[int, int], object] | None = None,
    ) -> Path:
        """Karpathy's ``dataset_coco.json`` and JPEGs for one image per entry of ``splits``.

        ``layout``: ``"split_folders"`` (ROOT/val2014/...), ``"under_images"``
        (ROOT/images/val2014/...) or ``"flat"`` (ROOT/images/<file>).
        ``raw[(i, k)]`` overrides caption ``k`` of image ``i`` (``...`` deletes the key).
        """
        entries, sentid = [], 0
        for i, split in enumerate(splits):
            fp = "train2014" if split == "train" else "val2014"
            cocoid = 1000 + i
            fn = f"COCO_{fp}_{cocoid:012d}.jpg"
            sub = {"split_folders": Path(fp), "under_images": Path("images", fp)}.get(
                layout, Path("images")
            )
            jpeg(root / sub / fn, i)
            sents = []
            for k in range(captions):
                s = {
                    "tokens": ["image", str(i), "caption", str(k)],
                    "raw": f"Image {i} caption {k}. ",
                    "imgid": i,
                    "sentid": sentid,
                }
                if raw and (i, k) in raw:
                    if raw[(i, k)] is ...:
                        del s["raw"]
                    else:
                        s["raw"] = raw[(i, k)]
                sents.append(s)
                sentid += 1
            entries.append(
                {
                    "filepath": fp,
                    "sentids": [s["sentid"] for s in sents],
                    "filename": fn,
                    "imgid": i,
                    "split": split,
                    "sentences": sents,
                    "cocoid": cocoid,
                }
            )
        (root / "dataset_coco.json").write_text(json.dumps({"images": entries, "dataset": "coco"}))
        return root

    @staticmethod
    def imagenet_kaggle(
        root: Path,
        wnids: Sequence[str],
        n_images: int,
        *,
        id_suffix: str = "",
        file_suffix: str = ".JPEG",
        empty_rows: Sequence[int] = (),
    ) -> Path:
        """The Kaggle LOC layout: image ``j`` (1-based id ``j+1``) is of class ``j % len(wnids)``."""
        (root / "LOC_synset_mapping.txt").write_text(
            "".join(f"{w} lemma{i}, alias{i}\n" for i, w in enumerate(wnids))
        )
        val = root / "ILSVRC" / "Data" / "CLS-LOC" / "val"
        rows = ["ImageId,PredictionString"]
        for j in range(n_images):
            iid = f"ILSVRC2012_val_{j + 1:08d}"
            jpeg(val / f"{iid}{file_suffix}", j)
            w = wnids[j % len(wnids)]
            pred = "" if j in empty_rows else f"{w} 1 2 30 40 {w} 5 6 70 80 "
            rows.append(f"{iid}{id_suffix},{pred}")
        (root / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
        return root

    @staticmethod
    def imagenet_valprep(
        root: Path, wnids: Sequence[str], n_images: int, *, under: str = "val"
    ) -> Path:
        """``valprep.sh`` output: ``ROOT/<under>/<wnid>/ILSVRC2012_val_<id>.JPEG``."""
        for j in range(n_images):
            w = wnids[j % len(wnids)]
            jpeg(root / under / w / f"ILSVRC2012_val_{j + 1:08d}.JPEG", j)
        return root

    @staticmethod
    def flickr_results(root: Path, lines: Sequence[str], n_images: int) -> Path:
        """``flickr30k_images/`` with ``n_images`` JPEGs named ``<1000+i>.jpg`` and a
        ``results.csv`` of the given data lines (after the Kaggle header)."""
        for i in range(n_images):
            jpeg(root / "flickr30k_images" / f"{1000 + i}.jpg", i)
        header = "image_name| comment_number| comment"
        (root / "results.csv").write_text("\n".join([header, *lines]) + "\n", encoding="utf-8")
        return root

    @staticmethod
    def flickr_karpathy(
        root: Path,
        splits: Sequence[str],
        *,
        images: str = "flickr30k-images",
        write_images: bool = True,
    ) -> Path:
        """Karpathy's ``dataset_flickr30k.json`` (``{"images": [{"sentids", "imgid",
        "sentences": [{"tokens", "raw", "imgid", "sentid"}], "split", "filename"}],
        "dataset": "flickr30k"}``) for images ``<1000+i>.jpg``, five captions each."""
        entries = []
        for i, split in enumerate(splits):
            if write_images:
                jpeg(root / images / f"{1000 + i}.jpg", i)
            sents = [
                {
                    "tokens": ["image", str(i), "caption", str(k)],
                    "raw": f"Image {i} caption {k}.",
                    "imgid": i,
                    "sentid": 5 * i + k,
                }
                for k in range(5)
            ]
            entries.append(
                {
                    "sentids": [s["sentid"] for s in sents],
                    "imgid": i,
                    "sentences": sents,
                    "split": split,
                    "filename": f"{1000 + i}.jpg",
                }
            )
        root.mkdir(parents=True, exist_ok=True)
        (root / "dataset_flickr30k.json").write_text(
            json.dumps({"images": entries, "dataset": "flickr30k"})
        )
        return root

    @staticmethod
    def flickr_caption_lines(n_images: int, per: int = 5) -> list[str]:
        """Well-formed ``results.csv`` data lines: ``<1000+i>.jpg| k| Image i caption k.``."""
        return [
            f"{1000 + i}.jpg| {k}| Image {i} caption {k}."
            for i in range(n_images)
            for k in range(per)
        ]


@pytest.fixture(scope="session")
def published() -> type[Published]:
    """The builders (see :class:`Published`)."""
    return Published


@pytest.fixture
def hf_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the ``datasets`` Arrow cache (written by ``load_dataset`` on files) at a temp folder."""
    import datasets

    path = tmp_path_factory.mktemp("hf_datasets_cache")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", path)
    return path


def hf_table(n: int, *, offset: int = 0, split: str | None = None):
    """A ``datasets.Dataset`` with an ``Image`` column (PNG bytes whose red value is the
    row index + ``offset``) and two captions per row, as a Hub captioning dataset has."""
    import io

    import datasets as hfd

    rows = []
    for i in range(offset, offset + n):
        buf = io.BytesIO()
        Image.new("RGB", (4, 4), (i, 0, 0)).save(buf, format="PNG")
        rows.append({"bytes": buf.getvalue(), "path": None})
    cols = {
        "image": rows,
        "caption": [[f"row {i} a", f"row {i} b"] for i in range(offset, offset + n)],
    }
    feats = {"image": hfd.Image(), "caption": hfd.Sequence(hfd.Value("string"))}
    if split is not None:
        cols["split"] = [split] * n
        feats["split"] = hfd.Value("string")
    return hfd.Dataset.from_dict(cols, features=hfd.Features(feats))


Published.hf_table = staticmethod(hf_table)
