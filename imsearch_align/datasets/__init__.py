"""Dataset loaders, each registered in :data:`imsearch_align.DATASETS`.

``flickr30k``, ``coco``, ``imagenet``, ``precomputed``, ``hf`` and ``shapes``
are defined here; ``synthetic`` (latent pairs) is imported by the registry
itself. Every loader returns a :class:`PairedDataset` (``precomputed`` and
``synthetic`` also return the providers holding the vectors: an
:class:`EmbeddedDataset`).

What a loader takes: :func:`describe` (``imsearch-align list datasets NAME``)
and ``docs/datasets.md``. How to record what it was given in a result:
:func:`describe_param_value`. What it left out: ``PairedDataset.skipped``.

Rooms, imported one way (each imports only those above it):
``errors`` (errors, warnings, skip reasons), ``splits`` (split names, the
seeded split), ``_digest`` (content digests), ``vectors``
(:class:`PrecomputedEmbeddings`, the id-lookup provider of vectors in memory);
``_tables`` and ``_arrays`` (the construction checks and ``from_arrays``
steps); ``base`` (:class:`PairedDataset`); ``_local`` (helpers of the file
loaders), ``_describe``, ``_support``; then the loaders. Nothing here imports
the adapters layer: the encoders import ``errors`` and ``vectors``.
"""

from __future__ import annotations

from imsearch_align.datasets import coco, flickr30k, hf, imagenet, precomputed, shapes
from imsearch_align.datasets._describe import (
    ParamDoc,
    describe,
    describe_markdown,
    describe_param_value,
)
from imsearch_align.datasets._support import load_support_dataset
from imsearch_align.datasets.base import EmbeddedDataset, PairedDataset
from imsearch_align.datasets.coco import load_coco
from imsearch_align.datasets.errors import (
    SKIP_REASONS,
    BadAnnotationError,
    BadImageError,
    HubUnreachableError,
    LayoutError,
    ZeroEmbeddingWarning,
)
from imsearch_align.datasets.flickr30k import load_flickr30k
from imsearch_align.datasets.hf import from_hf
from imsearch_align.datasets.imagenet import load_imagenet
from imsearch_align.datasets.precomputed import load_precomputed
from imsearch_align.datasets.shapes import generate_shapes, load_shapes
from imsearch_align.datasets.splits import SPLITS, SUPPORT_SPLIT, TEST_SPLIT, seeded_split
from imsearch_align.datasets.vectors import PrecomputedEmbeddings

__all__ = [
    "SKIP_REASONS",
    "SPLITS",
    "SUPPORT_SPLIT",
    "TEST_SPLIT",
    "BadAnnotationError",
    "BadImageError",
    "EmbeddedDataset",
    "HubUnreachableError",
    "LayoutError",
    "PairedDataset",
    "ParamDoc",
    "PrecomputedEmbeddings",
    "ZeroEmbeddingWarning",
    "coco",
    "describe",
    "describe_markdown",
    "describe_param_value",
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
    "load_support_dataset",
    "precomputed",
    "seeded_split",
    "shapes",
]
