"""Ridge least-squares map from image space to text space (a baseline)."""

from __future__ import annotations

import numpy as np

from imsearch_align.framework.registry import METHODS
from imsearch_align.methods.base import AlignmentBase, l2_normalize, support_moments

__all__ = ["LinearMap"]


@METHODS.register("linear")
class LinearMap(AlignmentBase):
    """Ridge regression of text embeddings on image embeddings, then cosine.

    Fit (with intercept, as scikit-learn's ``Ridge``)::

        W = argmin ||Xc W - Yc||_F^2 + alpha ||W||_F^2 = (Xc'Xc + alpha I)^-1 Xc'Yc

    Similarity: the cosine between the predicted and the actual text embedding::

        sim(x, y) = cos(mu_y + W'(x - mu_x), y)

    Index form: ``normalize(mu_y + W'(x - mu_x))`` and ``normalize(y)``
    (``output_dim_ = d_text``).

    Args:
        alpha: ridge strength (absolute, in squared embedding units), ``>= 0``;
            ``alpha = 0`` is plain least squares and needs ``Xc'Xc`` invertible.

    Attributes:
        coef_: ``(d_image, d_text)`` map ``W``; mean_image_, mean_text_.
    """

    def __init__(self, alpha: float = 1.0) -> None:
        self.alpha = alpha

    def _validate_params(self, X: np.ndarray, Y: np.ndarray) -> None:
        a = self.alpha
        if isinstance(a, bool) or not isinstance(a, int | float | np.floating):
            raise TypeError(f"alpha must be a float >= 0, got {type(a).__name__}")
        if not (np.isfinite(a) and a >= 0):
            raise ValueError(f"alpha must be a finite float >= 0, got {a!r}")

    fit_float64 = False  # fitted from float64 moments, block by block

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        mom = support_moments(X, Y)
        self.mean_image_, self.mean_text_ = mom.mean_x, mom.mean_y
        G = mom.Kxx
        G[np.diag_indices_from(G)] += float(self.alpha)
        try:
            self.coef_ = np.linalg.solve(G, mom.Kxy)
        except np.linalg.LinAlgError as exc:
            raise ValueError(
                "image_emb: Xc'Xc + alpha I is singular (fewer support pairs than "
                f"dimensions or collinear features) with alpha={self.alpha}; pass alpha > 0"
            ) from exc

    def _output_dim(self) -> int:
        return int(self.coef_.shape[1])

    def _predict(self, X: np.ndarray) -> np.ndarray:
        return self.mean_text_ + (X - self.mean_image_) @ self.coef_

    def _transform_images(self, X: np.ndarray) -> np.ndarray:
        return l2_normalize(self._predict(X)).astype(np.float32)

    def _transform_texts(self, Y: np.ndarray) -> np.ndarray:
        return l2_normalize(Y).astype(np.float32)

    def _similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        P = self._predict(X)
        num = P @ Y.T
        den = np.outer(np.linalg.norm(P, axis=1), np.linalg.norm(Y, axis=1))
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)
