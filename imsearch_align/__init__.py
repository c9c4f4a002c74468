"""imsearch_align: how well do aligned image-text spaces search, and how fast?

The public core API::

    from imsearch_align import Run, Qrels, evaluate
    res = evaluate(run, qrels, ["P@10", "nDCG@10", "Accuracy"])
    res.mean(); res.per_query
"""

from __future__ import annotations

from imsearch_align.framework.interfaces import (
    AlignmentMethod,
    BenchmarkDataset,
    EmbeddingProvider,
    SearchResult,
    VectorStoreAdapter,
)
from imsearch_align.framework.metrics import EvaluationResult, Qrels, Run, evaluate
from imsearch_align.framework.registry import DATASETS, ENCODERS, METHODS, STORES, Registry

__version__ = "0.1.0"

__all__ = [
    "DATASETS",
    "ENCODERS",
    "METHODS",
    "STORES",
    "AlignmentMethod",
    "BenchmarkDataset",
    "EmbeddingProvider",
    "EvaluationResult",
    "Qrels",
    "Registry",
    "Run",
    "SearchResult",
    "VectorStoreAdapter",
    "__version__",
    "evaluate",
]
