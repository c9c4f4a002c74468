"""Hugging Face datasets / DataFrame adapter."""

from __future__ import annotations

import io

import datasets as hfd
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from imsearch_align.datasets import HubUnreachableError
from imsearch_align.datasets.hf import from_hf


def _png(v: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (4, 4), (v, v, v)).save(buf, format="PNG")
    return buf.getvalue()


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
    # Stored as encoded bytes that decode to the original pixels.
    px = np.asarray(Image.open(io.BytesIO(ds.images["bytes"].iloc[2])))
    assert (px[..., 0] == 2).all()


def test_dataframe_with_two_caption_columns_and_paths() -> None:
    df = pd.DataFrame({"img": ["/a.jpg", "/b.jpg"], "c1": ["x", "y"], "c2": ["x2", "y2"]})
    ds = from_hf(df, image_column="img", caption_columns=["c1", "c2"], test_fraction=0.5, seed=0)
    assert ds.images["path"].tolist() == ["/a.jpg", "/b.jpg"] and "bytes" not in ds.images
    assert ds.texts["caption"].tolist() == ["x", "x2", "y", "y2"]
    assert sorted(ds.images["split"]) == ["test", "train"]


def test_bytes_cells_and_bad_inputs() -> None:
    df = pd.DataFrame({"image": [_png(1), _png(2)], "caption": ["a", "b"]})
    ds = from_hf(df)
    assert "path" not in ds.images and len(ds.images["bytes"].iloc[0]) > 0
    with pytest.raises(ValueError, match=r"missing column\(s\) \['text'\]"):
        from_hf(df, caption_columns="text")
    with pytest.raises(TypeError, match="row 0 holds int"):
        from_hf(pd.DataFrame({"image": [3], "caption": ["a"]}))
    with pytest.raises(ValueError, match="split column"):
        from_hf(df.assign(s=["train", "holdout"]), split_column="s")


def test_hub_name_offline_suggests_alternatives(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*a, **kw):
        raise ConnectionError("Couldn't reach the Hugging Face Hub (offline mode is enabled)")

    monkeypatch.setattr(hfd, "load_dataset", offline)
    with pytest.raises(
        HubUnreachableError, match=r"(?s)some/dataset.*offline.*DataFrame.*precomputed"
    ):
        from_hf("some/dataset")
