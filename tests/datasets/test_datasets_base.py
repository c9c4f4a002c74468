"""PairedDataset: validation, qrels by definition, split integrity, from_arrays."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from imsearch_align import Qrels
from imsearch_align.datasets.base import PairedDataset, seeded_split


def _toy(n_img: int = 10, per: int = 3, seed: int = 0) -> PairedDataset:
    images = pd.DataFrame(
        {"image_id": np.arange(n_img) * 7 + 3, "path": [f"/x/{i}.jpg" for i in range(n_img)]}
    )
    img = np.repeat(images["image_id"].to_numpy(), per)
    texts = pd.DataFrame(
        {
            "text_id": np.arange(len(img)) + 1000,
            "image_id": img,
            "caption": [f"c{i}" for i in range(len(img))],
        }
    )
    return PairedDataset("toy", images, texts).resplit(test_fraction=0.3, seed=seed)


def _pairs(q: Qrels) -> set[tuple[int, int]]:
    return {(int(a), int(b)) for a, b in zip(q.query_ids, q.doc_ids)}


def test_qrels_t2i_and_i2t_follow_the_definition() -> None:
    ds = _toy()
    t = ds.texts[ds.texts["split"] == "test"]
    # Oracle: t2i = each caption -> its image; i2t = the same pairs reversed.
    expected = {(int(a), int(b)) for a, b in zip(t["text_id"], t["image_id"])}
    assert _pairs(ds.qrels("t2i")) == expected
    assert _pairs(ds.qrels("i2t")) == {(b, a) for a, b in expected}
    assert np.all(ds.qrels("t2i").relevance == 1.0)
    # Every test image has all of its 3 captions relevant.
    counts = pd.Series(ds.qrels("i2t").query_ids).value_counts()
    assert set(counts) == {3} and len(counts) == (ds.images["split"] == "test").sum()
    assert ds.qrels("t2i").query_ids.dtype == np.int64


def test_no_test_pair_leaks_into_support_set() -> None:
    for seed in range(5):
        ds = _toy(n_img=40, per=5, seed=seed)
        sup_img, test_img = set(ds.split_ids("train")), set(ds.split_ids("test"))
        assert sup_img and test_img and not sup_img & test_img
        sup_txt = ds.texts[ds.texts["text_id"].isin(ds.split_ids("train", "text"))]
        test_txt = ds.texts[ds.texts["text_id"].isin(ds.split_ids("test", "text"))]
        assert set(sup_txt["image_id"]) <= sup_img and set(test_txt["image_id"]) <= test_img
        assert not _pairs(ds.qrels("t2i", "train")) & _pairs(ds.qrels("t2i", "test"))


def test_seeded_split_is_deterministic_and_counts_are_exact() -> None:
    a = seeded_split(101, test_fraction=0.3, val_fraction=0.1, seed=42)
    assert (a == seeded_split(101, test_fraction=0.3, val_fraction=0.1, seed=42)).all()
    assert not (a == seeded_split(101, test_fraction=0.3, val_fraction=0.1, seed=43)).all()
    assert (a == "test").sum() == round(101 * 0.3) and (a == "val").sum() == round(101 * 0.1)
    with pytest.raises(ValueError, match="test_fraction"):
        seeded_split(10, test_fraction=1.5, seed=0)


def test_caption_referencing_unknown_image_is_an_error() -> None:
    images = pd.DataFrame({"image_id": [1, 2]})
    texts = pd.DataFrame({"text_id": [0, 1], "image_id": [1, 9], "caption": ["a", "b"]})
    with pytest.raises(ValueError, match=r"reference unknown image_id.*\[9\]"):
        PairedDataset("x", images, texts)


@pytest.mark.parametrize(
    ("images", "texts", "match"),
    [
        (
            {"image_id": [1, 1]},
            {"text_id": [0], "image_id": [1], "caption": ["a"]},
            "images.image_id must be unique",
        ),
        (
            {"image_id": [1.5]},
            {"text_id": [0], "image_id": [1], "caption": ["a"]},
            "must be integers",
        ),
        (
            {"image_id": [1]},
            {"text_id": [0], "image_id": [1]},
            r"missing column\(s\) \['caption'\]",
        ),
        (
            {"image_id": [1], "split": ["holdout"]},
            {"text_id": [0], "image_id": [1], "caption": ["a"]},
            "split must be one of",
        ),
        (
            {"image_id": [1], "split": ["test"]},
            {"text_id": [0], "image_id": [1], "caption": ["a"], "split": ["train"]},
            "must share its image's split",
        ),
    ],
)
def test_bad_tables_raise(images: dict, texts: dict, match: str) -> None:
    with pytest.raises((ValueError, TypeError), match=match):
        PairedDataset("x", pd.DataFrame(images), pd.DataFrame(texts))


def test_dataset_is_frozen_and_owns_its_tables() -> None:
    images = pd.DataFrame({"image_id": [1, 2]})
    texts = pd.DataFrame({"text_id": [0, 1], "image_id": [1, 2], "caption": ["a", "b"]})
    ds = PairedDataset("x", images, texts)
    images.loc[0, "image_id"] = 99  # the caller's frame changes, the dataset's does not
    assert ds.images["image_id"].tolist() == [1, 2]
    with pytest.raises(AttributeError):
        ds.name = "y"  # type: ignore[misc]


def test_bad_direction_and_split_name_the_argument() -> None:
    ds = _toy()
    with pytest.raises(ValueError, match="direction must be one of"):
        ds.qrels("x2y")
    with pytest.raises(ValueError, match="split must be one of"):
        ds.qrels("t2i", split="dev")


def test_from_arrays_wraps_embeddings_and_providers_return_rows() -> None:
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(20, 4)), rng.normal(size=(40, 3))
    ti = np.repeat(np.arange(20), 2)
    ds, pimg, ptxt = PairedDataset.from_arrays(
        X, Y, ti, labels=np.arange(20) % 3, test_fraction=0.25, seed=1
    )
    assert len(ds.images) == 20 and len(ds.texts) == 40 and (ds.labels == np.arange(20) % 3).all()
    test_ids = ds.split_ids("test")
    assert len(test_ids) == 5
    np.testing.assert_array_equal(pimg.encode(test_ids), X[test_ids].astype(np.float32))
    tids = ds.split_ids("test", "text")
    np.testing.assert_array_equal(ptxt.encode(tids), Y[tids].astype(np.float32))
    assert _pairs(ds.qrels("t2i")) == {(int(t), int(ti[t])) for t in tids}
    lq = ds.label_qrels()
    assert _pairs(lq) == {(int(i), int(i) % 3) for i in test_ids}
    with pytest.raises(ValueError, match="text_image must index image_emb rows"):
        PairedDataset.from_arrays(X, Y, ti + 5)
    with pytest.raises(ValueError, match="text_image is required"):
        PairedDataset.from_arrays(X, Y)


def test_skipped_is_validated_and_survives_subset() -> None:
    images = pd.DataFrame({"image_id": [1, 2], "split": ["train", "test"]})
    texts = pd.DataFrame({"text_id": [0, 1], "image_id": [1, 2], "caption": ["a", "b"]})
    ds = PairedDataset("x", images, texts, skipped={"missing_image": np.int64(2)})
    assert ds.skipped == {"missing_image": 2} and type(ds.skipped["missing_image"]) is int
    assert ds.subset(["test"]).skipped == {"missing_image": 2}
    with pytest.raises(ValueError, match="skipped must map reasons in"):
        PairedDataset("x", images, texts, skipped={"lost": 1})
    with pytest.raises(ValueError, match="counts >= 0"):
        PairedDataset("x", images, texts, skipped={"empty_caption": -1})


def test_fingerprint_covers_content_not_name_or_location(tmp_path) -> None:
    def make(root, caption="b", path_name="2.jpg", split="test", name="x"):
        images = pd.DataFrame(
            {
                "image_id": [1, 2],
                "path": [str(root / "1.jpg"), str(root / path_name)],
                "split": ["train", split],
            }
        )
        texts = pd.DataFrame({"text_id": [0, 1], "image_id": [1, 2], "caption": ["a", caption]})
        return PairedDataset(name, images, texts, root=str(root))

    base = make(tmp_path / "a")
    fp = base.fingerprint
    assert len(fp) == 64 and fp == base.fingerprint
    assert make(tmp_path / "elsewhere", name="y").fingerprint == fp  # same data, other folder
    for changed in (
        make(tmp_path / "a", caption="c"),
        make(tmp_path / "a", path_name="3.jpg"),
        make(tmp_path / "a", split="val"),
        base.resplit(test_fraction=1.0, seed=0),
        PairedDataset("x", base.images, base.texts, class_names=("p", "q")),
    ):
        assert changed.fingerprint != fp
    # Row order does not matter (hashed in id order); a bytes column is covered too.
    shuffled = PairedDataset("x", base.images.iloc[::-1], base.texts.iloc[::-1], root=base.root)
    assert shuffled.fingerprint == fp
    b1 = PairedDataset("x", base.images.assign(bytes=[b"p", b"q"]), base.texts, root=base.root)
    b2 = PairedDataset("x", base.images.assign(bytes=[b"p", b"r"]), base.texts, root=base.root)
    assert len({fp, b1.fingerprint, b2.fingerprint}) == 3
