"""Dataset loaders, each registered in :data:`imsearch_align.DATASETS`.

``flickr30k``, ``coco``, ``imagenet``, ``precomputed``, ``hf`` and ``shapes``
are defined here; ``synthetic`` (latent pairs) is imported by the registry
itself. Every loader returns a :class:`PairedDataset` (``precomputed`` also
returns the providers holding the vectors: an :class:`EmbeddedDataset`).
"""

from __future__ import annotations

from imsearch_align.datasets import coco, flickr30k, hf, imagenet, precomputed, shapes
from imsearch_align.datasets._local import HubUnreachableError, LayoutError
from imsearch_align.datasets.base import (
    SPLITS,
    SUPPORT_SPLIT,
    TEST_SPLIT,
    EmbeddedDataset,
    PairedDataset,
    seeded_split,
)
from imsearch_align.datasets.coco import load_coco
from imsearch_align.datasets.flickr30k import load_flickr30k
from imsearch_align.datasets.hf import from_hf
from imsearch_align.datasets.imagenet import load_imagenet
from imsearch_align.datasets.precomputed import load_precomputed
from imsearch_align.datasets.shapes import generate_shapes, load_shapes

__all__ = [
    "SPLITS",
    "SUPPORT_SPLIT",
    "TEST_SPLIT",
    "EmbeddedDataset",
    "HubUnreachableError",
    "LayoutError",
    "PairedDataset",
    "coco",
    "flickr30k",
    "from_hf",
    "generate_shapes",
    "hf",
    "imagenet",
    "load_coco",
    "load_flickr30k",
    "load_imagenet",
    "load_precomputed",
    "load_shapes",
    "precomputed",
    "seeded_split",
    "shapes",
]
