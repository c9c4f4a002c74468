"""Retrieval captioning: sacrebleu BLEU against a hand computation and sacrebleu itself;
the ``coco`` scorer against pycocoevalcap's Bleu, Rouge, Cider and PTBTokenizer."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import sacrebleu
import scipy.sparse as sp

from imsearch_align.diagnostics import coco_caption
from imsearch_align.diagnostics.captioning import (
    SCORERS,
    check_scorer,
    nearest_other_caption,
    retrieval_captioning_bleu,
)
from imsearch_align.diagnostics.coco_caption import (
    COCO_METRICS,
    coco_bleu,
    coco_caption_scores,
    coco_cider_d,
    coco_rouge_l,
    ptb_tokenize,
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


# ----------------------------------------------------------------------------- scorer coco

# Captions and what pycocoevalcap's PTBTokenizer (Stanford CoreNLP 3.4.1, Java) and its
# punctuation removal make of them (written from the jar's output).
PTB_CASES = {
    "A man riding a wave on top of a surfboard.": "a man riding a wave on top of a surfboard",
    'Two dogs (one brown) play in the "park", don\'t they?': (
        "two dogs -lrb- one brown -rrb- play in the park do n't they"
    ),
    "The cat's toy is on the table... It can't be!": "the cat 's toy is on the table it ca n't be",
    "A black-and-white photo of 3.5 people -- wow; amazing: yes!": (
        "a black-and-white photo of 3.5 people wow amazing yes"
    ),
    "He said 'hello' to Mr. Smith in the U.S.": "he said hello to mr. smith in the u.s.",
    "A [red] {blue} bus & a train/tram at 5:30pm for $5,000.": (
        "a -lsb- red -rsb- -lcb- blue -rcb- bus & a train/tram at 5:30 pm for $ 5,000"
    ),
    "I'm gonna go, you're cannot wanna; we'll see": "i 'm gon na go you 're can not wan na we 'll see",
    "“Curly quotes” and the dog’s bone…": "curly quotes and the dog 's bone",
    "A man ... standing near a STOP sign!!": "a man standing near a stop sign !!",
    "It's 5 o'clock in the '90s, a.m. etc.": "it 's 5 o'clock in the '90s a.m. etc.",
    "kids' toys, rock'n'roll, 50% off, #tag": "kids toys rock 'n' roll 50 % off #tag",
    "!!!": "!!!",
    "...": "",
}


def test_ptb_tokenize_matches_pycocoevalcaps_tokeniser_on_known_output():
    for caption, want in PTB_CASES.items():
        assert ptb_tokenize(caption) == want, caption


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a Java runtime")
def test_ptb_tokenize_equals_the_stanford_jar():
    ptb = pytest.importorskip("pycocoevalcap.tokenizer.ptbtokenizer")
    caps = list(PTB_CASES)
    got = ptb.PTBTokenizer().tokenize({i: [{"caption": c}] for i, c in enumerate(caps)})
    assert [ptb_tokenize(c) for c in caps] == [got[i][0] for i in range(len(caps))]


def _random_corpus(seed: int, n: int, empty: bool = False):
    rng = np.random.default_rng(seed)
    words = "a dog cat man woman runs sits on the grass red ball with two near".split()

    def caption(lo: int) -> str:
        return " ".join(rng.choice(words, int(rng.integers(lo, 12))))

    hyps = [caption(0 if empty else 1) for _ in range(n)]
    refs = [[caption(1) for _ in range(int(rng.integers(1, 6)))] for _ in range(n)]
    return hyps, refs


@pytest.mark.parametrize(("seed", "n", "empty"), [(0, 1, False), (1, 7, True), (2, 40, False)])
def test_bleu_rouge_cider_equal_pycocoevalcap(seed, n, empty):
    pytest.importorskip("pycocoevalcap")
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    hyps, refs = _random_corpus(seed, n, empty)
    gts, res = dict(enumerate(refs)), {i: [h] for i, h in enumerate(hyps)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    assert coco_bleu(hyps, refs) == pytest.approx(bleu, abs=1e-12)
    assert coco_cider_d(hyps, refs) == pytest.approx(Cider().compute_score(gts, res)[0], abs=1e-9)
    assert coco_rouge_l(hyps, refs) == pytest.approx(Rouge().compute_score(gts, res)[0], abs=1e-12)


def test_coco_scores_of_raw_captions_without_java(monkeypatch):
    pytest.importorskip("pycocoevalcap")
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider

    monkeypatch.setattr(coco_caption.shutil, "which", lambda _: None)
    hyps = ["A dog runs on the grass.", "Two cats, sitting!", "A man (left) rides a bike."]
    refs = [
        ["A dog is running on grass.", "The dog runs."],
        ["two cats sitting on a sofa"],
        ["A man rides a bicycle.", "Someone on a bike", "a man riding a bike"],
    ]
    got = coco_caption_scores(hyps, refs)
    gts = {i: [ptb_tokenize(r) for r in rs] for i, rs in enumerate(refs)}
    res = {i: [ptb_tokenize(h)] for i, h in enumerate(hyps)}
    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)
    assert [got.scores[f"coco_bleu{n}"] for n in (1, 2, 3, 4)] == pytest.approx(bleu, abs=1e-12)
    assert got.scores["coco_cider_d"] == pytest.approx(Cider().compute_score(gts, res)[0], abs=1e-9)
    assert list(got.scores) == list(COCO_METRICS)
    assert np.isnan(got.scores["coco_meteor"]) and np.isnan(got.scores["coco_spice"])
    assert "needs a Java runtime" in got.unavailable["coco_meteor"]
    assert "pip install pycocoevalcap" in got.unavailable["coco_meteor"]
    assert "not implemented in this harness" in got.unavailable["coco_spice"]
    with pytest.raises(ValueError, match="image 1 has no reference captions"):
        coco_caption_scores(["a", "b"], [["a"], []])


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a Java runtime")
@pytest.mark.timeout(300)
def test_meteor_through_pycocoevalcaps_jar_with_java():
    pytest.importorskip("pycocoevalcap")
    got = coco_caption_scores(["a dog runs on the grass"], [["a dog is running on grass"]])
    assert "coco_meteor" not in got.unavailable
    assert 0.0 < got.scores["coco_meteor"] < 1.0


def test_task_refuses_an_unknown_scorer_before_any_work():
    from imsearch_align.experiment.config import ConfigError
    from imsearch_align.experiment.tasks.captioning import Captioning

    with pytest.raises(ConfigError, match=r"scorer must be one of 'sacrebleu', 'coco', got 'bleu'"):
        Captioning(scorer="bleu")
    with pytest.raises(ConfigError, match="apply to scorer 'sacrebleu'"):
        Captioning(scorer="coco", lowercase=True)
    assert Captioning().params() == {"tokenize": "13a", "lowercase": False, "scorer": "sacrebleu"}
    assert check_scorer("coco") == "coco" and set(SCORERS) == {"sacrebleu", "coco"}


def test_unknown_scorer_exits_2_before_any_work(tmp_path, capsys):
    from imsearch_align.cli import main

    args = ["eval", "--task", "captioning", "--task-param", "scorer=bleu", "--dataset", "shapes",
            "--method", "identity", "--store", "exact", "--cache-dir", "none", "--no-progress",
            "--output-dir", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 2
    assert "scorer must be one of 'sacrebleu', 'coco', got 'bleu'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.fixture
def tiny_tasks():
    """The tiny-tasks dataset and bow-test encoder of tests/experiment, registered here only."""
    import importlib
    import sys
    from pathlib import Path

    from imsearch_align.framework.registry import DATASETS, ENCODERS

    here = str(Path(__file__).parents[1] / "experiment")
    sys.path.insert(0, here)
    try:
        mod = importlib.import_module("tiny_tasks_plugin")
        if "bow-test" not in ENCODERS:
            importlib.reload(mod)
        yield
    finally:
        sys.path.remove(here)
        for reg, name in ((DATASETS, "tiny-tasks"), (ENCODERS, "bow-test")):
            if name in reg:
                reg.unregister(name)


def test_task_with_scorer_coco_records_scores_and_definitions(tiny_tasks, monkeypatch):
    from imsearch_align.experiment import ExperimentConfig, run_experiment

    monkeypatch.setattr(coco_caption.shutil, "which", lambda _: None)  # no METEOR: fast
    items = {"kind": "items", "n_items": 10}
    cfg = ExperimentConfig(dataset="tiny-tasks", dataset_params=items, image_encoder=None,
                           text_encoder="bow-test", text_encoder_params=items, method="identity",
                           store="exact", task="captioning", task_params={"scorer": "coco"},
                           cache_dir=None, k_values=(1,))  # fmt: skip
    r = run_experiment(cfg, progress=False)
    # Each image receives its twin's identical caption "a photo of itemj".
    assert r.metric("captioning/coco_bleu4") == pytest.approx(1.0, abs=1e-6)
    assert r.metric("captioning/coco_rouge_l") == pytest.approx(1.0)
    assert r.metric("captioning/coco_cider_d") > 0
    assert "captioning/bleu4" not in r.metrics
    d = r.task.details
    assert d["scorer"] == "coco" and d["scorer_definition"] == SCORERS["coco"]
    assert set(d["definitions"]) == set(COCO_METRICS)
    assert set(d["unavailable"]) == {"coco_meteor", "coco_spice"}
    assert np.isnan(r.metric("captioning/coco_spice"))


def test_task_default_scorer_is_sacrebleu_labelled_by_its_definition(tiny_tasks):
    from imsearch_align.experiment import ExperimentConfig, run_experiment

    items = {"kind": "items", "n_items": 10}
    cfg = ExperimentConfig(dataset="tiny-tasks", dataset_params=items, image_encoder=None,
                           text_encoder="bow-test", text_encoder_params=items, method="identity",
                           store="exact", task="captioning", cache_dir=None, k_values=(1,))  # fmt: skip
    r = run_experiment(cfg, progress=False)
    assert r.metric("captioning/bleu4") == pytest.approx(100.0)
    d = r.task.details
    assert d["scorer"] == "sacrebleu" and "not CLIP_benchmark's number" in d["scorer_definition"]
    assert list(d["definitions"]) == ["bleu4"] and "sacrebleu" in d["definitions"]["bleu4"]
