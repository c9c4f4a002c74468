"""Embedding-space diagnostics and the remaining tasks.

* :mod:`.geometry`: modality gap, SVM separability, uniformity / alignment,
  spherical k-NN entropy, log cap area, and :func:`diagnose` for one space.
* :mod:`.captioning`: retrieval captioning scored with sacrebleu BLEU-4.
* :mod:`.multilabel`: CLIP_benchmark's multi-label mAP.
* :mod:`.linear_probe`: logistic-regression probe on frozen image embeddings.
* :mod:`.perturbations`: seeded query perturbations (registry ``PERTURBATIONS``).

Importing this package imports numpy/scipy only; sklearn, sacrebleu and PIL
load inside the functions that need them.
"""

from __future__ import annotations

from imsearch_align.diagnostics.captioning import CaptioningResult, retrieval_captioning_bleu
from imsearch_align.diagnostics.geometry import (
    EntropyResult,
    GapResult,
    NormalizationWarning,
    SeparabilityResult,
    alignment,
    diagnose,
    linear_separability,
    log_cap_area,
    log_sphere_area,
    modality_gap,
    modality_separability,
    spherical_knn_entropy,
    uniformity,
)
from imsearch_align.diagnostics.linear_probe import LinearProbeResult, linear_probe
from imsearch_align.diagnostics.multilabel import MultiLabelResult, multilabel_map
from imsearch_align.diagnostics.perturbations import PerturbedItems, get_perturbation, perturb_item

__all__ = [
    "CaptioningResult",
    "EntropyResult",
    "GapResult",
    "LinearProbeResult",
    "MultiLabelResult",
    "NormalizationWarning",
    "PerturbedItems",
    "SeparabilityResult",
    "alignment",
    "diagnose",
    "get_perturbation",
    "linear_probe",
    "linear_separability",
    "log_cap_area",
    "log_sphere_area",
    "modality_gap",
    "modality_separability",
    "multilabel_map",
    "perturb_item",
    "retrieval_captioning_bleu",
    "spherical_knn_entropy",
    "uniformity",
]
