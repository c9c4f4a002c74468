"""The study's label cell: each build's deployable setting searched with every query
kept within its own class (``label in [L]``), next to the category cells.

:func:`label_cell` groups the sampled queries by the label they are searched
within (:func:`~imsearch_align.collection.label_filter.query_labels`: the
label of each query's first relevant item), and for each group runs one
batched ``search_filtered`` under ``label in [L]`` and computes the exact
filtered truth over the rows of that label
(:func:`~imsearch_align.collection.filters.filtered_truth`, cached per
collection by the :class:`~imsearch_align.collection.filtered_study.FilterPlan`).
The cell (``kind: "filtered"``, ``filter.field: "label"``) reports, over all
queries: the task's measures next to the exact filtered truth's and ANN
recall against it (query-weighted means of the groups'), the batched
queries/s (every query over the summed seconds of the groups), and
single-query latency percentiles (the seeded sample of the category cells,
each query under its own label's filter). ``filter.selectivity`` and
``filter.kept_share`` are the query-weighted mean share of the collection a
query's filter keeps; ``filter.per_label`` gives each label's name, kept
share, query count and ANN recall. Like every sweep and share cell it carries the
clustered bootstrap intervals of its measures and their paired difference to exact
(:func:`~imsearch_align.collection.intervals.cell_intervals`, over the groups' queries
joined) and its per-query table (:mod:`~imsearch_align.collection.per_query`).

Each group streams the collection once for its truth: the cost grows with
the number of labels the queries carry (a handful for the shapes dataset).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np

from imsearch_align.collection.aligned import CollectionBlocks
from imsearch_align.collection.cell_files import DeployContext
from imsearch_align.collection.intervals import cell_intervals, judged_clusters
from imsearch_align.collection.label_filter import UNKNOWN, LabelAttribute, query_labels
from imsearch_align.collection.measure import search_batched, search_latency
from imsearch_align.collection.per_query import PENDING, per_query_frame
from imsearch_align.collection.prepare import Prepared
from imsearch_align.collection.recall import ann_recall_at_k, compare_measures
from imsearch_align.collection.under_filter import SHARED_FIELDS, FilterCheck, UnderFilter
from imsearch_align.framework.metrics import Qrels, Run

__all__ = ["EXPRESSION", "label_cell"]

#: ``filter.expression`` of a label cell (``L``: each query's own label).
EXPRESSION = "label in [L]"


def _restrict(qrels: Qrels, query_ids: np.ndarray) -> Any:
    """The judgements of ``query_ids`` only."""

    keep = np.isin(qrels.query_ids, query_ids)
    return Qrels(qrels.query_ids[keep], qrels.doc_ids[keep], qrels.relevance[keep])


class _PerQuery:
    """``store`` searched with each query under its own label's filter, the queries named by
    row: :func:`~imsearch_align.collection.measure.search_latency` given ``arange(nq)``
    times single filtered queries of the sample the category cells time."""

    def __init__(
        self, store: Any, queries: np.ndarray, filters: list[Any], attr: Any, check: FilterCheck
    ) -> None:
        self.store, self.queries, self.filters = store, queries, filters
        self.check = check
        # each filter's kept ids, found before any timed search
        distinct = {_key(f): f for f in filters}
        self.kept = {key: attr.kept_ids(f) for key, f in distinct.items()}

    def search(self, name: str, rows: np.ndarray, k: int) -> Any:
        """The filtered search of query ``rows[0]`` under its label's filter (its ids checked)."""
        r = int(rows[0])
        res = self.store.search_filtered(name, self.queries[r : r + 1], k, self.filters[r])
        self.check.count(res.ids, self.kept[_key(self.filters[r])])
        return res


def _key(f: Any) -> tuple:
    """A filter as a dictionary key (its field and values)."""
    return (f.field, tuple(np.asarray(f.values).tolist()))


def _label_row(attr: LabelAttribute, label: int, f: Any, n: int, recall: float) -> dict:
    """One label's entry of ``filter.per_label``."""
    return {
        "label": label,
        "name": attr.name_of(label),
        "expression": f"label in [{label}]",
        "kept_share": attr.kept_share(f),
        "kept_rows": len(attr.kept_ids(f)),
        "queries": n,
        "ann_recall": recall,
    }


@dataclass
class _Totals:
    """Sums over the label groups' queries (weighted by judged queries where scored) and
    the per-label rows of ``filter.per_label``."""

    attr: LabelAttribute
    qlab: np.ndarray
    mixed: int
    without: int
    approx: dict[str, float] = field(default_factory=dict)
    exact: dict[str, float] = field(default_factory=dict)
    weight: int = 0
    seconds: float = 0.0
    recall: float = 0.0
    uncertain: int = 0
    open: int = 0
    truth_s: float = 0.0
    kept: float = 0.0
    per_label: list[dict[str, Any]] = field(default_factory=list)
    check: FilterCheck = field(default_factory=FilterCheck)
    #: Per group: its tie-aware results, searched query ids, returned ids, ANN recall.
    scored: list[tuple[Any, Any, np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)


def _joined(parts: list[Any]) -> Any:
    """The groups' tie-aware results as one (``query_ids``, ``values`` per measure)."""
    names = [m for m in parts[0].values if all(m in p.values for p in parts)]
    return SimpleNamespace(
        query_ids=np.concatenate([np.asarray(p.query_ids) for p in parts]),
        values={m: np.concatenate([np.asarray(p.values[m]) for p in parts]) for m in names},
    )


def _groups(
    plan: Any,
    runner: Any,
    store: Any,
    name: str,
    prep: Prepared,
    coll: CollectionBlocks,
    ctx: DeployContext,
) -> _Totals:
    """Every label group searched and scored: sums over queries, per-label rows."""

    base, k = ctx.base, max(ctx.base.ks)
    attr: LabelAttribute = plan.label_attribute(prep, coll)
    acc = _Totals(attr, *query_labels(prep.qrels, prep.query_ids, attr))
    qlab = acc.qlab
    for label in np.unique(qlab):
        rows = np.flatnonzero(qlab == label)
        f = attr.label_filter(int(label))
        truth = plan.label_truth(prep, coll, int(label), k, coll.block_rows)
        q, qids = prep.queries[rows], prep.query_ids[rows]
        under = UnderFilter(store, f, attr.kept_ids(f), acc.check)
        ids, scores, qps = search_batched(under, name, q, k, runner.batch)
        qrels = _restrict(prep.qrels, qids)
        means = compare_measures(Run.from_arrays(qids, ids, scores), truth, qrels, base.measures)
        recall = ann_recall_at_k(ids, truth, k)
        acc.scored.append((means["approximate"], means["exact"], qids, ids, recall.per_query))
        w = len(qrels.queries)
        for m, v in means["means"].items():
            acc.approx[m] = acc.approx.get(m, 0.0) + w * float(v["approximate"])
            acc.exact[m] = acc.exact.get(m, 0.0) + w * float(v["exact"])
        acc.weight += w
        acc.seconds += len(rows) / qps if qps > 0 else 0.0
        acc.recall += float(recall.per_query.sum())
        acc.uncertain += recall.n_uncertain
        acc.open += int((~truth.closed).sum())
        acc.truth_s += truth.seconds
        acc.kept += len(rows) * attr.kept_share(f)
        acc.per_label.append(_label_row(attr, int(label), f, len(rows), recall.mean))
    return acc


def label_cell(
    plan: Any,
    runner: Any,
    store: Any,
    name: str,
    prep: Prepared,
    coll: CollectionBlocks,
    ctx: DeployContext,
) -> dict[str, Any]:
    """The label cell of the built collection ``name`` (see the module docstring)."""

    k, d = max(ctx.base.ks), ctx.base.direction
    acc = _groups(plan, runner, store, name, prep, coll, ctx)
    attr: LabelAttribute = acc.attr
    nq, w = len(prep.query_ids), max(acc.weight, 1)
    filters = [attr.label_filter(int(x)) for x in acc.qlab]
    latency = search_latency(
        _PerQuery(store, prep.queries, filters, attr, acc.check), name, np.arange(nq), k,
        runner.latency_queries, runner.seed,
    )  # fmt: skip
    recall = acc.recall / nq if nq else 1.0
    metrics = {f"{d}/{m}": v / w for m, v in acc.approx.items()}
    metrics[f"{d}/ann_recall@{k}"] = recall
    qps = nq / acc.seconds if acc.seconds > 0 else float("inf")
    kept = acc.kept / nq if nq else 0.0
    approx, exact = _joined([p[0] for p in acc.scored]), _joined([p[1] for p in acc.scored])
    clusters = judged_clusters(prep.qrels, approx.query_ids)
    intervals, interval = cell_intervals(
        approx, exact, prep.qrels, d, seed=runner.seed, clusters=clusters
    )
    searched = [np.concatenate([p[i] for p in acc.scored]) for i in (2, 3, 4)]
    cell = {key: ctx.cell[key] for key in SHARED_FIELDS if key in ctx.cell}
    cell.update(
        kind="filtered",
        filter={
            "field": attr.field,
            "selectivity": kept,
            "kept_share": kept,
            "expression": EXPRESSION,
            "per_query": "each query is searched within the label of its first relevant item",
            "labels": len(attr.class_names),
            "distractor_labels": attr.distractors,
            "unknown_items": int((attr.labels == UNKNOWN).sum()),
            "per_label": acc.per_label,
            "queries_mixed_labels": acc.mixed,
            "queries_without_relevant": {"count": acc.without},
            "returned_ids": acc.check.returned,
            "outside_filter": acc.check.outside,
        },
        metrics=metrics,
        exact_metrics={f"{d}/{m}": v / w for m, v in acc.exact.items()},
        intervals=intervals,
        interval=interval,
        ann_recall={"k": k, "mean": recall, "uncertain": acc.uncertain},
        queries_per_s=qps,
        batch=runner.batch,
        latency_ms=latency,
        truth={
            "queries": nq,
            "groups": len(acc.per_label),
            "k": k,
            "open_rows": acc.open,
            "seconds": round(acc.truth_s, 3),
        },
        config=ctx.ident["config"],
        status=acc.check.status(),
    )
    cell[PENDING] = per_query_frame(*searched[:2], searched[2], approx, exact, clusters)
    runner.say(f"    filter label (each query's own, {len(acc.per_label)} labels, kept "
                f"{kept:.4f} on average): recall {recall:.3f} {qps:,.0f} q/s")  # fmt: skip
    return cell
