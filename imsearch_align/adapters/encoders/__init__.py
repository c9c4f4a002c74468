"""Embedding providers, registered in :data:`imsearch_align.ENCODERS`.

| name | class | modality |
|---|---|---|
| ``sentence-transformers`` | :class:`SentenceTransformerEncoder` | text |
| ``hf-image`` | :class:`HFImageEncoder` (DINOv2, ViT; CLS/mean/pooler) | image |
| ``clip`` | :class:`CLIPEncoder` (``modality="image"`` or ``"text"``) | both |
| ``efficientnet-lite0`` | :class:`EfficientNetLite0Encoder` (offline ImageNet weights) | image |
| ``precomputed`` | :class:`PrecomputedEmbeddings` (vectors looked up by id) | either |

The four torch encoders share :class:`~imsearch_align.adapters.encoders._base.TorchEncoder`:
loading on first use, one place for device, fp16, batching, progress and
install hints, and an ``id`` (what is computed) plus a ``version`` (which
weights) known without loading anything. Importing this package is light:
torch and transformers load on first ``dim`` or ``encode``.

:class:`PrecomputedEmbeddings` (vectors held in memory) and
:class:`BadImageError` live in the data layer
(:mod:`imsearch_align.datasets.vectors`, :mod:`imsearch_align.datasets.errors`),
which returns and raises them without importing any encoder; they are
re-exported here.
"""

from __future__ import annotations

from imsearch_align.adapters.encoders._base import TorchEncoder
from imsearch_align.adapters.encoders._common import ModelNotFoundError
from imsearch_align.adapters.encoders.clip import CLIPEncoder
from imsearch_align.adapters.encoders.efficientnet import EfficientNetLite0Encoder
from imsearch_align.adapters.encoders.hf_image import HFImageEncoder
from imsearch_align.adapters.encoders.precomputed import PrecomputedEmbeddings
from imsearch_align.adapters.encoders.sentence_transformers import SentenceTransformerEncoder
from imsearch_align.datasets.errors import BadImageError

__all__ = [
    "BadImageError",
    "CLIPEncoder",
    "EfficientNetLite0Encoder",
    "HFImageEncoder",
    "ModelNotFoundError",
    "PrecomputedEmbeddings",
    "SentenceTransformerEncoder",
    "TorchEncoder",
]
