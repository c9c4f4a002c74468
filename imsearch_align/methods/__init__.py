"""Alignment methods as indexable spaces (scikit-learn style estimators).

Each method maps images and texts into a space where its own similarity is an
inner product, so any store with metric IP can index it::

    from imsearch_align import METHODS
    m = METHODS.get("csa")(sim_dim=128).fit(support_images, support_texts)
    docs = m.transform_images(images)      # float32 (n, output_dim_) or CSR (ASIF)
    queries = m.transform_texts(texts)
    scores = queries @ docs.T              # == m.similarity(images, texts).T

Registered names: ``csa``, ``asif``, ``cka``, ``procrustes``, ``linear``, ``identity``.
"""

from __future__ import annotations

from imsearch_align.methods.asif import ASIF
from imsearch_align.methods.base import AlignmentBase, NotFittedError, l2_normalize
from imsearch_align.methods.cka import LocalCKA, hungarian_match
from imsearch_align.methods.csa import CSA
from imsearch_align.methods.identity import Identity
from imsearch_align.methods.linear import LinearMap
from imsearch_align.methods.procrustes import Procrustes

__all__ = [
    "ASIF",
    "CSA",
    "AlignmentBase",
    "Identity",
    "LinearMap",
    "LocalCKA",
    "NotFittedError",
    "Procrustes",
    "hungarian_match",
    "l2_normalize",
]
