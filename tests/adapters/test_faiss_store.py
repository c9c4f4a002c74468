"""FaissStore: the conformance kit for flat, hnsw and ivf, plus faiss-specific behaviour."""

from __future__ import annotations

import pytest

from imsearch_align.testing.store_conformance import StoreConformance

faiss = pytest.importorskip("faiss")

from imsearch_align.adapters.faiss_store import FaissStore  # noqa: E402


class TestFaissFlatConformance(StoreConformance):
    exact = True
    supports_sparse = True

    @pytest.fixture
    def make_store(self):
        return lambda: FaissStore(index="flat")


class TestFaissHnswConformance(StoreConformance):
    exact = False
    supports_sparse = True
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self):
        return lambda: FaissStore(index="hnsw", M=16, efConstruction=64, efSearch=64)


class TestFaissIvfConformance(StoreConformance):
    exact = False
    supports_sparse = True
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self):
        return lambda: FaissStore(index="ivf", nlist=32, nprobe=8)
