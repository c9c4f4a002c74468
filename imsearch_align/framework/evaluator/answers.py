"""One answer of the store, checked: short rows, foreign ids, NaN scores, the order.

Per answer (:func:`check_answer`): short rows of a dense collection, ids
not in the collection (:class:`_IdTable`), NaN scores, rows out of the
canonical order (:func:`_order_problems`, re-sorted by
:func:`_sort_in_place`). :class:`_Assembly` holds the ``(nq, k)`` arrays
the workers fill, batch by batch. Nothing here knows the batch loop or
the evaluator: both build on it.
"""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd

from imsearch_align.framework.interfaces import NO_HIT, SearchResult
from imsearch_align.framework.metrics import _unsorted_rows_serial

__all__ = ["check_answer", "hits_per_row"]

_NAN_ERROR = "NaN score"
_SHORT_UNKNOWN = (
    "the store answered a dense collection with fewer hits than its other answers "
    "(collection size unknown)"
)


def hits_per_row(res: SearchResult, k: int, sparse: bool, count: int | None) -> np.ndarray | None:
    """Hits per row, for a dense collection of unknown size (else None)."""
    if sparse or count is not None:
        return None
    return (res.ids[:, :k] != NO_HIT).sum(axis=1)


def check_answer(
    res: SearchResult, k: int, sparse: bool, count: int | None, id_table: _IdTable | None
) -> tuple[dict[int, str], tuple[np.ndarray, int], np.ndarray | None]:
    """Row errors of one answer (short, foreign ids, NaN), its unsorted rows, hits per row.

    A dense collection must answer ``min(k, count)`` hits. When its
    size is unknown (the store is no
    :class:`~imsearch_align.framework.interfaces.CollectionCatalog`), a
    row with fewer hits than another row of its batch fails here and one
    with fewer than the longest answer of the call fails at assembly.
    """
    ids, sc = res.ids[:, :k], res.scores[:, :k]
    errors: dict[int, str] = {}
    n_hits = hits_per_row(res, k, sparse, count)
    if n_hits is not None:
        short = n_hits < n_hits.max() if len(n_hits) else n_hits.astype(bool)
        errors.update(dict.fromkeys(np.flatnonzero(short).tolist(), _SHORT_UNKNOWN))
    elif not sparse:
        need = min(k, count)
        if ids.shape[1] < need:
            short = np.ones(len(ids), dtype=bool)
        else:
            short = (ids[:, :need] == NO_HIT).any(axis=1)
        what = f"fewer than min(k={k}, collection size {count}) = {need} hits"
        for r in np.flatnonzero(short).tolist():
            errors[r] = f"the store answered a dense collection with {what}"
    if id_table is not None:
        foreign = id_table.foreign_rows(ids)
        for r in foreign.tolist():
            errors.setdefault(r, "the store returned an id that is not in the collection")
    nan = np.isnan(sc)
    if nan.any():
        for r in np.flatnonzero((nan & (ids != NO_HIT)).any(axis=1)).tolist():
            errors[r] = _NAN_ERROR
    return errors, _order_problems(ids, sc), n_hits


def _order_problems(ids: np.ndarray, sc: np.ndarray) -> tuple[np.ndarray, int]:
    """Rows out of the canonical order, and how many of them break the score order.

    Canonical: score descending, ties by id ascending, no-hits last. A row
    with only its ties in another order is the store's tie rule (re-sorted,
    not reported); a row whose scores go up is reported.
    """
    bad = _unsorted_rows_serial(ids, sc, ids == NO_HIT)
    if not len(bad):
        return bad, 0
    s = np.where(ids[bad] == NO_HIT, -np.inf, sc[bad])
    return bad, int((s[:, 1:] > s[:, :-1]).any(axis=1).sum())


def _sort_in_place(res: SearchResult, rows: np.ndarray) -> None:
    """Put ``rows`` of ``res`` in canonical order, extra score columns alike."""
    if not len(rows):
        return
    d, s = res.ids[rows], res.scores[rows]
    m, k = d.shape
    empty = d == NO_HIT
    flat_rows = np.repeat(np.arange(m), k)
    order = np.lexsort((d.ravel(), -s.ravel().astype(np.float64), empty.ravel(), flat_rows))
    cols = order.reshape(m, k) - (np.arange(m) * k)[:, None]
    res.ids[rows] = np.take_along_axis(d, cols, 1)
    res.scores[rows] = np.take_along_axis(s, cols, 1)
    for col in res.extra_scores.values():
        col[rows] = np.take_along_axis(col[rows], cols, 1)


class _IdTable:
    """Membership of returned ids in the collection (a bitmap when ids are compact)."""

    def __init__(self, cids: np.ndarray) -> None:
        self.table = None
        self.index = None
        if (
            cids.dtype != object
            and len(cids)
            and cids.min() >= 0
            and cids.max() < 8 * len(cids) + 2**20
        ):
            self.table = np.zeros(int(cids.max()) + 1, dtype=bool)
            self.table[cids] = True
        else:
            self.index = pd.Index(pd.unique(cids))

    def foreign_rows(self, ids: np.ndarray) -> np.ndarray:
        hit = ids != NO_HIT
        if self.table is not None:
            safe = np.where(hit & (ids >= 0) & (ids < len(self.table)), ids, 0)
            known = self.table[safe] & (ids >= 0) & (ids < len(self.table))
        else:
            known = (self.index.get_indexer(ids.ravel()) >= 0).reshape(ids.shape)
        return np.flatnonzero((hit & ~known).any(axis=1))


class _Assembly:
    """The ``(nq, k)`` result arrays, filled batch by batch by the workers.

    Rows a store did not fill (fewer than ``k`` hits) are padded with ``-1``
    and ``-inf``; extra score columns are allocated when first seen.
    """

    def __init__(self, nq: int, k: int) -> None:
        self.k = k
        self.ids = np.empty((nq, k), dtype=np.int64)
        self.scores = np.empty((nq, k), dtype=np.float32)
        self.extra: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def place(self, span: tuple[int, int], r: SearchResult) -> None:
        s, e = span
        w = min(r.k, self.k)
        self.ids[s:e, :w] = r.ids[:, :w]
        self.scores[s:e, :w] = r.scores[:, :w]
        if w < self.k:
            self.ids[s:e, w:] = NO_HIT
            self.scores[s:e, w:] = -np.inf
        for name, col in r.extra_scores.items():
            with self._lock:
                if name not in self.extra:
                    self.extra[name] = np.full(self.ids.shape, -np.inf, dtype=np.float32)
            self.extra[name][s:e, :w] = np.asarray(col)[:, :w]

    def result(self, rows: np.ndarray | None = None) -> SearchResult:
        if rows is None:
            return SearchResult(self.ids, self.scores, dict(self.extra))
        return SearchResult(
            self.ids[rows], self.scores[rows], {n: v[rows] for n, v in self.extra.items()}
        )
