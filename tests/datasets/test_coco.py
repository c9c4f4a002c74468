"""COCO Karpathy loader from a generated tiny folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from imsearch_align.datasets import HubUnreachableError, LayoutError
from imsearch_align.datasets.coco import load_coco


def _make(root: Path, *, under_images: bool = False) -> Path:
    entries = []
    for i, (split, n_caps) in enumerate(
        [("test", 6), ("test", 5), ("val", 5), ("restval", 5), ("train", 5)]
    ):
        fp = "val2014" if split != "train" else "train2014"
        fn = f"COCO_{fp}_{i:012d}.jpg"
        d = root / ("images" if under_images else "") / fp
        d.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (i * 40, 0, 0)).save(d / fn)
        entries.append(
            {
                "filepath": fp,
                "filename": fn,
                "cocoid": 1000 + i,
                "split": split,
                "sentences": [{"raw": f"img {i} caption {k} "} for k in range(n_caps)],
            }
        )
    (root / "dataset_coco.json").write_text(json.dumps({"images": entries}))
    return root


@pytest.mark.parametrize("under_images", [False, True])
def test_default_is_karpathy_test_with_first_five_captions(
    tmp_path: Path, under_images: bool
) -> None:
    ds = load_coco(_make(tmp_path, under_images=under_images))
    assert ds.images["image_id"].tolist() == [1000, 1001]
    assert set(ds.images["split"]) == {"test"}
    caps = ds.texts[ds.texts["image_id"] == 1000]
    assert caps["caption"].tolist() == [
        f"img 0 caption {k}" for k in range(5)
    ]  # 6th dropped, stripped
    assert caps["text_id"].tolist() == [100000 + k for k in range(5)]
    assert len(ds.qrels("t2i").query_ids) == 10


def test_all_splits_restval_counts_as_train(tmp_path: Path) -> None:
    ds = load_coco(_make(tmp_path), splits=None, max_captions=None)
    assert dict(zip(ds.images["image_id"], ds.images["split"])) == {
        1000: "test",
        1001: "test",
        1002: "val",
        1003: "train",
        1004: "train",
    }
    assert len(ds.texts) == 26


def test_missing_json_lists_layout(tmp_path: Path) -> None:
    with pytest.raises(
        LayoutError, match=r"(?s)dataset_coco\.json.*Expected layout.*How to get it.*cocodataset"
    ):
        load_coco(tmp_path)


def test_unknown_images_and_hub_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _make(tmp_path)
    (root / "val2014" / "COCO_val2014_000000000001.jpg").unlink()
    with pytest.raises(ValueError, match=r"unknown image.*COCO_val2014_000000000001"):
        load_coco(root)
    import huggingface_hub

    def offline(**kw):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(HubUnreachableError, match="precomputed"):
        load_coco(source="hub")
