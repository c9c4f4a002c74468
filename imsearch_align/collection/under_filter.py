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
    store is not trusted to have applied it): ``returned`` ids, ``outside`` the filter.

    :meth:`count` only keeps the answer; the check runs when ``returned`` or ``outside``
    is read, so it is never inside a timed search (checking 10 ids against the 500,000 a
    filter keeps at 1M took ~40 ms with ``np.isin``, more than the search)."""

    def __init__(self) -> None:
        self._returned = 0
        self._outside = 0
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    def count(self, ids: np.ndarray, kept: np.ndarray) -> None:
        """Keep the returned ``ids`` (``-1`` padding skipped when checked) to check against
        ``kept`` (ascending) later."""
        self._pending.append((np.asarray(ids), kept))

    def _check(self) -> None:
        for ids, kept in self._pending:
            got = ids[ids >= 0].astype(np.int64, copy=False).ravel()
            pos = np.searchsorted(kept, got)
            inside = pos < len(kept)
            inside[inside] = kept[pos[inside]] == got[inside]
            self._returned += int(got.size)
            self._outside += int((~inside).sum())
        self._pending.clear()

    @property
    def returned(self) -> int:
        """Ids returned (no-hit padding not counted)."""
        self._check()
        return self._returned

    @property
    def outside(self) -> int:
        """Returned ids the filter does not keep."""
        self._check()
        return self._outside

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
