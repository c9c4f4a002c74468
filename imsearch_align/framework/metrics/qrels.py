"""Relevance judgements: :class:`Qrels`, one row per judged ``(query_id, doc_id)``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from imsearch_align.framework.interfaces import NO_HIT
from imsearch_align.framework.metrics.ids import (
    _as_id_array,
    _check_frame,
    _first_duplicate_pair,
    _id_kind,
    _index_of,
    py_scalar,
)

__all__ = ["Qrels"]


@dataclass(frozen=True, eq=False)
class Qrels:
    """Relevance judgements: one row per judged ``(query_id, doc_id)``.

    Attributes:
        query_ids: ``(n,)`` query id of each judgement (int64 or object).
        doc_ids: ``(n,)`` doc id of each judgement (int64 or object).
        relevance: ``(n,)`` float64 graded relevance; ``<= 0`` is not relevant.
    """

    query_ids: np.ndarray
    doc_ids: np.ndarray
    relevance: np.ndarray

    def __post_init__(self) -> None:
        q = _as_id_array(self.query_ids, "qrels query_id")
        d = _as_id_array(self.doc_ids, "qrels doc_id")
        r = np.asarray(self.relevance, dtype=np.float64)
        if not (q.ndim == d.ndim == r.ndim == 1 and len(q) == len(d) == len(r)):
            raise ValueError(
                "Qrels: query_ids, doc_ids and relevance must be 1-D of equal length, got "
                f"{np.shape(q)}, {np.shape(d)}, {np.shape(r)}"
            )
        if not np.all(np.isfinite(r)):
            bad = int(np.flatnonzero(~np.isfinite(r))[0])
            raise ValueError(
                f"Qrels: relevance must be finite, got {r[bad]} for query {py_scalar(q[bad])!r}"
            )
        no_hit = (d == NO_HIT) if d.dtype != object else np.equal(d, NO_HIT).astype(bool)
        if no_hit.any():
            bad = np.flatnonzero(no_hit)
            raise ValueError(
                f"Qrels: doc id {NO_HIT} is the run's no-hit marker and cannot be judged; got it "
                f"for query {py_scalar(q[bad[0]])!r}"
                + (f" and {len(bad) - 1} more judgement(s)" if len(bad) > 1 else "")
                + "; give that document another id"
            )
        i = _first_duplicate_pair(q, d)
        if i is not None:
            raise ValueError(
                f"Qrels: duplicate judgement for query {py_scalar(q[i])!r}, doc {py_scalar(d[i])!r}"
            )
        for name, arr in (("query_ids", q), ("doc_ids", d), ("relevance", r)):
            arr = arr.view()
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    # -- constructors
    @classmethod
    def _trusted(cls, query_ids: np.ndarray, doc_ids: np.ndarray, relevance: np.ndarray) -> Qrels:
        """Qrels from arrays already validated by another Qrels (no checks, no copies)."""
        obj = object.__new__(cls)
        for name, arr in (("query_ids", query_ids), ("doc_ids", doc_ids), ("relevance", relevance)):
            arr = np.asarray(arr).view()
            arr.setflags(write=False)
            object.__setattr__(obj, name, arr)
        return obj

    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        *,
        query_col: str = "query_id",
        doc_col: str = "doc_id",
        relevance_col: str = "relevance",
    ) -> Qrels:
        """Build from a DataFrame with columns ``query_id, doc_id, relevance``."""
        _check_frame(df, "Qrels.from_frame", (query_col, doc_col, relevance_col))
        return cls(df[query_col].to_numpy(), df[doc_col].to_numpy(), df[relevance_col].to_numpy())

    @classmethod
    def from_dict(cls, d: dict) -> Qrels:
        """Build from ``{query_id: {doc_id: relevance}}`` (pytrec_eval's layout)."""
        qs, ds, rs = [], [], []
        for q, docs in d.items():
            for doc, rel in docs.items():
                qs.append(q)
                ds.append(doc)
                rs.append(rel)
        return cls(np.asarray(qs), np.asarray(ds), np.asarray(rs, dtype=np.float64))

    @classmethod
    def from_pairs(cls, query_ids: Sequence, doc_ids: Sequence) -> Qrels:
        """Binary qrels: each ``(query_id, doc_id)`` pair is relevant (1)."""
        return cls(np.asarray(query_ids), np.asarray(doc_ids), np.ones(len(query_ids)))

    def to_frame(self) -> pd.DataFrame:
        """The judgements as a DataFrame ``query_id, doc_id, relevance``."""
        return pd.DataFrame(
            {"query_id": self.query_ids, "doc_id": self.doc_ids, "relevance": self.relevance}
        )

    # -- derived
    @cached_property
    def _codes(self) -> tuple[np.ndarray, np.ndarray]:
        """(index of each judgement's query in :attr:`queries`, :attr:`queries`): one hash pass."""
        codes, uniques = pd.factorize(self.query_ids)
        return codes.astype(np.int64, copy=False), np.asarray(uniques)

    @cached_property
    def queries(self) -> np.ndarray:
        """Unique query ids in order of first appearance."""
        return self._codes[1]

    @cached_property
    def _positive(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positive judgements as (query index, doc id, gain), sorted by query index."""
        keep = self.relevance > 0
        jq = self._codes[0][keep]
        order = np.argsort(jq, kind="stable")
        return jq[order], self.doc_ids[keep][order], self.relevance[keep][order]

    @cached_property
    def _doc_kind(self) -> str:
        """Type of the relevant doc ids: ``"int"``, ``"str"``, ``"mixed"`` or ``"empty"``."""
        return _id_kind(self._positive[1])

    def unknown_docs(self, doc_ids: Sequence | np.ndarray) -> int:
        """How many relevant judgements name a doc that is not in ``doc_ids``.

        ``doc_ids`` are the ids of the indexed collection. A relevant doc
        outside the index can never be retrieved: it caps recall and nDCG
        silently, so callers warn with this count.
        """
        ids = _as_id_array(np.asarray(doc_ids).ravel(), "doc_ids")
        rel = self._positive[1]
        if not len(rel):
            return 0
        if rel.dtype != object and ids.dtype != object:
            return int((~np.isin(rel, ids)).sum())
        return int((_index_of(pd.unique(ids), rel) < 0).sum())

    @cached_property
    def _ideal_weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query index, rank in the ideal ranking, gain / log2(rank + 2)) of each positive gain."""
        jq, g, rank = self._ideal_sorted
        return jq, rank, g / np.log2(rank + 2.0)

    @cached_property
    def _ideal_sorted(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Positive gains sorted by (query index, gain desc), with 0-based rank in query."""
        jq, _, g = self._positive
        if len(g) and np.all(g == g[0]):
            order = np.arange(len(g))  # binary qrels: already grouped, no gain order
        elif (
            len(g) and np.all(g == np.round(g)) and g.max() < 2**20 and len(jq) and jq.max() < 2**40
        ):
            # Integer gains: one exact int64 key (query, then gain descending).
            order = np.argsort(jq * 2**21 + (2**21 - 1 - g.astype(np.int64)), kind="stable")
        else:
            order = np.lexsort((-g, jq))
        jq, g = jq[order], g[order]
        counts = np.bincount(jq, minlength=len(self.queries))
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        return jq, g, np.arange(len(jq)) - starts[jq]

    def __len__(self) -> int:
        return len(self.query_ids)
