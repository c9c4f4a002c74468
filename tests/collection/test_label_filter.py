"""The dataset's own labels as a filter: component-majority labels of synthetic
distractors, draws unchanged by it, the per-label exact filtered truth against float64
brute force (tie-aware), and the study's label cell next to the category cells."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from imsearch_align.collection import ArraySource, CollectionBlocks, MixtureModel, SyntheticSource
from imsearch_align.collection.cell_files import DeployContext
from imsearch_align.collection.filter_kinds import ShareKept, WithinLabel
from imsearch_align.collection.filters import filtered_truth
from imsearch_align.collection.label_filter import (
    UNKNOWN,
    LabelAttribute,
    LabelPlan,
    component_labels,
    majority_labels,
    query_labels,
)
from imsearch_align.collection.synthetic import CHUNK_ROWS
from imsearch_align.framework.metrics import Qrels, Run
from imsearch_align.framework.ranking.tie_aware import EXACT_TIE_TOL
from imsearch_align.framework.ties import tie_aware_evaluate

MEASURES = ["HitRate@1", "HitRate@10", "nDCG@10"]


def _model(spread: float = 1.0) -> MixtureModel:
    """A mixture given directly (no k-means): 5 components, rank 3, 16-d."""
    rng = np.random.default_rng(11)
    K, r, d = 5, 3, 16
    means = rng.standard_normal((K, d))
    bases = np.stack([np.linalg.qr(rng.standard_normal((d, r)))[0].T for _ in range(K)])
    scales = rng.uniform(0.1, 0.5, (K, r)) * spread
    residual = rng.uniform(0.01, 0.05, K) * spread
    w = np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    return MixtureModel(w, means, bases, scales, residual, True, "enc")


def test_synthetic_rows_are_the_mixture_formula_in_the_seeded_draw_order():
    """Row i of chunk j is means[c] + z bases[c] + residual[c] e (normalised), with c, z and e
    drawn in that order from the chunk's generator: the formula written out, per row."""
    model = _model()
    src = SyntheticSource(model, 9000, seed=4, modality="image")
    rows = np.concatenate([b for _, b in src.blocks(1000)])
    assert rows.shape == (9000, 16)
    want = []
    for j in range(0, 9000, CHUNK_ROWS):
        n = min(CHUNK_ROWS, 9000 - j)
        rng = np.random.default_rng([4, j // CHUNK_ROWS])
        c = rng.choice(len(model.weights), size=n, p=model.weights)
        z = rng.standard_normal((n, model.scales.shape[1])) * model.scales[c]
        e = rng.standard_normal((n, model.dim))
        x = (
            model.means[c]
            + np.einsum("nr,nrd->nd", z, model.bases[c])
            + e * model.residual[c, None]
        )
        want.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    np.testing.assert_allclose(rows, np.concatenate(want), rtol=0, atol=1e-6)


def test_components_are_the_components_the_rows_were_drawn_from():
    model = _model(spread=1e-3)  # tight components: a row's nearest mean is its component
    n = 2 * CHUNK_ROWS + 500
    src = SyntheticSource(model, n, seed=3)
    rows = np.concatenate([b for _, b in src.blocks(3000)]).astype(np.float64)
    unit = model.means / np.linalg.norm(model.means, axis=1, keepdims=True)
    nearest = (rows @ unit.T).argmax(axis=1)
    np.testing.assert_array_equal(src.components(), nearest)
    a, b = CHUNK_ROWS - 100, CHUNK_ROWS + 250  # across a chunk boundary
    np.testing.assert_array_equal(src.components(a, b), nearest[a:b])
    np.testing.assert_array_equal(src.head(700).components(), nearest[:700])
    assert np.bincount(nearest, minlength=5).min() > 0


def test_component_labels_are_the_support_majority():
    rng = np.random.default_rng(0)
    centres = 10 * np.eye(8)[:3]
    X = np.concatenate([c + 0.1 * rng.standard_normal((100, 8)) for c in centres])
    truth = np.repeat([2, 0, 1], 100)  # cluster j holds mostly label truth[j*100]
    noisy = truth.copy()
    noisy[rng.choice(300, 40, replace=False)] = 3  # a minority label in every cluster
    model = MixtureModel.fit(X, n_components=3, rank=2, seed=0, normalize=False)
    labels = component_labels(model, noisy)
    comp_of_cluster = [np.bincount(model.assignments[j * 100 : (j + 1) * 100]).argmax()
                       for j in range(3)]  # fmt: skip
    assert [int(labels[c]) for c in comp_of_cluster] == [2, 0, 1]
    # a sampled fit keeps -1 for the rows it left out; labels still by majority
    sampled = MixtureModel.fit(X, n_components=3, rank=2, seed=0, max_rows=150)
    assert (sampled.assignments == -1).sum() == 150
    assert sorted(component_labels(sampled, noisy).tolist()) == [0, 1, 2]
    # ties go to the smaller label; unknown labels are not counted
    assert majority_labels([0, 0, 1, 1, 1], [4, 2, UNKNOWN, UNKNOWN, 5], 3).tolist() == [2, 5, -1]
    with pytest.raises(ValueError, match="fitted to 300 support rows, got 10 labels"):
        component_labels(model, noisy[:10])


# -- the per-label truth -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def labelled():
    """60 test docs of 3 labels, 300 distractors (labels 0..2 and unknown), exact copies."""
    from imsearch_align.collection import cone_vectors

    rng = np.random.default_rng(5)
    test = cone_vectors(60, 24, seed=1, clusters=3)
    test_ids = np.arange(100, 160, dtype=np.int64)
    distr = np.concatenate([cone_vectors(260, 24, seed=2, clusters=3), np.repeat(test[:2], 20, 0)])
    coll = CollectionBlocks(test_ids, test, ArraySource(distr), block_rows=37)
    ids = np.concatenate([test_ids, coll.distractors.ids(0, 300)])
    labels = np.concatenate([rng.integers(0, 3, 60), rng.integers(-1, 3, 300)])
    order = np.argsort(ids)
    attr = LabelAttribute(ids[order], labels[order], ("a", "b", "c"), "test")
    q = test[rng.integers(0, 60, 40)] + 0.05 * rng.standard_normal((40, 24)).astype(np.float32)
    q[:3] = test[0]  # ties with the 20 copies of doc 100
    qids = np.arange(40, dtype=np.int64) + 7000
    rel = test_ids[rng.integers(0, 60, 40)]
    rel[:3] = test_ids[0]
    return coll, q.astype(np.float32), qids, Qrels.from_pairs(qids, rel), attr


def test_per_label_truth_equals_brute_force_over_the_label_rows(labelled):
    coll, q, qids, qrels, attr = labelled
    ids, docs = (np.concatenate(x) for x in zip(*coll, strict=True))
    qlab, mixed, without = query_labels(qrels, qids, attr)
    assert mixed == 0 and without == 0
    np.testing.assert_array_equal(qlab, attr.of(qrels.doc_ids))  # one relevant doc each
    for label in np.unique(qlab):
        rows = np.flatnonzero(qlab == label)
        f = attr.label_filter(int(label))
        assert f.field == "label" and f.values == (int(label),)
        truth = filtered_truth(q[rows], qids[rows], coll, 10, attr, f, margin=8)
        keep = attr.keeps(ids, f)
        assert truth.groups_closed and truth.n_docs == keep.sum()
        assert UNKNOWN not in attr.of(ids[keep])
        S = q[rows].astype(np.float64) @ docs[keep].astype(np.float64).T
        ref = Run.from_arrays(qids[rows], np.broadcast_to(ids[keep], S.shape).copy(), S)
        np.testing.assert_array_equal(truth.run.doc_ids[:, :10], ref.doc_ids[:, :10])
        np.testing.assert_allclose(truth.run.scores[:, :10], ref.scores[:, :10], rtol=1e-12)
        sub = Qrels.from_pairs(qids[rows], np.asarray(qrels.doc_ids)[rows])
        assert set(sub.doc_ids.tolist()) <= set(ids[keep].tolist())  # relevant items kept
        mine = truth.evaluate(sub, MEASURES)
        theirs = tie_aware_evaluate(ref, sub, MEASURES, tol=EXACT_TIE_TOL)
        for m in MEASURES:
            np.testing.assert_allclose(mine.values[m], theirs.values[m], atol=1e-12)


def test_query_labels_take_the_first_relevant_item_and_count_the_rest():
    attr = LabelAttribute(np.array([1, 2, 3]), np.array([0, 1, 1]), ("x", "y"))
    qrels = Qrels(np.array([5, 5, 6, 7]), np.array([2, 1, 3, 99]), np.array([1, 1, 1, 1]))
    labels, mixed, without = query_labels(qrels, np.array([5, 6, 7]), attr)
    assert labels.tolist() == [1, 1, UNKNOWN] and mixed == 1 and without == 1
    assert attr.name_of(1) == "y" and attr.name_of(UNKNOWN) == "unknown"
    with pytest.raises(ValueError, match="id 99 is not an item"):
        attr.of([99])


# -- the study's label cell --------------------------------------------------------------------


@pytest.fixture(scope="module")
def data():
    """300 images of 3 classes (200 support, 100 test), two captions each, 16-d."""
    from imsearch_align.datasets.base import PairedDataset

    rng = np.random.default_rng(1)
    y = rng.integers(0, 3, 300)
    centres = rng.standard_normal((3, 16)) * 2
    X = centres[y] + rng.standard_normal((300, 16))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    ti = np.repeat(np.arange(300), 2)
    Y = X[ti] + 0.3 * rng.standard_normal((600, 16))
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    split = np.where(rng.permutation(300) < 200, "train", "test")
    ds = PairedDataset.from_arrays(
        X.astype(np.float32), Y.astype(np.float32), ti, y, name="labelled", split=split,
        class_names=["circle", "square", "star"],
    )[0]  # fmt: skip
    return ds, X.astype(np.float32), Y.astype(np.float32)


def _prep(data, direction: str, n_distractors: int):
    ds, X, Y = data
    rows = {"image": X, "text": Y}
    doc_mod, q_mod = ("image", "text") if direction == "t2i" else ("text", "image")
    qrels = ds.qrels(direction, "test")
    qids = np.asarray(qrels.queries)
    doc_ids = ds.split_ids("test", doc_mod)
    prep = SimpleNamespace(
        direction=direction, doc_ids=doc_ids, docs=rows[doc_mod][doc_ids], query_ids=qids,
        queries=rows[q_mod][qids], qrels=qrels, doc_modality=doc_mod,
    )  # fmt: skip
    support = rows[doc_mod][ds.split_ids("train", doc_mod)]
    model = MixtureModel.fit(support, n_components=6, seed=0)
    src = SyntheticSource(model, n_distractors, seed=2, modality=doc_mod)
    return prep, CollectionBlocks(doc_ids, prep.docs, src, block_rows=256), model


class _Runner:
    batch, latency_queries, seed, repeats = 50, 20, 0, 1

    def __init__(self) -> None:
        self.said: list[str] = []
        self.written: dict[str, dict] = {}

    def say(self, text: str) -> None:
        self.said.append(text)

    def write(self, path: Path, cell: dict) -> None:
        """As the one writer of cells: the format stamped, JSON-ready; the per-query table
        set aside (the study's writer puts it beside the cell)."""
        from imsearch_align.collection.per_query import PENDING
        from imsearch_align.experiment.study_cell import CELL_FORMAT

        cell = {k: v for k, v in cell.items() if k != PENDING}
        self.written[path.name] = json.loads(
            json.dumps({**cell, "format": CELL_FORMAT}, default=float)
        )


def _measure(plan, prep, coll, direction: str, repeats: int = 1):
    from imsearch_align.adapters.exact import ExactStore
    from imsearch_align.collection.measure import insert_collection

    base = SimpleNamespace(ks=(1, 10), measures=MEASURES, direction=direction)
    ctx = DeployContext(base, None, {}, {}, {"config": {}}, Path("cell.json"),
                        {"store": "exact", "method": "identity", "direction": direction})  # fmt: skip
    runner = _Runner()
    runner.repeats = repeats
    with ExactStore() as store:
        attrs = plan.inserts(store, prep, coll)
        insert_collection(store, "c", coll, coll.dim, attributes=attrs)
        cells = plan.measure(runner, store, "c", prep, coll, ctx)
    return cells, runner, attrs


@pytest.mark.parametrize("direction", ["t2i", "i2t"])
def test_label_cell_beside_unchanged_category_cells(data, direction):
    from imsearch_align.collection.filtered_study import FilterPlan
    from imsearch_align.collection.label_filter import item_labels
    from imsearch_align.report_html import read_cell
    from imsearch_align.report_html.production import filter_figures

    ds = data[0]
    prep, coll, model = _prep(data, direction, 1500)
    plan = FilterPlan((0.5, 0.1), labels=LabelPlan(ds))
    attr = plan.label_attribute(prep, coll)
    # documents: the dataset's labels (a caption its image's); distractors: their component's
    doc_mod = prep.doc_modality
    np.testing.assert_array_equal(attr.of(prep.doc_ids), item_labels(ds, prep.doc_ids, doc_mod))
    sup = ds.split_ids("train", doc_mod)
    comp = component_labels(model, item_labels(ds, sup, doc_mod))
    dis = coll.distractors
    np.testing.assert_array_equal(attr.of(dis.ids(0, dis.n_rows)), comp[dis.components()])
    assert attr.distractors.startswith("mixture component") and (attr.labels >= 0).all()
    cells, runner, attrs = _measure(plan, prep, coll, direction)
    assert sorted(attrs(prep.doc_ids[:3])) == ["category", "label"]
    assert [c["filter"].get("field") for c in cells] == ["category", "category", "label"]
    cat, label = cells[:2], cells[2]
    assert sorted(runner.written) == [
        "filtered-label_cell.json", "filtered-s0.1_cell.json", "filtered-s0.5_cell.json"
    ]  # fmt: skip
    # the category cells are what a plan without labels measures
    plain, _, plain_attrs = _measure(FilterPlan((0.5, 0.1)), prep, coll, direction)
    assert sorted(plain_attrs(prep.doc_ids[:3])) == ["category"]
    for a, b in zip(cat, plain, strict=True):
        for key in ("metrics", "exact_metrics", "ann_recall", "kind"):
            assert a[key] == b[key]
        assert {**a["truth"], "seconds": 0} == {**b["truth"], "seconds": 0}
        assert a["filter"] == b["filter"]
    f = label["filter"]
    nq = len(prep.query_ids)
    assert label["status"]["state"] == "ok" and f["expression"] == "label in [L]"
    assert sum(p["queries"] for p in f["per_label"]) == nq
    assert {p["name"] for p in f["per_label"]} <= {"circle", "square", "star"}
    assert f["selectivity"] == pytest.approx(
        sum(p["queries"] * p["kept_share"] for p in f["per_label"]) / nq
    )
    assert 0 < f["selectivity"] < 1 and f["queries_without_relevant"]["count"] == 0
    d = direction
    assert label["metrics"][f"{d}/ann_recall@10"] == 1.0  # the exact store
    assert label["metrics"][f"{d}/HitRate@10"] == pytest.approx(
        label["exact_metrics"][f"{d}/HitRate@10"]
    )
    assert label["latency_ms"]["p50"] > 0 and label["queries_per_s"] > 0
    # intervals and the per-query table over the groups' queries joined (issue 37 item 2)
    from imsearch_align.collection.per_query import PENDING

    frame = label[PENDING]
    assert len(frame) == label["interval"]["queries"] and frame["query_id"].is_unique
    for key, iv in label["intervals"].items():
        m = key.split("/", 1)[1]
        assert iv["approximate"]["mean"] == pytest.approx(label["metrics"][key], abs=1e-12)
        assert iv["exact"]["mean"] == pytest.approx(label["exact_metrics"][key], abs=1e-12)
        assert frame[m].mean() == pytest.approx(label["metrics"][key], abs=1e-12)
        assert iv["difference"]["low"] <= iv["difference"]["mean"] <= iv["difference"]["high"]
    assert frame["ann_recall"].mean() == pytest.approx(label["metrics"][f"{d}/ann_recall@10"])
    # the report reads it, as written, as one more point of the filter charts
    read = [read_cell(runner.written[f"filtered-{x}_cell.json"]) for x in ("s0.5", "s0.1", "label")]
    assert read[2].selectivity == pytest.approx(f["selectivity"])
    figs = filter_figures(read)
    assert figs and any("filter: label in [L]" in n for fig in figs for n in fig.notes)
    assert any("filter label" in s for s in runner.said)


def test_no_labels_no_label_cell(data, tmp_path):
    from imsearch_align.collection.filtered_study import FilterPlan

    ds = data[0]
    prep, coll, _ = _prep(data, "t2i", 300)
    assert FilterPlan((0.5,)).label_attribute(prep, coll) is None
    assert FilterPlan((0.5,)).cases() == [ShareKept(0.5)]
    assert FilterPlan((0.5,), labels=LabelPlan(ds)).cases() == [ShareKept(0.5), WithinLabel()]
    assert FilterPlan((0.5, "label"), labels=LabelPlan(ds)).cases() == [
        ShareKept(0.5),
        WithinLabel(),
    ]
    with pytest.raises(ValueError, match=r"'label' needs the dataset's class labels"):
        FilterPlan((0.5, "label"))
    # a file of distractors: unknown labels, never kept by a label filter
    labels, how = LabelPlan(ds).distractor_labels(ArraySource(np.ones((4, 16), np.float32)))
    assert (labels == UNKNOWN).all() and how.startswith("unknown")
    unlabelled = SimpleNamespace(labels=None, class_names=None, name="u")
    with pytest.raises(ValueError, match="has no class labels"):
        LabelPlan(unlabelled)
    study = SimpleNamespace(load=lambda cfg: SimpleNamespace(dataset=unlabelled, support=None))
    assert LabelPlan.from_study(study, None) is None


def test_a_share_cell_is_timed_in_repeated_passes_after_a_warm_up(data):
    """Issue 37: a filtered cell's q/s and latency are the median of --repeats counted
    passes (back to back, after a warm-up whose answers are scored), every pass kept."""
    from imsearch_align.collection.filtered_study import FilterPlan

    prep, coll, _ = _prep(data, "t2i", 600)
    cells, _, _ = _measure(FilterPlan((0.5,)), prep, coll, "t2i", repeats=3)
    (cell,) = cells
    passes = cell["passes"]
    assert [p["counted"] for p in passes] == [False, True, True, True]
    assert cell["timing"]["order"] == "back to back" and cell["timing"]["counted"] == 3
    qps = sorted(p["queries_per_s"] for p in passes[1:])
    assert cell["queries_per_s"] == pytest.approx(qps[1])
    assert cell["queries_per_s_range"] == pytest.approx([qps[0], qps[2]])
    assert all(p["started"].endswith("Z") and p["outages"] is None for p in passes)
    assert cell["status"]["state"] == "ok"
    # every pass's answers were checked against the filter (one check over all passes)
    nq = len(prep.query_ids)
    assert cell["filter"]["returned_ids"] >= 4 * nq * 10 and cell["filter"]["outside_filter"] == 0
