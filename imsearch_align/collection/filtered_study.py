"""The collection study's filtered cells: each built index searched under filters of
known selectivity (``benchmarks/collection.py --filters 0.5 0.1 0.01``).

A :class:`FilterPlan` rides along a
:class:`~imsearch_align.collection.study.CellRunner`: the collection is
inserted with a ``category`` attribute per item
(:func:`~imsearch_align.collection.filters.assign_categories`, relevant
items in the kept categories), and once the search settings of a build are
swept, the same built index, set to its deployable setting
(:func:`~imsearch_align.experiment.deploy.deploy_index`), is searched with
``search_filtered`` once per selectivity. Each such
search is one cell, ``kind: "filtered"`` (the fields of
:mod:`imsearch_align.experiment.study_cell`): ``filter.selectivity`` (the
share kept, as asked; ``filter.kept_share`` as measured),
``filter.expression`` (Milvus syntax), the task's measures on the filtered
answers next to the exact filtered truth's, ANN recall against the exact
filtered truth (:func:`~imsearch_align.collection.filters.filtered_truth`),
batched queries/s and single-query latency. A query whose relevant items
the filter removed is counted and its ids listed
(``filter.queries_without_relevant``) and printed; it stays measured.

With a :class:`~imsearch_align.collection.label_filter.LabelPlan`
(``labels=``: the dataset has class labels), every item also carries its
class ``label`` and one more filtered cell per build searches each query
within its own class (``filter.field: "label"``,
:mod:`~imsearch_align.collection.label_cell`); without one, nothing of that.

A store that is not :class:`~imsearch_align.framework.interfaces.FilteredSearch`
gets failed filtered cells naming the stores that filter (its unfiltered
cells run as before, without attributes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.adapters.attributes import no_filter_message
from imsearch_align.collection.aligned import CollectionBlocks
from imsearch_align.collection.cell_files import DeployContext, read_ok
from imsearch_align.collection.filter_kinds import FilterKind, ShareKept, WithinLabel, parse_filter
from imsearch_align.collection.filters import (
    AttributeTable,
    CategoryAttribute,
    assign_categories,
    collection_ids,
    filtered_truth,
    milvus_expression,
    queries_without_relevant,
    relevant_doc_ids,
    selectivity_filter,
)
from imsearch_align.collection.intervals import cell_intervals, judged_clusters
from imsearch_align.collection.label_filter import query_labels
from imsearch_align.collection.passes import apply_passes, repeated_passes
from imsearch_align.collection.per_query import PENDING, per_query_frame
from imsearch_align.collection.prepare import Prepared
from imsearch_align.collection.recall import ann_recall_at_k, compare_measures
from imsearch_align.collection.under_filter import (
    SHARED_FIELDS,
    FilterCheck,
    UnderFilter,
    plain_id,
)
from imsearch_align.experiment.study_cell import status_record
from imsearch_align.framework.interfaces import FilteredSearch, StoreUnavailableError
from imsearch_align.framework.metrics import Run

__all__ = ["FilterPlan"]

#: Query ids named in a cell (and printed) when a filter leaves queries no relevant item.
NAMED = 10


@dataclass
class FilterPlan:
    """Selectivities to measure on every built index, and their per-collection state.

    Args:
        selectivities: shares of the collection the filters keep (each a
            multiple of ``1 / n_categories``), checked here.
        seed: seeds the categories.
        n_categories: categories of the attribute.
        labels: a :class:`~imsearch_align.collection.label_filter.LabelPlan`
            (None: no ``label`` attribute, no label cell).
    """

    selectivities: tuple[Any, ...]
    seed: int = 0
    n_categories: int = 100
    labels: Any = None
    _coll: Any = field(default=None, repr=False)
    _attr: CategoryAttribute | None = field(default=None, repr=False)
    _label: Any = field(default=None, repr=False)
    _truths: dict[Any, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        kinds = tuple(dict.fromkeys(parse_filter(s) for s in self.selectivities))
        if not kinds:
            raise ValueError("filters: give at least one selectivity")
        for k in kinds:
            if isinstance(k, ShareKept):
                selectivity_filter(k.share, self.n_categories)
            elif k.needs_labels and self.labels is None:
                raise ValueError(
                    f"{k.text()!r} needs the dataset's class labels, and this dataset "
                    "has none (a dataset with labels: --shapes, imagenet)"
                )
        if self.labels is not None and not any(k.needs_labels for k in kinds):
            kinds += (WithinLabel(),)  # the dataset's own metadata joins the shares
        #: The filter kinds measured on each build.
        self.kinds: tuple[FilterKind, ...] = kinds
        self.selectivities = tuple(k.share for k in kinds if isinstance(k, ShareKept))

    def attribute(self, prep: Prepared, coll: CollectionBlocks) -> CategoryAttribute:
        """The categories of ``coll``'s items (computed once per collection)."""
        if self._coll is not coll:
            self._coll, self._truths, self._label = coll, {}, None
            self._attr = assign_categories(
                collection_ids(coll),
                relevant_doc_ids(prep.qrels),
                n_categories=self.n_categories,
                seed=self.seed,
            )
        return self._attr

    def truth(
        self, prep: Prepared, coll: CollectionBlocks, selectivity: float, k: int, block_rows: int
    ) -> Any:
        """The exact filtered truth of one selectivity (computed once per collection)."""
        table = self.table(prep, coll)
        if selectivity not in self._truths:
            f = selectivity_filter(selectivity, self.n_categories)
            self._truths[selectivity] = filtered_truth(
                prep.queries, prep.query_ids, coll, k, table, f, block_rows=block_rows
            )
        return self._truths[selectivity]

    def label_attribute(self, prep: Prepared, coll: CollectionBlocks) -> Any:
        """The class labels of ``coll``'s items (computed once per collection; None
        without a label plan)."""
        self.attribute(prep, coll)
        if self.labels is not None and self._label is None:
            self._label = self.labels.attribute(prep, coll)
        return self._label

    def label_truth(
        self, prep: Prepared, coll: CollectionBlocks, label: int, k: int, block_rows: int
    ) -> Any:
        """The exact truth of ``prep``'s queries searched within ``label`` over the rows of
        that label (computed once per collection and label)."""
        attr = self.label_attribute(prep, coll)
        if ("label", label) not in self._truths:
            rows = np.flatnonzero(query_labels(prep.qrels, prep.query_ids, attr)[0] == label)
            self._truths["label", label] = filtered_truth(
                prep.queries[rows], prep.query_ids[rows], coll, k, self.table(prep, coll),
                attr.label_filter(label), block_rows=block_rows,
            )  # fmt: skip
        return self._truths["label", label]

    def inserts(self, store: Any, prep: Prepared, coll: CollectionBlocks) -> Any:
        """``ids -> {"category": ...}`` (and ``"label"`` with a label plan) for the inserts
        into ``store`` (None: it does not filter), an
        :class:`~imsearch_align.collection.filters.AttributeInserts` whose ``declare``
        names them before the first insert (a store that types its attributes creates the
        collection with them: Milvus's INT64 fields with a scalar index)."""

        if not isinstance(store, FilteredSearch):
            return None
        return self.table(prep, coll).inserts()

    def table(self, prep: Prepared, coll: CollectionBlocks) -> AttributeTable:
        """Every attribute of ``coll``'s items (categories; labels with a label plan)."""
        label = self.label_attribute(prep, coll)
        return AttributeTable(self.attribute(prep, coll), *([label] if label is not None else []))

    def cases(self) -> list[FilterKind]:
        """What each build is measured under: every kind (with a label plan, the label
        kind too)."""
        return list(self.kinds)

    def reuse_one(self, path: Path) -> list[dict[str, Any]] | None:
        """The clean filtered cells of every selectivity (and the label cell) measured
        before on the cell at ``path`` (the unfiltered one's file), else None."""

        done = [read_ok(self.path(path, x)) for x in self.cases()]
        return done if all(done) else None

    # -- cells ------------------------------------------------------------------------
    def identity(self, ident: dict[str, Any], selectivity: float) -> dict[str, Any]:
        """A filtered cell's identity: the unfiltered one's, plus the filter."""
        return {**ident, "filter": {"selectivity": selectivity, "categories": self.n_categories,
                                    "seed": self.seed}}  # fmt: skip

    @staticmethod
    def path(path: Path, kind: FilterKind) -> Path:
        """``filtered-s{share}_`` (``filtered-label_`` for the label cell) + the unfiltered
        cell's name (its key covers the filter)."""
        return kind.path(path)

    def measure(
        self,
        runner: Any,
        store: Any,
        name: str,
        prep: Prepared,
        coll: CollectionBlocks,
        ctx: DeployContext,
    ) -> list[dict[str, Any]]:
        """Every selectivity's cell on the built collection ``name``: written, returned.

        ``ctx``: ``base``, ``setting``, ``build``, ``search`` (the cell's),
        ``ident`` and ``path`` (of the unfiltered cell), ``cell`` (it, for
        the shared fields).
        """

        out = []
        for kind in self.cases():
            path = self.path(ctx.path, kind)
            try:
                if not isinstance(store, FilteredSearch):
                    raise TypeError(no_filter_message(store))
                cell = kind.measure(self, runner, store, name, prep, coll, ctx)
            except StoreUnavailableError:
                raise
            except Exception as exc:
                cell = self._failed(ctx, kind, exc)
                runner.say(f"  failed filter {kind.text()}: {cell['status']['error']}")
            runner.write(path, cell)
            out.append(cell)
        return out

    def share_cell(
        self,
        runner: Any,
        store: Any,
        name: str,
        prep: Prepared,
        coll: CollectionBlocks,
        ctx: DeployContext,
        sel: float,
    ) -> dict[str, Any]:

        base, k = ctx.base, max(ctx.base.ks)
        attr = self.attribute(prep, coll)
        f = selectivity_filter(sel, self.n_categories)
        truth = self.truth(prep, coll, sel, k, coll.block_rows)
        table = self.table(prep, coll)  # the filter reads the one attribute table
        check = FilterCheck()
        under = UnderFilter(store, f, table.kept_ids(f), check)
        passes, ids, scores = repeated_passes(
            under, name, prep.queries, k, repeats=runner.repeats, batch=runner.batch,
            latency_queries=runner.latency_queries, seed=runner.seed, cpu=ctx.cpu,
        )  # fmt: skip
        run = Run.from_arrays(prep.query_ids, ids, scores)
        scored = compare_measures(run, truth, prep.qrels, base.measures)
        means = scored["means"]
        recall = ann_recall_at_k(ids, truth, k)
        clusters = judged_clusters(prep.qrels, scored["approximate"].query_ids)
        intervals, interval = cell_intervals(
            scored["approximate"], scored["exact"], prep.qrels, base.direction, seed=runner.seed,
            clusters=clusters,
        )  # fmt: skip
        frame = per_query_frame(
            prep.query_ids, ids, recall.per_query, scored["approximate"], scored["exact"],
            clusters,
        )  # fmt: skip
        lost = queries_without_relevant(prep.qrels, table.kept_ids(f))
        d = base.direction
        metrics = {f"{d}/{m}": float(v["approximate"]) for m, v in means.items()}
        metrics[f"{d}/ann_recall@{k}"] = recall.mean
        cell = {key: ctx.cell[key] for key in SHARED_FIELDS if key in ctx.cell}
        cell.update(
            kind="filtered",
            filter={
                "selectivity": sel,
                "kept_share": table.kept_share(f),
                "kept_rows": len(table.kept_ids(f)),
                "expression": milvus_expression(f),
                "field": f.field,
                "categories": self.n_categories,
                "seed": self.seed,
                "relevant_items": attr.n_relevant,
                "queries_without_relevant": {
                    "count": len(lost),
                    "first": [plain_id(q) for q in lost[:NAMED]],
                },
                "returned_ids": check.returned,
                "outside_filter": check.outside,
            },
            metrics=metrics,
            exact_metrics={f"{d}/{m}": float(v["exact"]) for m, v in means.items()},
            intervals=intervals,
            interval=interval,
            ann_recall={"k": k, "mean": recall.mean, "uncertain": recall.n_uncertain},
            batch=runner.batch,
            truth=truth.record(),
            config=ctx.ident["config"],
        )
        order = "back to back" if runner.repeats > 1 else "one pass"
        apply_passes(cell, passes, runner.repeats, order, getattr(ctx.cpu, "what", None))
        cell["status"] = _joined(cell["status"], check.status())
        cell[PENDING] = frame  # written beside the cell by the runner's writer
        short = f" {len(lost)} queries without a kept relevant item" if len(lost) else ""
        rec, qps = f"recall {recall.mean:.3f}", cell["queries_per_s"]
        runner.say(f"    filter {sel:g} (kept {cell['filter']['kept_share']:.4f}): "
                    f"{rec} {qps:,.0f} q/s{short}")  # fmt: skip
        if len(lost):
            shown = ", ".join(str(plain_id(q)) for q in lost[:NAMED])
            runner.say(f"    queries without a kept relevant item (counted, scored 0): {shown}"
                        + (" ..." if len(lost) > NAMED else ""))  # fmt: skip
        return cell

    def _failed(self, ctx: DeployContext, kind: FilterKind, exc: BaseException) -> dict[str, Any]:
        cell = {key: ctx.cell[key] for key in SHARED_FIELDS if key in ctx.cell}
        cell.update(
            kind="filtered",
            filter=kind.failed_record(),
            status=status_record("failed", error=exc),
        )
        return cell


def _joined(*statuses: dict[str, Any]) -> dict[str, Any]:
    """One status from several: the worst state, every reason."""
    reasons = tuple(r for st in statuses for r in st["reasons"])
    degraded = any(st["state"] != "ok" for st in statuses)
    return status_record("degraded", reasons=reasons) if degraded else status_record()
