"""The dataset's own metadata as a filter: every collection item's class label, and the
label each query is searched within ("search within the category of what I am looking for").

When the evaluated dataset has class labels (``dataset.labels``,
``dataset.class_names``: the offline shapes dataset, a classification set),
every item of a collection gets a second integer attribute, ``label``
(:class:`LabelAttribute`, built by :meth:`LabelPlan.attribute`):

* a test image: its dataset label; a caption (documents of ``i2t``): the
  label of its image;
* a synthetic distractor
  (:class:`~imsearch_align.collection.synthetic.SyntheticSource`): the label
  of the mixture component it was drawn from, which is the majority dataset
  label of the support rows k-means put in that component
  (:func:`component_labels`; ties: the smaller label; a component without a
  labelled support row: ``-1``);
* a distractor from another dataset's split (``dataset:NAME``): that
  dataset's label of the row when it has labels with the same class names,
  else ``-1``;
* a distractor from a file: ``-1``.

``-1`` (:data:`UNKNOWN`) is no class: a label filter never keeps it. Each
query is searched under ``label in [L]``, ``L`` the label of its *first*
relevant item in the judgements' order (:func:`query_labels`; a query whose
relevant items carry several labels is counted, and one without a relevant
item gets ``-1``, counted too), so a query's relevant item is always kept.
The study's label cell (:mod:`~imsearch_align.collection.label_cell`)
groups the queries by ``L``: one batched filtered search and one exact
filtered truth per group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.collection.aligned import CollectionBlocks, collection_ids
from imsearch_align.collection.prepare import Prepared
from imsearch_align.collection.synthetic import SyntheticSource
from imsearch_align.datasets.splits import SUPPORT_SPLIT
from imsearch_align.framework.interfaces import Filter
from imsearch_align.framework.metrics import Qrels
from imsearch_align.framework.registry import DATASETS

__all__ = [
    "FIELD",
    "UNKNOWN",
    "LabelAttribute",
    "LabelPlan",
    "component_labels",
    "item_labels",
    "majority_labels",
    "query_labels",
]

#: The attribute's name in every store.
FIELD = "label"
#: The label of an item of no known class (never kept by a label filter).
UNKNOWN = -1


def majority_labels(assignments: Any, labels: Any, n_components: int) -> np.ndarray:
    """``(n_components,)`` the most frequent label among the rows assigned to each component.

    ``assignments``: the component of each row (``-1``: not assigned);
    ``labels``: each row's label (``-1``: unknown, not counted). Ties go to
    the smaller label; a component with no labelled row gets :data:`UNKNOWN`.
    """
    a = np.asarray(assignments, dtype=np.int64)
    lab = np.asarray(labels, dtype=np.int64)
    if a.shape != lab.shape:
        raise ValueError(f"majority_labels: {a.shape} assignments for {lab.shape} labels")
    ok = (a >= 0) & (lab >= 0)
    out = np.full(int(n_components), UNKNOWN, dtype=np.int64)
    if not ok.any():
        return out
    n_labels = int(lab[ok].max()) + 1
    counts = np.zeros((int(n_components), n_labels), dtype=np.int64)
    np.add.at(counts, (a[ok], lab[ok]), 1)
    has = counts.sum(axis=1) > 0
    out[has] = counts[has].argmax(axis=1)  # argmax: the first (smallest) of tied labels
    return out


def component_labels(model: Any, support_labels: Any) -> np.ndarray:
    """The label of each component of a fitted
    :class:`~imsearch_align.collection.synthetic.MixtureModel`: the majority of
    ``support_labels`` (one per support row given to ``fit``, in that order)
    among the rows k-means assigned to it.

    Raises:
        ValueError: the model keeps no assignments, or ``support_labels`` is
            not one per support row it was fitted to.
    """
    a = getattr(model, "assignments", None)
    if a is None:
        raise ValueError("component_labels: the mixture keeps no support assignments")
    lab = np.asarray(support_labels)
    if lab.shape != a.shape:
        raise ValueError(
            f"component_labels: the mixture was fitted to {len(a)} support rows, got "
            f"{len(lab)} labels"
        )
    return majority_labels(a, lab, len(model.weights))


def item_labels(dataset: Any, ids: Any, modality: str) -> np.ndarray:
    """The label of each of ``ids`` (image ids, or text ids whose image's label is
    taken); :data:`UNKNOWN` for an id the dataset does not label."""
    ids = np.asarray(ids, dtype=np.int64)
    labels = getattr(dataset, "labels", None)
    if labels is None:
        return np.full(len(ids), UNKNOWN, dtype=np.int64)
    by_image = pd.Series(labels, index=dataset.images["image_id"].to_numpy(dtype=np.int64))
    if modality == "text":
        texts = dataset.texts
        image_of = pd.Series(
            texts["image_id"].to_numpy(dtype=np.int64), index=texts["text_id"].to_numpy()
        )
        image_ids = image_of.reindex(ids).to_numpy()
    elif modality == "image":
        image_ids = ids
    else:
        raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
    out = by_image.reindex(image_ids).to_numpy(dtype=np.float64, na_value=np.nan)
    return np.where(np.isnan(out), UNKNOWN, out).astype(np.int64)


def _same_classes(a: Any, b: Any) -> bool:
    names = getattr(a, "class_names", None)
    return (
        names is not None
        and getattr(b, "labels", None) is not None
        and (tuple(names) == tuple(getattr(b, "class_names", None) or ()))
    )


@dataclass(frozen=True)
class LabelAttribute:
    """The class label of every item of one collection (see the module docstring).

    Attributes:
        ids: every item's id, ascending.
        labels: the label of each of ``ids`` (:data:`UNKNOWN`: no class).
        class_names: the dataset's class names (label ``i`` is ``class_names[i]``).
        distractors: how the distractors got their labels (for the record).
        field: the attribute's name.
    """

    ids: np.ndarray
    labels: np.ndarray
    class_names: tuple[str, ...]
    distractors: str = ""
    field: str = FIELD

    def of(self, ids: Any, *, missing: int | None = None) -> np.ndarray:
        """The labels of ``ids`` (int64); an id outside the collection raises, or
        gets ``missing`` when given."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.full(len(ids), UNKNOWN if missing is None else missing, dtype=np.int64)
        bad = np.ones(len(ids), dtype=bool)
        if len(self.ids):
            pos = np.minimum(np.searchsorted(self.ids, ids), len(self.ids) - 1)
            bad = self.ids[pos] != ids
            out[~bad] = self.labels[pos[~bad]]
        if bad.any() and missing is None:
            raise ValueError(
                f"LabelAttribute: id {int(ids[bad][0])} is not an item of the collection "
                f"({len(self.ids)} items)"
            )
        return out

    def attributes(self, ids: Any) -> dict[str, np.ndarray]:
        """``{field: labels}`` of ``ids``: the ``attributes=`` of a store insert."""
        return {self.field: self.of(ids)}

    def label_filter(self, label: int) -> Filter:
        """The filter keeping the items of ``label`` (``label in [L]``)."""
        return Filter(self.field, (int(label),))

    def keeps(self, ids: Any, f: Filter) -> np.ndarray:
        """Boolean mask: which of ``ids`` the filter keeps."""
        return np.isin(self.of(ids), np.asarray(f.values, dtype=np.int64))

    def kept_share(self, f: Filter) -> float:
        """The share of the collection ``f`` keeps."""
        kept = np.isin(self.labels, np.asarray(f.values, dtype=np.int64))
        return float(kept.mean()) if len(kept) else 0.0

    def kept_ids(self, f: Filter) -> np.ndarray:
        """Every kept id, ascending."""
        return self.ids[np.isin(self.labels, np.asarray(f.values, dtype=np.int64))]

    def name_of(self, label: int) -> str:
        """The class name of ``label`` (``"unknown"`` for :data:`UNKNOWN`)."""
        ok = 0 <= int(label) < len(self.class_names)
        return str(self.class_names[int(label)]) if ok else "unknown"


def query_labels(qrels: Qrels, query_ids: Any, attr: LabelAttribute) -> tuple[np.ndarray, int, int]:
    """The label each query is searched within: its first relevant item's (qrels order).

    Returns ``(labels, mixed, without)``: one label per ``query_ids``;
    ``mixed``, the queries whose relevant items carry more than one label;
    ``without``, the queries with no relevant item in the collection (label
    :data:`UNKNOWN`).
    """
    rel = np.asarray(qrels.relevance) > 0
    q = np.asarray(qrels.query_ids)[rel]
    docs = np.asarray(qrels.doc_ids)[rel].astype(np.int64)
    lab = attr.of(docs, missing=UNKNOWN)
    inside = lab != UNKNOWN
    frame = pd.DataFrame({"q": q[inside], "label": lab[inside]})
    per = frame.groupby("q", sort=False)["label"].agg(["first", "nunique"])
    qids = pd.Index(np.asarray(query_ids))
    first = per["first"].reindex(qids)
    labels = first.fillna(UNKNOWN).to_numpy(dtype=np.int64)
    mixed = int((per["nunique"].reindex(qids).fillna(0) > 1).sum())
    return labels, mixed, int(first.isna().sum())


@dataclass
class LabelPlan:
    """Where the labels of a study's collections come from (see the module docstring).

    Args:
        dataset: the evaluated dataset (with labels).
        support: the dataset the synthetic distractors' mixture was fitted to
            (its support split, in ``split_ids`` order); default ``dataset``.
    """

    dataset: Any
    support: Any = None
    _others: dict[str, Any] = field(default_factory=dict, repr=False)
    _components: dict[int, tuple[Any, np.ndarray]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if getattr(self.dataset, "labels", None) is None or not self.dataset.class_names:
            raise ValueError(
                f"LabelPlan: dataset {getattr(self.dataset, 'name', '?')!r} has no class labels"
            )
        if self.support is None:
            self.support = self.dataset

    @classmethod
    def from_study(cls, study: Any, config: Any) -> LabelPlan | None:
        """The plan of ``config``'s data (None when its dataset has no class labels)."""
        data = study.load(config)
        ds = data.dataset
        if getattr(ds, "labels", None) is None or not getattr(ds, "class_names", None):
            return None
        return cls(ds, data.support)

    @property
    def class_names(self) -> tuple[str, ...]:
        """The evaluated dataset's class names."""
        return tuple(self.dataset.class_names)

    def attribute(self, prep: Prepared, coll: CollectionBlocks) -> LabelAttribute:
        """The label of every item of ``coll`` (documents of ``prep``, then distractors)."""
        ids = collection_ids(coll)
        doc_labels = item_labels(self.dataset, prep.doc_ids, prep.doc_modality)
        src = coll.distractors
        if src is None:
            dis, how = np.zeros(0, np.int64), "none"
        else:
            dis, how = self.distractor_labels(src)
        labels = np.concatenate([doc_labels, dis])
        order = np.argsort(ids, kind="stable")
        return LabelAttribute(ids[order], labels[order], self.class_names, how)

    def distractor_labels(self, source: Any) -> tuple[np.ndarray, str]:
        """``(labels, how)``: the label of each row ``source`` serves, and how it was found."""

        n = source.n_rows
        unknown = np.full(n, UNKNOWN, dtype=np.int64)
        if isinstance(source, SyntheticSource):
            comp = self._component_labels(source)
            if comp is None:
                return unknown, "unknown (the mixture's support rows are not the dataset's)"
            return comp[source.components(0, n)], "mixture component (majority support label)"
        name = str(getattr(source, "name", ""))
        sids = getattr(source, "source_ids", None)
        if name.startswith("dataset:") and sids is not None:
            other = self._other(name.split(":")[1])
            if not _same_classes(self.dataset, other):
                return unknown, f"unknown ({name}: no labels with the same class names)"
            return item_labels(other, sids[:n], source.modality or "image"), f"{name} labels"
        return unknown, "unknown (a file of embeddings)"

    def _component_labels(self, source: Any) -> np.ndarray | None:

        model = source.model
        hit = self._components.get(id(model))
        if hit is not None and hit[0] is model:
            return hit[1]
        out = None
        if _same_classes(self.dataset, self.support) and model.assignments is not None:
            modality = source.modality or "image"
            ids = self.support.split_ids(SUPPORT_SPLIT, modality)
            if len(ids) == len(model.assignments):
                out = component_labels(model, item_labels(self.support, ids, modality))
        self._components[id(model)] = (model, out)
        return out

    def _other(self, name: str) -> Any:
        """Another registered dataset (loaded once), for a ``dataset:NAME`` source."""
        if name not in self._others:
            if name == self.dataset.name:
                self._others[name] = self.dataset
            else:
                loaded = DATASETS.get(name)()
                self._others[name] = loaded[0] if isinstance(loaded, tuple) else loaded
        return self._others[name]
