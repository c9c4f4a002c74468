"""Matching accuracy as an expected value over the tied optimal assignments.

Brute force: every one of the ``n!`` assignments of small tie-heavy score
matrices is scored, and the mean accuracy over those of maximum total is the
reference (:func:`expected_accuracy`, dense and sparse, agree to 1e-12).
End to end: a collapsed space gives exactly ``1/n`` on the dense and the
candidate path, twin items ``1/2``; tie-free data keeps the solver's value.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imsearch_align.diagnostics import assignment
from imsearch_align.diagnostics.assignment import expected_accuracy, expected_accuracy_sparse
from imsearch_align.experiment import ExperimentConfig, run_experiment
from imsearch_align.experiment.tasks.matching import hungarian_accuracy
from imsearch_align.framework.registry import DATASETS, ENCODERS

HERE = str(Path(__file__).parent)


def brute_force(s: np.ndarray, tol: float = 1e-9) -> float:
    """Mean accuracy over the assignments of maximum total score (all n!)."""
    n = len(s)
    perms = np.array(list(itertools.permutations(range(n))))
    totals = s[np.arange(n), perms].sum(axis=1)
    best = perms[totals >= totals.max() - tol]
    return float(np.mean(best == np.arange(n)))


def _sparse_of(s: np.ndarray, tol: float = 0.0, seed: int = 0):
    """The sparse entry point on the complete graph of ``s`` (edges in a shuffled order)."""
    n = len(s)
    r, c = np.divmod(np.random.default_rng(seed).permutation(n * n), n)
    _, assigned = hungarian_accuracy(s, seed=seed)
    return expected_accuracy_sparse(n, r, c, s[r, c], assigned, tol, seed=seed)


def _cases():
    rng = np.random.default_rng(7)
    yield "collapsed", np.zeros((6, 6))
    yield "blocks", np.kron(np.eye(3), np.ones((2, 2)))
    yield (
        "uneven blocks",
        np.block([[np.ones((3, 3)), np.zeros((3, 3))], [np.zeros((3, 3)), np.eye(3)]]),
    )
    twins = np.eye(7)
    twins[:, 1] = twins[:, 0]  # captions 0 and 1 identical: rows 0, 1 tie
    yield "duplicate captions", twins
    dup = np.eye(6) * 0.5 + 0.25
    dup[3] = dup[4]  # images 3 and 4 identical
    yield "duplicate images", dup
    for t in range(40):
        n = int(rng.integers(2, 8))
        levels = int(rng.integers(2, 4))
        yield f"random levels {t}", rng.integers(0, levels, (n, n)) / levels
    for t in range(10):  # partial ties: sums of a row and a column price tie everywhere
        n = int(rng.integers(3, 8))
        s = rng.integers(0, 3, n)[:, None] + rng.integers(0, 3, n)[None, :] * 0.5
        s[rng.random((n, n)) < 0.3] -= 1.0
        yield f"partial {t}", s


@pytest.mark.parametrize("name,s", list(_cases()), ids=[c[0] for c in _cases()])
def test_expected_accuracy_equals_brute_force_over_optimal_assignments(name, s):
    want = brute_force(s)
    for seed in (0, 3):
        assert expected_accuracy(s, seed=seed).accuracy == pytest.approx(want, abs=1e-12)
        assert _sparse_of(s, seed=seed).accuracy == pytest.approx(want, abs=1e-12)


def test_exact_counting_beyond_the_closed_form():
    """A 2x2-block component that is not complete: counted, not 1/m."""
    s = np.eye(5)
    s[0, 1] = s[1, 2] = s[2, 0] = 1.0  # a 3-cycle of ties: 2 optimal assignments
    r = expected_accuracy(s)
    assert (
        r.accuracy == pytest.approx(brute_force(s), abs=1e-15) == pytest.approx(3 / 5 * 0.5 + 2 / 5)
    )
    assert r.tied_rows == 3 and r.components == 1 and r.exact and r.interval is None


def test_collapsed_space_is_one_over_n_exactly():
    n = 300
    for s in (np.zeros((n, n)), np.full((n, n), 0.3)):
        r = expected_accuracy(s, 1e-12)
        assert r.accuracy == 1 / n and r.tied_rows == n and r.exact
        assert _sparse_of(s, 1e-12).accuracy == 1 / n
    # near-ties within the tolerance are ties, beyond it they are not
    near = np.eye(3) * 1e-14 + 0.5
    assert expected_accuracy(near, 1e-12).accuracy == pytest.approx(1 / 3)
    assert expected_accuracy(near, 0.0).accuracy == 1.0


@pytest.mark.parametrize("n", [5, 60, 400])
def test_tie_free_data_keeps_the_solvers_value(n):
    from scipy.optimize import linear_sum_assignment

    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 16))
    s = x @ (x + rng.standard_normal((n, 16))).T
    rows, cols = linear_sum_assignment(s, maximize=True)
    want = float(np.mean(cols[np.argsort(rows)] == np.arange(n)))
    r = expected_accuracy(s, 1e-12)
    assert r.accuracy == want and r.tied_rows == 0 and r.exact  # bit for bit
    assert _sparse_of(s, 1e-12).accuracy == want


def test_large_irregular_component_is_estimated_with_an_interval(monkeypatch):
    monkeypatch.setattr(assignment, "EXACT_LIMIT", 4)
    monkeypatch.setattr(assignment, "SPARSE_STATES", 2)  # too many subsets: sampled
    s = np.zeros((6, 6))
    s[0, 5] = -1.0  # one forbidden pair: not complete, 6 rows > the limit
    r = expected_accuracy(s, replicates=50)
    assert not r.exact and r.estimated_rows == 6 and r.tied_rows == 6
    lo, hi = r.interval  # hard bounds: no matching gives fewer or more own columns
    assert lo <= r.accuracy <= hi and (lo, hi) == (0.0, 1.0)
    d = r.details()
    assert d["accuracy_exact"] is False and d["accuracy_interval"] == [lo, hi]


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module", autouse=True)
def plugin():
    """bow-test (from the task tests' plug-in) and a collapsed dataset, for this module only."""
    sys.path.insert(0, HERE)
    try:
        mod = importlib.import_module("tiny_tasks_plugin")
        if "bow-test" not in ENCODERS:
            importlib.reload(mod)
        DATASETS.register("grouped-items")(_grouped)
        yield
    finally:
        sys.path.remove(HERE)
        for reg, name in (
            (DATASETS, "tiny-tasks"),
            (ENCODERS, "bow-test"),
            (DATASETS, "grouped-items"),
        ):
            if name in reg:
                reg.unregister(name)


def _grouped(n: int = 300, size: int = 300):
    """``n`` train and ``n`` test images in groups of ``size`` identical
    images with identical captions (``size = n``: a collapsed space)."""
    from imsearch_align.datasets.base import PairedDataset
    from imsearch_align.datasets.vectors import PrecomputedEmbeddings

    m = 2 * n
    item = np.arange(m) % n // size
    split = np.where(np.arange(m) < n, "train", "test")
    images = pd.DataFrame({"image_id": np.arange(m), "split": split})
    texts = pd.DataFrame(
        {
            "text_id": np.arange(m),
            "image_id": np.arange(m),
            "caption": [f"item{j}" for j in item],
            "split": split,
        }
    )
    X = np.zeros((m, max(n // size, 4)), dtype=np.float32)
    X[np.arange(m), item] = 1.0
    emb = PrecomputedEmbeddings(np.arange(m), X, modality="image", name="grouped")
    return PairedDataset("grouped", images, texts), emb, None


def _run(dataset: str, dataset_params: dict, task_params: dict, n_words: int):
    cfg = ExperimentConfig(
        dataset=dataset,
        dataset_params=dataset_params,
        image_encoder=None,
        text_encoder="bow-test",
        text_encoder_params={"kind": "items", "n_items": n_words},
        method="identity",
        store="exact",
        task="matching",
        task_params=task_params,
        cache_dir=None,
        k_values=(1,),
    )
    return run_experiment(cfg, progress=False)


@pytest.mark.parametrize("task_params", [{}, {"dense_limit": 299, "candidates": 300}])
def test_collapsed_space_gives_one_over_n_on_both_paths(task_params):
    r = _run("grouped-items", {}, task_params, 4)
    assert r.status.ok
    assert r.metric("matching/accuracy") == 1 / 300
    assert r.metric("matching/top1_accuracy") == pytest.approx(1 / 300, abs=1e-15)
    d = r.task.details
    assert d["tied_rows"] == 300 and d["accuracy_exact"] is True
    assert d["tie_components"] == 1 and d.get("tie_rows_open", 0) == 0


@pytest.mark.parametrize("task_params", [{}, {"dense_limit": 29, "candidates": 1}])
def test_tie_groups_cut_by_the_candidate_lists_are_closed(task_params):
    """Groups of 3 identical items; with one candidate (two returned) per
    image and per caption, no list holds a whole group: the pairs the lists
    left out are scored, and each group is a complete 3x3 tie (1/3)."""
    r = _run("grouped-items", {"n": 30, "size": 3}, task_params, 10)
    assert r.metric("matching/accuracy") == pytest.approx(1 / 3, abs=1e-15)
    d = r.task.details
    assert d["tied_rows"] == 30 and d["tie_components"] == 10 and d["largest_tie_component"] == 3
    assert d.get("tie_rows_open", 0) == 0


def test_rows_left_open_past_the_budget_are_counted():
    """Past dense_limit**2 pairs to score, the candidate graph's ties alone
    are used and the rows whose ties may reach past it are counted."""
    r = _run("grouped-items", {"n": 30, "size": 3}, {"dense_limit": 4, "candidates": 1}, 10)
    d = r.task.details
    assert d["tie_rows_open"] == 30 and d["tied_rows"] == 30
    # each group: the 3x3 tie less the one pair no list returned (4 of 6 assignments)
    assert r.metric("matching/accuracy") == pytest.approx(1 / 6, abs=1e-15)


@pytest.mark.parametrize("task_params", [{}, {"dense_limit": 4, "candidates": 3}])
def test_twin_items_give_one_half_on_both_paths(task_params):
    """Twin images with identical captions: each pair is a 2x2 tie."""
    r = _run("tiny-tasks", {"kind": "items", "n_items": 20}, task_params, 20)
    assert r.metric("matching/accuracy") == 0.5
    d = r.task.details
    assert d["tied_rows"] == 20 and d["tie_components"] == 10 and d["largest_tie_component"] == 2


def _random_component(m: int, p: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A 0/1 tight graph holding the identity (a perfect matching) and each row's own column
    (a shuffled one, some rows without)."""
    rng = np.random.default_rng(seed)
    B = (rng.random((m, m)) < p) | np.eye(m, dtype=bool)
    target = rng.permutation(m)
    target[rng.random(m) < 0.2] = -1
    return B, target


def _brute_share(B: np.ndarray, target: np.ndarray) -> float:
    import itertools

    m, hits, total = len(B), 0, 0
    for perm in itertools.permutations(range(m)):
        if all(B[r, perm[r]] for r in range(m)):
            total += 1
            hits += sum(perm[r] == target[r] for r in range(m))
    return hits / total


@pytest.mark.parametrize("seed", range(6))
def test_reachable_subset_count_equals_every_subset_count_and_brute_force(seed):
    B, target = _random_component(7, 0.35, seed)
    want = _brute_share(B, target)
    assert assignment._exact_probabilities(B, target)[1] == pytest.approx(want, abs=1e-12)
    assert assignment._reachable_share(B, target, 10**6) == pytest.approx(want, abs=1e-12)
    lo, hi = assignment._hit_bounds(B, target)
    assert lo <= want <= hi


def test_a_22_row_component_is_counted_exactly_not_sampled(monkeypatch):
    """The issue's size: over EXACT_LIMIT rows, the seeded-order sampler was not uniform
    (0.308 against 0.297); the reachable-subset count equals the every-subset count."""
    B, target = _random_component(22, 0.12, 7)
    want = assignment._exact_probabilities(B, target)[1]  # 2**22 subsets: the oracle
    assert assignment._reachable_share(B, target, 10**6) == pytest.approx(want, rel=1e-12)
    s = np.where(B, 0.0, -1.0)  # tight edges score 0, the rest lose 1: B is the tight graph
    dense = expected_accuracy(s)  # its tied component (19 rows) counted over every subset
    monkeypatch.setattr(assignment, "EXACT_LIMIT", 4)
    r = expected_accuracy(s)  # the same component counted over reachable subsets
    assert r.exact and r.interval is None and r.largest == dense.largest > 4
    assert r.accuracy == pytest.approx(dense.accuracy, abs=1e-12)


def test_sampled_fallback_reports_hard_bounds_not_a_confidence_interval(monkeypatch):
    monkeypatch.setattr(assignment, "EXACT_LIMIT", 4)
    monkeypatch.setattr(assignment, "SPARSE_STATES", 2)
    B, target = _random_component(9, 0.4, 3)
    share = _brute_share(B, target)
    lo, hi = assignment._hit_bounds(B, target)
    assert lo <= share <= hi and lo < hi
    got, bound = assignment._component_share(B, target, 40, np.random.default_rng(0))
    assert bound == (lo, hi) and lo <= got <= hi
