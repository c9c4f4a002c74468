"""Precomputed embeddings: .npy, .parquet, .safetensors, pickles only on opt-in, Hub offline."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from safetensors.numpy import save_file

from imsearch_align import DATASETS
from imsearch_align.datasets import HubUnreachableError
from imsearch_align.datasets.precomputed import load_precomputed, read_embeddings

rng = np.random.default_rng(0)
X = rng.normal(size=(6, 4)).astype(np.float32)
Y = rng.normal(size=(12, 3)).astype(np.float32)


def _write(fmt: str, path: Path, arr: np.ndarray) -> Path:
    if fmt == "npy":
        np.save(path.with_suffix(".npy"), arr)
    elif fmt == "parquet":
        pd.DataFrame({"id": np.arange(len(arr)), "embedding": list(arr)}).to_parquet(
            path.with_suffix(".parquet")
        )
    elif fmt == "parquet-wide":
        pd.DataFrame(arr, columns=[f"d{i}" for i in range(arr.shape[1])]).to_parquet(
            path.with_suffix(".parquet")
        )
        return path.with_suffix(".parquet")
    elif fmt == "safetensors":
        save_file(
            {"embeddings": arr, "ids": np.arange(len(arr))}, str(path.with_suffix(".safetensors"))
        )
    return path.with_suffix("." + fmt)


@pytest.mark.parametrize("fmt", ["npy", "parquet", "parquet-wide", "safetensors"])
def test_formats_round_trip_and_pair_two_captions_per_image(tmp_path: Path, fmt: str) -> None:
    ip, tp = _write(fmt, tmp_path / "img", X), _write(fmt, tmp_path / "txt", Y)
    ds, pimg, ptxt = DATASETS.get("precomputed")(ip, tp, test_fraction=0.5, seed=0)
    assert ds.texts["image_id"].tolist() == np.repeat(np.arange(6), 2).tolist()
    np.testing.assert_array_equal(pimg.encode(np.arange(6)), X)
    np.testing.assert_array_equal(ptxt.encode(np.arange(12)), Y)
    assert ds.name == "img"


def test_three_d_text_array(tmp_path: Path) -> None:
    np.save(tmp_path / "i.npy", X)
    np.save(tmp_path / "t.npy", Y.reshape(6, 2, 3))
    ds, _, ptxt = load_precomputed(tmp_path / "i.npy", tmp_path / "t.npy")
    np.testing.assert_array_equal(ptxt.encode([3]), Y[3:4])
    assert ds.texts["image_id"].tolist()[:4] == [0, 0, 1, 1]


def test_pickle_needs_explicit_opt_in(tmp_path: Path) -> None:
    for name, obj in (("i.pkl", X), ("t.pkl", {"embeddings": Y})):
        with (tmp_path / name).open("wb") as fh:
            pickle.dump(obj, fh)
    with pytest.raises(
        ValueError, match=r"refusing to load .*i\.pkl.*runs arbitrary code.*allow_pickle=True"
    ):
        load_precomputed(tmp_path / "i.pkl", tmp_path / "t.pkl")
    _, pimg, ptxt = load_precomputed(tmp_path / "i.pkl", tmp_path / "t.pkl", allow_pickle=True)
    np.testing.assert_array_equal(pimg.encode(np.arange(6)), X)
    np.testing.assert_array_equal(ptxt.encode(np.arange(12)), Y)
    # An object .npy is a pickle in disguise: refused too.
    np.save(tmp_path / "o.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError, match="runs arbitrary code"):
        read_embeddings(tmp_path / "o.npy")
    # ... and read when allowed, as the message says (a dict saved with np.save)
    np.save(
        tmp_path / "d.npy", np.array({"embeddings": Y, "ids": np.arange(12) + 5}), allow_pickle=True
    )
    ids, vec = read_embeddings(tmp_path / "d.npy", allow_pickle=True)
    np.testing.assert_array_equal(vec, Y)
    np.testing.assert_array_equal(ids, np.arange(12) + 5)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"does not exist; expected a \.npy"):
        read_embeddings(tmp_path / "nope.npy")
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(ValueError, match="unsupported embeddings file"):
        read_embeddings(tmp_path / "x.csv")
    np.save(tmp_path / "i.npy", X)
    np.save(tmp_path / "t.npy", Y[:7])
    with pytest.raises(ValueError, match="cannot pair 7 text rows with 6 image rows"):
        load_precomputed(tmp_path / "i.npy", tmp_path / "t.npy")
    # A damaged .npy is named as such, not mistaken for a pickle.
    raw = (tmp_path / "i.npy").read_bytes()
    (tmp_path / "cut.npy").write_bytes(raw[: len(raw) - 40])
    with pytest.raises(ValueError, match=r"cut\.npy' could not be read .*truncated") as e:
        read_embeddings(tmp_path / "cut.npy")
    assert "allow_pickle" not in str(e.value)
    (tmp_path / "junk.npy").write_bytes(b"not an array at all")
    with pytest.raises(ValueError, match=r"junk\.npy' is not a readable \.npy file") as e:
        read_embeddings(tmp_path / "junk.npy")
    assert "allow_pickle" not in str(e.value)


def test_hub_repo_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub

    def offline(**kw):
        raise huggingface_hub.errors.LocalEntryNotFoundError("offline")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", offline)
    with pytest.raises(HubUnreachableError, match=r"(?s)ridalefdali/flickr30k_embeddings.*local"):
        load_precomputed(
            "flickr30k_dinov2_dinov2-large_image_embeddings.pkl",
            "flickr30k_gtr_t5_gtr-t5-xl_text_embeddings.pkl",
            repo_id="ridalefdali/flickr30k_embeddings",
            allow_pickle=True,
        )


def test_text_image_and_labels_from_npy_files_and_zero_rows(tmp_path: Path) -> None:
    from imsearch_align.datasets import ZeroEmbeddingWarning

    np.save(tmp_path / "img.npy", X)
    np.save(tmp_path / "txt.npy", Y)
    ti = np.repeat(np.arange(6), 2)[::-1].copy()  # not the default image-major pairing
    np.save(tmp_path / "text_image.npy", ti)
    np.save(tmp_path / "labels.npy", np.arange(6) % 2)
    ds, _, _ = DATASETS.get("precomputed")(
        image_path=str(tmp_path / "img.npy"),
        text_path=str(tmp_path / "txt.npy"),
        text_image=str(tmp_path / "text_image.npy"),
        labels=str(tmp_path / "labels.npy"),
    )
    assert ds.texts["image_id"].tolist() == ti.tolist() and ds.labels.tolist() == [0, 1] * 3
    Z = X.copy()
    Z[[1, 4]] = 0.0
    np.save(tmp_path / "zero.npy", Z)
    with pytest.warns(
        ZeroEmbeddingWarning, match=r"2 of 6 embedding rows are all zeros.*rows \[1, 4\]"
    ):
        load_precomputed(tmp_path / "zero.npy", tmp_path / "txt.npy")
    np.save(tmp_path / "allzero.npy", np.zeros_like(X))
    with pytest.raises(ValueError, match="all 6 embedding rows are zero vectors"):
        load_precomputed(tmp_path / "allzero.npy", tmp_path / "txt.npy")
    with pytest.raises(ValueError, match="text_image must be a 1-D list of integers"):
        load_precomputed(tmp_path / "img.npy", tmp_path / "txt.npy", text_image=[[0, 1]])


def test_support_only_load(tmp_path: Path) -> None:
    from imsearch_align.datasets import load_support_dataset

    np.save(tmp_path / "img.npy", X)
    np.save(tmp_path / "txt.npy", Y)
    params = {"image_path": str(tmp_path / "img.npy"), "text_path": str(tmp_path / "txt.npy")}
    with pytest.raises(ValueError, match=r"no support pairs.*pass test_fraction=0\.0"):
        load_support_dataset("precomputed", {**params, "test_fraction": 1.0})
    ds, img, _ = load_support_dataset("precomputed", {**params, "test_fraction": 0.0})
    assert set(ds.images["split"]) == {"train"} and len(ds.texts) == 12
    np.testing.assert_array_equal(img.encode(ds.split_ids("train")), X)


def test_one_row_per_pair_gives_each_image_once_with_all_its_texts(tmp_path: Path) -> None:
    """Pairs exported as rows (each image row repeated per caption): one image
    per distinct embedding, its texts all relevant, split per image."""
    imgs = rng.normal(size=(4, 5)).astype(np.float32)
    order = np.random.default_rng(3).permutation(20)  # interleaved pairs
    of_pair = np.repeat(np.arange(4), 5)[order]
    np.save(tmp_path / "i.npy", imgs[of_pair])
    np.save(tmp_path / "t.npy", rng.normal(size=(20, 3)).astype(np.float32))
    with pytest.warns(UserWarning, match="20 image rows hold 4 distinct embeddings"):
        ds, pimg, _ = load_precomputed(tmp_path / "i.npy", tmp_path / "t.npy", test_fraction=0.5)
    assert len(ds.images) == 4 and len(ds.texts) == 20
    heads = [int(np.flatnonzero(of_pair == g)[0]) for g in range(4)]
    first = sorted(heads)  # image ids follow first appearance
    for img_id, head in enumerate(first):
        texts = ds.texts.loc[ds.texts["image_id"] == img_id, "text_id"].tolist()
        assert texts == np.flatnonzero(of_pair == of_pair[head]).tolist()
        np.testing.assert_array_equal(pimg.encode([img_id])[0], imgs[of_pair[head]])
    assert sorted(ds.images["split"]) == ["test", "test", "train", "train"]
    qrels = ds.qrels("i2t")  # every caption of an image is relevant to it
    assert pd.Series(np.asarray(qrels.query_ids)).value_counts().tolist() == [5] * len(
        qrels.queries
    )


def test_one_image_with_two_labels_is_refused() -> None:
    from imsearch_align.datasets.base import PairedDataset

    Xd = np.stack([X[0], X[1], X[0]])
    with pytest.raises(ValueError, match=r"rows 0 and 2 hold the same embedding.*labels"):
        PairedDataset.from_arrays(Xd, Y[:3], labels=[0, 1, 1])
    with pytest.raises(ValueError, match=r"rows 0 and 2 hold the same embedding.*split"):
        PairedDataset.from_arrays(Xd, Y[:3], split=["train", "test", "test"])


def test_ids_stored_in_the_files_must_agree_with_the_row_pairing(tmp_path: Path) -> None:
    img_ids = np.array([50, 10, 30, 20, 40, 60])
    pd.DataFrame({"id": img_ids, "embedding": list(X)}).to_parquet(tmp_path / "i.parquet")
    # text rows carry their image's id: in the image file's order, fine
    ok = np.repeat(img_ids, 2)
    pd.DataFrame({"id": ok, "embedding": list(Y)}).to_parquet(tmp_path / "t.parquet")
    ds, _, _ = load_precomputed(tmp_path / "i.parquet", tmp_path / "t.parquet")
    assert ds.texts["image_id"].tolist() == np.repeat(np.arange(6), 2).tolist()
    # text rows sorted by image id, image rows not: every pair would be wrong
    pd.DataFrame({"id": np.sort(ok), "embedding": list(Y)}).to_parquet(tmp_path / "t.parquet")
    with pytest.raises(
        ValueError, match=r"text row 0 .* has id 10, an image id.*image row 0 .* whose id is 50"
    ):
        load_precomputed(tmp_path / "i.parquet", tmp_path / "t.parquet")
    # caption ids (not all image ids): nothing to check
    pd.DataFrame({"id": np.arange(100, 112), "embedding": list(Y)}).to_parquet(
        tmp_path / "t.parquet"
    )
    load_precomputed(tmp_path / "i.parquet", tmp_path / "t.parquet")


# ----------------------------------------------------------------------------- bad files: exit 2

_RUN = ["--image-encoder", "none", "--text-encoder", "none", "--method", "csa", "--store", "exact",
        "--n-support", "3", "--no-progress"]  # fmt: skip


def _eval_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture, ip: Path, tp: Path) -> str:
    """``imsearch-align eval`` on the files: exit 2 with one line ``error: ...``, no file written."""
    from imsearch_align.cli import main

    out = tmp_path / "out"
    args = ["eval", "--dataset", "precomputed", "--dataset-param", f"image_path={ip}",
            "--dataset-param", f"text_path={tp}", *_RUN, "--output-dir", str(out)]  # fmt: skip
    assert main(args) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "Traceback" not in captured.err and "--traceback" not in captured.err
    assert not out.exists() or not any(out.rglob("*"))
    return lines[0]


@pytest.mark.parametrize("side", ["image", "text"])
def test_an_empty_npy_names_the_file_the_rows_expected_and_the_shape(
    tmp_path: Path, capsys: pytest.CaptureFixture, side: str
) -> None:
    np.save(tmp_path / "img.npy", X)
    np.save(tmp_path / "txt.npy", Y)
    np.save(tmp_path / "empty.npy", np.zeros((0, 4), np.float32))
    ip = tmp_path / ("empty.npy" if side == "image" else "img.npy")
    tp = tmp_path / ("empty.npy" if side == "text" else "txt.npy")
    want = (
        rf"{side}_path {re.escape(repr(str(tmp_path / 'empty.npy')))} holds no embedding rows: "
        r"expected at least one row, got shape \(0, 4\)"
    )
    with pytest.raises(ValueError, match=want):
        load_precomputed(ip, tp)
    line = _eval_exits_2(tmp_path, capsys, ip, tp)
    assert re.search(want, line), line
    # a 3-D text array with no caption per image, and an empty parquet file, alike
    np.save(tmp_path / "t3.npy", np.zeros((6, 0, 3), np.float32))
    with pytest.raises(ValueError, match=r"text_path .* got shape \(6, 0, 3\)"):
        load_precomputed(tmp_path / "img.npy", tmp_path / "t3.npy")
    pd.DataFrame({"embedding": []}).to_parquet(tmp_path / "e.parquet")
    with pytest.raises(ValueError, match=r"image_path .*e\.parquet' holds no embedding rows"):
        load_precomputed(tmp_path / "e.parquet", tmp_path / "txt.npy")


def test_ragged_parquet_rows_name_the_file_column_first_bad_row_and_lengths(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    rows = list(X)
    rows[3] = rows[3][:2]
    rows[5] = rows[5][:3]
    pd.DataFrame({"id": np.arange(6), "embedding": rows}).to_parquet(tmp_path / "r.parquet")
    np.save(tmp_path / "txt.npy", Y)
    want = (
        rf"{re.escape(repr(str(tmp_path / 'r.parquet')))}: column 'embedding' must hold rows of one length; "
        r"row 3 has 2 values where most rows have 4 \(lengths seen: 4 \(4 rows\), 2 \(1 row\), "
        r"3 \(1 row\)\)"
    )
    with pytest.raises(ValueError, match=want):
        read_embeddings(tmp_path / "r.parquet")
    line = _eval_exits_2(tmp_path, capsys, tmp_path / "r.parquet", tmp_path / "txt.npy")
    assert re.search(want, line), line
    # a missing (null) row is named as such
    rows = [*list(X[:2]), None, *list(X[3:])]
    pd.DataFrame({"embedding": rows}).to_parquet(tmp_path / "n.parquet")
    with pytest.raises(
        ValueError, match=r"row 2 has no value where most rows have 4 .*null \(1 row\)"
    ):
        read_embeddings(tmp_path / "n.parquet")


def test_safetensors_ids_of_the_wrong_length_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    save_file({"embeddings": X, "ids": np.arange(4)}, str(tmp_path / "i.safetensors"))
    np.save(tmp_path / "txt.npy", Y)
    want = (
        rf"{re.escape(repr(str(tmp_path / 'i.safetensors')))}: 'ids' has 4 entries, expected 6 "
        r"\(one per embedding row\)"
    )
    with pytest.raises(ValueError, match=want):
        read_embeddings(tmp_path / "i.safetensors")
    line = _eval_exits_2(tmp_path, capsys, tmp_path / "i.safetensors", tmp_path / "txt.npy")
    assert re.search(want, line), line
    # a 3-D text tensor: one id per caption row or one per image block
    Y3 = Y.reshape(6, 2, 3)
    for n in (6, 12):
        save_file({"embeddings": Y3, "ids": np.arange(n)}, str(tmp_path / "t.safetensors"))
        assert len(read_embeddings(tmp_path / "t.safetensors")[0]) == n
    save_file({"embeddings": Y3, "ids": np.arange(7)}, str(tmp_path / "t.safetensors"))
    with pytest.raises(ValueError, match=r"'ids' has 7 entries, expected 6 \(one per image "
                       r"block\) or 12 \(one per embedding row\)"):  # fmt: skip
        read_embeddings(tmp_path / "t.safetensors")
