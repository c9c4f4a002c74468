"""Shapes generator: determinism, layout read by the real Flickr30k loader, labels, captions."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from imsearch_align import DATASETS
from imsearch_align.datasets.flickr30k import load_flickr30k
from imsearch_align.datasets.shapes import COLOURS, SHAPES, generate_shapes, load_shapes


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


def test_same_seed_byte_identical_other_seed_differs(tmp_path: Path) -> None:
    a = generate_shapes(tmp_path / "a", 8, seed=5, size=64)
    b = generate_shapes(tmp_path / "b", 8, seed=5, size=64)
    c = generate_shapes(tmp_path / "c", 8, seed=6, size=64)
    assert _digest(a) == _digest(b) != _digest(c)


def test_flickr_loader_reads_it_and_captions_describe_the_image(tmp_path: Path) -> None:
    root = generate_shapes(tmp_path, 30, seed=1, size=96)
    ds = load_flickr30k(root)
    assert len(ds.images) == 30 and len(ds.texts) == 150
    assert (ds.texts.groupby("image_id").size() == 5).all()
    assert set(ds.images["split"]) == {"train", "val", "test"}
    sh = load_shapes(root)
    assert sh.class_names == SHAPES and sh.templates and sh.labels.shape == (30,)
    for iid, label, path in zip(sh.images["image_id"], sh.labels, sh.images["path"]):
        caps = sh.texts[sh.texts["image_id"] == iid]["caption"].tolist()
        assert len(set(caps)) == 5  # five different wordings
        # The main shape's type (the label) is named in every caption.
        assert all(SHAPES[label] in c.lower() for c in caps)
        # The main shape's colour, named in the first caption, is actually drawn.
        colour = caps[0].split()[1]
        px = np.asarray(Image.open(path).convert("RGB")).reshape(-1, 3)
        assert (np.abs(px.astype(int) - COLOURS[colour]).sum(axis=1) < 10).sum() > 50


def test_registered_and_generates_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMSEARCH_ALIGN_CACHE", str(tmp_path))
    ds = DATASETS.get("shapes")(n_images=4, seed=2, size=32)
    assert len(ds.images) == 4 and (tmp_path / "shapes-n4-s2-px32" / "results.csv").is_file()


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="n_images must be in"):
        generate_shapes("/tmp/unused", 0, seed=0)
    with pytest.raises(TypeError, match="seed must be an integer"):
        generate_shapes("/tmp/unused", 1, seed=None)  # type: ignore[arg-type]
