"""Orthogonal Procrustes after PCA to a common dimension (a baseline)."""

from __future__ import annotations

import numpy as np

from imsearch_align.framework.registry import METHODS
from imsearch_align.framework.validation import check_int
from imsearch_align.methods.base import AlignmentBase, l2_normalize

__all__ = ["Procrustes"]


def _pca_components(Vc: np.ndarray, dim: int) -> np.ndarray:
    """Top-``dim`` principal directions ``(d, dim)`` of centred rows, deterministic signs.

    Signs follow scikit-learn's ``svd_flip``: the largest-|.| entry of each
    direction is positive, so a refit gives the same space.
    """
    _, _, Vt = np.linalg.svd(Vc, full_matrices=False)
    P = Vt[:dim].T
    idx = np.argmax(np.abs(P), axis=0)
    signs = np.sign(P[idx, np.arange(dim)])
    signs[signs == 0] = 1.0
    return P * signs


@METHODS.register("procrustes")
class Procrustes(AlignmentBase):
    """PCA both sides to ``dim``, then the orthogonal map that best aligns them.

    Fit: ``P_x, P_y`` are the top-``dim`` principal directions of the centred
    support sides (no whitening), ``A = Xc P_x``, ``B = Yc P_y``, and
    ``R = argmin_{R'R = I} ||A R - B||_F = U V'`` from ``A'B = U S V'``.

    Similarity: the cosine in the text PCA space::

        sim(x, y) = cos(R' P_x' (x - mu_x), P_y' (y - mu_y))

    Index form: both transforms are L2-normalised, so IP = cosine.

    Args:
        dim: common dimension, in ``[1, min(d_image, d_text, N - 1)]``
            (centred support data has rank at most ``N - 1``); ``None`` uses
            that maximum.

    Attributes:
        mean_image_, mean_text_, components_image_, components_text_, rotation_.
    """

    def __init__(self, dim: int | None = None) -> None:
        self.dim = dim

    def _validate_params(self, X: np.ndarray, Y: np.ndarray) -> None:
        high = min(X.shape[1], Y.shape[1], X.shape[0] - 1)
        if high < 1:
            raise ValueError(f"Procrustes needs at least 2 support pairs, got {X.shape[0]}")
        if self.dim is not None:
            d = check_int(self.dim, "dim")
            if not 1 <= d <= high:
                raise ValueError(
                    f"dim must be None or in [1, {high}] (min(d_image, d_text, N - 1) with "
                    f"d_image={X.shape[1]}, d_text={Y.shape[1]}, N={X.shape[0]}), got {d}"
                )

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        dim = min(X.shape[1], Y.shape[1], X.shape[0] - 1) if self.dim is None else int(self.dim)
        self.mean_image_, self.mean_text_ = X.mean(0), Y.mean(0)
        Xc, Yc = X - self.mean_image_, Y - self.mean_text_
        self.components_image_ = _pca_components(Xc, dim)
        self.components_text_ = _pca_components(Yc, dim)
        U, _, Vt = np.linalg.svd((Xc @ self.components_image_).T @ (Yc @ self.components_text_))
        self.rotation_ = U @ Vt
        self.dim_ = dim

    def _output_dim(self) -> int:
        return int(self.dim_)

    def _transform_images(self, X: np.ndarray) -> np.ndarray:
        Z = ((X - self.mean_image_) @ self.components_image_) @ self.rotation_
        return l2_normalize(Z).astype(np.float32)

    def _transform_texts(self, Y: np.ndarray) -> np.ndarray:
        return l2_normalize((Y - self.mean_text_) @ self.components_text_).astype(np.float32)

    def _similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        mapped = (X - self.mean_image_) @ (self.components_image_ @ self.rotation_)
        target = (Y - self.mean_text_) @ self.components_text_
        num = mapped @ target.T
        den = np.outer(np.linalg.norm(mapped, axis=1), np.linalg.norm(target, axis=1))
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
