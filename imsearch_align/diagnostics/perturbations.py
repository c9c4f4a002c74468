"""Query perturbations applied before encoding, seeded and lazily cached.

In the spirit of MMTrustEval's method hooks: a run can encode its queries
through a perturbation and report how retrieval degrades. Each perturbation
is registered in :data:`imsearch_align.framework.registry.PERTURBATIONS`
under its name; ``get_perturbation("typo", rate=0.1)`` builds one (unknown
names raise with a "did you mean").

Determinism: item ``i`` is perturbed with a generator seeded by
``SeedSequence([seed, i])``, so the result depends only on (item, seed, i),
never on access order or on the other items. :class:`PerturbedItems` wraps a
sequence, perturbs on first access and memoises.

Captions (``str`` in, ``str`` out; words are split on whitespace and joined
with single spaces):

* ``typo(rate)``: each word of 2+ characters gets, with probability ``rate``,
  one random edit (swap of adjacent characters, deletion, substitution or
  insertion of a lowercase letter).
* ``word_dropout(rate)``: each word is dropped with probability ``rate``;
  at least one word is kept.
* ``word_shuffle()``: the words in a random order (no synonyms involved).

Images (PIL image in, PIL image of the same size and mode out; or a NumPy
``(H, W)`` / ``(H, W, C)`` array in, same shape and dtype out). uint8 pixels
live in [0, 255] and are clipped back into it; float pixels are taken as
[0, 1] for the noise scale and are not clipped. PIL modes other than
``L``, ``RGB``, ``RGBA`` are converted to ``RGB`` first.

* ``gaussian_noise(sigma)``: additive N(0, sigma^2) noise, ``sigma`` a
  fraction of the intensity range.
* ``blur(sigma)``: Gaussian blur over the spatial axes, ``sigma`` in pixels
  (deterministic: the seed is unused).
* ``crop(scale)``: a random window with ``scale`` of the area and the
  image's aspect ratio, resized back to the full size (bilinear).
"""

from __future__ import annotations

import string
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from imsearch_align.framework.registry import PERTURBATIONS

__all__ = [
    "IMAGE_PERTURBATIONS",
    "TEXT_PERTURBATIONS",
    "Blur",
    "Crop",
    "GaussianNoise",
    "Perturbation",
    "PerturbedItems",
    "Typo",
    "WordDropout",
    "WordShuffle",
    "get_perturbation",
    "perturb_item",
]


def _check_fraction(value: Any, name: str, *, low_open: bool = False) -> float:
    ok = isinstance(value, int | float | np.floating) and not isinstance(value, bool)
    v = float(value) if ok else float("nan")
    if not ok or not ((0.0 < v) if low_open else (0.0 <= v)) or v > 1.0:
        interval = "(0, 1]" if low_open else "[0, 1]"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")
    return v


class Perturbation(ABC):
    """Base of all perturbations: ``apply(item, rng)`` returns a perturbed copy.

    Attributes:
        name: registry name.
        modality: ``"text"`` or ``"image"``.
    """

    name: ClassVar[str] = ""
    modality: ClassVar[str] = ""

    @abstractmethod
    def apply(self, item: Any, rng: np.random.Generator) -> Any:
        """Return the perturbed copy of ``item`` using only ``rng`` for randomness."""

    def params(self) -> dict[str, Any]:
        """Parameters, for result records."""
        return dict(vars(self))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"


# --------------------------------------------------------------------------- text


class _TextPerturbation(Perturbation):
    modality: ClassVar[str] = "text"

    def apply(self, item: Any, rng: np.random.Generator) -> str:
        """Perturb one caption."""
        if not isinstance(item, str):
            raise TypeError(f"{self.name} perturbs captions (str), got {type(item).__name__}")
        return " ".join(self._words(item.split(), rng))

    @abstractmethod
    def _words(self, words: list[str], rng: np.random.Generator) -> list[str]:
        """The perturbed word list."""


_LETTERS = string.ascii_lowercase


@PERTURBATIONS.register("typo")
class Typo(_TextPerturbation):
    """One random character edit per word with probability ``rate``."""

    name = "typo"

    def __init__(self, rate: float = 0.1) -> None:
        self.rate = _check_fraction(rate, "rate")

    def _words(self, words: list[str], rng: np.random.Generator) -> list[str]:
        out = []
        for w in words:
            if len(w) >= 2 and rng.random() < self.rate:
                i = int(rng.integers(len(w)))
                op = int(rng.integers(4))
                c = _LETTERS[int(rng.integers(26))]
                if op == 0:  # swap w[j], w[j+1]
                    j = min(i, len(w) - 2)
                    w = w[:j] + w[j + 1] + w[j] + w[j + 2 :]
                elif op == 1:
                    w = w[:i] + w[i + 1 :]
                elif op == 2:
                    w = w[:i] + c + w[i + 1 :]
                else:
                    w = w[:i] + c + w[i:]
            out.append(w)
        return out


@PERTURBATIONS.register("word_dropout")
class WordDropout(_TextPerturbation):
    """Drop each word with probability ``rate``, keeping at least one."""

    name = "word_dropout"

    def __init__(self, rate: float = 0.1) -> None:
        self.rate = _check_fraction(rate, "rate")

    def _words(self, words: list[str], rng: np.random.Generator) -> list[str]:
        if not words:
            return words
        keep = rng.random(len(words)) >= self.rate
        if not keep.any():
            keep[int(rng.integers(len(words)))] = True
        return [w for w, k in zip(words, keep) if k]


@PERTURBATIONS.register("word_shuffle")
class WordShuffle(_TextPerturbation):
    """The caption's words in a random order."""

    name = "word_shuffle"

    def _words(self, words: list[str], rng: np.random.Generator) -> list[str]:
        return [words[i] for i in rng.permutation(len(words))]


# --------------------------------------------------------------------------- images


class _ImagePerturbation(Perturbation):
    modality: ClassVar[str] = "image"

    def apply(self, item: Any, rng: np.random.Generator) -> Any:
        """Perturb one image (PIL in -> PIL out, ndarray in -> ndarray out)."""
        pil = _as_pil_class(item)
        if pil is not None:
            img = item if item.mode in ("L", "RGB", "RGBA") else item.convert("RGB")
            arr = np.asarray(img)
            out = self._array(arr.astype(np.float64), rng, 255.0)
            return pil.fromarray(np.clip(np.rint(out), 0, 255).astype(np.uint8), mode=img.mode)
        if not isinstance(item, np.ndarray):
            raise TypeError(
                f"{self.name} perturbs images (PIL.Image or numpy array), got {type(item).__name__}"
            )
        if item.ndim not in (2, 3) or item.dtype.kind not in "uif":
            raise ValueError(
                f"{self.name}: image array must be numeric (H, W) or (H, W, C), "
                f"got shape {item.shape} dtype {item.dtype}"
            )
        if item.dtype == np.uint8:
            out = self._array(item.astype(np.float64), rng, 255.0)
            return np.clip(np.rint(out), 0, 255).astype(np.uint8)
        if item.dtype.kind == "f":
            return self._array(item.astype(np.float64), rng, 1.0).astype(item.dtype)
        raise ValueError(f"{self.name}: integer images must be uint8, got {item.dtype}")

    @abstractmethod
    def _array(self, a: np.ndarray, rng: np.random.Generator, scale: float) -> np.ndarray:
        """The perturbed float64 pixel array (``scale`` = the intensity range)."""


def _as_pil_class(item: Any) -> Any:
    """PIL.Image module if ``item`` is a PIL image, else None (PIL imported lazily)."""
    mod = type(item).__module__
    if not mod.startswith("PIL."):
        return None
    from PIL import Image

    return Image if isinstance(item, Image.Image) else None


@PERTURBATIONS.register("gaussian_noise")
class GaussianNoise(_ImagePerturbation):
    """Additive Gaussian pixel noise, ``sigma`` a fraction of the intensity range."""

    name = "gaussian_noise"

    def __init__(self, sigma: float = 0.05) -> None:
        self.sigma = _check_fraction(sigma, "sigma")

    def _array(self, a: np.ndarray, rng: np.random.Generator, scale: float) -> np.ndarray:
        return a + rng.normal(0.0, self.sigma * scale, size=a.shape)


@PERTURBATIONS.register("blur")
class Blur(_ImagePerturbation):
    """Gaussian blur of ``sigma`` pixels over the spatial axes."""

    name = "blur"

    def __init__(self, sigma: float = 2.0) -> None:
        if not (isinstance(sigma, int | float) and not isinstance(sigma, bool) and sigma > 0):
            raise ValueError(f"sigma must be a number > 0 (pixels), got {sigma!r}")
        self.sigma = float(sigma)

    def _array(self, a: np.ndarray, rng: np.random.Generator, scale: float) -> np.ndarray:
        from scipy.ndimage import gaussian_filter

        sig = (self.sigma, self.sigma) + (0.0,) * (a.ndim - 2)
        return gaussian_filter(a, sigma=sig, mode="reflect")


@PERTURBATIONS.register("crop")
class Crop(_ImagePerturbation):
    """A random window of ``scale`` of the area, resized back to full size."""

    name = "crop"

    def __init__(self, scale: float = 0.5) -> None:
        self.scale = _check_fraction(scale, "scale", low_open=True)

    def _array(self, a: np.ndarray, rng: np.random.Generator, scale: float) -> np.ndarray:
        from scipy.ndimage import map_coordinates

        h, w = a.shape[:2]
        side = np.sqrt(self.scale)
        ch, cw = max(1, round(h * side)), max(1, round(w * side))
        y0 = int(rng.integers(h - ch + 1))
        x0 = int(rng.integers(w - cw + 1))
        # Pixel-centre mapping of the full grid onto the window, bilinear.
        ys = y0 + (np.arange(h) + 0.5) * ch / h - 0.5
        xs = x0 + (np.arange(w) + 0.5) * cw / w - 0.5
        yy, xx = np.meshgrid(ys, xs, indexing="ij")
        if a.ndim == 2:
            return map_coordinates(a, [yy, xx], order=1, mode="nearest")
        return np.stack(
            [
                map_coordinates(a[..., c], [yy, xx], order=1, mode="nearest")
                for c in range(a.shape[2])
            ],
            axis=-1,
        )


# --------------------------------------------------------------------------- access


def get_perturbation(name: str, **params: Any) -> Perturbation:
    """Build the perturbation registered as ``name`` with ``params``.

    Raises:
        KeyError: unknown name (with close matches and the valid names).
    """
    return PERTURBATIONS.get(name)(**params)


def _resolve(perturbation: str | Perturbation) -> Perturbation:
    if isinstance(perturbation, str):
        return get_perturbation(perturbation)
    if not isinstance(perturbation, Perturbation):
        raise TypeError(
            f"perturbation must be a registered name or a Perturbation, got {type(perturbation).__name__}"
        )
    return perturbation


def _rng(seed: int, index: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(index)]))


def perturb_item(item: Any, perturbation: str | Perturbation, *, seed: int, index: int = 0) -> Any:
    """Perturb one item deterministically from ``(seed, index)``."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return _resolve(perturbation).apply(item, _rng(seed, index))


class PerturbedItems(Sequence):
    """A lazy view of ``items`` through a perturbation: perturbs on access, memoises.

    ``PerturbedItems(captions, "typo", seed=0)[i]`` equals
    ``perturb_item(captions[i], "typo", seed=0, index=i)``; each item is
    computed at most once. Slicing returns a list.
    """

    def __init__(
        self, items: Sequence[Any], perturbation: str | Perturbation, *, seed: int
    ) -> None:
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
        self.items = items
        self.perturbation = _resolve(perturbation)
        self.seed = int(seed)
        self._cache: dict[int, Any] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        j = int(i) + n if int(i) < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"index {i} out of range for {n} items")
        if j not in self._cache:
            self._cache[j] = self.perturbation.apply(self.items[j], _rng(self.seed, j))
        return self._cache[j]

    @property
    def n_cached(self) -> int:
        """How many items have been perturbed so far."""
        return len(self._cache)

    def __repr__(self) -> str:
        return f"PerturbedItems({len(self)} items, {self.perturbation!r}, seed={self.seed})"


#: Names of the text / image perturbations, for runners that pick by modality.
TEXT_PERTURBATIONS: tuple[str, ...] = ("typo", "word_dropout", "word_shuffle")
IMAGE_PERTURBATIONS: tuple[str, ...] = ("gaussian_noise", "blur", "crop")
