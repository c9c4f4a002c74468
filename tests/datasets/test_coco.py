"""COCO Karpathy loader on folders written in the published format (tests/datasets/conftest.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imsearch_align import DATASETS
from imsearch_align.datasets import (
    BadAnnotationError,
    BadImageError,
    HubUnreachableError,
    LayoutError,
)
from imsearch_align.datasets.coco import load_coco

# Entry i of the fixture: cocoid 1000 + i, in these Karpathy splits.
SPLITS = ("train", "restval", "val", "test", "test")


def test_default_runs_the_karpathy_protocol_from_root_alone(tmp_path: Path, published) -> None:
    root = published.coco(tmp_path)
    ds = DATASETS.get("coco")(root=str(root))  # what --dataset-param root=DIR passes
    # Oracle: the JSON itself: support = train + restval, test = test, val left out.
    want = {
        1000 + i: ("train" if s == "restval" else s) for i, s in enumerate(SPLITS) if s != "val"
    }
    assert dict(zip(ds.images["image_id"], ds.images["split"])) == want
    assert len(ds.split_ids("train", "text")) == 10 and len(ds.split_ids("test", "text")) == 10
    cap = ds.texts.set_index("text_id")["caption"]
    assert cap[1003 * 100 + 2] == "Image 3 caption 2."  # raw's trailing space stripped
    # Each path is the file the JSON names (colour encodes the entry index).
    for iid, path in zip(ds.images["image_id"], ds.images["path"]):
        assert Image.open(path).getpixel((0, 0))[0] == pytest.approx(iid - 1000, abs=3)


@pytest.mark.parametrize(
    ("splits", "expected"),
    [
        ("train,test", {1000, 1001, 1003, 1004}),
        (["train", "test"], {1000, 1001, 1003, 1004}),
        ("test", {1003, 1004}),
        ("restval", {1000, 1001}),
        ("train,val,test", {1000, 1001, 1002, 1003, 1004}),
    ],
)
def test_splits_as_comma_string_or_list(tmp_path: Path, published, splits, expected) -> None:
    ds = load_coco(published.coco(tmp_path), splits=splits)
    assert set(ds.images["image_id"]) == expected


def test_bad_splits_name_the_valid_ones(tmp_path: Path, published) -> None:
    with pytest.raises(
        ValueError, match=r"splits must name splits among \['train', 'val', 'test'\]"
    ):
        load_coco(published.coco(tmp_path), splits="train,tset")


@pytest.mark.parametrize("layout", ["split_folders", "under_images", "flat"])
def test_every_image_layout_is_found(tmp_path: Path, published, layout: str) -> None:
    ds = load_coco(published.coco(tmp_path, layout=layout))
    assert len(ds.images) == 4 and all(Path(p).is_file() for p in ds.images["path"])


def test_no_image_found_names_every_layout_tried(tmp_path: Path, published) -> None:
    root = published.coco(tmp_path)
    for d in ("train2014", "val2014"):
        for f in (root / d).iterdir():
            f.rename(root / f"x_{f.name}")  # images somewhere the JSON does not say
    with pytest.raises(LayoutError) as err:
        load_coco(root)
    msg = str(err.value)
    for layout in ("ROOT/<filepath>/<filename>", "ROOT/images/<filepath>/<filename>"):
        assert layout in msg
    assert "ROOT/images/<filename> (flat)" in msg and "Expected layout" in msg
    assert str(root / "images" / "COCO_train2014_000000001000.jpg") in msg


def test_only_the_first_five_captions_are_kept(tmp_path: Path, published) -> None:
    ds = load_coco(published.coco(tmp_path, captions=7), splits="test")
    assert (ds.texts.groupby("image_id").size() == 5).all()
    assert len(load_coco(tmp_path, splits="test", max_captions=None).texts) == 14


def test_missing_image_is_an_error_or_a_counted_skip(tmp_path: Path, published) -> None:
    root = published.coco(tmp_path)
    (root / "val2014" / "COCO_val2014_000000001003.jpg").unlink()
    with pytest.raises(
        ValueError,
        match=r"(?s)1 image file\(s\).*COCO_val2014_000000001003.*skip_bad_images=True.*splits=test",
    ):
        load_coco(root)
    with pytest.warns(UserWarning, match=r"skipped 1 item\(s\): image file does not exist"):
        ds = load_coco(root, skip_bad_images=True)
    assert ds.skipped == {"missing_image": 1}
    assert 1003 not in set(ds.images["image_id"]) and 1003 not in set(ds.texts["image_id"])
    assert len(ds.images) == 3


def test_truncated_jpeg_caught_at_load_time(tmp_path: Path, published) -> None:
    root = published.coco(tmp_path)
    bad = root / "train2014" / "COCO_train2014_000000001000.jpg"
    published.truncate(bad)
    with Image.open(bad) as im:
        im.verify()  # what the old check did: it passes
    with pytest.raises(BadImageError, match=r"COCO_train2014_000000001000\.jpg.*truncated"):
        load_coco(root)
    with pytest.warns(UserWarning, match="unreadable_image"):
        ds = load_coco(
            root, skip_bad_images=True, verify_images=False
        )  # skipping implies the check
    assert ds.skipped == {"unreadable_image": 1} and 1000 not in set(ds.images["image_id"])


@pytest.mark.parametrize(
    ("raw", "reason"), [("", "empty_caption"), ("   \t", "empty_caption"), (..., "missing_caption")]
)
def test_bad_captions_rejected_with_location_or_skipped_and_counted(
    tmp_path: Path, published, raw, reason
) -> None:
    root = published.coco(tmp_path, captions=6, raw={(3, 1): raw})
    with pytest.raises(
        BadAnnotationError,
        match=r"dataset_coco\.json' images\[3\] \(cocoid 1003\) sentences\[1\].*skip_bad_captions=True",
    ):
        load_coco(root)
    with pytest.warns(UserWarning, match=reason):
        ds = load_coco(root, skip_bad_captions=True)
    assert ds.skipped == {reason: 1}
    caps = ds.texts[ds.texts["image_id"] == 1003]["caption"].tolist()
    # The bad caption does not take a slot: the first five *real* captions remain.
    assert caps == [f"Image 3 caption {k}." for k in (0, 2, 3, 4, 5)]


def test_bom_is_read_and_non_utf8_byte_is_located(tmp_path: Path, published) -> None:
    root = published.coco(tmp_path)
    ann = root / "dataset_coco.json"
    text = ann.read_text()
    ann.write_bytes(b"\xef\xbb\xbf" + text.encode())
    assert len(load_coco(root)) == 4
    ann.write_bytes(text.replace("Image 3 caption 2.", "Caf\u00e9 3").encode("cp1252"))
    with pytest.raises(
        ValueError, match=r"dataset_coco\.json' line 1 column \d+: byte 0xe9 is not valid UTF-8"
    ):
        load_coco(root)


def test_not_karpathy_json_and_missing_json(tmp_path: Path) -> None:
    with pytest.raises(
        LayoutError, match=r"(?s)dataset_coco\.json.*Expected layout.*How to get it.*cocodataset"
    ):
        load_coco(tmp_path)
    (tmp_path / "dataset_coco.json").write_text(json.dumps({"annotations": []}))
    with pytest.raises(ValueError, match=r"is not Karpathy's dataset_coco\.json"):
        load_coco(tmp_path)


def test_an_image_without_captions_is_kept_as_a_document_and_warned(
    tmp_path: Path, published
) -> None:
    root = published.coco(tmp_path, raw={(4, k): "" for k in range(5)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = load_coco(root, skip_bad_captions=True)
    assert 1004 in set(ds.split_ids("test")) and ds.skipped == {"empty_caption": 5}
    np.testing.assert_array_equal(ds.uncaptioned_image_ids("test"), [1004])
    with pytest.warns(
        UserWarning, match=r"1 image\(s\) of split 'test' have no caption and are ignored"
    ):
        q = ds.qrels("i2t")
    assert 1004 not in set(q.query_ids)


def test_hub_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def offline(**kw):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(HubUnreachableError, match="precomputed"):
        load_coco(source="hub")


def test_support_only_load_needs_no_test_images(tmp_path: Path, published) -> None:
    from imsearch_align.datasets import load_support_dataset

    root = published.coco(tmp_path)
    for cid in (1003, 1004):  # the test images are not there at all
        (root / "val2014" / f"COCO_val2014_{cid:012d}.jpg").unlink()
    sup = load_support_dataset("coco", {"root": str(root)})
    assert sorted(sup.images["image_id"]) == [1000, 1001] and set(sup.images["split"]) == {"train"}
    with pytest.raises(ValueError, match=r"no support pairs.*splits="):
        load_support_dataset("coco", {"root": str(root), "splits": "val"})


def test_hub_5k_csv_one_row_per_image_and_a_repeated_image_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Hub copy (nlphuji's 5k test CSV): one row per image, its captions a
    JSON list. A CSV with an image on two rows would count it twice: refused."""
    from imsearch_align.datasets import _local

    folder = tmp_path / "images_mscoco_2014_5k_test"
    folder.mkdir()
    names = ["COCO_val2014_000000000001.jpg", "COCO_val2014_000000000002.jpg"]
    for i, n in enumerate(names):
        Image.new("RGB", (8, 8), (10 * i, 0, 0)).save(folder / n)
    csv = tmp_path / "test_5k_mscoco_2014.csv"

    def write(rows):
        import pandas as pd

        pd.DataFrame(rows, columns=["filename", "raw", "cocoid"]).to_csv(csv, index=False)

    monkeypatch.setattr(_local, "hub_download", lambda repo, name, **kw: str(tmp_path / name))
    write([[names[0], json.dumps(["a cat", "a dog"]), 1], [names[1], json.dumps(["a car"]), 2]])
    ds = load_coco(tmp_path, source="hub")
    assert sorted(ds.images["image_id"]) == [1, 2]
    assert ds.texts.groupby("image_id")["caption"].apply(list).to_dict() == {
        1: ["a cat", "a dog"],
        2: ["a car"],
    }
    write([[names[0], json.dumps(["a cat"]), 1], [names[0], json.dumps(["a dog"]), 1]])
    with pytest.raises(ValueError, match=r"has 2 rows in the CSV.*one row per image"):
        load_coco(tmp_path, source="hub")
