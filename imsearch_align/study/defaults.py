"""The study's defaults: distractor counts, each store mode's index grid (declared by the
mode, full and quick) and the default stores."""

from __future__ import annotations

import importlib.util

from imsearch_align.collection.store_modes import STORES

__all__ = [
    "DIRECTIONS",
    "FULL_SIZES",
    "QUICK_SIZES",
    "default_index",
    "default_stores",
]

#: Query directions: text searching images, images searching text.
DIRECTIONS = ("t2i", "i2t")
#: Distractor counts of a full study and of ``quick``.
FULL_SIZES = (0, 100_000, 1_000_000)
QUICK_SIZES = (0, 20_000)


def default_index(store: str, quick: bool) -> tuple[str, ...]:
    """Store mode ``store``'s default index settings (its ``default_index``, or
    ``quick_index`` in a quick study: :mod:`~imsearch_align.collection.store_modes`)."""
    return STORES[store].grid(quick)


def default_stores(quick: bool) -> tuple[str, ...]:
    """FAISS; with ``quick`` also Milvus Lite when ``milvus-lite`` is installed."""
    lite = quick and importlib.util.find_spec("milvus_lite") is not None
    return ("faiss", "milvus-lite") if lite else ("faiss",)
