"""The table of measures: every entry parses, computes what trec_eval computes, and renders."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from imsearch_align import Qrels, Run, evaluate
from imsearch_align.framework import measures as M

pytrec_eval = pytest.importorskip("pytrec_eval")

KS = (1, 3, 10, 50)


def _random_case(seed: int, nq: int = 200, ndoc: int = 300, depth: int = 50):
    """Graded qrels and a tie-free run with short rankings and queries without relevant docs."""
    rng = np.random.default_rng(seed)
    qrels: dict[str, dict[str, int]] = {}
    for q in range(nq):
        docs = rng.choice(ndoc, size=int(rng.integers(1, 20)), replace=False)
        rel = rng.integers(0, 4, size=len(docs))
        if q % 9 == 0:
            rel[:] = 0
        qrels[f"q{q}"] = {f"d{d}": int(r) for d, r in zip(docs, rel)}
    ids = np.full((nq, depth), -1, dtype=object)
    scores = np.full((nq, depth), -np.inf)
    for q in range(nq):
        width = depth if q % 7 else int(rng.integers(1, depth))
        docs = rng.choice(ndoc, size=width, replace=False)
        ids[q, :width] = [f"d{d}" for d in docs]
        scores[q, :width] = rng.permutation(width) + rng.random(width) * 0.5
    return qrels, ids, scores


def _trec_name(meas: M.Measure, k: int) -> str | None:
    """pytrec_eval's measure key, read from the table's trec_eval column."""
    name = meas.trec_eval.split(" ")[0]
    if name.endswith("_k"):
        return name[:-2] + f"_{k}"
    return name


def test_every_entry_parses_at_any_cutoff_and_has_a_kernel():
    for meas in M.MEASURES:
        # exactly one kernel: from the judgements, or from the indexed vectors
        assert callable(meas.kernel) != callable(meas.vector_kernel)
        assert meas.needs_vectors == (meas.vector_kernel is not None)
        if meas.cutoff:
            for k in (1, 7, 100, M.MAX_K):
                assert M.lookup(meas.at(k)) == (meas, k)
                assert M.parse_measure(meas.at(k)) == (meas.family, k)
        else:
            got, k = M.lookup(meas.name)
            assert got is meas and (meas.same_as[0], k) == M.parse_measure(meas.name)
        assert M.display_label(meas.at(5))


@pytest.mark.parametrize("seed", [0, 1])
def test_every_kernel_matches_pytrec_eval(seed):
    qrels, ids, scores = _random_case(seed)
    nq = ids.shape[0]
    names = [f"q{q}" for q in range(nq)]
    run = Run.from_arrays(names, ids, scores)
    for meas in M.MEASURES:
        if (
            meas.needs_vectors
        ):  # not a function of the judgements (tests/framework/test_diversity.py)
            continue
        ks = KS if meas.cutoff else (M.lookup(meas.name)[1],)
        for k in ks:
            name = meas.at(k)
            trec = _trec_name(meas, k)
            if trec == "recip_rank":  # trec's RR has no cutoff: give it the first k ranks only
                trun = {
                    q: {
                        d: float(s)
                        for d, s in zip(run.doc_ids[i, :k], run.scores[i, :k])
                        if d != -1
                    }
                    for i, q in enumerate(names)
                }
            else:
                trun = {
                    q: {d: float(s) for d, s in zip(ids[i], scores[i]) if d != -1}
                    for i, q in enumerate(names)
                }
            family = trec.rsplit("_", 1)[0] if trec != "recip_rank" else trec
            param = f"{family}.{k}" if trec != "recip_rank" else trec
            ref = pytrec_eval.RelevanceEvaluator(qrels, {param}).evaluate(trun)
            want = np.array([ref[q][trec] for q in names])
            got = evaluate(run, Qrels.from_dict(qrels), [name])
            pq = got.per_query.set_index("query_id").loc[names, name].to_numpy()
            np.testing.assert_allclose(pq, want, atol=1e-12, rtol=0, err_msg=name)


def test_rendered_tables_list_every_entry():
    md = M.markdown_table()
    lines = md.strip().splitlines()
    assert len(lines) == 2 + len(M.MEASURES)
    for meas, line in zip(M.MEASURES, lines[2:]):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[0] == f"`{meas.name}`"
        assert cells[1] == meas.definition
        assert meas.trec_eval.split(" ")[0] in cells[2]
    task = M.task_markdown_table().strip().splitlines()
    assert len(task) == 2 + len(M.TASK_MEASURES)
    for t, line in zip(M.TASK_MEASURES, task[2:]):
        assert f"`{t.name.replace('{k}', 'k')}`" in line and t.definition in line
    rows = M.list_rows()
    assert [r[0] for r in rows] == [m.name for m in M.MEASURES] + [
        t.name.replace("{k}", "k") for t in M.TASK_MEASURES
    ]
    assert all(len(r) == 4 and all(isinstance(c, str) and c for c in r) for r in rows)


def test_task_measures_name_where_they_are_computed():
    names = {t.name for t in M.TASK_MEASURES}
    assert {"acc1", "acc5", "mean_per_class_recall", "ann_recall@{k}"} <= names
    tasks = {t.task for t in M.TASK_MEASURES}
    assert {"matching", "multilabel", "linear_probe", "captioning"} <= tasks
    for t in M.TASK_MEASURES:
        assert t.where and t.source and t.definition


def test_default_measures_per_k_then_accuracy():
    assert M.default_measures([1, 10]) == [
        "P@1",
        "R@1",
        "nDCG@1",
        "AP@1",
        "RR@1",
        "HitRate@1",
        "P@10",
        "R@10",
        "nDCG@10",
        "AP@10",
        "RR@10",
        "HitRate@10",
        "Diversity@10",  # default_largest_k: at the largest k only
        "Accuracy",
    ]
    assert M.default_measures([5, 5]) == M.default_measures([5])
    with pytest.raises(ValueError, match=r"k_values: every k must be in \[1, 1000000\], got 0"):
        M.default_measures([0])
    with pytest.raises(TypeError, match="k_values: every k must be an integer, got str '5'"):
        M.default_measures(["5"])
    assert M.default_measures([np.int64(3)])[0] == "P@3"
    assert [m for m in M.default_measures([10, 5]) if m.startswith("Diversity")] == ["Diversity@10"]


def test_adding_a_measure_is_one_entry(monkeypatch):
    """A new entry is parsed, dispatched, listed and rendered with nothing else changed."""

    def hits_at(h: M.Hits, k: int) -> np.ndarray:
        return h.count_within(k)

    extra = M.Measure(
        "Hits@k",
        "–",
        "–",
        "number of relevant docs in the top k",
        cutoff=True,
        default=False,
        label="hits@{k}",
        kernel=hits_at,
    )
    monkeypatch.setattr(M, "MEASURES", (*M.MEASURES, extra))
    qrels = Qrels.from_pairs([0, 0, 1], [5, 6, 9])
    run = Run.from_arrays([0, 1], np.array([[5, 7, 6], [8, 1, 2]]), np.array([[3.0, 2, 1]] * 2))
    res = evaluate(run, qrels, ["Hits@3", "P@3"])
    assert res.values["Hits@3"].tolist() == [2.0, 0.0]
    assert res.values["P@3"].tolist() == pytest.approx([2 / 3, 0.0])
    assert "`Hits@k`" in M.markdown_table()
    assert "Hits@k" in M.valid_measure_names()
    assert "Hits@10" not in M.default_measures([10])  # default=False


def _dcg(h: M.Hits, k: int) -> np.ndarray:
    """A made-up family: DCG@k, not normalised (the plain kernel)."""
    w = h.cols < k
    return np.bincount(h.rows[w], weights=h.discounted_gains[w], minlength=h.n_queries)


def _expected_dcg(g: M.TieGroups, k: int) -> np.ndarray:
    """Its tie kernel: every tied rank holds its group's mean gain."""
    group, _, pos, row = g.ranks
    w = pos < k
    gain = (g.s / g.mf)[group[w]]
    return np.bincount(row[w], weights=gain / np.log2(pos[w] + 2.0), minlength=g.n)


_DCG = M.Measure(
    "DCG@k",
    "–",
    "–",
    "sum of gain/log2(rank+1) over the top k, not normalised",
    cutoff=True,
    default=True,
    label="DCG@{k}",
    kernel=_dcg,
    tie_kernel=_expected_dcg,
)


def _every_tie_order(run: Run, qrels: Qrels, measures: list[str]):
    """Per qrels query, the (mean, min, max) of each measure over every order of its tie
    groups (equal scores), each order scored by ``evaluate`` on its own."""
    out = {m: [] for m in measures}
    for q in qrels.queries.tolist():
        i = run.query_ids.tolist().index(q)
        hits = int((~run.empty[i]).sum())
        s = run.scores[i, :hits].tolist()
        bounds = [0, *[j for j in range(1, hits) if s[j] != s[j - 1]], hits]
        perms = [list(itertools.permutations(range(a, b))) for a, b in itertools.pairwise(bounds)]
        orders = [[c for grp in choice for c in grp] for choice in itertools.product(*perms)]
        ids = np.array([run.doc_ids[i, order] for order in orders])
        one = Qrels.from_dict({n: dict(zip(qrels.doc_ids[qrels.query_ids == q].tolist(),
                                           qrels.relevance[qrels.query_ids == q].tolist()))
                               for n in range(len(orders))})  # fmt: skip
        res = evaluate(Run.from_arrays(np.arange(len(orders)), ids, None), one, measures)
        for m in measures:
            v = res.values[m]
            out[m].append((v.mean(), v.min(), v.max()))
    return {m: np.array(v) for m, v in out.items()}


def test_a_measure_added_by_one_entry_is_seen_everywhere(monkeypatch, capsys):
    """One entry with a kernel and a tie kernel: listed by ``imsearch-align list metrics``,
    in the README table and the default list, scored by ``evaluate``, and scored by
    ``tie_aware_evaluate`` as the mean over every order of the tied documents."""
    from imsearch_align.cli import main
    from imsearch_align.framework.ties import tie_aware_evaluate

    monkeypatch.setattr(M, "MEASURES", (*M.MEASURES, _DCG))
    row = ("DCG@k", "–", "–", "sum of gain/log2(rank+1) over the top k, not normalised")
    assert row in M.list_rows()
    assert main(["list", "metrics"]) == 0
    assert "sum of gain/log2(rank+1) over the top k, not normalised" in capsys.readouterr().out
    assert "| `DCG@k` | sum of gain/log2(rank+1) over the top k, not normalised |" in (
        M.markdown_table()
    )
    assert "DCG@10" in M.default_measures([10]) and M.display_label("DCG@3") == "DCG@3"

    # Tie groups: ranks 2-4 and 5-6 of q0 (a full row), 1-2 and 3-5 of q1 (a short one).
    ids = np.array([[1, 2, 3, 4, 5, 6], [7, 8, 9, 10, 11, -1]])
    scores = np.array([[0.9, 0.8, 0.8, 0.8, 0.5, 0.5], [0.7, 0.7, 0.6, 0.6, 0.6, -np.inf]])
    run = Run.from_arrays(["q0", "q1"], ids, scores)
    qrels = Qrels.from_dict({"q0": {2: 1, 4: 3, 6: 2, 1: 1, 99: 2}, "q1": {8: 2, 10: 1, 11: 3}})
    measures = ["DCG@1", "DCG@3", "DCG@5", "DCG@6", "P@3"]
    plain = evaluate(run, qrels, measures)
    log2 = np.log2(np.arange(2, 8))
    want_q0 = 1 / log2[0] + 1 / log2[1] + 3 / log2[3]  # docs 1, 2, 4 in the top 5 (id order)
    assert plain.values["DCG@5"][0] == pytest.approx(want_q0)

    tie = tie_aware_evaluate(run, qrels, measures, tol=0.0)
    brute = _every_tie_order(run, qrels, measures)
    for m in measures:
        mean, lo, hi = brute[m].T
        np.testing.assert_allclose(tie.values[m], mean, rtol=0, atol=1e-12, err_msg=m)
        np.testing.assert_allclose(tie.low[m], lo, rtol=0, atol=1e-12, err_msg=m)
        np.testing.assert_allclose(tie.high[m], hi, rtol=0, atol=1e-12, err_msg=m)
    assert tie.n_tie_dependent["DCG@3"] == 2 and tie.values["DCG@3"][0] != plain.values["DCG@3"][0]


def test_a_measure_added_by_one_entry_reaches_an_experiments_tie_aware_results(
    monkeypatch, tmp_path
):
    """A default entry is reported by an experiment: expected value, tie rule and tie report."""
    from imsearch_align.experiment import ExperimentConfig, run_experiment

    monkeypatch.setattr(M, "MEASURES", (*M.MEASURES, _DCG))
    syn = {"n_images": 120, "captions_per_image": 2, "seed": 3, "d_image": 16, "d_text": 12}
    cfg = ExperimentConfig(
        dataset="synthetic",
        dataset_params=syn,
        image_encoder=None,
        text_encoder=None,
        method="procrustes",
        store="exact",
        n_support=60,
        cache_dir=None,
        k_values=(1, 5),
    )
    res = run_experiment(cfg, output_dir=tmp_path / "out", progress=False)
    assert res.status.ok, res.status
    t2i = res.rankings["t2i"]
    for name in ("DCG@1", "DCG@5"):
        assert name in t2i.metrics and name in t2i.tie_rule and name in t2i.ties["measures"]
    # One relevant image per caption: the ideal DCG is 1, so DCG@k is nDCG@k.
    assert t2i.metrics["DCG@5"] == pytest.approx(t2i.metrics["nDCG@5"], abs=1e-12)


def test_unknown_names_suggest_ours():
    cases = {
        "MAP@10": "AP@10",
        "ndcg_cut_10": "nDCG@10",
        "P_5": "P@5",
        "mrr@10": "RR@10",
        "success_5": "HitRate@5",
        "image_retrieval_recall@5": "HitRate@5",
        "HitRat@5": "HitRate@5",
        "acc1": "Accuracy",
    }
    for bad, want in cases.items():
        with pytest.raises(ValueError, match=f"unknown measure '{bad}'.*did you mean '{want}'"):
            M.lookup(bad)
    with pytest.raises(ValueError, match=r"HitRate@5 \(CLIP_benchmark's recall@k\) or R@5"):
        M.lookup("recall@5")
    with pytest.raises(ValueError, match=r"k in 'P@0' must be in \[1, 1000000\], got 0"):
        M.lookup("P@0")
    with pytest.raises(ValueError, match="unknown measure 3"):
        M.lookup(3)  # type: ignore[arg-type]


def test_an_entry_has_exactly_one_kernel(monkeypatch):
    table = M.MEASURES
    none = dataclasses.replace(table[0], name="X@k", kernel=None)
    both = dataclasses.replace(M.lookup("Diversity@5")[0], name="Y@k", kernel=table[0].kernel)
    monkeypatch.setattr(M, "MEASURES", (*table, none))
    with pytest.raises(ValueError, match="entry 'X@k' must have exactly one of kernel"):
        M.lookup("P@1")
    monkeypatch.setattr(M, "MEASURES", (*table, both))
    with pytest.raises(ValueError, match="entry 'Y@k' must have exactly one of kernel"):
        M.lookup("P@1")


def test_an_entry_without_cutoff_must_say_what_it_is(monkeypatch):
    bad = dataclasses.replace(M.MEASURES[-1], name="Top1", same_as=None)
    monkeypatch.setattr(M, "MEASURES", (*M.MEASURES, bad))
    with pytest.raises(ValueError, match="entry 'Top1' has no cutoff, so same_as must name"):
        M.lookup("P@1")


def test_display_labels_tell_hit_rate_from_ir_recall():
    assert M.display_label("HitRate@5") == "recall@5 (CLIP)"
    assert M.display_label("R@5") == "IR recall@5"
    assert M.display_label("Accuracy") == "acc@1"
