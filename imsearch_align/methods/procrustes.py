"""Orthogonal Procrustes after PCA to a common dimension (a baseline)."""

from __future__ import annotations

import numpy as np

from imsearch_align.framework.registry import METHODS
from imsearch_align.framework.validation import check_int
from imsearch_align.methods.base import AlignmentBase, l2_normalize, support_moments

__all__ = ["Procrustes"]


#: Eigenvalues of a support scatter matrix below this share of the largest are its null
#: space (float64 rounding of zero variance): directions there are arbitrary.
RANK_RTOL = 1e-9


def _eigh_desc(K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (descending) and eigenvectors of a symmetric scatter matrix."""
    w, V = np.linalg.eigh(K)
    order = np.argsort(-w, kind="stable")
    return w[order], V[:, order]


def numerical_rank(w: np.ndarray) -> int:
    """Directions a scatter matrix with eigenvalues ``w`` (descending) really spans."""
    top = float(w[0]) if len(w) else 0.0
    return int(np.count_nonzero(w > RANK_RTOL * top)) if top > 0 else 0


def _pca_components(w: np.ndarray, V: np.ndarray, dim: int) -> np.ndarray:
    """Top-``dim`` principal directions ``(d, dim)`` from a scatter matrix's eigenvectors
    (``w``, ``V`` descending), deterministic signs.

    The eigenvectors of ``Xc'Xc`` with the largest eigenvalues are the right
    singular vectors of ``Xc`` (what an SVD of the data gives), from a
    ``d x d`` matrix instead of the ``N x d`` data. Signs follow
    scikit-learn's ``svd_flip``: the largest-|.| entry of each direction is
    positive, so a refit gives the same space.
    """
    P = V[:, :dim]
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
            (centred support data has rank at most ``N - 1``), and at most the
            directions both support sides really span (their numerical rank:
            repeated images span fewer than ``N - 1``; a principal direction
            beyond it is an arbitrary null-space vector, which BLAS kernels
            choose differently); ``None`` uses that maximum.

    Attributes:
        mean_image_, mean_text_, components_image_, components_text_, rotation_;
        support_rank_image_, support_rank_text_ (the directions each side spans).
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
        mom = support_moments(X, Y)
        (wx, Vx), (wy, Vy) = _eigh_desc(mom.Kxx), _eigh_desc(mom.Kyy)
        rank = {"image": numerical_rank(wx), "text": numerical_rank(wy)}
        spanned = min(rank.values())
        high = min(X.shape[1], Y.shape[1], X.shape[0] - 1)
        dim = min(high, spanned) if self.dim is None else int(self.dim)
        if dim > spanned or dim < 1:
            side = min(rank, key=rank.get)
            raise ValueError(
                f"dim={dim}: the {side} support set spans {spanned} directions (numerical "
                f"rank; repeated items count once), and a principal direction beyond them is "
                f"an arbitrary null-space vector that differs by BLAS kernel; use dim <= "
                f"{spanned} or dim=None"
            )
        self.mean_image_, self.mean_text_ = mom.mean_x, mom.mean_y
        self.components_image_ = _pca_components(wx, Vx, dim)
        self.components_text_ = _pca_components(wy, Vy, dim)
        self.support_rank_image_, self.support_rank_text_ = rank["image"], rank["text"]
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
