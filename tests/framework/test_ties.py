"""Tie-aware measures: closed forms against a brute-force average over every tie order.

The oracle groups scores with a plain Python loop (the documented chaining
rule), enumerates every order of the members of every tie group, scores each
order with the package's tie-rule ``evaluate`` and takes the mean, minimum
and maximum per query.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from imsearch_align.framework import ties
from imsearch_align.framework.metrics import Qrels, Run, evaluate
from imsearch_align.framework.ties import (
    EPS_F32,
    default_tolerance,
    open_tie_groups,
    tie_aware_evaluate,
    tie_groups,
)

FAMILIES = ("P", "R", "nDCG", "AP", "RR", "HitRate")


def _measures(ks) -> list[str]:
    return [f"{f}@{k}" for f in FAMILIES for k in ks] + ["Accuracy"]


# ----------------------------------------------------------------------------- oracle


def _oracle_groups(scores: np.ndarray, hits: int, tol: float) -> list[tuple[int, int]]:
    """``[(a, b), ...]`` half-open column ranges of the tie groups of one sorted row."""
    groups, a = [], 0
    for i in range(1, hits):
        x, y = float(scores[i - 1]), float(scores[i])
        if not x - y <= tol * max(1.0, abs(x), abs(y)):
            groups.append((a, i))
            a = i
    if hits:
        groups.append((a, hits))
    return groups


def _brute_force(run: Run, qrels: Qrels, measures, tol, relevance_level=None):
    """Per qrels query: (mean, min, max) of each measure over every tie order."""
    qmap = {q: i for i, q in enumerate(run.query_ids.tolist())}
    judged = {}
    for q, d, r in zip(qrels.query_ids.tolist(), qrels.doc_ids.tolist(), qrels.relevance):
        judged.setdefault(q, []).append((d, r))
    rows, row_q, qq, dd, rr = [], [], [], [], []
    for qi, q in enumerate(qrels.queries.tolist()):
        if q not in qmap:
            continue
        ids = run.doc_ids[qmap[q]]
        hits = int((~run.empty[qmap[q]]).sum())
        groups = _oracle_groups(run.scores[qmap[q]], hits, tol)
        perms = [list(itertools.permutations(range(a, b))) for a, b in groups]
        for choice in itertools.product(*perms):
            order = [c for grp in choice for c in grp] + list(range(hits, len(ids)))
            new_q = len(rows)
            rows.append(ids[order])
            row_q.append(qi)
            for d, r in judged[q]:
                qq.append(new_q)
                dd.append(d)
                rr.append(r)
    n = len(qrels.queries)
    out = {m: (np.zeros(n), np.zeros(n), np.zeros(n)) for m in measures}
    if not rows:
        return out
    big = Run.from_arrays(np.arange(len(rows)), np.array(rows), None)
    res = evaluate(
        big,
        Qrels(np.array(qq), np.array(dd, dtype=object), np.array(rr)),
        measures,
        relevance_level=relevance_level,
    )
    row_q = np.array(row_q)
    for m in measures:
        v = res.values[m]
        mean, lo, hi = out[m]
        for qi in np.unique(row_q):
            sel = v[row_q == qi]
            mean[qi], lo[qi], hi[qi] = sel.mean(), sel.min(), sel.max()
    return out


def _check_truncated(res, run: Run, tol: float) -> None:
    """Flag iff the row is full and ends in a group of >= 2 starting above the cut-off."""
    rows = {q: i for i, q in enumerate(run.query_ids.tolist())}
    for qi, q in enumerate(res.query_ids.tolist()):
        expect_start = None
        if q in rows:
            i = rows[q]
            hits = int((~run.empty[i]).sum())
            a, b = _oracle_groups(run.scores[i], hits, tol)[-1] if hits else (0, 0)
            if hits == run.k and b - a >= 2:
                expect_start = a
        for m in res.measures:
            k = 1 if m == "Accuracy" else int(m.split("@")[1])
            assert res.truncated[m][qi] == (expect_start is not None and expect_start < k), (q, m)


def _tied_case(seed: int, *, nq: int = 12, K: int = 8, str_ids: bool = False):
    """A run whose rows hold tie groups (equal or few-ulp scores) and graded qrels.

    Returns ``(run, qrels, tol)``. Some rows are short (no-hit padding), some
    queries have no relevant doc, one qrels query is missing from the run and
    one run query is not judged.
    """
    rng = np.random.default_rng(seed)
    tol = 1e-5
    ids = np.full((nq + 1, K), -1, dtype=object if str_ids else np.int64)
    scores = np.full((nq + 1, K), -np.inf, dtype=np.float32)
    qq, dd, rr = [], [], []
    for q in range(nq + 1):
        hits = K if q % 4 else int(rng.integers(2, K))
        docs = rng.choice(40, size=hits, replace=False)
        # Partition the hits into groups of 1..4, at most ~3 multi-member groups.
        sizes, left = [], hits
        while left:
            s = int(min(left, rng.choice([1, 1, 2, 3, 4])))
            sizes.append(s)
            left -= s
        col, base = 0, 0.9
        for s in sizes:
            for j in range(s):
                # Equal scores, or a few float32 ulps apart: well inside tol.
                jitter = int(rng.integers(0, 3)) * j
                scores[q, col] = np.float32(base) - np.float32(jitter * 6e-8)
                col += 1
            base -= 0.01
        ids[q, :hits] = [f"d{d}" for d in docs] if str_ids else docs
        if q == nq:
            continue  # run query absent from the qrels: ignored
        judged = rng.choice(docs, size=int(rng.integers(1, hits + 1)), replace=False)
        rel = rng.integers(0, 4, size=len(judged))
        if q % 5 == 0:
            rel[:] = 0  # judged, nothing relevant
        outside = [40 + q] if q % 3 == 0 else []  # relevant doc the run missed
        for d, r in [*zip(judged, rel), *((d, 2) for d in outside)]:
            qq.append(f"q{q}")
            dd.append(f"d{d}" if str_ids else int(d))
            rr.append(float(r))
    qq.append("missing")  # a qrels query absent from the run
    dd.append("d1" if str_ids else 1)
    rr.append(1.0)
    run = Run.from_arrays([f"q{q}" for q in range(nq + 1)], ids, scores)
    qrels = Qrels(np.array(qq), np.array(dd, dtype=object if str_ids else np.int64), np.array(rr))
    return run, qrels, tol


# ----------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("seed", range(6))
def test_expected_values_and_bounds_match_brute_force(seed):
    run, qrels, tol = _tied_case(seed, str_ids=seed % 2 == 1)
    # K = 8: cut-offs inside groups, past the run, and (seeds 3-5) a largest
    # cut-off below K, so groups crossing it are read past it and later ones skipped.
    measures = _measures((1, 2, 3, 5, 8, 11) if seed < 3 else (1, 2, 3, 5))
    res = tie_aware_evaluate(run, qrels, measures, tol=tol)
    oracle = _brute_force(run, qrels, measures, tol)
    _check_truncated(res, run, tol)
    n_dep = 0
    for m in measures:
        mean, lo, hi = oracle[m]
        np.testing.assert_allclose(res.values[m], mean, rtol=0, atol=1e-12, err_msg=m)
        np.testing.assert_allclose(res.low[m], lo, rtol=0, atol=1e-12, err_msg=m)
        np.testing.assert_allclose(res.high[m], hi, rtol=0, atol=1e-12, err_msg=m)
        np.testing.assert_array_equal(res.tie_dependent[m], hi - lo > 1e-12, err_msg=m)
        # The tie-rule value is one of the orders: inside the bounds.
        assert np.all(res.low[m] <= res.plain.values[m] + 1e-15)
        assert np.all(res.plain.values[m] <= res.high[m] + 1e-15)
        n_dep += res.n_tie_dependent[m]
    assert n_dep > 0  # the case really has ties that matter
    missing = list(res.query_ids).index("missing")
    assert all(res.values[m][missing] == 0 for m in measures)
    assert res.mean()["P@3"] == pytest.approx(res.values["P@3"].mean())
    assert res.low_mean()["AP@5"] <= res.mean()["AP@5"] <= res.high_mean()["AP@5"]


@pytest.mark.parametrize("level", [2.0, 0.5])
def test_relevance_level_matches_brute_force(level):
    run, qrels, tol = _tied_case(7)
    measures = _measures((1, 3, 8))
    res = tie_aware_evaluate(run, qrels, measures, tol=tol, relevance_level=level)
    oracle = _brute_force(run, qrels, measures, tol, relevance_level=level)
    for m in measures:
        np.testing.assert_allclose(res.values[m], oracle[m][0], rtol=0, atol=1e-12, err_msg=m)
        np.testing.assert_allclose(res.low[m], oracle[m][1], rtol=0, atol=1e-12, err_msg=m)
        np.testing.assert_allclose(res.high[m], oracle[m][2], rtol=0, atol=1e-12, err_msg=m)


def test_hand_computed_group_of_three():
    # Ranks 1-3 tie; one relevant doc among them, R = 1.
    run = Run.from_arrays(["q"], np.array([[1, 2, 3, 4]]), np.array([[0.5, 0.5, 0.5, 0.1]]))
    qrels = Qrels.from_dict({"q": {3: 1}})
    res = tie_aware_evaluate(run, qrels, ["P@1", "RR@3", "AP@2", "HitRate@2", "nDCG@1"], tol=0.0)
    assert res.values["P@1"][0] == pytest.approx(1 / 3, abs=1e-15)
    assert res.values["RR@3"][0] == pytest.approx((1 + 1 / 2 + 1 / 3) / 3, abs=1e-15)
    assert res.values["AP@2"][0] == pytest.approx((1 + 1 / 2) / 3, abs=1e-15)
    assert res.values["HitRate@2"][0] == pytest.approx(2 / 3, abs=1e-15)
    assert res.values["nDCG@1"][0] == pytest.approx(1 / 3, abs=1e-15)
    assert res.plain.values["P@1"][0] == 0.0  # tie rule: doc 1 first
    assert (res.low["P@1"][0], res.high["P@1"][0]) == (0.0, 1.0)
    assert res.n_tie_dependent["P@1"] == 1


def _tie_free_case(seed: int, nq: int = 300, depth: int = 50):
    rng = np.random.default_rng(seed)
    ids = np.full((nq, depth), -1, dtype=np.int64)
    scores = np.full((nq, depth), -np.inf)
    qq, dd, rr = [], [], []
    for q in range(nq):
        width = depth if q % 9 else int(rng.integers(1, depth))
        docs = rng.choice(500, size=width, replace=False)
        ids[q, :width] = docs
        scores[q, :width] = rng.permutation(width) + 0.5 * rng.random(width)  # gaps >= 0.5
        judged = rng.choice(500, size=int(rng.integers(1, 15)), replace=False)
        for d, r in zip(judged, rng.integers(0, 4, size=len(judged))):
            qq.append(q)
            dd.append(int(d))
            rr.append(float(r))
    return Run.from_arrays(np.arange(nq), ids, scores), Qrels(np.array(qq), np.array(dd), rr)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_ties_gives_the_tie_rule_values(seed):
    run, qrels = _tie_free_case(seed)
    measures = _measures((1, 5, 10, 50, 60))
    res = tie_aware_evaluate(run, qrels, measures, dim=512)
    for m in measures:
        np.testing.assert_array_equal(res.values[m], res.plain.values[m])
        np.testing.assert_array_equal(res.low[m], res.plain.values[m])
        np.testing.assert_array_equal(res.high[m], res.plain.values[m])
        assert res.n_tie_dependent[m] == 0
        assert res.n_truncated[m] == 0


def test_closed_forms_without_links_equal_the_tie_rule_kernel():
    """The closed-form path itself (not the shortcut) gives the tie-rule values with no links."""
    run, qrels = _tie_free_case(3, nq=60, depth=20)
    measures = _measures((1, 4, 20, 25))
    plain = evaluate(run, qrels, measures)
    qrows = np.arange(len(qrels.queries))
    rows = np.array([list(run.query_ids).index(q) for q in qrels.queries])
    jud = ties._Judgements(qrels)
    hr, hc, hg, dup = jud.hits(qrows, run.doc_ids[rows], run.empty[rows])
    assert len(dup) == 0 and len(hr) > 0
    R, idcg = jud.totals(qrows, None, [1, 4, 20, 25])
    ones = np.ones(len(hr), dtype=np.int64)
    out = ties._group_values(len(qrows), hr, hc, ones, (hg > 0) * 1.0, hg, measures, R, idcg)
    for m in measures:
        np.testing.assert_allclose(out[m], plain.values[m], rtol=0, atol=1e-14, err_msg=m)


# ----------------------------------------------------------------------------- truncation


def _ending_in_a_tie():
    # Ranks 3-4 tie and the row is full: the store may hold more of that group.
    ids = np.array([[10, 11, 12, 13]])
    scores = np.array([[0.9, 0.8, 0.5, 0.5]], dtype=np.float32)
    qrels = Qrels.from_dict({"q": {13: 1, 12: 0}})
    return ids, scores, qrels


def test_group_cut_by_the_end_of_the_run_is_flagged():
    ids, scores, qrels = _ending_in_a_tie()
    run = Run.from_arrays(["q"], ids, scores)
    res = tie_aware_evaluate(run, qrels, ["P@2", "P@3", "P@4", "HitRate@3", "P@6"], tol=0.0)
    assert res.truncated["P@2"][0] == False  # noqa: E712 - the group starts at rank 3
    assert all(res.truncated[m][0] for m in ("P@3", "P@4", "HitRate@3", "P@6"))
    assert res.n_truncated == {"P@2": 0, "P@3": 1, "P@4": 1, "HitRate@3": 1, "P@6": 1}
    # Scored over the returned members of the group (doc 13 at rank 3 or 4).
    assert res.values["P@3"][0] == pytest.approx(0.5 / 3, abs=1e-15)
    assert res.values["HitRate@3"][0] == pytest.approx(0.5, abs=1e-15)
    assert res.values["P@4"][0] == pytest.approx(1 / 4, abs=1e-15)
    with pytest.raises(ValueError, match=r"groups_closed=True.*'q'.*open_tie_groups"):
        tie_aware_evaluate(run, qrels, ["P@3"], tol=0.0, groups_closed=True)


def test_extended_run_closes_the_group():
    ids, scores, qrels = _ending_in_a_tie()
    short = Run.from_arrays(["q"], ids, scores)
    assert open_tie_groups(short, 3, tol=0.0).tolist() == [True]
    # The exact store, asked deeper, shows the whole group (doc 14 ties too) and its end.
    ext = Run.from_arrays(
        ["q"], np.array([[10, 11, 12, 13, 14, 15]]), np.array([[0.9, 0.8, 0.5, 0.5, 0.5, 0.2]])
    )
    assert open_tie_groups(ext, 3, tol=0.0).tolist() == [False]
    assert open_tie_groups(ext, 6, tol=0.0).tolist() == [True]  # rank 6 is the last column
    res = tie_aware_evaluate(ext, qrels, ["P@3", "HitRate@3"], tol=0.0, groups_closed=True)
    assert res.n_truncated == {"P@3": 0, "HitRate@3": 0}
    assert res.values["HitRate@3"][0] == pytest.approx(1 / 3, abs=1e-15)  # 1 of 3 members
    oracle = _brute_force(ext, qrels, ["P@3", "HitRate@3"], 0.0)
    assert res.values["P@3"][0] == pytest.approx(oracle["P@3"][0][0], abs=1e-12)


def test_open_tie_groups_rules():
    run = Run.from_arrays(
        ["full_single", "full_tied", "short"],
        np.array([[1, 2, 3], [1, 2, 3], [1, 2, -1]]),
        np.array([[0.9, 0.8, 0.7], [0.9, 0.7, 0.7], [0.9, 0.9, -np.inf]]),
    )
    assert open_tie_groups(run, 2, tol=0.0).tolist() == [False, True, False]
    assert open_tie_groups(run, 3, tol=0.0).tolist() == [True, True, False]
    assert open_tie_groups(run, 5, tol=0.0).tolist() == [True, True, False]  # run too shallow


# ----------------------------------------------------------------------------- tolerance


def test_default_tolerance_formula():
    u = EPS_F32 / 2
    for d in (1, 64, 512, 4096):
        # Higham & Mary's gamma~ with lambda = 7, twice, plus two final roundings.
        g = math.exp(7 * math.sqrt(d) * u + d * u * u / (1 - u)) - 1
        assert default_tolerance(d) == pytest.approx(2 * g + 2 * u, rel=1e-9)
        assert default_tolerance(d) == pytest.approx(EPS_F32 * (7 * math.sqrt(d) + 1), rel=1e-4)
        # ... and the guarantee it rests on: failure chance 2 d exp(-lambda^2 (1-u)^2 / 2).
        assert 2 * d * math.exp(-49 * (1 - u) ** 2 / 2) < 2e-7
    assert default_tolerance(512, worst_case=True) == pytest.approx(
        EPS_F32 * (512 / (1 - 512 * u) + 1), rel=1e-15
    )


@pytest.mark.parametrize("d", [64, 768])
def test_default_tolerance_covers_float32_summation_orders(d):
    """Two summation orders of the same float32 dot products differ well inside the default."""
    rng = np.random.default_rng(d)
    X = rng.standard_normal((120, d)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    Q = X[:20] + 0.05 * rng.standard_normal((20, d)).astype(np.float32) / np.sqrt(d)
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    gemm = Q @ X.T
    seq = np.cumsum(Q[:, None, :] * X[None, :, :], axis=2, dtype=np.float32)[:, :, -1]
    rev = np.cumsum((Q[:, None, :] * X[None, :, :])[:, :, ::-1], axis=2, dtype=np.float32)
    diff = max(np.abs(gemm - seq).max(), np.abs(seq - rev[:, :, -1]).max())
    assert diff > 0  # the orders really round differently
    assert diff <= default_tolerance(d) / 7  # 0.5 EPS_F32 sqrt(d) measured at most


def test_tolerance_groups_last_ulps_and_not_farther():
    tol = default_tolerance(512)
    s = np.float32(0.7)
    one, three = np.nextafter(s, np.float32(-1)), s
    for _ in range(3):
        three = np.nextafter(three, np.float32(-1))
    far = np.float32(0.7 - 2 * tol)
    run = Run.from_arrays(
        ["ulp1", "ulp3", "far"],
        np.array([[1, 2, 3], [1, 2, 3], [1, 2, 3]]),
        np.array([[s, one, 0.1], [s, three, 0.1], [s, far, 0.1]], dtype=np.float32),
    )
    labels = tie_groups(run, dim=512)
    assert labels.tolist() == [[0, 0, 2], [0, 0, 2], [0, 1, 2]]


def test_tolerance_chains_and_scales_with_the_score():
    tol = 1e-6
    run = Run.from_arrays(
        ["chain", "big", "small", "pad", "exact"],
        np.array([[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, -1, -1], [1, 2, 3]]),
        np.array(
            [
                [0.5, 0.5 - 0.6 * tol, 0.5 - 1.2 * tol],  # each link within tol: one group
                [100.0, 100.0 - 50 * tol, 0.0],  # relative: 50 tol <= tol * 100
                [0.5, 0.5 - 50 * tol, 0.0],  # the same gap at 0.5 is no tie
                [0.3, -np.inf, -np.inf],  # no-hit cells are in no group
                [0.5, 0.5, 0.5 - 1e-12],
            ]
        ),
    )
    assert tie_groups(run, tol=tol).tolist() == [
        [0, 0, 0],
        [0, 0, 2],
        [0, 1, 2],
        [0, -1, -1],
        [0, 0, 0],
    ]
    assert tie_groups(run, tol=0.0)[4].tolist() == [0, 0, 2]  # tol 0: equal scores only


def test_stores_rounding_differently_agree_on_tie_aware_values():
    """Near-duplicate documents scored by two summation orders: tie rules differ, expectations not."""
    rng = np.random.default_rng(5)
    d = 64
    base = rng.standard_normal((40, d))
    docs = np.repeat(base, 3, axis=0) + 1e-9 * rng.standard_normal((120, d))  # triplets
    docs = (docs / np.linalg.norm(docs, axis=1, keepdims=True)).astype(np.float32)
    queries = base[:30] + 0.8 * rng.standard_normal((30, d))
    queries = (queries / np.linalg.norm(queries, axis=1, keepdims=True)).astype(np.float32)
    prod = queries[:, None, :] * docs[None, :, :]
    s_a = np.cumsum(prod, axis=2, dtype=np.float32)[:, :, -1]
    s_b = np.cumsum(prod[:, :, ::-1], axis=2, dtype=np.float32)[:, :, -1]
    qrels = Qrels.from_pairs(np.repeat(np.arange(30), 1), 3 * np.arange(30) + 1)  # middle twin
    measures = ["P@1", "P@5", "R@10", "nDCG@10", "AP@10", "RR@10", "HitRate@1"]
    results = []
    for s in (s_a, s_b):
        top = np.argsort(-s, axis=1, kind="stable")[:, :13]  # past the triplet at rank 10
        run = Run.from_arrays(np.arange(30), top, np.take_along_axis(s, top, axis=1))
        results.append(tie_aware_evaluate(run, qrels, measures, dim=d, groups_closed=True))
    a, b = results
    assert any(
        not np.array_equal(a.plain.values[m], b.plain.values[m]) for m in measures
    )  # the two "stores" really disagree under the tie rule
    for m in measures:
        np.testing.assert_allclose(a.values[m], b.values[m], rtol=0, atol=1e-9, err_msg=m)
        assert a.mean()[m] == pytest.approx(b.mean()[m], abs=1e-9)


# ----------------------------------------------------------------------------- errors


def _tiny():
    return Run.from_arrays(["q"], np.array([[1, 2]]), np.array([[0.5, 0.5]])), Qrels.from_dict(
        {"q": {1: 1}}
    )


@pytest.mark.parametrize("tol", [-1e-6, float("nan"), float("inf"), -float("inf")])
def test_bad_tolerance_raises(tol):
    run, qrels = _tiny()
    with pytest.raises(ValueError, match=r"tol must be a finite number >= 0, got"):
        tie_aware_evaluate(run, qrels, ["P@1"], tol=tol)
    with pytest.raises(ValueError, match=r"tol must be a finite number >= 0"):
        tie_groups(run, tol=tol)


def test_bad_tolerance_type_and_dimension_raise():
    run, qrels = _tiny()
    with pytest.raises(TypeError, match=r"tol must be a real number, got str"):
        tie_aware_evaluate(run, qrels, ["P@1"], tol="1e-6")
    with pytest.raises(ValueError, match=r"give tol .* or dim .*got neither"):
        tie_aware_evaluate(run, qrels, ["P@1"])
    for dim in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match=r"dim must be a positive integer"):
            tie_aware_evaluate(run, qrels, ["P@1"], dim=dim)
    with pytest.raises(TypeError, match=r"groups_closed must be a bool"):
        tie_aware_evaluate(run, qrels, ["P@1"], tol=0.0, groups_closed="yes")
    with pytest.raises(ValueError, match=r"k must be a positive integer, got 0"):
        open_tie_groups(run, 0, tol=0.0)


def test_unknown_measure_is_named_with_a_suggestion():
    run, qrels = _tiny()
    with pytest.raises(ValueError, match=r"unknown measure 'MAP@10'.*did you mean 'AP@10'"):
        tie_aware_evaluate(run, qrels, ["P@1", "MAP@10"], tol=0.0)
    with pytest.raises(ValueError, match=r"measures is empty"):
        tie_aware_evaluate(run, qrels, [], tol=0.0)


def test_measure_without_tie_aware_form_is_named(monkeypatch):
    """A family the tie-rule evaluator knows but whose table entry has no tie kernel."""
    from imsearch_align.framework import measures

    ndcg, _ = measures.lookup("nDCG@10")
    burges = dataclasses.replace(ndcg, name="nDCGBurges@k", tie_kernel=None)
    monkeypatch.setattr(measures, "MEASURES", (*measures.MEASURES, burges))
    run, qrels = _tiny()
    with pytest.raises(ValueError, match=r"'nDCGBurges@10' has no tie-aware form"):
        tie_aware_evaluate(run, qrels, ["P@1", "nDCGBurges@10"], tol=0.0)


def test_duplicate_relevant_doc_in_a_group_crossing_the_cut_off_raises():
    # Doc 3 twice in the group spanning ranks 2-4: the tie rule's top 2 sees one.
    run = Run.from_arrays(["q"], np.array([[1, 2, 3, 3]]), np.array([[0.5, 0.4, 0.4, 0.4]]))
    qrels = Qrels.from_dict({"q": {3: 1}})
    assert evaluate(run, qrels, ["P@2"]).values["P@2"][0] == 0.0  # no error, no hit
    with pytest.raises(ValueError, match=r"appears twice in the ranking of query 'q'"):
        tie_aware_evaluate(run, qrels, ["P@2"], tol=0.0)


def test_lenient_fails_only_the_query_repeating_a_relevant_doc():
    run = Run.from_arrays(
        ["q", "r"],
        np.array([[1, 2, 3, 3], [1, 2, 3, 4]]),
        np.array([[0.5, 0.4, 0.4, 0.4], [0.5, 0.4, 0.4, 0.1]]),
    )
    qrels = Qrels.from_dict({"q": {3: 1}, "r": {3: 1}})
    res = tie_aware_evaluate(run, qrels, ["P@2", "HitRate@2"], tol=0.0, lenient=True)
    assert list(res.plain.failed_queries) == ["q"]
    assert res.values["P@2"].tolist() == [0.0, 0.25]  # r: doc 3 at rank 2 or 3
    assert res.plain.values["P@2"].tolist() == [0.0, 0.0]
    assert res.tie_dependent["P@2"].tolist() == [False, True]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, -1.0, 300.0, -300.0])
def test_fast_tie_scan_finds_exactly_the_documented_links(dtype, scale):
    """The prefiltered scan gives the documented rule, with gaps one ulp either side of tol."""
    rng = np.random.default_rng(int(abs(scale)) + (dtype == np.float32))
    n, K = 200, 30
    base = float(np.asarray(0.6 * scale, dtype=dtype))
    ulp = float(np.spacing(np.asarray(abs(base), dtype=dtype)))
    tol = 3 * ulp / max(1.0, abs(base))  # near base, a gap of 3 ulps ties, 4 do not
    steps = rng.integers(0, 7, size=(n, K)).astype(np.float64)  # 0..6 ulps
    steps[:, 0] = 0
    scores = (base - np.cumsum(steps, axis=1) * ulp).astype(dtype)
    ids = np.tile(np.arange(K), (n, 1))
    short = rng.random(n) < 0.2
    ids[short, K - 5 :] = -1
    scores[short, K - 5 :] = -np.inf
    run = Run.from_arrays(np.arange(n), ids, scores)
    expect = np.zeros((n, K - 1), dtype=bool)
    for r in range(n):
        for i in range(K - 1):
            if run.empty[r, i + 1]:
                continue
            x, y = float(run.scores[r, i]), float(run.scores[r, i + 1])
            expect[r, i] = x - y <= tol * max(1.0, abs(x), abs(y))
    s64, hit = run.scores.astype(np.float64), ~run.empty[:, 1:]
    gaps = np.round((s64[:, :-1][hit] - s64[:, 1:][hit]) / ulp)
    assert {3.0, 4.0} <= set(gaps.tolist())  # the boundary is exercised
    np.testing.assert_array_equal(ties._link_matrix(run.scores, run.empty, tol), expect)
    lr, li = ties._sparse_links(run.scores, run.empty, tol)
    np.testing.assert_array_equal(np.stack([lr, li]), np.stack(np.nonzero(expect)))


# ----------------------------------------------------------------------------- ambiguous rows


@pytest.mark.parametrize("tol_factor", [0.0, 0.5, 1.0, 3.0])
def test_ambiguous_rows_are_exactly_those_with_a_gap_in_the_band(tol_factor):
    """A row is ambiguous iff some neighbouring pair of hits has a gap in
    ``(tol - error, tol + error]`` (relative to ``max(1, |a|, |b|)``)."""
    rng = np.random.default_rng(int(tol_factor * 10))
    error = 1e-5
    tol = tol_factor * error
    n, K = 300, 12
    vals = [0.0, 0.2, 0.9, 1.1, 1.9, 2.5, 4.1, 50.0]
    steps = rng.choice(vals, size=(n, K), p=[0.04] * 7 + [0.72]) * error
    steps[:, 0] = 0
    scores = 0.7 - np.cumsum(steps, axis=1)
    scores[:5] *= 400  # |s| > 1: the relative scale matters
    ids = np.tile(np.arange(K), (n, 1))
    ids[rng.random(n) < 0.2, K - 3 :] = -1
    scores = np.where(ids < 0, -np.inf, scores)
    run = Run.from_arrays(np.arange(n), ids, scores)
    expect = []
    for r in range(n):
        for i in range(K - 1):
            if run.empty[r, i + 1]:
                continue
            a, b = float(run.scores[r, i]), float(run.scores[r, i + 1])
            scale = max(1.0, abs(a), abs(b))
            if (tol - error) * scale < a - b <= (tol + error) * scale:
                expect.append(r)
                break
    got = ties.ambiguous_rows(run, tol, error)
    assert 0 < len(expect) < n
    np.testing.assert_array_equal(got, expect)


def test_ambiguous_rows_bad_input():
    run, _ = _tiny()
    with pytest.raises(ValueError, match="tol"):
        ties.ambiguous_rows(run, -1.0, 1e-6)
    with pytest.raises(ValueError, match="error"):
        ties.ambiguous_rows(run, 1e-6, float("nan"))
    with pytest.raises(TypeError, match="Run"):
        ties.ambiguous_rows("run", 1e-6, 1e-6)
