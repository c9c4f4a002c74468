"""Shared data of the concurrency tests: a small built ExactStore collection and its queries."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.testing.store_data import clustered_vectors

N, DIM, NQ, K = 4000, 32, 120, 10


@pytest.fixture(scope="module")
def built() -> Iterator[tuple[ExactStore, np.ndarray, np.ndarray]]:
    """``(store, queries, query ids)``: collection ``docs`` of N clustered vectors."""
    X, Q = clustered_vectors(N, DIM, n_queries=NQ, seed=3)
    store = ExactStore()
    store.create_collection("docs", DIM)
    store.insert("docs", X, np.arange(N, dtype=np.int64) * 7)
    yield store, Q, np.arange(NQ, dtype=np.int64) + 1000
    store.close()
