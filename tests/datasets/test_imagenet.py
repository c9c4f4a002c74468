"""ImageNet-1k val loader on the published layouts, and the shipped class names / templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imsearch_align.datasets import BadAnnotationError, LayoutError
from imsearch_align.datasets.imagenet import (
    imagenet_classnames,
    imagenet_templates,
    imagenet_wnids,
    load_imagenet,
)


def test_package_data_has_1000_classes_wnids_and_80_templates() -> None:
    names, tpl, wnids = imagenet_classnames(), imagenet_templates(), imagenet_wnids()
    assert len(names) == 1000 and len(wnids) == 1000 == len(set(wnids))
    assert list(wnids) == sorted(wnids)  # class index order is WordNet-id order
    assert wnids[0] == "n01440764" and wnids[999] == "n15075141"  # tench ... toilet tissue
    # OpenAI's curated names repeat two (ImageNet has two synsets each for these).
    dups = sorted({n for n in names if names.count(n) > 1})
    assert dups == ["missile", "sunglasses"]
    assert names[0] == "tench" and names[1] == "goldfish" and names[999] == "toilet paper"
    assert len(tpl) == 80 and all("{c}" in t for t in tpl)
    assert tpl[0] == "a bad photo of a {c}."


def _fake_wnids(n: int) -> list[str]:
    return [f"n{1 + i:08d}" for i in range(n)]  # not ImageNet-1k synsets: names from the mapping


def test_kaggle_layout_labels_from_first_synset_names_from_mapping(
    tmp_path: Path, published
) -> None:
    ds = load_imagenet(
        published.imagenet_kaggle(tmp_path, _fake_wnids(3), 6), test_fraction=0.5, seed=0
    )
    assert ds.images["image_id"].tolist() == [1, 2, 3, 4, 5, 6]
    assert ds.labels.tolist() == [0, 1, 2, 0, 1, 2]
    assert ds.class_names == ("lemma0", "lemma1", "lemma2")
    assert len(ds.templates) == 80
    assert ds.texts["caption"].tolist()[:2] == ["a photo of a lemma0.", "a photo of a lemma1."]
    assert (ds.images["split"] == "test").sum() == 3
    lq = ds.label_qrels(None)
    assert {(int(q), int(d)) for q, d in zip(lq.query_ids, lq.doc_ids)} == {
        (i + 1, i % 3) for i in range(6)
    }


def test_real_synsets_use_clip_names(tmp_path: Path, published) -> None:
    ds = load_imagenet(
        published.imagenet_kaggle(tmp_path, published.REAL_WNIDS, 5), verify_images=False
    )
    assert ds.class_names == (
        "tench",
        "goldfish",
        "great white shark",
        "tiger shark",
        "toilet paper",
    )
    full = tmp_path / "full"
    full.mkdir()
    ds = load_imagenet(published.imagenet_kaggle(full, imagenet_wnids(), 4), verify_images=False)
    assert ds.class_names == imagenet_classnames()


@pytest.mark.parametrize(
    ("id_suffix", "file_suffix"),
    [(".JPEG", ".JPEG"), (".jpeg", ".jpeg"), ("", ".jpeg"), (".JPEG", ".jpg")],
)
def test_suffixed_image_ids_and_file_suffixes(
    tmp_path: Path, published, id_suffix, file_suffix
) -> None:
    root = published.imagenet_kaggle(
        tmp_path, _fake_wnids(2), 4, id_suffix=id_suffix, file_suffix=file_suffix
    )
    ds = load_imagenet(root)
    assert ds.images["image_id"].tolist() == [1, 2, 3, 4]
    assert [Path(p).name for p in ds.images["path"]] == [
        f"ILSVRC2012_val_{j:08d}{file_suffix}" for j in (1, 2, 3, 4)
    ]


def test_empty_prediction_string_rejected_with_line_or_skipped(tmp_path: Path, published) -> None:
    root = published.imagenet_kaggle(tmp_path, _fake_wnids(2), 5, empty_rows=(2,))
    with pytest.raises(
        BadAnnotationError,
        match=r"LOC_val_solution\.csv' line 4: image 'ILSVRC2012_val_00000003' has an empty PredictionString.*skip_bad_labels=True",
    ):
        load_imagenet(root)
    with pytest.warns(UserWarning, match="missing_label"):
        ds = load_imagenet(root, skip_bad_labels=True)
    assert ds.skipped == {"missing_label": 1} and ds.images["image_id"].tolist() == [1, 2, 4, 5]


@pytest.mark.parametrize("under", ["val", "ILSVRC/Data/CLS-LOC/val", "."])
def test_valprep_class_folders(tmp_path: Path, published, under: str) -> None:
    wnids = published.REAL_WNIDS[:3]
    root = published.imagenet_valprep(tmp_path, wnids, 7, under=under)
    ds = load_imagenet(root, test_fraction=0.0)
    # Oracle: the folder a file is in is its class; classes in WordNet-id order.
    by_id = dict(zip(ds.images["image_id"], ds.labels))
    assert by_id == {j + 1: j % 3 for j in range(7)}
    # standard ids: the 1,000-way problem in the standard order, whatever is present
    assert len(ds.class_names) == 1000
    assert ds.class_names[:3] == ("tench", "goldfish", "great white shark")
    assert set(ds.images["split"]) == {"train"}
    for p, lab in zip(ds.images["path"], ds.labels):
        assert Path(p).parent.name == wnids[lab]


def test_class_folders_with_mapping_and_unknown_folder(tmp_path: Path, published) -> None:
    root = published.imagenet_valprep(tmp_path, _fake_wnids(2), 4)
    with pytest.raises(
        ValueError, match=r"not ImageNet-1k WordNet ids; add LOC_synset_mapping\.txt"
    ):
        load_imagenet(root)
    (root / "LOC_synset_mapping.txt").write_text(
        "".join(f"{w} name{i}, x\n" for i, w in enumerate(_fake_wnids(3)))
    )
    ds = load_imagenet(root, test_fraction=1.0)
    assert ds.class_names == ("name0", "name1", "name2") and set(ds.images["split"]) == {"test"}
    (root / "val" / "n09999999").mkdir()
    Image.new("RGB", (4, 4)).save(root / "val" / "n09999999" / "x.JPEG")
    with pytest.raises(
        ValueError, match=r"class folder\(s\) \['n09999999'\].*not in LOC_synset_mapping"
    ):
        load_imagenet(root)


def test_missing_files_list_both_layouts(tmp_path: Path, published) -> None:
    with pytest.raises(
        LayoutError,
        match=r"(?s)no class folders.*LOC_synset_mapping\.txt.*Expected layout.*valprep.*kaggle",
    ):
        load_imagenet(tmp_path)
    (tmp_path / "x").mkdir()
    root = published.imagenet_kaggle(tmp_path / "x", _fake_wnids(3), 3)
    (root / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\nILSVRC2012_val_00000001,n99999999 1 2 3 4\n"
    )
    with pytest.raises(
        ValueError,
        match=r"first synset that is not in LOC_synset_mapping\.txt, e\.g\. 'n99999999' at .*line 2",
    ):
        load_imagenet(root)


def test_missing_image_error_does_not_suggest_splits(tmp_path: Path, published) -> None:
    root = published.imagenet_kaggle(tmp_path, _fake_wnids(2), 4)
    (root / "ILSVRC/Data/CLS-LOC/val/ILSVRC2012_val_00000002.JPEG").unlink()
    with pytest.raises(ValueError, match="skip_bad_images=True") as err:
        load_imagenet(root)
    assert "splits" not in str(err.value)
    with pytest.warns(UserWarning, match="missing_image"):
        ds = load_imagenet(root, skip_bad_images=True)
    assert ds.skipped == {"missing_image": 1} and 2 not in set(ds.images["image_id"])


def test_partial_class_folders_keep_the_standard_classes_and_loose_files_are_refused(
    tmp_path: Path, published
) -> None:
    """Three folders of an incomplete extraction: still the 1,000-way problem,
    each folder at its standard index (sunglasses is 837, not 2); an image
    beside the class folders would be left out, so the layout is refused."""
    from imsearch_align.datasets.imagenet import imagenet_wnids

    std = list(imagenet_wnids())
    picked = [std[1], std[2], std[837]]
    root = published.imagenet_valprep(tmp_path, picked, 6)
    ds = load_imagenet(root, test_fraction=0.0)
    assert len(ds.class_names) == 1000 and ds.class_names[837] == "sunglasses"
    for p, lab in zip(ds.images["path"], ds.labels):
        assert std[lab] == Path(p).parent.name
    assert sorted(set(ds.labels.tolist())) == [1, 2, 837]
    Image.new("RGB", (4, 4)).save(root / "val" / "ILSVRC2012_val_00000099.JPEG")
    with pytest.raises(Exception, match=r"1 image file\(s\) beside them, outside any class"):
        load_imagenet(root)


def test_a_non_standard_id_in_the_mapping_keeps_clips_names_for_the_others(
    tmp_path: Path, published
) -> None:
    """Names are chosen per synset: one extra id must not turn the two cranes
    (bird, machine) into one 'crane' with identical prompts."""
    from imsearch_align.datasets.imagenet import _class_names, imagenet_wnids

    std = list(imagenet_wnids())
    wnids = [*std, "n09999999"]
    lemmas = [f"lemma{i}" for i in range(len(wnids))]
    names = _class_names(wnids, lemmas)
    assert names[134] != names[517] and len(set(names[:1000])) >= 998
    assert names[-1] == "lemma1000"
