"""The study's defaults: distractor counts, each store mode's index grid (full and quick),
the default stores, and the data and encoders a study uses when the spec names none."""

from __future__ import annotations

import importlib.util

__all__ = [
    "DEFAULT_INDEX",
    "DIRECTIONS",
    "FULL_SIZES",
    "QUICK_INDEX",
    "QUICK_SIZES",
    "default_index",
    "default_stores",
]

#: Query directions: text searching images, images searching text.
DIRECTIONS = ("t2i", "i2t")
#: Distractor counts of a full study and of ``quick``.
FULL_SIZES = (0, 100_000, 1_000_000)
QUICK_SIZES = (0, 20_000)
#: Each store mode's index grid in a full study (``max_size``: left out above it).
DEFAULT_INDEX: dict[str, tuple[str, ...]] = {
    "faiss": (
        "faiss:flat:max_size=100000",
        "faiss:ivf_flat:nprobe=1,4,16,64",
        "faiss:hnsw:M=16,efConstruction=100,efSearch=16,32,64,128,max_size=100000",
    ),
    "milvus": (
        "milvus:FLAT:max_size=100000",
        "milvus:IVF_FLAT:nprobe=1,4,16,64",
        "milvus:HNSW:M=16,efConstruction=100,ef=16,32,64,128,max_size=100000",
    ),
    "milvus-lite": ("milvus-lite:FLAT", "milvus-lite:IVF_FLAT:nprobe=8"),
    "exact": ("exact:flat",),
    "qdrant-local": ("qdrant-local:flat",),
    "lancedb": ("lancedb:flat",),
}
#: The smaller grids of ``quick`` (a store not named here takes its full grid).
QUICK_INDEX: dict[str, tuple[str, ...]] = {
    "faiss": (
        "faiss:flat",
        "faiss:ivf_flat:nprobe=1,8",
        "faiss:hnsw:M=16,efConstruction=64,efSearch=16,64",
    ),
    "milvus": ("milvus:FLAT", "milvus:IVF_FLAT:nprobe=8"),
    "milvus-lite": ("milvus-lite:FLAT",),
}


def default_index(store: str, quick: bool) -> tuple[str, ...]:
    """Store mode ``store``'s default index settings."""
    return (QUICK_INDEX if quick else {}).get(store, DEFAULT_INDEX[store])


def default_stores(quick: bool) -> tuple[str, ...]:
    """FAISS; with ``quick`` also Milvus Lite when ``milvus-lite`` is installed."""
    lite = quick and importlib.util.find_spec("milvus_lite") is not None
    return ("faiss", "milvus-lite") if lite else ("faiss",)
