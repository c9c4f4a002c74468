"""Distractor sources: files read in blocks, and every refusal named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from imsearch_align.collection import (
    DISTRACTOR_ID_BASE,
    ArraySource,
    CollectionBlocks,
    DistractorError,
    check_compatible,
    check_disjoint_ids,
    cone_vectors,
    open_file,
)
from imsearch_align.datasets import PairedDataset


def _rows(n=50, d=12):
    return cone_vectors(n, d, seed=4)


def _write_parquet(path, X, **meta):
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.table({"emb": pa.array(list(X)), "name": [str(i) for i in range(len(X))]})
    t = t.replace_schema_metadata({k: v for k, v in meta.items()})
    pq.write_table(t, path, row_group_size=16)


def _write_safetensors(path, X, **meta):
    from safetensors.numpy import save_file

    save_file({"embeddings": X}, str(path), metadata=meta or None)


@pytest.mark.parametrize("kind", ["npy", "parquet", "safetensors"])
def test_files_stream_the_rows_in_blocks(tmp_path, kind):
    X = _rows()
    path = tmp_path / f"d.{kind}"
    {"npy": lambda: np.save(path, X), "parquet": lambda: _write_parquet(path, X),
     "safetensors": lambda: _write_safetensors(path, X)}[kind]()  # fmt: skip
    src = open_file(path, encoder="enc-a")
    assert (src.n_rows, src.dim, src.encoder) == (50, 12, "enc-a")
    blocks = list(src.blocks(7))
    assert max(len(b[0]) for b in blocks) == 7
    np.testing.assert_array_equal(np.concatenate([b[1] for b in blocks]), X)
    ids = np.concatenate([b[0] for b in blocks])
    np.testing.assert_array_equal(ids, DISTRACTOR_ID_BASE + np.arange(50))
    assert src.head(20).n_rows == 20 and len(list(src.head(20).blocks(7))) == 3


def test_npy_is_memory_mapped(tmp_path):
    np.save(tmp_path / "d.npy", _rows())
    assert isinstance(open_file(tmp_path / "d.npy")._rows, np.memmap)


def test_another_dimension_refused():
    src = ArraySource(_rows(d=12), name="coco-images")
    with pytest.raises(DistractorError, match=r"dimension 12.*flickr30k have dimension 16"):
        check_compatible(src, dim=16, modality="image", dataset="flickr30k")


@pytest.mark.parametrize("where", ["sidecar", "parquet", "safetensors", "parameter"])
def test_another_encoder_refused(tmp_path, where):
    X = _rows()
    if where == "sidecar":
        np.save(tmp_path / "d.npy", X)
        (tmp_path / "d.npy.json").write_text(json.dumps({"encoder": "clip-b32"}))
        src = open_file(tmp_path / "d.npy")
    elif where == "parquet":
        _write_parquet(tmp_path / "d.parquet", X, encoder="clip-b32")
        src = open_file(tmp_path / "d.parquet")
    elif where == "safetensors":
        _write_safetensors(tmp_path / "d.safetensors", X, encoder="clip-b32")
        src = open_file(tmp_path / "d.safetensors")
    else:
        src = ArraySource(X, encoder="clip-b32")
    assert src.encoder == "clip-b32"
    with pytest.raises(DistractorError, match=r"encoder 'clip-b32'.*embedded with 'minilm'"):
        check_compatible(src, dim=12, encoder="minilm", dataset="flickr30k")
    if where != "parameter":
        with pytest.raises(DistractorError, match=r"records encoder 'clip-b32'.*'minilm'"):
            open_file(src.path, encoder="minilm")


def test_nan_and_zero_rows_counted_with_first_ids(tmp_path):
    X = _rows(200)
    X[[3, 17, 150]] = np.nan
    X[[5, 6]] = 0
    np.save(tmp_path / "bad.npy", X)
    src = open_file(tmp_path / "bad.npy", id_base=1000)
    msg = r"3 row\(s\) with NaN.*first ids \[1003, 1017, 1150\].*2 all-zero row\(s\) \(first ids \[1005, 1006\]\)"
    with pytest.raises(DistractorError, match=msg):
        src.check()
    with pytest.raises(DistractorError, match=msg):  # streaming finds them too
        list(src.blocks(64))


def test_id_collision_refused():
    src = ArraySource(_rows(), id_base=1_000)
    with pytest.raises(DistractorError, match=r"distractor id 1010 .* also an id of flickr30k"):
        check_disjoint_ids(src, [5, 1010, 1020], dataset="flickr30k")
    check_disjoint_ids(ArraySource(_rows()), [5, 1010])  # the reserved range: no collision
    with pytest.raises(DistractorError, match="distractor id 7 "):
        CollectionBlocks(np.arange(10), _rows(10), ArraySource(_rows(), ids=np.arange(7, 57)))


def test_from_split_uses_reserved_ids():
    emb = PairedDataset.from_arrays(_rows(40), _rows(40, 12), name="other", test_fraction=0.5)
    sids = emb.dataset.split_ids("test", "image")
    src = ArraySource.from_split(emb.dataset, "test", "image", emb.image)
    assert src.n_rows == len(sids) and src.modality == "image"
    assert src.encoder.startswith("precomputed:") and src.id_range[0] == DISTRACTOR_ID_BASE
    np.testing.assert_array_equal(src.source_ids, sids)
    np.testing.assert_array_equal(
        np.concatenate([b for _, b in src.blocks(5)]), emb.image.encode(sids)
    )
    with pytest.raises(DistractorError, match=r"expected \(\d+, d\) rows"):
        ArraySource.from_split(emb.dataset, "test", "image", _rows(3))
