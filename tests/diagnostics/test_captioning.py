"""Retrieval captioning BLEU against a hand computation and sacrebleu itself."""

from __future__ import annotations

import numpy as np
import pytest
import sacrebleu
import scipy.sparse as sp

from imsearch_align.diagnostics.captioning import (
    nearest_other_caption,
    retrieval_captioning_bleu,
)

IMAGE = np.array([[1.0, 0.0, 0.0]])
POOL = np.array([[1.0, 0.0, 0.0], [0.8, 0.6, 0.0], [0.0, 0.0, 1.0]])
CAPTIONS = ["a b c d e g", "a b c d e f", "q r s t"]
CAP_IDS = np.array([0, 1, 2])


def test_hand_computed_bleu_excludes_own_caption():
    res = retrieval_captioning_bleu(
        IMAGE, POOL, CAPTIONS, [0], CAP_IDS, tokenize="none", smooth_method="none"
    )
    # Own caption 0 (score 1.0) is excluded; caption 1 wins. Against the
    # reference "a b c d e g": p1..p4 = 5/6, 4/5, 3/4, 2/3, BP = 1.
    assert res.chosen.tolist() == [1]
    assert res.bleu == pytest.approx(100 * (5 / 6 * 4 / 5 * 3 / 4 * 2 / 3) ** 0.25, abs=1e-9)
    assert res.precisions == pytest.approx((100 * 5 / 6, 80.0, 75.0, 100 * 2 / 3))
    assert res.brevity_penalty == 1.0 and res.tokenize == "none"
    assert "tok:none" in res.signature


def test_ties_go_to_the_smallest_pool_index_and_sparse_input_agrees():
    pool = np.array([[1.0, 0.0], [0.5, 0.5], [0.5, 0.5]])
    img = np.array([[1.0, 1.0]])
    assert nearest_other_caption(img, pool, [9], [0, 1, 2]).tolist() == [0]  # three-way tie
    assert nearest_other_caption(img, pool, [0], [0, 5, 6]).tolist() == [1]
    got = nearest_other_caption(sp.csr_matrix(img), sp.csr_matrix(pool), [0], [0, 5, 6])
    assert got.tolist() == [1]


def test_equals_sacrebleu_on_brute_force_choices():
    rng = np.random.default_rng(0)
    n_img, per, dim = 12, 3, 8
    words = "a dog cat man woman runs sits on the grass red ball with two".split()
    captions = [" ".join(rng.choice(words, rng.integers(4, 9))) for _ in range(n_img * per)]
    cap_ids = np.repeat(np.arange(n_img) * 10, per)
    img_vecs = rng.standard_normal((n_img, dim))
    cap_vecs = rng.standard_normal((n_img * per, dim))
    res = retrieval_captioning_bleu(img_vecs, cap_vecs, captions, np.arange(n_img) * 10, cap_ids)
    hyps, refs = [], []
    for i in range(n_img):
        allowed = [j for j in range(len(captions)) if cap_ids[j] != 10 * i]
        best = max(allowed, key=lambda j: (img_vecs[i] @ cap_vecs[j], -j))
        hyps.append(captions[best])
        refs.append([captions[j] for j in range(len(captions)) if cap_ids[j] == 10 * i])
    want = sacrebleu.corpus_bleu(hyps, [list(r) for r in zip(*refs)])
    assert res.bleu == pytest.approx(want.score, abs=1e-12)
    assert res.tokenize == "13a"


def test_variable_reference_counts():
    refs = [["a b c d e g", "a b c d"], ["q r s t"]]
    res = retrieval_captioning_bleu(
        np.vstack([IMAGE, [[0.0, 0.0, 1.0]]]), POOL, CAPTIONS, [0, 2], CAP_IDS, references=refs
    )
    want = sacrebleu.corpus_bleu(
        [CAPTIONS[1], CAPTIONS[1]], [["a b c d e g", "q r s t"], ["a b c d", None]]
    )
    assert res.bleu == pytest.approx(want.score, abs=1e-12)


def test_errors():
    with pytest.raises(ValueError, match="captions has 2 entries, caption_vecs 3 rows"):
        retrieval_captioning_bleu(IMAGE, POOL, CAPTIONS[:2], [0], CAP_IDS)
    with pytest.raises(ValueError, match="no caption of another image"):
        retrieval_captioning_bleu(IMAGE, POOL, CAPTIONS, [0], [0, 0, 0])
    with pytest.raises(ValueError, match="no reference captions"):
        retrieval_captioning_bleu(IMAGE, POOL, CAPTIONS, [7], CAP_IDS)
    with pytest.raises(ValueError, match="caption_vecs must have dimension 2, got 3"):
        nearest_other_caption(np.ones((1, 2)), POOL, [0], CAP_IDS)
