"""Identity: a jointly trained model (e.g. CLIP) needs no alignment (the baseline)."""

from __future__ import annotations

import numpy as np

from imsearch_align.framework.registry import METHODS
from imsearch_align.methods.base import AlignmentBase, l2_normalize

__all__ = ["Identity"]


@METHODS.register("identity")
class Identity(AlignmentBase):
    """Cosine similarity in the shared space of a jointly trained encoder pair.

    Similarity: ``sim(x, y) = <x, y> / (||x|| ||y||)``. Index form: both sides
    L2-normalised. ``fit`` learns nothing but the dimension, and requires the
    two sides to have the same dimension (they must share a space).
    """

    def __init__(self) -> None:
        pass

    def _validate_params(self, X: np.ndarray, Y: np.ndarray) -> None:
        if X.shape[1] != Y.shape[1]:
            raise ValueError(
                f"identity needs image and text embeddings in one shared space (equal dims): "
                f"image_emb has dimension {X.shape[1]}, text_emb {Y.shape[1]}; "
                "use an aligning method (csa, asif, cka, procrustes, linear) instead"
            )

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        self.dim_ = int(X.shape[1])

    def _output_dim(self) -> int:
        return self.dim_

    def _transform_images(self, X: np.ndarray) -> np.ndarray:
        return l2_normalize(X).astype(np.float32)

    def _transform_texts(self, Y: np.ndarray) -> np.ndarray:
        return l2_normalize(Y).astype(np.float32)

    def _similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        num = X @ Y.T
        den = np.outer(np.linalg.norm(X, axis=1), np.linalg.norm(Y, axis=1))
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
