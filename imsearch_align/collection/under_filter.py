"""What a filtered cell shares with the unfiltered cell of its build, and a store seen
through one filter: shared by the selectivity cells
(:mod:`~imsearch_align.collection.filtered_study`) and the label cell
(:mod:`~imsearch_align.collection.label_cell`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from imsearch_align.experiment.study_cell import status_record

__all__ = ["SHARED_FIELDS", "FilterCheck", "UnderFilter", "plain_id"]


#: Fields a filtered cell copies from its unfiltered cell.
SHARED_FIELDS = ("format", "store", "method", "dataset", "direction", "index", "collection",
           "queries", "n_support", "provenance", "command")  # fmt: skip


def plain_id(v: Any) -> Any:
    """A numpy scalar id as a Python one (JSON-ready)."""
    return v.item() if isinstance(v, np.generic) else v


class FilterCheck:
    """Every id a filtered search returned, checked against the ids its filter keeps (a
    store is not trusted to have applied it): ``returned`` ids, ``outside`` the filter."""

    def __init__(self) -> None:
        self.returned = 0
        self.outside = 0

    def count(self, ids: np.ndarray, kept: np.ndarray) -> None:
        """Check the returned ``ids`` (``-1`` padding skipped) against ``kept`` (ascending)."""
        got = np.asarray(ids)[np.asarray(ids) >= 0]
        self.returned += int(got.size)
        self.outside += int((~np.isin(got, kept, assume_unique=False)).sum())

    def status(self) -> dict[str, Any]:
        """The cell's status: degraded when any returned id is outside the filter."""
        if not self.outside:
            return status_record()
        why = (f"{self.outside} of {self.returned} returned ids are outside the filter: the "
               "store did not apply it, so the cell's quality and speed are not a filtered "
               "search's")  # fmt: skip
        return status_record("degraded", reasons=(why,))


class UnderFilter:
    """``store`` whose ``search`` is ``search_filtered`` under ``f``: the study's timing
    functions (:func:`~imsearch_align.collection.measure.search_batched`,
    :func:`~imsearch_align.collection.measure.search_latency`) time filtered searches,
    and every answer's ids are checked against ``kept`` (the ids ``f`` keeps) in ``check``."""

    def __init__(self, store: Any, f: Any, kept: np.ndarray, check: FilterCheck) -> None:
        self.store, self.f, self.kept, self.check = store, f, kept, check

    @property
    def outages(self) -> Any:
        """The store's outage count (None: it does not count)."""
        return getattr(self.store, "outages", None)

    @property
    def segment_count(self) -> Any:
        """The store's segment count call (None: it cannot tell)."""
        return getattr(self.store, "segment_count", None)

    def search(self, name: str, queries: np.ndarray, k: int) -> Any:
        """The store's filtered search of ``queries``."""
        res = self.store.search_filtered(name, queries, k, self.f)
        self.check.count(res.ids, self.kept)
        return res
