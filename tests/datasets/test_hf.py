"""The hf loader: save_to_disk folders, parquet files and globs, in-memory data, real causes."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import datasets as hfd
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from imsearch_align import DATASETS
from imsearch_align.datasets import BadAnnotationError, HubUnreachableError, describe_param_value
from imsearch_align.datasets.hf import from_hf


def _png(v: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (v, v, v)).save(buf, format="PNG")
    return buf.getvalue()


def _red(cell: bytes) -> int:
    return Image.open(io.BytesIO(cell)).getpixel((0, 0))[0]


def test_hf_dataset_with_image_feature_and_caption_lists() -> None:
    data = hfd.Dataset.from_dict(
        {
            "image": [Image.new("RGB", (4, 4), (i, 0, 0)) for i in range(3)],
            "caption": [["a", "b"], ["c"], ["d", "e", "f"]],
            "split": ["train", "validation", "test"],
        },
        features=hfd.Features(
            {
                "image": hfd.Image(),
                "caption": hfd.Sequence(hfd.Value("string")),
                "split": hfd.Value("string"),
            }
        ),
    )
    ds = from_hf(data, split_column="split", name="toy")
    assert ds.images["split"].tolist() == ["train", "val", "test"]
    assert ds.texts["caption"].tolist() == list("abcdef")
    assert ds.texts["image_id"].tolist() == [0, 0, 1, 2, 2, 2]
    assert _red(ds.images["bytes"].iloc[2]) == 2  # encoded bytes of the original pixels


def test_save_to_disk_dataset_folder(tmp_path: Path, published) -> None:
    published.hf_table(6).save_to_disk(str(tmp_path / "d"))
    ds = DATASETS.get("hf")(data=str(tmp_path / "d"), test_fraction=0.5, seed=0)
    assert len(ds.images) == 6 and len(ds.texts) == 12 and ds.name == "hf-d"
    assert [_red(b) for b in ds.images["bytes"]] == list(range(6))
    assert (ds.images["split"] == "test").sum() == 3


def test_datasetdict_folder_keeps_its_own_splits(tmp_path: Path, published) -> None:
    dd = hfd.DatasetDict(
        {"train": published.hf_table(150), "test": published.hf_table(20, offset=150)}
    )
    dd.save_to_disk(str(tmp_path / "dd"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no re-split warning: the dataset's own splits are used
        ds = from_hf(str(tmp_path / "dd"))
    # Oracle: the split each row was saved in (the pixel value says which row it is).
    split_of = {_red(b): s for b, s in zip(ds.images["bytes"], ds.images["split"])}
    assert split_of == {i: "train" if i < 150 else "test" for i in range(170)}
    assert len(ds.split_ids("train", "text")) == 300
    only = from_hf(str(tmp_path / "dd"), splits="test")  # chosen splits are used as named
    assert len(only.images) == 20 and set(only.images["split"]) == {"test"}
    with pytest.raises(
        ValueError,
        match=r"split 'tset' is not a split of .*available: \['train', 'test'\]; did you mean 'test'",
    ):
        from_hf(str(tmp_path / "dd"), splits="tset")


def test_datasetdict_with_one_split_is_resplit_with_a_warning(published) -> None:
    dd = hfd.DatasetDict({"test": published.hf_table(10)})
    with pytest.warns(
        UserWarning,
        match=r"has split\(s\) \['test'\] but not both train and test; all 10 rows get a seeded ratio split",
    ):
        ds = from_hf(dd, test_fraction=0.3, seed=1)
    assert (ds.images["split"] == "test").sum() == 3
    mapped = from_hf(
        hfd.DatasetDict(
            {"train": published.hf_table(4), "validation": published.hf_table(3, offset=4)}
        ),
        splits={"train": "train", "validation": "test"},
    )
    assert dict(zip([_red(b) for b in mapped.images["bytes"]], mapped.images["split"])) == {
        0: "train",
        1: "train",
        2: "train",
        3: "train",
        4: "test",
        5: "test",
        6: "test",
    }


def test_parquet_file_and_glob(tmp_path: Path, published, hf_cache) -> None:
    published.hf_table(5).to_parquet(str(tmp_path / "a.parquet"))
    published.hf_table(3, offset=5).to_parquet(str(tmp_path / "b.parquet"))
    one = from_hf(str(tmp_path / "a.parquet"))
    assert [_red(b) for b in one.images["bytes"]] == list(range(5)) and one.name == "hf-a"
    both = from_hf(str(tmp_path / "*.parquet"), test_fraction=0.0)
    assert sorted(_red(b) for b in both.images["bytes"]) == list(range(8))
    assert set(both.images["split"]) == {"train"}
    with pytest.raises(ValueError, match="one table with no splits of its own"):
        from_hf(str(tmp_path / "a.parquet"), splits="test")


def test_csv_file_with_paths_relative_to_it(tmp_path: Path, hf_cache) -> None:
    (tmp_path / "img").mkdir()
    for i in range(3):
        Image.new("RGB", (4, 4), (i, 0, 0)).save(tmp_path / "img" / f"{i}.png")
    pd.DataFrame({"file": [f"img/{i}.png" for i in range(3)], "text": ["x", "y", "z"]}).to_csv(
        tmp_path / "pairs.csv", index=False
    )
    ds = from_hf(str(tmp_path / "pairs.csv"), image_column="file", caption_columns="text")
    assert ds.images["path"].tolist() == [str(tmp_path / "img" / f"{i}.png") for i in range(3)]


def test_mistyped_path_and_wrong_column_name_the_real_cause(
    tmp_path: Path, published, monkeypatch: pytest.MonkeyPatch
) -> None:
    published.hf_table(2).save_to_disk(str(tmp_path / "flickr_small"))
    with pytest.raises(
        FileNotFoundError, match=r"neither an existing file.*did you mean '.*flickr_small'"
    ):
        from_hf(str(tmp_path / "flickr_smal"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        from_hf("./no/such/dir/data.parquet")
    # One slash like a Hub name, but its folder is local: a path, with a suggestion.
    monkeypatch.chdir(tmp_path.parent)
    with pytest.raises(FileNotFoundError, match=r"did you mean .*flickr_small"):
        from_hf(f"{tmp_path.name}/flickr_smal")
    with pytest.raises(
        ValueError, match=r"missing column\(s\) \['captions'\].*did you mean 'caption'"
    ):
        from_hf(str(tmp_path / "flickr_small"), caption_columns="captions")


def test_hub_offline_is_the_only_hub_unreachable_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*a, **kw):
        raise ConnectionError("Couldn't reach 'some/dataset' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(hfd, "load_dataset", offline)
    with pytest.raises(
        HubUnreachableError, match=r"(?s)some/dataset.*offline.*save_to_disk.*precomputed"
    ):
        from_hf("some/dataset")

    def missing(*a, **kw):
        raise ValueError("Unknown split \"tset\". Should be one of ['train'].")

    monkeypatch.setattr(hfd, "load_dataset", missing)
    with pytest.raises(
        ValueError, match=r"could not load Hub dataset 'some/dataset': ValueError: Unknown split"
    ) as err:
        from_hf("some/dataset", splits="tset")
    assert not isinstance(err.value, HubUnreachableError)


def test_dataframe_with_two_caption_columns_and_paths(tmp_path: Path) -> None:
    for n in ("a", "b"):
        Image.new("RGB", (4, 4)).save(tmp_path / f"{n}.png")
    df = pd.DataFrame(
        {
            "img": [str(tmp_path / "a.png"), str(tmp_path / "b.png")],
            "c1": ["x", "y"],
            "c2": ["x2", "y2"],
        }
    )
    ds = from_hf(df, image_column="img", caption_columns="c1,c2", test_fraction=0.5, seed=0)
    assert ds.images["path"].tolist() == df["img"].tolist() and "bytes" not in ds.images
    assert ds.texts["caption"].tolist() == ["x", "x2", "y", "y2"]
    assert sorted(ds.images["split"]) == ["test", "train"]


@pytest.mark.parametrize(
    ("bad", "reason"), [(None, "missing_caption"), ("", "empty_caption"), ("  ", "empty_caption")]
)
def test_bad_captions_rejected_with_row_or_skipped(bad, reason) -> None:
    df = pd.DataFrame(
        {"image": [_png(1), _png(2), _png(3)], "caption": [["a", "b"], ["c", bad], ["d", "e"]]}
    )
    with pytest.raises(
        BadAnnotationError, match=r"row 1 column 'caption' item 1.*skip_bad_captions=True"
    ):
        from_hf(df)
    with pytest.warns(UserWarning, match=reason):
        ds = from_hf(df, skip_bad_captions=True)
    assert ds.skipped == {reason: 1} and ds.texts["caption"].tolist() == list("abcde")


def test_missing_and_unreadable_images(tmp_path: Path) -> None:
    df = pd.DataFrame(
        {
            "image": [_png(1), None, str(tmp_path / "gone.png"), b"not an image"],
            "caption": list("abcd"),
        }
    )
    with pytest.raises(
        ValueError,
        match=r"image column 'image' row 1 has no image \(and 1 more\).*skip_bad_images=True",
    ):
        from_hf(df)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        ds = from_hf(df, skip_bad_images=True)
    assert ds.skipped == {"missing_image": 2, "unreadable_image": 1}
    assert ds.images["image_id"].tolist() == [0] and ds.texts["caption"].tolist() == ["a"]
    with pytest.raises(TypeError, match="row 0 holds int"):
        from_hf(pd.DataFrame({"image": [3], "caption": ["a"]}))
    with pytest.raises(ValueError, match="split column"):
        from_hf(df.iloc[:1].assign(s=["holdout"]), split_column="s")


def test_in_memory_inputs_are_recorded_by_a_content_digest(published) -> None:
    a = published.hf_table(4)
    rec = describe_param_value(a)
    assert rec["type"] == "datasets.Dataset" and rec["rows"] == 4 and len(rec["sha256"]) == 64
    assert describe_param_value(published.hf_table(4)) == rec  # equal content, equal record
    # Same shape, one caption changed: a different record (a repr-based key would collide).
    b = a.map(lambda r, i: {"caption": ["changed", "x"]} if i == 2 else r, with_indices=True)
    assert repr(a) == repr(b) and describe_param_value(b) != rec
    df = a.to_pandas()
    r_df = describe_param_value(df)
    assert r_df["type"] == "pandas.DataFrame" and r_df["rows"] == 4
    df2 = df.copy()
    df2.at[0, "image"] = {"bytes": _png(9), "path": None}
    assert describe_param_value(df2)["sha256"] != r_df["sha256"]
    dd = describe_param_value(hfd.DatasetDict({"train": a, "test": b}))
    assert set(dd["splits"]) == {"train", "test"}
    params = {"data": df, "caption_columns": ("caption",), "root": Path("/x"), "n": np.int64(3)}
    out = describe_param_value(params)
    json.dumps(out)  # JSON-ready, nothing else
    assert out["caption_columns"] == ["caption"] and out["root"] == "/x" and out["n"] == 3
    with pytest.raises(TypeError, match=r"value\['f'\]: cannot record a value of type function"):
        describe_param_value({"f": lambda: 0})
    ds1 = from_hf(a, name="x")
    assert ds1.fingerprint == from_hf(published.hf_table(4), name="y").fingerprint
    assert ds1.fingerprint != from_hf(b, name="x").fingerprint


def test_rows_of_one_image_are_one_image_with_all_its_captions(tmp_path: Path) -> None:
    """Long format (a row per (image, caption) pair): each image once, with all
    its captions, split per image; by bytes and by file."""
    imgs = [_png(v) for v in (10, 20, 30, 40)]
    rows = [(i, f"cap {i}.{j}") for i in range(4) for j in range(5)]
    rng = np.random.default_rng(0)
    rows = [rows[r] for r in rng.permutation(len(rows))]  # interleaved, as files often are
    df = pd.DataFrame({"image": [imgs[i] for i, _ in rows], "caption": [c for _, c in rows]})
    with pytest.warns(UserWarning, match="20 rows hold 4 distinct images"):
        ds = from_hf(df, test_fraction=0.5, seed=0)
    assert len(ds.images) == 4 and len(ds.texts) == 20
    by_image = ds.texts.groupby("image_id")["caption"].apply(sorted)
    got = {
        _red(ds.images.set_index("image_id").loc[i, "bytes"]): caps for i, caps in by_image.items()
    }
    assert got == {10 * (i + 1): [f"cap {i}.{j}" for j in range(5)] for i in range(4)}
    assert sorted(ds.images["split"]) == ["test", "test", "train", "train"]
    # the same by file path, a relative and an absolute spelling of one file
    for i in range(4):
        (tmp_path / f"{i}.png").write_bytes(imgs[i])
    paths = [
        str(tmp_path / f"{i}.png") if k % 2 else f"{tmp_path}/./{i}.png"
        for k, (i, _) in enumerate(rows)
    ]
    with pytest.warns(UserWarning, match="20 rows hold 4 distinct images"):
        ds2 = from_hf(pd.DataFrame({"image": paths, "caption": df["caption"]}), test_fraction=0.5)
    assert len(ds2.images) == 4
    assert ds2.texts.groupby("image_id").size().tolist() == [5, 5, 5, 5]


def test_one_image_in_two_splits_is_refused() -> None:
    df = pd.DataFrame(
        {
            "image": [_png(1), _png(2), _png(1)],
            "caption": ["a", "b", "c"],
            "s": ["train", "test", "test"],
        }
    )
    with pytest.raises(ValueError, match=r"row 2 holds the same image as row 0.*'test'.*'train'"):
        from_hf(df, split_column="s")


def test_distinct_images_keep_the_row_split_of_before() -> None:
    """No repeated image: the ratio split is the same draw as the per-row one."""
    from imsearch_align.datasets.base import seeded_split

    df = pd.DataFrame({"image": [_png(v) for v in range(9)], "caption": list("abcdefghi")})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ds = from_hf(df, test_fraction=0.3, seed=5)
    assert ds.images["split"].tolist() == seeded_split(9, test_fraction=0.3, seed=5).tolist()


def test_equal_bytes_under_two_names_stay_two_images() -> None:
    """A duplicate photo under another file name is another image (as the
    published protocols count it); the same name and bytes is one image."""
    cell = lambda name, v: {"bytes": _png(v), "path": name}  # noqa: E731
    df = pd.DataFrame(
        {
            "image": [cell("a.png", 1), cell("b.png", 1), cell("a.png", 1), cell("c.png", 2)],
            "caption": ["a1", "b1", "a2", "c1"],
        }
    )
    with pytest.warns(UserWarning, match="4 rows hold 3 distinct images"):
        ds = from_hf(df, test_fraction=0.0)
    assert ds.images["image_id"].tolist() == [0, 1, 3]
    assert ds.texts["image_id"].tolist() == [0, 1, 0, 3]
