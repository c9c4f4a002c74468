"""Flickr30k loader: every local layout, split sources, and each bad-input error."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from imsearch_align import DATASETS
from imsearch_align.datasets import (
    BadAnnotationError,
    BadImageError,
    HubUnreachableError,
    LayoutError,
)
from imsearch_align.datasets.flickr30k import load_flickr30k
from imsearch_align.datasets.shapes import generate_shapes


@pytest.fixture(scope="module")
def shapes_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_shapes(tmp_path_factory.mktemp("shapes"), 12, seed=3, size=48)


def _copy(src: Path, dst: Path, *files: str) -> Path:
    shutil.copytree(src / "flickr30k-images", dst / "flickr30k-images")
    for f in files:
        shutil.copy(src / f, dst / f)
    return dst


def _truth(root: Path) -> dict[str, tuple[str, list[str]]]:
    data = json.loads((root / "dataset_flickr30k.json").read_text())
    return {
        im["filename"]: (im["split"], [s["raw"] for s in im["sentences"]]) for im in data["images"]
    }


def _as_dict(ds) -> dict[str, tuple[str, list[str]]]:
    out = {}
    for _, row in ds.images.iterrows():
        caps = (
            ds.texts[ds.texts["image_id"] == row["image_id"]]
            .sort_values("text_id")["caption"]
            .tolist()
        )
        out[row["file_name"]] = (row["split"], caps)
    return out


def test_karpathy_and_results_layouts_agree_with_the_written_truth(
    shapes_root: Path, tmp_path: Path
) -> None:
    truth = _truth(shapes_root)
    k = load_flickr30k(shapes_root, layout="karpathy")
    r = load_flickr30k(shapes_root, layout="results")  # split taken from the JSON next to it
    assert _as_dict(k) == truth and _as_dict(r) == truth
    # Ids do not depend on the layout: image_id = numeric stem, text_id = image_id*100 + k.
    assert k.images["image_id"].tolist() == [int(f[:6]) for f in k.images["file_name"]]
    assert k.texts["text_id"].tolist() == r.texts["text_id"].tolist()
    assert (
        k.texts["text_id"] == k.texts["image_id"] * 100 + k.texts.groupby("image_id").cumcount()
    ).all()
    assert DATASETS.get("flickr30k") is load_flickr30k


def test_results_csv_without_split_file_uses_seeded_ratio(
    shapes_root: Path, tmp_path: Path
) -> None:
    root = _copy(shapes_root, tmp_path, "results.csv")
    a = load_flickr30k(root, test_fraction=0.25, seed=7)
    b = load_flickr30k(root, test_fraction=0.25, seed=7)
    assert (a.images["split"] == b.images["split"]).all()
    assert (a.images["split"] == "test").sum() == 3
    assert {f: c for f, (_, c) in _as_dict(a).items()} == {
        f: c for f, (_, c) in _truth(shapes_root).items()
    }


def test_results_csv_tolerates_kaggle_lost_delimiter_row(shapes_root: Path, tmp_path: Path) -> None:
    root = _copy(shapes_root, tmp_path, "results.csv")
    lines = (root / "results.csv").read_text().splitlines()
    name, num, cap = (p.strip() for p in lines[3].split("|"))
    lines[3] = f"{name}| {num} {cap}"  # as in the Kaggle copy's row 19999
    (root / "results.csv").write_text("\n".join(lines) + "\n")
    ds = load_flickr30k(root)
    assert cap in ds.texts["caption"].tolist()


def test_captions_txt_layout(shapes_root: Path, tmp_path: Path) -> None:
    root = _copy(shapes_root, tmp_path)
    truth = _truth(shapes_root)
    rows = ["image,caption"] + [f"{f},{c}" for f, (_, caps) in truth.items() for c in caps]
    rows.append(f"{next(iter(truth))},A caption, with a comma")
    (root / "captions.txt").write_text("\n".join(rows) + "\n")
    ds = load_flickr30k(root, max_captions=None)
    got = _as_dict(ds)
    first = next(iter(truth))
    assert got[first][1] == [*truth[first][1], "A caption, with a comma"]
    assert all(got[f][1] == truth[f][1] for f in list(truth)[1:])


def test_splits_filter_and_max_captions(shapes_root: Path) -> None:
    ds = load_flickr30k(shapes_root, splits=("test",), max_captions=2)
    assert set(ds.images["split"]) == {"test"}
    assert (ds.texts.groupby("image_id").size() == 2).all()


def test_missing_folder_lists_layout_and_how_to_get_data(tmp_path: Path) -> None:
    with pytest.raises(
        LayoutError, match=r"(?s)does not exist.*Expected layout:.*results\.csv.*How to get it"
    ):
        load_flickr30k(tmp_path / "nope")
    (tmp_path / "flickr30k-images").mkdir()
    with pytest.raises(LayoutError, match=r"(?s)no caption file.*dataset_flickr30k\.json"):
        load_flickr30k(tmp_path)


def test_missing_images_folder(shapes_root: Path, tmp_path: Path) -> None:
    shutil.copy(shapes_root / "results.csv", tmp_path / "results.csv")
    with pytest.raises(LayoutError, match="no images folder"):
        load_flickr30k(tmp_path)


def test_captions_referencing_unknown_images(shapes_root: Path, tmp_path: Path) -> None:
    root = _copy(shapes_root, tmp_path, "results.csv")
    with (root / "results.csv").open("a") as fh:
        fh.write("999999.png| 0| a ghost image\n")
    with pytest.raises(
        ValueError, match=r"1 image file\(s\) named by the captions do not exist.*999999\.png"
    ):
        load_flickr30k(root)
    with pytest.warns(UserWarning, match="missing_image"):
        ds = load_flickr30k(root, skip_bad_images=True)
    assert ds.skipped == {"missing_image": 1} and len(ds.images) == 12


def test_unreadable_image_named_and_skippable(shapes_root: Path, tmp_path: Path) -> None:
    root = _copy(shapes_root, tmp_path, "results.csv", "dataset_flickr30k.json")
    (root / "flickr30k-images" / "000004.png").write_bytes(b"not an image")
    with pytest.raises(BadImageError, match=r"000004\.png"):
        load_flickr30k(root)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ds = load_flickr30k(root, skip_bad_images=True)
    assert any("skipped 1 item(s): image file cannot be decoded" in str(x.message) for x in w)
    assert ds.skipped == {"unreadable_image": 1}
    assert 4 not in set(ds.images["image_id"]) and 4 not in set(ds.texts["image_id"])
    assert len(ds.images) == 11


def test_hub_unreachable_suggests_local_path_or_precomputed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import huggingface_hub

    calls = []

    def offline(**kw):  # what hf_hub_download raises with HF_HUB_OFFLINE=1 and no cache
        calls.append(kw)
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline mode is enabled")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(
        HubUnreachableError, match=r"(?s)nlphuji/flickr30k.*unreachable.*root=FOLDER.*precomputed"
    ):
        load_flickr30k(source="hub")
    assert calls and calls[0]["repo_type"] == "dataset"


def test_bad_layout_argument() -> None:
    with pytest.raises(ValueError, match="layout must be"):
        load_flickr30k("/tmp", layout="tsv")
    with pytest.raises(ValueError, match="source must be"):
        load_flickr30k("/tmp", source="s3")


def test_ids_for_non_numeric_file_names(shapes_root: Path, tmp_path: Path) -> None:
    root = _copy(shapes_root, tmp_path)
    for p in (root / "flickr30k-images").iterdir():
        p.rename(p.with_name("img_" + p.name))
    (root / "captions.txt").write_text("image,caption\nimg_000001.png,b\nimg_000000.png,a\n")
    ds = load_flickr30k(root)
    # rank in sorted file-name order
    assert dict(zip(ds.images["file_name"], ds.images["image_id"])) == {
        "img_000001.png": 1,
        "img_000000.png": 0,
    }
    assert np.array_equal(ds.texts["text_id"], [100, 0])


# ------------------------------------------------------------------ bad data (issue 11.8)
@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("1001.jpg| 1|", "empty_caption"),
        ("1001.jpg| 1|    ", "empty_caption"),
        ("1001.jpg| 1", "missing_caption"),  # the caption column is absent
    ],
)
def test_results_csv_bad_caption_row(tmp_path: Path, published, line: str, reason: str) -> None:
    lines = published.flickr_caption_lines(3, per=6)
    lines[7] = line  # image 1's caption 1 (file line 9)
    root = published.flickr_results(tmp_path, lines, 3)
    with pytest.raises(BadAnnotationError, match=r"results\.csv' line 9: .*skip_bad_captions=True"):
        load_flickr30k(root)
    with pytest.warns(UserWarning, match=rf"skipped 1 item\(s\).*{reason}.*line 9"):
        ds = load_flickr30k(root, skip_bad_captions=True)
    assert ds.skipped == {reason: 1}
    caps = ds.texts[ds.texts["image_id"] == 1001]["caption"].tolist()
    # The bad row does not push out a real caption: five real ones remain.
    assert caps == [f"Image 1 caption {k}." for k in (0, 2, 3, 4, 5)]


def test_captions_txt_bad_rows_bom_and_encoding(tmp_path: Path, published) -> None:
    root = published.flickr_results(tmp_path, [], 2)
    (root / "results.csv").unlink()
    body = "image,caption\r\n1000.jpg,A dog.\r\n1000.jpg\r\n1001.jpg,  \r\n1001.jpg,A cat.\r\n"
    (root / "captions.txt").write_bytes(b"\xef\xbb\xbf" + body.encode())  # Excel: BOM + CRLF
    with pytest.raises(
        BadAnnotationError, match=r"captions\.txt' line 3: caption row has no caption field"
    ):
        load_flickr30k(root)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        ds = load_flickr30k(root, skip_bad_captions=True)
    assert ds.skipped == {"empty_caption": 1, "missing_caption": 1}
    assert sorted(ds.texts["caption"]) == ["A cat.", "A dog."]
    assert len(w) == 2
    (root / "captions.txt").write_bytes("image,caption\n1000.jpg,A d\u00f6g.\n".encode("latin-1"))
    with pytest.raises(
        ValueError, match=r"captions\.txt' line 2 column 13: byte 0xf6 is not valid UTF-8"
    ):
        load_flickr30k(root)


def test_karpathy_json_empty_caption(shapes_root: Path, tmp_path: Path) -> None:
    root = _copy(shapes_root, tmp_path)
    data = json.loads((shapes_root / "dataset_flickr30k.json").read_text())
    data["images"][2]["sentences"][0]["raw"] = " "
    (root / "dataset_flickr30k.json").write_text(json.dumps(data))
    with pytest.raises(BadAnnotationError, match=r"images\[2\] \(000002\.png\) sentences\[0\]"):
        load_flickr30k(root)
    with pytest.warns(UserWarning, match="empty_caption"):
        assert load_flickr30k(root, skip_bad_captions=True).skipped == {"empty_caption": 1}


def test_truncated_jpeg_is_caught(tmp_path: Path, published) -> None:
    root = published.flickr_results(tmp_path, published.flickr_caption_lines(3), 3)
    published.truncate(root / "flickr30k_images" / "1002.jpg")
    with pytest.raises(BadImageError, match=r"1002\.jpg.*truncated"):
        load_flickr30k(root)
    with pytest.warns(UserWarning, match="unreadable_image"):
        ds = load_flickr30k(root, skip_bad_images=True)
    assert ds.skipped == {"unreadable_image": 1} and sorted(ds.images["image_id"]) == [1000, 1001]


def test_splits_comma_string_and_support_only(shapes_root: Path) -> None:
    a = load_flickr30k(shapes_root, splits="train,test")
    b = load_flickr30k(shapes_root, splits=["train", "test"])
    assert a.images["image_id"].tolist() == b.images["image_id"].tolist()
    assert set(a.images["split"]) == {"train", "test"}
    sup = load_flickr30k(shapes_root, splits="train")
    assert set(sup.images["split"]) == {"train"} and len(sup.split_ids("test")) == 0
