"""Synthetic paired embeddings: shapes, determinism, structure, splits, errors."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from imsearch_align.datasets.synthetic import SyntheticPairs, make_synthetic_pairs


def test_shapes_and_dtypes():
    d = make_synthetic_pairs(50, d_latent=4, d_image=10, d_text=7, captions_per_image=3, seed=0)
    assert d.image_emb.shape == (50, 10) and d.image_emb.dtype == np.float32
    assert d.text_emb.shape == (150, 7) and d.text_emb.dtype == np.float32
    assert d.text_image.dtype == np.int64
    np.testing.assert_array_equal(d.text_image, np.repeat(np.arange(50), 3))
    assert d.image_labels is None
    X, Y = d.paired()
    assert X.shape == (150, 10) and Y.shape == (150, 7)
    np.testing.assert_array_equal(X[4], d.image_emb[1])


def test_frozen():
    d = make_synthetic_pairs(5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.image_emb = None  # type: ignore[misc]


def test_deterministic_by_seed():
    a, b, c = (make_synthetic_pairs(20, seed=s) for s in (3, 3, 4))
    np.testing.assert_array_equal(a.image_emb, b.image_emb)
    np.testing.assert_array_equal(a.text_emb, b.text_emb)
    assert not np.array_equal(a.image_emb, c.image_emb)


def test_image_is_tanh_of_latent_plus_noise():
    # Without noise every image coordinate lies strictly inside (-1, 1).
    d = make_synthetic_pairs(200, noise=0.0, seed=0)
    assert np.abs(d.image_emb).max() < 1.0
    assert np.abs(make_synthetic_pairs(200, noise=1.0, seed=0).image_emb).max() > 1.0


def test_captions_of_one_image_share_the_latent():
    d = make_synthetic_pairs(300, captions_per_image=2, noise=0.1, seed=0)
    same = np.linalg.norm(d.text_emb[0::2] - d.text_emb[1::2], axis=1).mean()
    other = np.linalg.norm(d.text_emb[0::2] - np.roll(d.text_emb[1::2], 1, axis=0), axis=1).mean()
    assert same < 0.3 * other
    # The two captions differ (independent noise draws).
    assert not np.allclose(d.text_emb[0], d.text_emb[1])


def test_classes_cluster():
    d = make_synthetic_pairs(400, n_classes=4, class_spread=0.1, noise=0.05, seed=0)
    assert d.image_labels is not None and set(np.unique(d.image_labels)) <= {0, 1, 2, 3}
    X = d.image_emb
    centres = np.stack([X[d.image_labels == c].mean(0) for c in range(4)])
    nearest = np.argmin(((X[:, None, :] - centres[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest == d.image_labels) > 0.95


def test_split_is_disjoint_and_keeps_texts_with_their_images():
    d = make_synthetic_pairs(100, captions_per_image=2, seed=0)
    sup, test = d.split(60, n_test=30, seed=1)
    assert isinstance(sup, SyntheticPairs) and sup.n_images == 60 and test.n_images == 30
    assert sup.n_texts == 120 and test.n_texts == 60
    rows = {tuple(r) for r in d.image_emb}
    s_rows = {tuple(r) for r in sup.image_emb}
    t_rows = {tuple(r) for r in test.image_emb}
    assert s_rows.isdisjoint(t_rows) and s_rows | t_rows <= rows
    # Each text still points at its own image: pairs are preserved.
    orig = {tuple(t): tuple(d.image_emb[i]) for t, i in zip(d.text_emb, d.text_image)}
    for part in (sup, test):
        for t, i in zip(part.text_emb, part.text_image):
            assert orig[tuple(t)] == tuple(part.image_emb[i])
    _, full_test = d.split(60, seed=1)
    assert full_test.n_images == 40


@pytest.mark.parametrize(
    ("kwargs", "exc", "msg"),
    [
        ({"n_images": 0}, ValueError, r"n_images must be in \[1, inf\], got 0"),
        ({"n_images": 5, "captions_per_image": 0}, ValueError, "captions_per_image"),
        ({"n_images": 5, "noise": -1.0}, ValueError, "noise must be a finite float >= 0"),
        ({"n_images": 5.5}, TypeError, "n_images must be an integer"),
    ],
)
def test_bad_arguments(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        make_synthetic_pairs(**kwargs)


def test_bad_split():
    d = make_synthetic_pairs(10)
    with pytest.raises(ValueError, match=r"n_support must be in \[1, 9\], got 10"):
        d.split(10)
    with pytest.raises(ValueError, match=r"n_test must be in \[1, 4\], got 5"):
        d.split(6, n_test=5)
