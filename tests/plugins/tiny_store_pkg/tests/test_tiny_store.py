"""The plug-in's own tests: imsearch_align's conformance kit, run from outside the package."""

from __future__ import annotations

import pytest
from tiny_store_pkg import TinyStore

from imsearch_align.testing.store_conformance import StoreConformance


class TestTinyStoreConformance(StoreConformance):
    exact = True  # brute force: top-k must equal the true top-k (tie-tolerant)
    supports_sparse = False  # must equal TinyStore.supports_sparse
    persistent = False  # data live in memory only

    @pytest.fixture
    def make_store(self):
        return lambda: TinyStore(block=7)  # a small block exercises the batching


def test_bad_block():
    with pytest.raises(ValueError, match="block must be an integer >= 1, got 0"):
        TinyStore(block=0)
