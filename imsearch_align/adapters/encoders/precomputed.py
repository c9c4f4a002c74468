"""The ``precomputed`` encoder: vectors held in memory, looked up by id.

The class lives in the data layer (:mod:`imsearch_align.datasets.vectors`),
which returns it from loaders without importing any encoder; this module is
where it registers as an encoder.
"""

from __future__ import annotations

from imsearch_align.datasets.vectors import PrecomputedEmbeddings
from imsearch_align.framework.registry import ENCODERS

__all__ = ["PrecomputedEmbeddings"]

ENCODERS.register("precomputed")(PrecomputedEmbeddings)
