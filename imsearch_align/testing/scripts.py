"""Test support for studies: write paired embeddings shaped like real encoders' output.

:func:`write_cone_pairs`
writes the ``--embeddings`` folder layout (``image.npy``, ``text.npy``,
``text_image.npy``) with unit rows sharing a cone-shaped latent, as a real
encoder pair's embeddings do (mean pairwise cosine about 0.4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["write_cone_pairs"]


def write_cone_pairs(
    folder: Path, n_images: int, *, image_dim: int = 24, text_dim: int = 16, seed: int = 0
) -> Path:
    """``n_images`` images and two captions each, unit rows sharing a cone-shaped latent."""
    from imsearch_align.collection import cone_vectors

    rng = np.random.default_rng(seed)
    z = cone_vectors(n_images, 12, seed=seed + 1).astype(np.float64)
    X = z @ rng.standard_normal((12, image_dim)) + 0.05 * rng.standard_normal((n_images, image_dim))
    ti = np.repeat(np.arange(n_images), 2)
    Y = z[ti] @ rng.standard_normal((12, text_dim)) + 0.05 * rng.standard_normal(
        (2 * n_images, text_dim)
    )
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    np.save(folder / "image.npy", X.astype(np.float32))
    np.save(folder / "text.npy", Y.astype(np.float32))
    np.save(folder / "text_image.npy", ti.astype(np.int64))
    return folder
