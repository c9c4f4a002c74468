"""Seeded synthetic paired image/text embeddings with a shared latent.

No downloads: used by tests and benchmarks to check that alignment methods
recover a known shared structure. Generative model::

    z_i     ~ N(0, I_{d_latent})                       (or around a class centre)
    image_i = tanh(A z_i) + noise * e_i                 (d_image; a nonlinear view)
    text_t  = B z_{image(t)} + noise * e_t              (d_text; one draw per caption)

``A`` and ``B`` are Gaussian with ``1/sqrt(d_latent)`` scaling, so every view
has O(1) entries. Several captions of one image are independent noise draws
around the same latent.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from imsearch_align.framework.registry import DATASETS
from imsearch_align.framework.validation import check_int

if TYPE_CHECKING:
    from imsearch_align.datasets.base import EmbeddedDataset

__all__ = ["SyntheticPairs", "load_synthetic", "make_synthetic_pairs"]


@dataclass(frozen=True)
class SyntheticPairs:
    """Paired embeddings: images, texts, and which image each text describes.

    Attributes:
        image_emb: ``(n_images, d_image)`` float32.
        text_emb: ``(n_texts, d_text)`` float32.
        text_image: ``(n_texts,)`` int64, the row of ``image_emb`` each text describes.
        image_labels: ``(n_images,)`` int64 class of each image, or ``None``.
    """

    image_emb: np.ndarray
    text_emb: np.ndarray
    text_image: np.ndarray
    image_labels: np.ndarray | None = None

    @property
    def n_images(self) -> int:
        """Number of images."""
        return int(self.image_emb.shape[0])

    @property
    def n_texts(self) -> int:
        """Number of texts."""
        return int(self.text_emb.shape[0])

    def paired(self) -> tuple[np.ndarray, np.ndarray]:
        """Row-aligned ``(image_emb[text_image], text_emb)``: one row per (image, text) pair.

        This is the form ``AlignmentMethod.fit`` takes.
        """
        return self.image_emb[self.text_image], self.text_emb

    def subset(self, image_index: np.ndarray) -> SyntheticPairs:
        """The given images (in that order) with all their texts, re-indexed."""
        idx = np.asarray(image_index, dtype=np.int64)
        new_pos = np.full(self.n_images, -1, dtype=np.int64)
        new_pos[idx] = np.arange(len(idx))
        keep = np.flatnonzero(new_pos[self.text_image] >= 0)
        return SyntheticPairs(
            image_emb=self.image_emb[idx],
            text_emb=self.text_emb[keep],
            text_image=new_pos[self.text_image[keep]],
            image_labels=None if self.image_labels is None else self.image_labels[idx],
        )

    def split(
        self, n_support: int, *, n_test: int | None = None, seed: int = 0
    ) -> tuple[SyntheticPairs, SyntheticPairs]:
        """Disjoint ``(support, test)`` subsets of images, each with its texts.

        Args:
            n_support: images in the support set, in ``[1, n_images - 1]``.
            n_test: images in the test set; ``None`` takes all the others.
            seed: seed of the random permutation.
        """
        n = self.n_images
        ns = check_int(n_support, "n_support", low=1, high=n - 1)
        nt = n - ns if n_test is None else check_int(n_test, "n_test", low=1, high=n - ns)
        perm = np.random.default_rng(seed).permutation(n)
        return self.subset(np.sort(perm[:ns])), self.subset(np.sort(perm[ns : ns + nt]))


def make_synthetic_pairs(
    n_images: int,
    *,
    d_latent: int = 16,
    d_image: int = 64,
    d_text: int = 48,
    captions_per_image: int = 1,
    n_classes: int | None = None,
    class_spread: float = 0.5,
    noise: float = 0.6,
    seed: int = 0,
) -> SyntheticPairs:
    """Generate seeded paired embeddings sharing a latent (module docstring).

    Args:
        n_images: number of images (>= 1).
        d_latent: dimension of the shared latent ``z``.
        d_image, d_text: embedding dimensions.
        captions_per_image: texts per image (independent noise draws).
        n_classes: if given, latents are ``centre[c] + class_spread * N(0, I)``
            with ``n_classes`` unit-scale centres, and ``image_labels`` is set.
        class_spread: within-class standard deviation of the latent.
        noise: standard deviation of the per-item observation noise.
        seed: seed of everything (maps, latents, noise).

    Returns:
        :class:`SyntheticPairs`; texts are ordered image by image.
    """
    n = check_int(n_images, "n_images", low=1)
    dz = check_int(d_latent, "d_latent", low=1)
    di = check_int(d_image, "d_image", low=1)
    dt = check_int(d_text, "d_text", low=1)
    c = check_int(captions_per_image, "captions_per_image", low=1)
    for name, v in (("noise", noise), ("class_spread", class_spread)):
        if not (np.isfinite(v) and v >= 0):
            raise ValueError(f"{name} must be a finite float >= 0, got {v!r}")
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((dz, di)) / np.sqrt(dz)
    B = rng.standard_normal((dz, dt)) / np.sqrt(dz)
    labels = None
    if n_classes is None:
        z = rng.standard_normal((n, dz))
    else:
        k = check_int(n_classes, "n_classes", low=1)
        centres = rng.standard_normal((k, dz))
        labels = rng.integers(0, k, size=n).astype(np.int64)
        z = centres[labels] + class_spread * rng.standard_normal((n, dz))
    image = np.tanh(z @ A) + noise * rng.standard_normal((n, di))
    text_image = np.repeat(np.arange(n, dtype=np.int64), c)
    text = z[text_image] @ B + noise * rng.standard_normal((n * c, dt))
    return SyntheticPairs(
        image_emb=image.astype(np.float32),
        text_emb=text.astype(np.float32),
        text_image=text_image,
        image_labels=labels,
    )


def _loader_signature(loader: Any) -> inspect.Signature:
    """``loader``'s own parameters, then the generation parameters of
    :func:`make_synthetic_pairs` (its keyword-only ones), in that order."""
    own = [p for p in inspect.signature(loader).parameters.values() if p.kind is not p.VAR_KEYWORD]
    return inspect.signature(loader).replace(parameters=[*own, *_GENERATION.values()])


#: The generation parameters, written once in :func:`make_synthetic_pairs`'s signature.
_GENERATION = {
    p.name: p
    for p in inspect.signature(make_synthetic_pairs).parameters.values()
    if p.kind is p.KEYWORD_ONLY
}


@DATASETS.register("synthetic")
def load_synthetic(
    n_images: int = 1000,
    *,
    test_fraction: float = 0.3,
    split_seed: int = 0,
    **generation: Any,
) -> EmbeddedDataset:
    """The synthetic pairs as a dataset with its own precomputed encoders.

    The images are split into support (``train``) and ``test`` by a seeded
    ratio, all captions of an image on its side. Returns
    ``EmbeddedDataset(dataset, image, text)``, so an experiment needs no
    encoder (``image_encoder=None``, ``text_encoder=None``). Its signature
    lists the generation parameters of :func:`make_synthetic_pairs` by name.

    Args:
        n_images: number of images.
        test_fraction: share of images in ``test`` (``0.0``: all support).
        split_seed: seed of the split.
        d_latent: dimension of the shared latent.
        d_image: image embedding dimension.
        d_text: text embedding dimension.
        captions_per_image: texts per image (independent noise draws).
        n_classes: number of latent classes (labels for classification); None: no labels.
        class_spread: within-class standard deviation of the latent.
        noise: standard deviation of the per-item observation noise.
        seed: seed of the generation (maps, latents, noise).
    """
    from imsearch_align.datasets.base import PairedDataset

    unknown = [k for k in generation if k not in _GENERATION]
    if unknown:
        raise TypeError(f"load_synthetic() got an unexpected keyword argument {unknown[0]!r}")
    pairs = make_synthetic_pairs(n_images, **generation)
    seed = generation.get("seed", _GENERATION["seed"].default)
    class_names = (
        tuple(f"class {c}" for c in range(int(pairs.image_labels.max()) + 1))
        if pairs.image_labels is not None
        else None
    )
    return PairedDataset.from_arrays(
        pairs.image_emb,
        pairs.text_emb,
        pairs.text_image,
        pairs.image_labels,
        name=f"synthetic-{n_images}-{seed}",
        test_fraction=test_fraction,
        seed=split_seed,
        class_names=class_names,
    )


load_synthetic.__signature__ = _loader_signature(load_synthetic)  # type: ignore[attr-defined]
