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


class Versioned(CountingText):
    """A provider that declares its weights' version (VersionedProvider) and counts loads."""

    def __init__(self, version: str = "1", weights: str = "w1") -> None:
        super().__init__(version)
        self.version = weights
        self.loads = 0

    @property
    def dim(self) -> int:  # a real encoder loads its model to answer this
        self.loads += 1
        return 3


def test_provider_key_uses_the_declared_version() -> None:
    from imsearch_align.embedding import provider_key
    from imsearch_align.framework.interfaces import VersionedProvider

    p = Versioned("1", "w7")
    assert isinstance(p, VersionedProvider) and provider_key(p) == "counting:v1@w7"
    assert provider_key(CountingText("1")) == "counting:v1"  # no version declared
    with pytest.raises(TypeError, match="must be an EmbeddingProvider"):
        provider_key(object())


def test_new_weights_never_reuse_old_vectors_and_a_hit_loads_nothing(tmp_path) -> None:
    ds = _ds()
    p = Versioned("1", "w1")
    embed(ds, p, "text", cache_dir=tmp_path)
    q = Versioned("1", "w1")
    embed(ds, q, "text", cache_dir=tmp_path)
    assert q.calls == 0 and q.loads == 0  # a cache hit neither encodes nor loads
    r = Versioned("1", "w2")  # same id, other weights
    embed(ds, r, "text", cache_dir=tmp_path)
    assert r.calls == 1


def test_embed_texts_is_cached_on_provider_and_texts(tmp_path) -> None:
    from imsearch_align.embedding import embed_texts, texts_sha256

    prompts = [f"a photo of a {c}." for c in ("cat", "dog", "car")]
    p = Versioned()
    a = embed_texts(p, prompts, cache_dir=tmp_path, namespace="toy-prompts")
    np.testing.assert_array_equal(a, CountingText().encode(prompts))  # oracle: the direct formula
    b = embed_texts(Versioned(), prompts, cache_dir=tmp_path, namespace="toy-prompts")
    np.testing.assert_array_equal(a, b)
    q = Versioned()
    embed_texts(q, prompts[::-1], cache_dir=tmp_path, namespace="toy-prompts")
    assert q.calls == 1  # other order, other entry
    r = Versioned(weights="w2")
    embed_texts(r, prompts, cache_dir=tmp_path, namespace="toy-prompts")
    assert r.calls == 1
    assert texts_sha256(["ab", "c"]) != texts_sha256(["a", "bc"])  # length-prefixed
    keys = [json.loads(f.read_text())["key"] for f in tmp_path.rglob("*toy-prompts*.json")]
    assert len(keys) == 3 and {k["dataset_id"] for k in keys} == {"toy-prompts"}
    assert {k["provider_id"] for k in keys} == {"counting:v1@w1", "counting:v1@w2"}
    np.testing.assert_array_equal(embed_texts(Versioned(), prompts), a)  # no cache_dir
    with pytest.raises(ValueError, match="non-empty strings; item 1 is ' '"):
        embed_texts(p, ["a", " "])
    with pytest.raises(TypeError, match="list of strings"):
        embed_texts(p, "abc")
    X = np.eye(2, 3, dtype=np.float32)  # two images (equal rows would be one image)
    _, _, ptxt = PairedDataset.from_arrays(X, X, test_fraction=0.5, seed=0)
    with pytest.raises(TypeError, match="cannot encode new text"):
        embed_texts(ptxt, prompts)


class ZeroFor:
    """Text provider mapping the listed captions to zero vectors."""

    modality = "text"
    dim = 2
    id = "zero-for"

    def __init__(self, zero: set[str]) -> None:
        self.zero = zero

    def encode(self, items, *, batch_size=32, progress=True):
        return np.array(
            [[0.0, 0.0] if s in self.zero else [1.0, len(s)] for s in items], np.float32
        )


def test_all_zero_rows_are_warned_with_count_and_ids_or_rejected_when_all(tmp_path) -> None:
    from imsearch_align.embedding import ZeroEmbeddingWarning, embed_texts

    ds = _ds()
    with pytest.warns(
        ZeroEmbeddingWarning, match=r"2 of 4 embedding rows are all zeros.*ids \[1, 3\]"
    ):
        out = embed(ds, ZeroFor({"bb", "dddd"}), "text", cache_dir=tmp_path)
    assert not out[[1, 3]].any()
    with pytest.warns(ZeroEmbeddingWarning, match="2 of 4"):  # also on a cache hit
        embed(ds, ZeroFor({"bb", "dddd"}), "text", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="all 4 embedding rows are zero vectors"):
        embed(ds, ZeroFor({"a", "bb", "aca", "dddd"}), "text")
    with pytest.warns(ZeroEmbeddingWarning, match=r"rows \[0\]"):
        embed_texts(ZeroFor({"x"}), ["x", "y"])
