"""Query perturbations: determinism by seed, type preservation, laziness, registry."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from imsearch_align.diagnostics.perturbations import (
    Perturbation,
    PerturbedItems,
    get_perturbation,
    perturb_item,
)
from imsearch_align.framework.registry import PERTURBATIONS

CAPTION = "a small brown dog runs across the green grass near the river"
TEXT = ["typo", "word_dropout", "word_shuffle"]
IMAGES = ["gaussian_noise", "blur", "crop"]


def _img(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (24, 32, 3), dtype=np.uint8)


def test_registry_names_and_did_you_mean():
    assert set(TEXT + IMAGES) <= set(PERTURBATIONS.names())
    with pytest.raises(KeyError, match="Did you mean 'typo'"):
        get_perturbation("typos")


@pytest.mark.parametrize("name", TEXT)
def test_text_deterministic_by_seed(name):
    a = [perturb_item(CAPTION, name, seed=s, index=3) for s in (1, 1, 2)]
    assert a[0] == a[1]
    assert a[0] != a[2] or name == "word_dropout"  # dropout may coincide; checked below
    assert perturb_item(CAPTION, name, seed=1, index=4) is not None


def test_word_dropout_and_shuffle_properties():
    words = CAPTION.split()
    shuf = perturb_item(CAPTION, "word_shuffle", seed=0).split()
    assert sorted(shuf) == sorted(words) and shuf != words
    drop = perturb_item(CAPTION, get_perturbation("word_dropout", rate=0.5), seed=0).split()
    it = iter(words)
    assert all(w in it for w in drop) and 0 < len(drop) < len(words)  # an ordered subsequence
    assert perturb_item("one", get_perturbation("word_dropout", rate=1.0), seed=0) == "one"
    assert perturb_item(CAPTION, get_perturbation("typo", rate=0.0), seed=0) == CAPTION


def test_typo_edits_one_character_per_word():
    out = perturb_item(CAPTION, get_perturbation("typo", rate=1.0), seed=7).split()
    words = CAPTION.split()
    assert len(out) == len(words) and out != words
    assert all(abs(len(a) - len(b)) <= 1 for a, b in zip(out, words))


@pytest.mark.parametrize("name", IMAGES)
def test_images_keep_type_shape_and_are_seeded(name):
    arr = _img()
    a = perturb_item(arr, name, seed=3, index=1)
    b = perturb_item(arr, name, seed=3, index=1)
    assert a.dtype == np.uint8 and a.shape == arr.shape
    np.testing.assert_array_equal(a, b)
    pil = perturb_item(Image.fromarray(arr), name, seed=3, index=1)
    assert isinstance(pil, Image.Image) and pil.size == (32, 24) and pil.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(pil), a)
    f = perturb_item(arr[..., 0].astype(np.float32) / 255, name, seed=3)
    assert f.dtype == np.float32 and f.shape == (24, 32)
    if name != "blur":  # blur has no randomness
        assert not np.array_equal(perturb_item(arr, name, seed=4, index=1), a)


def test_image_known_answers():
    grey = np.full((40, 40), 128, np.uint8)
    np.testing.assert_array_equal(perturb_item(grey, "blur", seed=0), grey)
    noisy = perturb_item(grey, get_perturbation("gaussian_noise", sigma=0.02), seed=0)
    assert np.std(noisy.astype(float)) == pytest.approx(0.02 * 255, rel=0.1)
    arr = _img(1)
    np.testing.assert_array_equal(
        perturb_item(arr, get_perturbation("crop", scale=1.0), seed=0), arr
    )


def test_perturbed_items_lazy_memoised_and_order_independent():
    calls = []

    class Counting(Perturbation):
        name = "counting"
        modality = "text"

        def apply(self, item, rng):
            calls.append(item)
            return f"{item}-{rng.integers(1000)}"

    caps = [f"c{i}" for i in range(5)]
    items = PerturbedItems(caps, Counting(), seed=0)
    assert items.n_cached == 0 and len(items) == 5
    x3 = items[3]
    assert items[3] == x3 and items[-2] == x3 and calls == ["c3"]
    again = PerturbedItems(caps, Counting(), seed=0)
    assert [again[i] for i in (4, 3, 0)][1] == x3  # access order does not matter
    typo = PerturbedItems(caps * 2, "typo", seed=1)
    assert typo[2] == perturb_item((caps * 2)[2], "typo", seed=1, index=2)
    assert typo[1:3] == [typo[1], typo[2]]
    with pytest.raises(IndexError):
        items[5]


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"rate must be a number in \[0, 1\], got 1\.5"):
        get_perturbation("typo", rate=1.5)
    with pytest.raises(TypeError, match="perturbs captions"):
        perturb_item(_img(), "typo", seed=0)
    with pytest.raises(TypeError, match="perturbs images"):
        perturb_item(CAPTION, "blur", seed=0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        perturb_item(CAPTION, "typo", seed=-1)
