"""Embedding cache and embed(): hit, miss, corruption detected and recomputed, key sensitivity."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from imsearch_align.cache import CacheKey, CorruptCacheWarning, EmbeddingCache
from imsearch_align.datasets.base import PairedDataset
from imsearch_align.embedding import embed


class CountingText:
    """A deterministic text provider that counts its calls (the oracle: a direct formula)."""

    modality = "text"
    dim = 3

    def __init__(self, version: str = "1") -> None:
        self.id = f"counting:v{version}"
        self.calls = 0

    def encode(self, items, *, batch_size=32, progress=True):
        self.calls += 1
        return np.array([[len(s), s.count("a"), hash(s) % 7] for s in items], np.float32)


def _ds() -> PairedDataset:
    images = pd.DataFrame({"image_id": [10, 11, 12], "split": ["train", "test", "test"]})
    texts = pd.DataFrame(
        {
            "text_id": [0, 1, 2, 3],
            "image_id": [10, 11, 12, 12],
            "caption": ["a", "bb", "aca", "dddd"],
        }
    )
    return PairedDataset("toy", images, texts)


def test_miss_then_hit_and_rows_follow_ids(tmp_path) -> None:
    ds, p = _ds(), CountingText()
    a = embed(ds, p, "text", cache_dir=tmp_path)
    b = embed(ds, p, "text", cache_dir=tmp_path)
    assert p.calls == 1 and np.array_equal(a, b)
    np.testing.assert_array_equal(a, CountingText().encode(["a", "bb", "aca", "dddd"]))
    sub = embed(ds, p, "text", ids=[3, 1], cache_dir=tmp_path)
    np.testing.assert_array_equal(sub, a[[3, 1]])
    assert p.calls == 2  # a different id set is a different entry
    files = sorted(f.name for f in tmp_path.rglob("*") if f.is_file())
    assert len(files) == 4 and not any(f.endswith(".tmp") for f in files)


def test_key_changes_with_provider_version_and_inputs(tmp_path) -> None:
    ds = _ds()
    p1, p2 = CountingText("1"), CountingText("2")
    embed(ds, p1, "text", cache_dir=tmp_path)
    embed(ds, p2, "text", cache_dir=tmp_path)
    assert p2.calls == 1
    texts = ds.texts.assign(caption=["a", "bb", "aca", "changed"])
    ds2 = PairedDataset("toy", ds.images, texts)
    embed(ds2, p1, "text", cache_dir=tmp_path)
    assert p1.calls == 2


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "bad_sidecar", "foreign_key"])
def test_corrupt_entry_is_detected_and_recomputed(tmp_path, damage: str) -> None:
    ds, p = _ds(), CountingText()
    good = embed(ds, p, "text", cache_dir=tmp_path)
    npy = next(tmp_path.rglob("*.npy"))
    side = npy.with_suffix(".json")
    if damage == "flip_byte":
        b = bytearray(npy.read_bytes())
        b[-1] ^= 0xFF
        npy.write_bytes(bytes(b))
    elif damage == "truncate":
        npy.write_bytes(npy.read_bytes()[:40])
    elif damage == "bad_sidecar":
        side.write_text("{not json")
    else:
        meta = json.loads(side.read_text())
        meta["key"]["split"] = "other"
        side.write_text(json.dumps(meta))
    with pytest.warns(CorruptCacheWarning, match="recomputing"):
        again = embed(ds, p, "text", cache_dir=tmp_path)
    assert p.calls == 2 and np.array_equal(again, good)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the rewritten entry verifies cleanly
        embed(ds, p, "text", cache_dir=tmp_path)
    assert p.calls == 2


def test_cache_get_or_compute_direct(tmp_path) -> None:
    key = CacheKey("p", "d", "image", "test", "abc")
    c = EmbeddingCache(tmp_path)
    assert c.load(key) is None
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(c.get_or_compute(key, lambda: arr), arr)
    np.testing.assert_array_equal(c.get_or_compute(key, lambda: arr * 0), arr)


def test_embed_bad_inputs(tmp_path) -> None:
    ds, p = _ds(), CountingText()
    with pytest.raises(ValueError, match="encodes 'text', but modality='image'"):
        embed(ds, p, "image")
    with pytest.raises(KeyError, match=r"not in dataset 'toy', e.g. \[99\]"):
        embed(ds, p, "text", ids=[0, 99])
    with pytest.raises(ValueError, match="modality must be"):
        embed(ds, p, "audio")


def test_embed_precomputed_by_id() -> None:
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    ds, pimg, _ = PairedDataset.from_arrays(X, X + 1, test_fraction=0.5, seed=0)
    test = ds.split_ids("test")
    np.testing.assert_array_equal(embed(ds, pimg, "image", ids=test), X[test])
