"""Synthetic distractors share the support's cone; they are seeded and block-size free."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.collection import MixtureModel, SyntheticSource, cone_vectors, describe
from imsearch_align.collection.synthetic import CHUNK_ROWS


@pytest.fixture(scope="module")
def support():
    X = cone_vectors(1500, 48, seed=7, clusters=12)
    assert 0.3 <= describe(X).mean_cosine <= 0.6  # a real encoder's cone
    return X


@pytest.fixture(scope="module")
def model(support):
    return MixtureModel.fit(support, n_components=12, rank=6, seed=0, encoder="enc")


def test_mean_pairwise_cosine_matches_the_support(support, model):
    src = SyntheticSource(model, 3000, seed=1)
    real, fake = describe(support, seed=2), describe(src, seed=2)
    assert abs(real.mean_cosine - fake.mean_cosine) < 0.05
    assert abs(real.spectrum[0] - fake.spectrum[0]) < 0.05
    assert abs(fake.mean_norm - 1.0) < 1e-5  # unit support, unit draws
    # Unlike a zero-mean mixture of orthogonal centres (cosine ~0).
    assert fake.mean_cosine > 0.2
    assert src.encoder == "enc" and src.record()["components"] == 12


def test_seeded_and_independent_of_block_size(model):
    n = CHUNK_ROWS + 300
    a = np.concatenate([b for _, b in SyntheticSource(model, n, seed=5).blocks(1000)])
    b = np.concatenate([b for _, b in SyntheticSource(model, n, seed=5).blocks(n)])
    c = np.concatenate([b for _, b in SyntheticSource(model, n, seed=6).blocks(n)])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    again = MixtureModel.fit(cone_vectors(1500, 48, seed=7, clusters=12), n_components=12, rank=6)
    assert again.fingerprint == model.fingerprint
