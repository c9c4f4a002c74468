"""What a filtered cell shares with the unfiltered cell of its build, and a store seen
through one filter: shared by the selectivity cells
(:mod:`~imsearch_align.collection.filtered_study`) and the label cell
(:mod:`~imsearch_align.collection.label_cell`)."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["SHARED_FIELDS", "UnderFilter", "plain_id"]


#: Fields a filtered cell copies from its unfiltered cell.
SHARED_FIELDS = ("format", "store", "method", "dataset", "direction", "index", "collection",
           "queries", "n_support", "provenance", "command")  # fmt: skip


def plain_id(v: Any) -> Any:
    """A numpy scalar id as a Python one (JSON-ready)."""
    return v.item() if isinstance(v, np.generic) else v


class UnderFilter:
    """``store`` whose ``search`` is ``search_filtered`` under ``f``: the study's timing
    functions (:func:`~imsearch_align.collection.measure.search_batched`,
    :func:`~imsearch_align.collection.measure.search_latency`) time filtered searches."""

    def __init__(self, store: Any, f: Any) -> None:
        self.store, self.f = store, f

    def search(self, name: str, queries: np.ndarray, k: int) -> Any:
        """The store's filtered search of ``queries``."""
        return self.store.search_filtered(name, queries, k, self.f)
