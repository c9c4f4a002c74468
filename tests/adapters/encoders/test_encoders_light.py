"""Encoder plumbing without torch: registry, precomputed provider, image loading, errors."""

from __future__ import annotations

import io
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from imsearch_align import ENCODERS, EmbeddingProvider
from imsearch_align.adapters.encoders import (
    BadImageError,
    ModelNotFoundError,
    PrecomputedEmbeddings,
)
from imsearch_align.adapters.encoders._common import l2_normalize, load_image, model_not_found


def test_registry_names_and_import_is_light() -> None:
    built_in = [n for n in ENCODERS.names() if ENCODERS.origin(n) == "built-in"]
    assert built_in == [
        "clip",
        "efficientnet-lite0",
        "hf-image",
        "precomputed",
        "sentence-transformers",
    ]
    code = "import sys, imsearch_align; from imsearch_align import ENCODERS; ENCODERS.names(); print('torch' in sys.modules or 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_precomputed_provider_looks_up_by_id() -> None:
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    p = ENCODERS.get("precomputed")([10, 20, 30, 40], X, modality="image", name="x")
    assert isinstance(p, EmbeddingProvider) and p.dim == 3
    np.testing.assert_array_equal(p.encode([30, 10]), X[[2, 0]])
    with pytest.raises(KeyError, match=r"1 requested id\(s\) have no embedding, e.g. \[5\]"):
        p.encode([5])
    q = PrecomputedEmbeddings([10, 20, 30, 40], X + 1, modality="image", name="x")
    assert p.id != q.id  # different vectors, different cache key
    n = PrecomputedEmbeddings([1, 2, 3, 4], X, modality="text", normalize=True)
    np.testing.assert_allclose(np.linalg.norm(n.encode([2, 3]), axis=1), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="modality must be"):
        PrecomputedEmbeddings([1], X[:1], modality="audio")


def test_load_image_accepts_path_bytes_pil_array_and_names_bad_files(tmp_path) -> None:
    im = Image.new("RGBA", (5, 4), (1, 2, 3, 255))
    im.save(tmp_path / "a.png")
    buf = io.BytesIO()
    im.save(buf, format="PNG")
    for item in (tmp_path / "a.png", str(tmp_path / "a.png"), buf.getvalue(), im, np.asarray(im)):
        out = load_image(item)
        assert out.mode == "RGB" and out.size == (5, 4) and out.getpixel((0, 0)) == (1, 2, 3)
    (tmp_path / "bad.jpg").write_bytes(b"garbage")
    with pytest.raises(BadImageError, match=r"bad\.jpg"):
        load_image(tmp_path / "bad.jpg")
    with pytest.raises(BadImageError, match="does not exist"):
        load_image(tmp_path / "missing.jpg")


def test_unknown_model_did_you_mean_and_offline_hint() -> None:
    err = model_not_found("all-MiniLM-L6", {"all-MiniLM-L6-v2": lambda: None}, OSError("not found"))
    assert isinstance(err, ModelNotFoundError)
    msg = str(err)
    assert (
        "Did you mean 'all-MiniLM-L6-v2'?" in msg
        and "local model folder" in msg
        and "precomputed" in msg
    )


def test_l2_normalize_keeps_zero_rows() -> None:
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_torch_encoders_share_one_base_and_know_id_and_version_without_loading(tmp_path) -> None:
    """id and version come from names and files: no torch import, no model load."""
    code = (
        "import sys, json\n"
        "from imsearch_align import ENCODERS\n"
        "from imsearch_align.framework.interfaces import VersionedProvider\n"
        "from imsearch_align.adapters.encoders import TorchEncoder\n"
        "out = {}\n"
        "for name, kw in [('sentence-transformers', {'model': 'all-MiniLM-L6-v2'}),\n"
        "                 ('hf-image', {'model': MODEL_PATH, 'pooling': 'mean'}),\n"
        "                 ('clip', {'model': 'openai/clip-vit-base-patch32', 'modality': 'text'}),\n"
        "                 ('efficientnet-lite0', {})]:\n"
        "    e = ENCODERS.get(name)(**kw)\n"
        "    assert isinstance(e, TorchEncoder) and isinstance(e, VersionedProvider)\n"
        "    out[name] = [e.id, e.version, e._state is None]\n"
        "out['torch'] = 'torch' in sys.modules\n"
        "print(json.dumps(out))\n"
    ).replace("MODEL_PATH", repr(str(tmp_path)))
    (tmp_path / "config.json").write_text("{}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import json

    from imsearch_align.adapters.encoders._common import local_fingerprint

    got = json.loads(out.stdout)
    assert got.pop("torch") is False
    assert got["sentence-transformers"][0] == "sentence-transformers:all-MiniLM-L6-v2:l2"
    assert got["hf-image"] == [
        f"hf-image:{tmp_path}:mean:l2",
        f"local-{local_fingerprint(tmp_path)}",
        True,
    ]
    assert got["clip"][:1] == ["clip:openai/clip-vit-base-patch32:text:l2"]
    assert got["clip"][1] == "hub" or got["clip"][1].startswith("rev-")  # offline: no network read
    assert (
        got["efficientnet-lite0"][0] == "efficientnet-lite0:efficientnet-lite0:avgpool224:tfpre:l2"
    )
    assert got["efficientnet-lite0"][1].startswith("local-")
    assert all(v[2] for v in got.values())  # nothing loaded


def test_torch_encoder_base_errors_name_the_fix() -> None:
    from imsearch_align.adapters.encoders import TorchEncoder

    class Needs(TorchEncoder):
        kind = "needs"
        requires = ("no_such_module_for_imsearch",)

    with pytest.raises(
        ImportError, match=r"the needs encoder needs the optional package.*pip install"
    ):
        Needs().encode(["x"])
    enc = ENCODERS.get("sentence-transformers")("all-MiniLM-L6-v2", device="cpu")
    with pytest.raises(ValueError, match="batch_size must be"):
        enc.encode(["x"], batch_size=0)
    with pytest.raises(TypeError, match="text items must be strings, got int at position 1"):
        enc.encode(["x", 3])
    assert enc._state is None  # rejected before loading anything


def test_local_fingerprint_changes_when_a_model_is_saved_over_with_the_same_sizes(tmp_path):
    """A retrained model keeps every tensor's shape, so its weights file keeps
    its size: the fingerprint (the cache key's weights version) must change."""
    import os

    from imsearch_align.adapters.encoders._common import local_fingerprint

    (tmp_path / "config.json").write_text('{"crop_size": 224}')
    w = tmp_path / "model.safetensors"
    w.write_bytes(b"\x00" * (2 << 20))  # above the content-hash size
    before = local_fingerprint(tmp_path)
    assert local_fingerprint(tmp_path) == before  # stable
    st = w.stat()
    w.write_bytes(b"\x01" * (2 << 20))  # retrained: same size, new time
    os.utime(w, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    after_weights = local_fingerprint(tmp_path)
    assert after_weights != before
    cfg_st = (tmp_path / "config.json").stat()
    (tmp_path / "config.json").write_text('{"crop_size": 256}')  # same size, same time
    os.utime(tmp_path / "config.json", ns=(cfg_st.st_atime_ns, cfg_st.st_mtime_ns))
    assert local_fingerprint(tmp_path) != after_weights  # small files by content
