"""The OOD cost of cross-modal queries against control queries (issue 38): the curve
arithmetic by hand, the effort parameters the stores name, the control rows, and the
cost measured on FAISS IVF-Flat over encoder-shaped data with a planted modality gap."""

from __future__ import annotations

import json
import math
from itertools import pairwise

import numpy as np
import pytest

from imsearch_align.collection.cone import cone_vectors
from imsearch_align.collection.ood import (
    EFFORT_PARAMS,
    control_rows,
    cost_at,
    effort_key,
    ood_cost,
    rank_agreement,
)
from imsearch_align.collection.ood_predict import ivf_list_share, nn_similarity_ratio

faiss = pytest.importorskip("faiss")

NPROBE = [1, 2, 4, 8, 16, 32]
GAPS = (0.25, 0.5, 0.75)


def _geometric(e_lo: float, e_hi: float, r_lo: float, r_hi: float, t: float) -> float:
    """The effort at recall ``t`` on the segment, interpolated linearly in log effort."""
    return e_lo * (e_hi / e_lo) ** ((t - r_lo) / (r_hi - r_lo))


# ---- the curve arithmetic ------------------------------------------------------------


def test_interpolation_matches_the_formula_by_hand():
    efforts = [1, 2, 4, 8, 16]
    cross = [0.10, 0.50, 0.60, 0.90, 0.95]
    control = [0.30, 0.55, 0.80, 0.92, 0.97]
    got = ood_cost(efforts, cross, control)
    want_needed = [
        _geometric(1, 2, 0.10, 0.50, 0.30),
        _geometric(2, 4, 0.50, 0.60, 0.55),
        _geometric(4, 8, 0.60, 0.90, 0.80),
        _geometric(8, 16, 0.90, 0.95, 0.92),
        None,  # 0.97 is above the cross curve's best (0.95)
    ]
    assert got["efforts"] == efforts
    for g, w in zip(got["needed"], want_needed):
        assert (g is None) == (w is None)
        if w is not None:
            assert g == pytest.approx(w, rel=1e-12)
    assert got["control_needed"] == pytest.approx(efforts)  # the control curve rises
    ratios = [w / e for w, e in zip(want_needed[:4], efforts)]
    assert got["ratio"][:4] == pytest.approx(ratios, rel=1e-12)
    assert got["ratio"][4] is None
    assert got["beyond_sweep"] == [False, False, False, False, True]
    assert got["ratio_bound"][4] == pytest.approx(16 / 16)
    assert got["gap"] == pytest.approx([0.2, 0.05, 0.2, 0.02, 0.02])
    assert got["gap_at"]["8"] == pytest.approx(0.02)
    assert got["median_ratio"] == pytest.approx(float(np.median(ratios)))
    assert got["n_beyond"] == 1


def test_input_order_does_not_matter():
    efforts, cross, control = (
        [1, 2, 4, 8, 16],
        [0.1, 0.5, 0.6, 0.9, 0.95],
        [0.3, 0.55, 0.8, 0.92, 0.97],
    )
    perm = [3, 0, 4, 2, 1]
    shuffled = ood_cost([efforts[i] for i in perm], [cross[i] for i in perm],
                        [control[i] for i in perm])  # fmt: skip
    assert shuffled == ood_cost(efforts, cross, control)


def test_a_noisy_cross_curve_is_read_through_its_running_maximum():
    # cross dips at 4 (0.65 < 0.70): the target 0.75 lies between 4 and 8 on the running
    # max (0.70 -> 0.80), not on the raw dip (0.65 -> 0.80)
    got = ood_cost([1, 2, 4, 8], [0.5, 0.7, 0.65, 0.8], [0.5, 0.66, 0.75, 0.8])
    assert got["needed"][2] == pytest.approx(_geometric(4, 8, 0.70, 0.80, 0.75))
    assert got["needed"][2] != pytest.approx(_geometric(4, 8, 0.65, 0.80, 0.75))
    assert got["needed"][1] == pytest.approx(_geometric(1, 2, 0.5, 0.7, 0.66))
    assert got["gap"][2] == pytest.approx(0.10)  # the gap is at equal setting, raw


def test_needed_effort_is_monotone_and_lands_on_the_curve():
    """Property: on random noisy curves, the needed effort never falls as the target
    rises, stays in the sweep, and the cross curve's running max interpolated there
    is the target."""
    rng = np.random.default_rng(0)
    efforts = np.array([1, 2, 4, 8, 16, 32, 64])
    for _ in range(300):
        cross = np.clip(np.sort(rng.uniform(0, 1, 7)) + rng.normal(0, 0.05, 7), 0, 1)
        control = np.sort(rng.uniform(0, 1, 7))
        got = ood_cost(efforts, cross, control)
        best = np.maximum.accumulate(cross)
        pairs = sorted((t, n) for t, n in zip(control, got["needed"]) if n is not None)
        for (_, a), (_, b) in pairwise(pairs):
            assert b >= a - 1e-12
        for t, n, below in zip(control, got["needed"], got["below_sweep"]):
            if n is None:
                assert t > best[-1]
                continue
            assert 1 <= n <= 64
            if not below:
                assert np.interp(math.log2(n), np.log2(efforts), best) == pytest.approx(t)


def test_identical_curves_cost_nothing_even_on_a_plateau():
    curve = [0.6, 0.9, 1.0, 1.0, 1.0, 1.0]
    got = ood_cost(NPROBE, curve, curve)
    assert got["ratio"] == pytest.approx([1.0] * 6)
    assert got["control_needed"] == pytest.approx([1, 2, 4, 4, 4, 4])  # the plateau's start
    assert got["gap"] == [0.0] * 6 and got["median_ratio"] == 1.0
    assert got["below_sweep"] == [True] + [False] * 5  # nothing below the first setting


def test_a_cross_curve_better_from_the_start_is_an_upper_bound():
    got = ood_cost([1, 2, 4], [0.8, 0.9, 0.95], [0.5, 0.7, 0.9])
    assert got["below_sweep"] == [True, True, False]
    assert got["ratio"][:2] == pytest.approx([1.0, 0.5])  # at most min effort / control's
    assert got["ratio_bound"][:2] == pytest.approx([1.0, 0.5])
    assert got["ratio"][2] == pytest.approx(2.0 / 4.0)  # reached at 2 exactly
    assert got["gap"] == pytest.approx([-0.3, -0.2, -0.05])


def test_beyond_the_sweep_everywhere_has_no_median_and_is_json():
    got = ood_cost([16, 64], [0.1, 0.2], [0.5, 0.9])
    assert got["ratio"] == [None, None] and got["median_ratio"] is None
    assert got["ratio_bound"] == pytest.approx([64 / 16, 64 / 64])
    back = json.loads(json.dumps(got, allow_nan=False))
    assert back == got


def test_cost_at_reads_a_named_effort_and_refuses_an_unswept_one():
    got = json.loads(json.dumps(ood_cost([16, 32, 64, 128], [0.5, 0.7, 0.8, 0.9],
                                         [0.7, 0.8, 0.9, 0.95])))  # fmt: skip
    ratio, gap = cost_at(got, 64)
    assert ratio == pytest.approx(_geometric(64, 128, 0.8, 0.9, 0.9) / 64)
    assert gap == pytest.approx(0.1)
    assert cost_at(got, 128) == (None, pytest.approx(0.05))
    with pytest.raises(KeyError, match=r"effort 8 was not swept; swept: \[16, 32, 64, 128\]"):
        cost_at(got, 8)


@pytest.mark.parametrize(
    ("efforts", "cross", "control", "match"),
    [
        ([], [], [], "non-empty"),
        ([1, 2, 2], [0.1, 0.2, 0.3], [0.1, 0.2, 0.3], "distinct"),
        ([0, 2], [0.1, 0.2], [0.1, 0.2], "positive"),
        ([1, 2], [0.1, 0.2, 0.3], [0.1, 0.2], "recall_cross has shape"),
        ([1, 2], [0.1, 1.2], [0.1, 0.2], r"recall_cross must be recalls in \[0, 1\]"),
        ([1, 2], [0.1, 0.2], [0.1, float("nan")], "recall_control must be"),
    ],
)
def test_bad_curves_are_refused(efforts, cross, control, match):
    with pytest.raises(ValueError, match=match):
        ood_cost(efforts, cross, control)


# ---- the effort parameter ------------------------------------------------------------


def test_every_search_parameter_the_stores_declare_is_an_effort():
    from imsearch_align.adapters.faiss_index import SEARCH_PARAMS
    from imsearch_align.adapters.milvus.config import INDEX_TYPES

    names = {p for ps in SEARCH_PARAMS.values() for p in ps}
    names |= {p for _, search in INDEX_TYPES.values() for p in search}
    assert names and names <= set(EFFORT_PARAMS)
    for name in names:
        assert effort_key({name: 8}) == (name, 8)


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({"nprobe": 16}, ("nprobe", 16)),
        ({"nlist": 128, "nprobe": np.int64(4)}, ("nprobe", 4)),
        ({"efSearch": 64}, ("efSearch", 64)),
        ({"ef": 32, "M": 16, "efConstruction": 100}, ("ef", 32)),
        ({"hnsw_ef": 128}, ("hnsw_ef", 128)),
        ({}, None),
        ({"nlist": 128}, None),
    ],
)
def test_effort_key_finds_the_effort(params, want):
    assert effort_key(params) == want


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"nprobe": 8, "ef": 64}, "one effort parameter expected"),
        ({"nprobe": True}, "positive integer"),
        ({"ef": 0}, "positive integer"),
        ({"efSearch": 6.5}, "positive integer"),
    ],
)
def test_effort_key_refuses_ambiguous_or_bad_values(params, match):
    with pytest.raises(ValueError, match=match):
        effort_key(params)


# ---- control rows --------------------------------------------------------------------


def test_control_rows_never_take_an_excluded_position():
    """Property over many seeds and exclusion sets: distinct, ascending, in range,
    outside ``exclude``, and the same for the same seed."""
    for seed in range(400):
        rng = np.random.default_rng(seed)
        n_available = int(rng.integers(1, 300))
        exclude = rng.integers(0, n_available, int(rng.integers(0, 2 * n_available)))
        free = n_available - len(np.unique(exclude))
        n = int(rng.integers(0, free + 1))
        got = control_rows(n_available, exclude, n, seed)
        assert got.dtype == np.int64 and len(got) == n
        assert np.all(np.diff(got) > 0)
        assert got.size == 0 or (got.min() >= 0 and got.max() < n_available)
        assert not np.isin(got, exclude).any()
        assert np.array_equal(got, control_rows(n_available, exclude, n, seed))


def test_control_rows_take_every_free_row_when_asked_and_vary_with_the_seed():
    exclude = np.array([0, 3, 3, 7])
    assert control_rows(10, exclude, 7, 1).tolist() == [1, 2, 4, 5, 6, 8, 9]
    draws = {tuple(control_rows(1000, np.arange(500), 20, s)) for s in range(5)}
    assert len(draws) == 5


def test_control_rows_name_the_shortfall():
    with pytest.raises(ValueError, match=r"10 control rows asked, only 7 available "
                       r"\(10 rows less 3 excluded\): short by 3"):  # fmt: skip
        control_rows(10, np.array([0, 3, 3, 7]), 10, 0)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((10, np.array([10]), 1, 0), r"excluded position 10 is outside 0..9"),
        ((10, np.array([-1]), 1, 0), "excluded position -1"),
        ((10, np.array([0.5]), 1, 0), "integer positions"),
        ((10, np.array([], dtype=np.int64), -1, 0), "n must be an integer >= 0"),
    ],
)
def test_control_rows_refuse_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        control_rows(*args)


# ---- measured on FAISS IVF-Flat: encoder-shaped data, a planted modality gap -----------


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _recall_curve(index, docs: np.ndarray, queries: np.ndarray) -> list[float]:
    """Mean recall@10 of ``index`` at each nprobe, against numpy's exact top-10."""
    scores = queries.astype(np.float64) @ docs.T.astype(np.float64)
    truth = np.argpartition(-scores, 9, axis=1)[:, :10]
    out = []
    for p in NPROBE:
        index.nprobe = p
        _, got = index.search(queries, 10)
        hits = (got[:, :, None] == truth[:, None, :]).any(axis=2).sum(axis=1)
        out.append(float(hits.mean() / 10))
    return out


@pytest.fixture(scope="module")
def gap_study() -> dict:
    """20k cone-shaped documents (mean cosine ~0.47, 50 clusters, 256 dims) in an
    IVF-Flat index of 128 lists; two held-out query sets of the same clusters (the
    "same" queries and the controls) and the "same" ones moved by ``g`` along a fixed
    direction orthogonal to the cone's axis, renormalised."""
    n_docs, nq, dim = 20_000, 1000, 256
    x = cone_vectors(n_docs + 2 * nq, dim, seed=1, clusters=50, cone=2.5, spread=2.5)
    docs, same, controls = x[:n_docs], x[n_docs : n_docs + nq], x[n_docs + nq :]
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFFlat(quantizer, dim, 128, faiss.METRIC_INNER_PRODUCT)
    index.train(docs)
    index.add(docs)
    axis = docs.mean(axis=0) / np.linalg.norm(docs.mean(axis=0))
    d = np.random.default_rng(5).standard_normal(dim)
    d -= (d @ axis) * axis
    d /= np.linalg.norm(d)
    cross = {0.0: same, **{g: _unit(same + g * d) for g in GAPS}}
    control_curve = _recall_curve(index, docs, controls)
    return {
        "docs": docs,
        "controls": controls,
        "cross": cross,
        "centroids": quantizer.reconstruct_n(0, 128),
        "cost": {
            g: ood_cost(NPROBE, _recall_curve(index, docs, q), control_curve)
            for g, q in cross.items()
        },
    }


def test_in_distribution_queries_cost_nothing_within_noise(gap_study):
    cost = gap_study["cost"][0.0]
    finite = [r for r in cost["ratio"] if r is not None]
    assert len(finite) >= 4
    assert all(0.7 <= r <= 1.4 for r in finite), cost["ratio"]
    assert 0.85 <= cost["median_ratio"] <= 1.2
    assert max(abs(g) for g in cost["gap"]) < 0.03, cost["gap"]


def test_a_planted_modality_gap_costs_effort_and_grows_with_the_gap(gap_study):
    costs = gap_study["cost"]
    medians = [costs[g]["median_ratio"] for g in (0.0, *GAPS)]
    gaps8 = [costs[g]["gap_at"]["8"] for g in (0.0, *GAPS)]
    assert medians[1] > 1.2 and all(b > a for a, b in pairwise(medians)), medians
    assert gaps8[1] > 0.01 and all(b > a for a, b in pairwise(gaps8)), gaps8
    # the largest gap needs more than the sweep somewhere: the cost is then a lower bound
    assert costs[GAPS[-1]]["n_beyond"] >= 1


def test_the_predictors_fall_as_the_gap_grows_and_rank_the_costs(gap_study):
    docs, controls, centroids = gap_study["docs"], gap_study["controls"], gap_study["centroids"]
    nn, share = {}, {}
    for g, q in gap_study["cross"].items():
        nn[g] = nn_similarity_ratio(q, docs, controls)["ratio"]
        share[g] = ivf_list_share(q, docs, centroids, 8, controls=controls)["ratio"]
    gs = [0.0, *GAPS]
    assert abs(nn[0.0] - 1) < 0.01 and abs(share[0.0] - 1) < 0.03
    assert all(nn[b] < nn[a] for a, b in pairwise(gs)), nn
    assert all(share[b] < share[a] for a, b in pairwise(gs)), share
    medians = {str(g): gap_study["cost"][g]["median_ratio"] for g in gs}
    agree = rank_agreement({str(g): v for g, v in nn.items()}, medians)
    assert agree["n"] == 4 and agree["spearman"] == pytest.approx(-1.0)
    assert agree["kendall_tau"] == pytest.approx(-1.0)
