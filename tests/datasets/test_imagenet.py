"""ImageNet-1k val loader and the shipped class names / templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from imsearch_align.datasets import LayoutError
from imsearch_align.datasets.imagenet import imagenet_classnames, imagenet_templates, load_imagenet


def test_package_data_has_1000_classes_and_80_templates() -> None:
    names, tpl = imagenet_classnames(), imagenet_templates()
    assert len(names) == 1000
    # OpenAI's curated names repeat two (ImageNet has two synsets each for these).
    dups = sorted({n for n in names if names.count(n) > 1})
    assert dups == ["missile", "sunglasses"]
    assert names[0] == "tench" and names[1] == "goldfish" and names[999] == "toilet paper"
    assert len(tpl) == 80 and all("{c}" in t for t in tpl)
    assert tpl[0] == "a bad photo of a {c}."


def _make(root: Path, n_classes: int) -> Path:
    wnids = [f"n{1440764 + i:08d}" for i in range(n_classes)]
    (root / "LOC_synset_mapping.txt").write_text(
        "\n".join(f"{w} class{i}, alias{i}" for i, w in enumerate(wnids)) + "\n"
    )
    val = root / "ILSVRC" / "Data" / "CLS-LOC" / "val"
    val.mkdir(parents=True)
    rows = ["ImageId,PredictionString"]
    for j in range(6):
        iid = f"ILSVRC2012_val_{j + 1:08d}"
        Image.new("RGB", (8, 8)).save(val / f"{iid}.JPEG", format="JPEG")
        w = wnids[j % n_classes]
        rows.append(f"{iid},{w} 1 2 3 4 {wnids[-1]} 5 6 7 8")
    (root / "LOC_val_solution.csv").write_text("\n".join(rows) + "\n")
    return root


def test_labels_from_first_synset_names_from_mapping(tmp_path: Path) -> None:
    ds = load_imagenet(_make(tmp_path, 3), test_fraction=0.5, seed=0)
    assert ds.images["image_id"].tolist() == [1, 2, 3, 4, 5, 6]
    assert ds.labels.tolist() == [0, 1, 2, 0, 1, 2]
    assert ds.class_names == ("class0", "class1", "class2")
    assert len(ds.templates) == 80
    assert ds.texts["caption"].tolist()[:2] == ["a photo of a class0.", "a photo of a class1."]
    assert (ds.images["split"] == "test").sum() == 3
    lq = ds.label_qrels(None)
    assert {(int(q), int(d)) for q, d in zip(lq.query_ids, lq.doc_ids)} == {
        (i + 1, i % 3) for i in range(6)
    }


def test_1000_synsets_use_clip_class_names(tmp_path: Path) -> None:
    ds = load_imagenet(_make(tmp_path, 1000), verify_images=False)
    assert ds.class_names == imagenet_classnames()


def test_missing_files_list_layout(tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match=r"(?s)LOC_synset_mapping\.txt.*Expected layout.*kaggle"):
        load_imagenet(tmp_path)
    (tmp_path / "x").mkdir()
    root = _make(tmp_path / "x", 3)
    (root / "LOC_val_solution.csv").write_text(
        "ImageId,PredictionString\nILSVRC2012_val_00000001,n99999999 1 2 3 4\n"
    )
    with pytest.raises(ValueError, match="synsets not in LOC_synset_mapping"):
        load_imagenet(root)
