"""Modality gap (Liang et al., 2022) and alignment (Wang & Isola, 2020) of paired rows.

* gap: ``||mean(x) - mean(y)||_2`` over normalised rows;
* alignment: ``mean_i ||x_i - y_i||^alpha``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.diagnostics.geometry.normalization import _pair
from imsearch_align.framework.validation import is_sparse

__all__ = ["GapResult", "alignment", "modality_gap"]


@dataclass(frozen=True)
class GapResult:
    """Modality gap of one space (Liang et al., 2022).

    Attributes:
        gap: ``||mean(x) - mean(y)||_2`` over normalised rows.
        cos_centroids: cosine between the two centroids (nan if one is 0).
        image_centroid_norm: ``||mean(x)||`` (1 = all images identical, cone concentration).
        text_centroid_norm: ``||mean(y)||``.
    """

    gap: float
    cos_centroids: float
    image_centroid_norm: float
    text_centroid_norm: float


def modality_gap(image_emb: Any, text_emb: Any) -> GapResult:
    """Centroid distance between the two modalities on the unit sphere.

    Accepts dense arrays or scipy sparse matrices (rows normalised first).
    """
    x, y = _pair(image_emb, text_emb, allow_sparse=True)
    mx = np.asarray(x.mean(axis=0), dtype=np.float64).ravel()
    my = np.asarray(y.mean(axis=0), dtype=np.float64).ravel()
    nx, ny = float(np.linalg.norm(mx)), float(np.linalg.norm(my))
    cos = float(mx @ my / (nx * ny)) if nx > 0 and ny > 0 else float("nan")
    return GapResult(float(np.linalg.norm(mx - my)), cos, nx, ny)


def alignment(image_emb: Any, text_emb: Any, *, alpha: float = 2.0) -> float:
    """Wang & Isola's ``L_align = mean_i ||x_i - y_i||_2^alpha`` (in [0, 2^alpha]).

    The difference is taken directly, not as ``2 - 2 cos``, to keep precision
    for well-aligned pairs. Accepts dense or sparse rows.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    x, y = _pair(image_emb, text_emb, allow_sparse=True)
    if is_sparse(x) or is_sparse(y):
        import scipy.sparse as sp

        diff = sp.csr_matrix(x) - sp.csr_matrix(y)
        sq = np.asarray(diff.multiply(diff).sum(axis=1), dtype=np.float64).ravel()
    else:
        diff = x.astype(np.float64) - y.astype(np.float64)
        sq = np.einsum("ij,ij->i", diff, diff)
    return float(np.mean(sq ** (alpha / 2.0)))
