"""End to end on synthetic pairs: aligned spaces retrieve far above chance."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align import METHODS
from imsearch_align.datasets.synthetic import make_synthetic_pairs

N_TEST = 500
CHANCE = 1 / N_TEST


def t2i_recall_at_1(method, support, test) -> float:
    """Text-to-image R@1 through the indexable space (argmax: ties -> lower image id)."""
    method.fit(*support.paired())
    docs = method.transform_images(test.image_emb)
    queries = method.transform_texts(test.text_emb)
    scores = queries @ docs.T
    scores = scores.toarray() if sp.issparse(scores) else scores
    return float(np.mean(np.argmax(scores, axis=1) == test.text_image))


def split(n_support: int):
    data = make_synthetic_pairs(n_support + N_TEST, seed=1)
    return data.split(n_support, n_test=N_TEST, seed=0)


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("csa", {"sim_dim": 16}),
        ("asif", {"non_zeros": 100, "progress": False}),
        ("cka", {"base_size": 500}),
        ("cka", {"kernel": "rbf", "base_size": 500}),
        ("procrustes", {}),
        ("linear", {}),
    ],
)
def test_every_aligning_method_is_far_above_chance_at_2000_pairs(name, kwargs):
    support, test = split(2000)
    r1 = t2i_recall_at_1(METHODS.get(name)(**kwargs), support, test)
    assert r1 > 50 * CHANCE, f"{name} R@1 = {r1:.3f}, chance = {CHANCE:.3f}"


def test_unaligned_identity_is_at_chance_on_unrelated_spaces():
    # Same dimension but unrelated maps: no alignment gives about chance (a control
    # that shows the synthetic task is not trivially solvable).
    data = make_synthetic_pairs(N_TEST + 10, d_image=48, d_text=48, seed=1)
    support, test = data.split(10, n_test=N_TEST, seed=0)
    assert t2i_recall_at_1(METHODS.get("identity")(), support, test) < 10 * CHANCE


def test_csa_improves_with_more_support_pairs():
    small = t2i_recall_at_1(METHODS.get("csa")(sim_dim=16), *split(200))
    large = t2i_recall_at_1(METHODS.get("csa")(sim_dim=16), *split(5000))
    assert large > small + 0.2, (small, large)
