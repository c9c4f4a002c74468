"""Orthogonal Procrustes after PCA to a common dimension (a baseline)."""

from __future__ import annotations

import numpy as np

from imsearch_align.framework.registry import METHODS
from imsearch_align.framework.validation import check_int
from imsearch_align.methods.base import AlignmentBase, l2_normalize, support_moments

__all__ = ["Procrustes"]


def _pca_components(K: np.ndarray, dim: int) -> np.ndarray:
    """Top-``dim`` principal directions ``(d, dim)`` from a scatter matrix, deterministic signs.

    The eigenvectors of ``Xc'Xc`` with the largest eigenvalues are the right
    singular vectors of ``Xc`` (what an SVD of the data gives), from a
    ``d x d`` matrix instead of the ``N x d`` data. Signs follow
    scikit-learn's ``svd_flip``: the largest-|.| entry of each direction is
    positive, so a refit gives the same space.
    """
    w, V = np.linalg.eigh(K)
    P = V[:, np.argsort(-w, kind="stable")[:dim]]
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

    fit_float64 = False  # fitted from float64 moments, block by block

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        dim = min(X.shape[1], Y.shape[1], X.shape[0] - 1) if self.dim is None else int(self.dim)
        mom = support_moments(X, Y)
        self.mean_image_, self.mean_text_ = mom.mean_x, mom.mean_y
        self.components_image_ = _pca_components(mom.Kxx, dim)
        self.components_text_ = _pca_components(mom.Kyy, dim)
        # (Xc P)'(Yc Q) = P' (Xc'Yc) Q: the orthogonal map from the cross-scatter alone.
        U, _, Vt = np.linalg.svd(self.components_image_.T @ mom.Kxy @ self.components_text_)
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
