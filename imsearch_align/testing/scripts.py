"""Test support for the benchmark scripts: load one as a module, write paired embeddings.

``benchmarks/*.py`` are scripts, not package modules; a test loads one with
:func:`load_benchmark` and calls its ``main(argv)``. :func:`write_cone_pairs`
writes the ``--embeddings`` folder layout (``image.npy``, ``text.npy``,
``text_image.npy``) with unit rows sharing a cone-shaped latent, as a real
encoder pair's embeddings do (mean pairwise cosine about 0.4).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np

__all__ = ["load_benchmark", "write_cone_pairs"]

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_benchmark(name: str, module_name: str | None = None) -> ModuleType:
    """``benchmarks/<name>.py`` loaded as a module (``module_name``: its ``__name__``)."""
    spec = importlib.util.spec_from_file_location(
        module_name or f"benchmark_{name}", BENCHMARKS / f"{name}.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
