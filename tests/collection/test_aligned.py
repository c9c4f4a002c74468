"""Distractors aligned in blocks: the same rows as whole, one block in flight at most."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.collection import (
    ArraySource,
    CollectionBlocks,
    DistractorError,
    SpaceStats,
    aligned_blocks,
    cone_vectors,
    describe,
    exact_truth,
    side_by_side,
)
from imsearch_align.collection.sources import DistractorSource
from imsearch_align.methods.procrustes import Procrustes


class CountingSource(DistractorSource):
    """Generates rows on demand and counts the rows handed out and not yet released."""

    def __init__(self, n: int, dim: int) -> None:
        self._n, self._dim = n, dim
        self.in_flight = 0
        self.peak = 0
        self._checked = True

    @property
    def total_rows(self) -> int:
        return self._n

    @property
    def dim(self) -> int:
        return self._dim

    def _read(self, start: int, stop: int) -> np.ndarray:
        rng = np.random.default_rng(start)
        return rng.standard_normal((stop - start, self._dim)).astype(np.float32) + 1.0

    def blocks(self, block_rows=8192):
        for ids, block in super().blocks(block_rows):
            self.in_flight += len(block)
            self.peak = max(self.peak, self.in_flight)
            yield ids, block
            self.in_flight -= len(block)


@pytest.fixture(scope="module")
def method():
    X, Y = cone_vectors(400, 24, seed=1), cone_vectors(400, 24, seed=2)
    return Procrustes().fit(X, Y)


def test_aligned_blocks_equal_the_whole_transform(method):
    raw = cone_vectors(300, 24, seed=3)
    src = ArraySource(raw, modality="image")
    got = np.concatenate([b for _, b in aligned_blocks(src, method, "image", 64)])
    np.testing.assert_allclose(got, method.transform_images(raw), rtol=1e-6, atol=1e-7)
    with pytest.raises(DistractorError, match="image embeddings, but text distractors"):
        next(aligned_blocks(src, method, "text", 64))


def test_one_block_in_flight(method):
    src = CountingSource(20_000, 24)
    n = 0
    for _ids, block in aligned_blocks(src, method, "image", 500):
        n += len(block)
    assert n == 20_000 and src.peak == 500
    # The truth over the collection streams it the same way.
    src.peak = 0
    coll = CollectionBlocks(np.arange(10), cone_vectors(10, 24), src, method=method, block_rows=500)
    exact_truth(method.transform_texts(cone_vectors(5, 24)), np.arange(5), coll, 3)
    assert src.peak == 500


def test_peak_memory_grows_with_the_block_not_the_collection(method):
    def peak(n_rows: int) -> int:
        src = CountingSource(n_rows, 24)
        tracemalloc.start()
        for _ in aligned_blocks(src, method, "image", 256):
            pass
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    small, large = peak(2_000), peak(40_000)
    block_bytes = 256 * 24 * 8
    assert large < 12 * block_bytes  # a few float64 copies of one block
    assert large < 1.5 * small + block_bytes  # 20x the rows, about the same peak


def test_sparse_spaces_refused():
    class Sparse:
        def transform_images(self, X):
            return sp.csr_matrix(X)

    with pytest.raises(DistractorError, match="Sparse maps images to a sparse space"):
        next(aligned_blocks(ArraySource(cone_vectors(5, 4)), Sparse(), "image", 2))


def test_describe_streamed_equals_array():
    X = cone_vectors(3000, 16, seed=9)
    a, b = describe(X, sample=500, seed=1), describe(ArraySource(X), sample=500, seed=1)
    assert isinstance(a, SpaceStats) and a == b
    assert a.n == 3000 and a.sample == 500 and len(a.spectrum) == 10
    table = side_by_side({"test images": a, "distractors": b})
    assert "mean pairwise cosine" in table and table.splitlines()[1] == "|---|---|---|"
