"""Filtered search over a collection: a categorical attribute of known selectivity, the
filters over it, the queries a filter leaves unanswerable, and the exact filtered truth.

Every item of a collection (the evaluated documents and the distractors
alike) gets an integer ``category`` in ``0..n_categories-1``
(:func:`assign_categories`): the items are put in a seeded random order with
every *relevant* item (judged relevant to a sampled query) first, and the
item at rank ``r`` of ``N`` gets ``floor(r * n_categories / N)``. So each
category holds ``N / n_categories`` items (to one), and the filter keeping
categories ``0..m-1`` (:func:`selectivity_filter`, ``m = selectivity *
n_categories``) keeps the first ``ceil(m N / n_categories)`` ranks: a known
share of the collection, nested across selectivities (1% inside 10% inside
50%), and holding every relevant item while they fit, so the task stays
answerable. When the relevant items are more than a filter keeps (a small
collection at 1%), the ones left out are a seeded sample, and the queries
whose relevant items are all removed are named and counted
(:func:`queries_without_relevant`); they stay in the measured queries
(scoring zero), never dropped.

The exact filtered truth is :func:`~imsearch_align.collection.truth.exact_truth`
over the kept rows only (:func:`filtered_truth` streams the collection with
the filter's mask applied to each block): the same tie-aware, float64-true
top-k, so ANN recall against it is
:func:`~imsearch_align.collection.recall.ann_recall_at_k` as unfiltered.

The same streaming takes the dataset's own class labels
(:class:`~imsearch_align.collection.label_filter.LabelAttribute`, a second
attribute ``label``): any attribute with ``keeps(ids, filter)``.

The store side is :class:`~imsearch_align.framework.interfaces.FilteredSearch`
(``insert(..., attributes={"category": ...})``, ``search_filtered``);
:func:`milvus_expression` spells a filter as Milvus does, for the record.
What the inserts carry is an :class:`AttributeInserts`: the values of each
block's ids, and the attribute names declared before the first insert
(:attr:`AttributeInserts.declare`), so a store that types its attributes
(Milvus: INT64 fields with a scalar index) creates the collection with them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from imsearch_align.collection.aligned import collection_ids
from imsearch_align.collection.sources import DEFAULT_BLOCK_ROWS
from imsearch_align.collection.truth import as_stream, exact_truth
from imsearch_align.framework.interfaces import Filter
from imsearch_align.framework.metrics import Qrels

__all__ = [
    "FIELD",
    "N_CATEGORIES",
    "SELECTIVITIES",
    "Attribute",
    "AttributeInserts",
    "AttributeTable",
    "CategoryAttribute",
    "assign_categories",
    "collection_ids",
    "filtered_stream",
    "filtered_truth",
    "milvus_expression",
    "queries_without_relevant",
    "relevant_doc_ids",
    "selectivity_filter",
]

#: The attribute's name in every store.
FIELD = "category"
#: Categories of the attribute (a selectivity is a multiple of 1 / N_CATEGORIES).
N_CATEGORIES = 100
#: The study's default selectivities (share of the collection a filter keeps).
SELECTIVITIES = (0.5, 0.1, 0.01)


def selectivity_filter(
    selectivity: float, n_categories: int = N_CATEGORIES, field: str = FIELD
) -> Filter:
    """The filter keeping categories ``0..m-1``, ``m = selectivity * n_categories``.

    Raises:
        ValueError: a selectivity outside ``(0, 1]`` or not a multiple of
            ``1 / n_categories`` (naming the nearest ones that are).
    """
    s = float(selectivity)
    if not 0 < s <= 1:
        raise ValueError(f"selectivity must be in (0, 1] (the share kept), got {selectivity!r}")
    m = s * n_categories
    if abs(m - round(m)) > 1e-9 or round(m) < 1:
        lo, hi = max(1, int(np.floor(m))), min(n_categories, int(np.ceil(m)))
        raise ValueError(
            f"selectivity must be a multiple of 1/{n_categories} (whole categories of the "
            f"attribute), got {selectivity!r}; nearest: {lo / n_categories:g}, "
            f"{hi / n_categories:g}"
        )
    return Filter(field, tuple(range(round(m))))


def milvus_expression(f: Filter) -> str:
    """``f`` in Milvus's filter syntax: ``category in [0, 1, 2]`` (or its raw expression)."""
    if f.expression is not None:
        return f.expression
    return f"{f.field} in [{', '.join(str(v) for v in f.values)}]"


class Attribute(Protocol):
    """An integer attribute of every collection item that a filter reads
    (:class:`CategoryAttribute`, the dataset's labels
    :class:`~imsearch_align.collection.label_filter.LabelAttribute`)."""

    def keeps(self, ids: np.ndarray, f: Filter) -> np.ndarray:
        """Whether filter ``f`` keeps each item of ``ids`` (a boolean mask)."""


class AttributeTable:
    """Every attribute of one collection's items, by field: what a store insert carries
    (:meth:`attributes`) and what any filter reads (:meth:`keeps`, :meth:`kept_ids`,
    :meth:`kept_share`, dispatched on the filter's field). Filter kinds
    (:mod:`~imsearch_align.collection.filter_kinds`) read this one table."""

    def __init__(self, *columns: Any) -> None:
        self.columns: dict[str, Any] = {}
        for c in columns:
            if c.field in self.columns:
                raise ValueError(f"AttributeTable: field {c.field!r} is given twice")
            self.columns[c.field] = c

    def of_field(self, f: Filter) -> Any:
        """The attribute filter ``f`` reads; a field the table lacks raises, naming both."""
        try:
            return self.columns[f.field]
        except KeyError:
            raise ValueError(
                f"a filter on {f.field!r}: the collection's items carry "
                f"{', '.join(self.columns) or 'no attribute'}"
            ) from None

    def attributes(self, ids: Any) -> dict[str, np.ndarray]:
        """``{field: values}`` of ``ids`` for every attribute: a store insert's ``attributes=``."""
        return {k: v for c in self.columns.values() for k, v in c.attributes(ids).items()}

    def declare(self) -> dict[str, str]:
        """``{field: "int64"}`` for every attribute: what a store's ``create_collection(...,
        attributes=)`` declares before the first insert (every attribute is an integer)."""
        return {f: "int64" for f in self.columns}

    def inserts(self) -> AttributeInserts:
        """What the collection's inserts carry (``ids -> {field: values}``), with the names to
        declare at creation."""
        return AttributeInserts(self)

    def keeps(self, ids: Any, f: Filter) -> np.ndarray:
        """Boolean mask: which of ``ids`` the filter keeps."""
        return self.of_field(f).keeps(ids, f)

    def kept_share(self, f: Filter) -> float:
        """The share of the collection ``f`` keeps."""
        return self.of_field(f).kept_share(f)

    def kept_ids(self, f: Filter) -> np.ndarray:
        """Every id ``f`` keeps, ascending."""
        return self.of_field(f).kept_ids(f)


@dataclass(frozen=True)
class AttributeInserts:
    """The attributes of a collection's inserts: called with a block's ids, ``{field:
    values}`` (a store insert's ``attributes=``); :attr:`declare`, the names and types a
    store declares when it creates the collection
    (:func:`~imsearch_align.collection.measure.insert_collection`)."""

    table: AttributeTable

    def __call__(self, ids: Any) -> dict[str, np.ndarray]:
        return self.table.attributes(ids)

    @property
    def declare(self) -> dict[str, str]:
        """``{field: "int64"}`` for every attribute of the table."""
        return self.table.declare()


@dataclass(frozen=True)
class CategoryAttribute:
    """The category of every item of one collection (see the module docstring).

    Attributes:
        ids: every item's id, ascending.
        categories: the category of each of ``ids``.
        n_categories: categories ``0..n_categories-1``.
        n_relevant: items ranked first because they are relevant.
        seed: the seed of the order.
        field: the attribute's name.
    """

    ids: np.ndarray
    categories: np.ndarray
    n_categories: int
    n_relevant: int
    seed: int
    field: str = FIELD

    def of(self, ids: Any) -> np.ndarray:
        """The categories of ``ids`` (int64); an id outside the collection raises."""
        ids = np.asarray(ids, dtype=np.int64)
        pos = np.searchsorted(self.ids, ids)
        pos = np.minimum(pos, len(self.ids) - 1)
        bad = self.ids[pos] != ids
        if bad.any():
            raise ValueError(
                f"CategoryAttribute: id {int(ids[bad][0])} is not an item of the collection "
                f"({len(self.ids)} items)"
            )
        return self.categories[pos]

    def attributes(self, ids: Any) -> dict[str, np.ndarray]:
        """``{field: categories}`` of ``ids``: the ``attributes=`` of a store insert."""
        return {self.field: self.of(ids)}

    def keeps(self, ids: Any, f: Filter) -> np.ndarray:
        """Boolean mask: which of ``ids`` the filter keeps."""
        return np.isin(self.of(ids), np.asarray(f.values, dtype=np.int64))

    def kept_share(self, f: Filter) -> float:
        """The share of the collection ``f`` keeps (the measured selectivity)."""
        kept = np.isin(self.categories, np.asarray(f.values, dtype=np.int64))
        return float(kept.mean()) if len(kept) else 0.0

    def kept_ids(self, f: Filter) -> np.ndarray:
        """Every kept id, ascending."""
        return self.ids[np.isin(self.categories, np.asarray(f.values, dtype=np.int64))]


def relevant_doc_ids(qrels: Qrels) -> np.ndarray:
    """The doc ids judged relevant (relevance > 0) to some query of ``qrels``, unique."""
    docs = np.asarray(qrels.doc_ids)[np.asarray(qrels.relevance) > 0]
    try:
        return np.unique(docs.astype(np.int64))
    except (TypeError, ValueError):
        raise TypeError(
            "filtered search needs integer document ids in the judgements (the collection's "
            f"ids), got {docs.dtype}"
        ) from None


def assign_categories(
    ids: Any, relevant: Any, *, n_categories: int = N_CATEGORIES, seed: int = 0
) -> CategoryAttribute:
    """Seeded categories of known selectivity, the ``relevant`` items in the lowest ones.

    Args:
        ids: every item id of the collection (unique; in any order).
        relevant: ids of the items relevant to some query (ids outside
            ``ids`` are ignored).
        n_categories: categories ``0..n_categories-1``.
        seed: seeds the order (relevant items among themselves, then the rest).
    """
    ids = np.sort(np.asarray(ids, dtype=np.int64))  # the order given does not matter
    if (ids[1:] == ids[:-1]).any():
        raise ValueError("assign_categories: ids must be unique")
    if n_categories < 1:
        raise ValueError(f"n_categories must be >= 1, got {n_categories}")
    rng = np.random.default_rng(seed)
    rel = np.isin(ids, np.asarray(relevant, dtype=np.int64))
    first, rest = np.flatnonzero(rel), np.flatnonzero(~rel)
    order = np.concatenate([rng.permutation(first), rng.permutation(rest)])
    n = len(ids)
    cats = np.empty(n, dtype=np.int64)
    cats[order] = np.arange(n, dtype=np.int64) * n_categories // max(n, 1)
    return CategoryAttribute(ids, cats, int(n_categories), int(rel.sum()), int(seed))


def queries_without_relevant(qrels: Qrels, kept_doc_ids: Any) -> np.ndarray:
    """Query ids of ``qrels`` none of whose relevant documents is among ``kept_doc_ids``."""
    rel = np.asarray(qrels.relevance) > 0
    q = np.asarray(qrels.query_ids)
    kept = np.isin(np.asarray(qrels.doc_ids)[rel].astype(np.int64), np.asarray(kept_doc_ids))
    answerable = set(q[rel][kept].tolist())
    return np.asarray([x for x in qrels.queries if x not in answerable], dtype=q.dtype)


def filtered_stream(
    docs: Any,
    attribute: Attribute,
    f: Filter,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """A stream of ``docs``'s ``(ids, block)`` pairs (any form
    :func:`~imsearch_align.collection.truth.as_stream` takes) with only the rows ``f`` keeps."""

    source = as_stream(docs, block_rows)

    def stream() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for ids, block in source():
            keep = attribute.keeps(ids, f)
            if keep.any():
                yield np.asarray(ids)[keep], np.asarray(block)[keep]

    return stream


def filtered_truth(
    queries: Any,
    query_ids: Any,
    docs: Any,
    k: int,
    attribute: Attribute,
    f: Filter,
    **kwargs: Any,
) -> Any:
    """The exact, tie-aware top-``k`` of every query over the rows ``f`` keeps.

    :func:`~imsearch_align.collection.truth.exact_truth` (``kwargs``: its
    ``margin``, ``tie_tolerance``, ``block_rows``, ``gemm_cells``...) over
    ``docs`` (what ``exact_truth`` takes: a ``CollectionBlocks``, an
    ``(ids, matrix)`` pair...) with the mask applied to every block; not
    cached (the key would need a digest pass).
    """

    rows = kwargs.get("block_rows", DEFAULT_BLOCK_ROWS)
    stream = filtered_stream(docs, attribute, f, rows)
    return exact_truth(queries, query_ids, stream, k, **kwargs)
