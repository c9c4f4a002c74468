"""Geometry of one image-text embedding space: gap, separability, uniformity, entropy.

Every function works on **L2-normalised** rows (the unit sphere S^(d-1)).
Policy for unnormalised input: rows are normalised and a
:class:`NormalizationWarning` is issued (once per call and argument) when any
row norm differs from 1 by more than ``1e-3``; a row of norm 0 cannot be
normalised and raises ``ValueError``. Aligned spaces (CSA, local CKA) are
inner-product spaces whose vectors are not unit length, so refusing would make
the diagnostics unusable on them; the warning class lets a runner silence it
deliberately (``warnings.simplefilter("ignore", NormalizationWarning)``).

Computation dtype follows the input: float64 input is computed in float64,
anything else in float32 (the Gram matrix products); sums of exponentials,
logs and the k-NN distances are always accumulated in float64.

Definitions (n pairs ``x_i`` image, ``y_i`` text, dimension d):

* modality gap (Liang et al., 2022): ``||mean(x) - mean(y)||_2``.
* separability: **our definition** (the paper has no SVM): a linear
  soft-margin SVM (hinge loss, C = 1) separating images (0) from texts (1),
  trained and tested on a split by pair index, so a pair never straddles
  train and test; held-out accuracy, precision and recall (text positive).
* uniformity (Wang & Isola, 2020): ``log mean_{i<j} exp(-t ||u_i - u_j||^2)``;
  alignment: ``mean_i ||x_i - y_i||^alpha``.
* spherical k-NN entropy (Kozachenko-Leonenko on the sphere; Li, Mnatsakanov
  & Andrew, Entropy 13:650, 2011): ``psi(N) - psi(k) + mean_i log A_d(theta_i)``
  in nats, ``theta_i`` the geodesic angle to the k-th neighbour.

Rooms, one per family of diagnostic: :mod:`.normalization` (the input
policy, :func:`unit_rows`), :mod:`.gap` (gap, alignment),
:mod:`.separability`, :mod:`.uniform` (uniformity), :mod:`.entropy` (with
the sphere areas of :mod:`.cap_area`), the shared Gram-chunk engine
:mod:`.scan`, and :mod:`.assemble`, whose :func:`diagnose` computes the
whole set for one space.
"""

from __future__ import annotations

from imsearch_align.diagnostics.geometry.assemble import diagnose
from imsearch_align.diagnostics.geometry.cap_area import log_cap_area, log_sphere_area
from imsearch_align.diagnostics.geometry.entropy import EntropyResult, spherical_knn_entropy
from imsearch_align.diagnostics.geometry.gap import GapResult, alignment, modality_gap
from imsearch_align.diagnostics.geometry.normalization import NormalizationWarning, unit_rows
from imsearch_align.diagnostics.geometry.separability import (
    SeparabilityResult,
    linear_separability,
    modality_separability,
)
from imsearch_align.diagnostics.geometry.uniform import uniformity

__all__ = [
    "EntropyResult",
    "GapResult",
    "NormalizationWarning",
    "SeparabilityResult",
    "alignment",
    "diagnose",
    "linear_separability",
    "log_cap_area",
    "log_sphere_area",
    "modality_gap",
    "modality_separability",
    "spherical_knn_entropy",
    "uniformity",
    "unit_rows",
]
