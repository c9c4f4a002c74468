"""Ranking metrics, vectorised over an ``(n_queries, k)`` gain matrix.

The definitions are trec_eval's (``ndcg_cut``, ``P``, ``recall``,
``map_cut``), so ``evaluate`` agrees with ``pytrec_eval`` to floating-point
precision on tie-free runs. The measure names, their trec_eval and
CLIP_benchmark aliases, definitions and kernels are one table in
:mod:`imsearch_align.framework.measures`.

Semantics (documented in the README):

* Ranking is by score descending; ties are broken by doc id ascending
  (trec_eval breaks them by docno descending: a deliberate difference).
* A doc is relevant when its qrels relevance is ``> 0`` (or
  ``>= relevance_level`` when given); nDCG uses the graded relevance as the
  gain (only positive values count), a log2 discount and the ideal ranking
  from the qrels, as trec_eval does.
* Every query in the qrels is scored and counted in the mean. A qrels query
  absent from the run scores 0 (and is listed in ``missing_queries``); a
  query without relevant documents scores 0. A run query absent from the
  qrels is ignored (and listed in ``ignored_queries``).
* A qrels doc id of ``-1`` is rejected (it is the run's no-hit marker).
  String doc ids on one side and integer ids on the other can never match:
  :func:`evaluate` raises when no id type is shared and warns with counts
  when only some ids are of the other type.
"""

from __future__ import annotations

import itertools
import os
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework import measures as _measures
from imsearch_align.framework.interfaces import NO_HIT
from imsearch_align.framework.measures import MAX_K, lookup, parse_measure, valid_measure_names

__all__ = [
    "MAX_K",
    "EvaluationResult",
    "IdTypeWarning",
    "Qrels",
    "Run",
    "bootstrap_ci",
    "compute_measures",
    "evaluate",
    "parse_measure",
    "valid_measure_names",
]


class IdTypeWarning(UserWarning):
    """Some doc ids are strings on one side and integers on the other (they never match)."""


def py_scalar(x: Any) -> Any:
    """A numpy scalar as a plain Python value, so messages read ``0``, not ``np.int64(0)``."""
    return x.item() if isinstance(x, np.generic) else x


def _as_id_array(values: Iterable, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(
            f"{what} must fit int64, got {int(arr.max())} (above 2**63 - 1: it would wrap "
            "to a negative id, and -1 means no hit)"
        )
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind in "OUS":
        return arr.astype(object)
    if (
        arr.dtype.kind == "f"
        and arr.size
        and np.all(np.isfinite(arr))
        and np.all(arr == np.round(arr))
    ):
        return arr.astype(np.int64)
    raise TypeError(f"{what} must be integers or strings, got dtype {arr.dtype}")


def _index_of(vocab: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Position of each value in ``vocab`` (unique), -1 where absent."""
    if len(vocab) == len(values) and vocab.dtype == values.dtype and np.array_equal(vocab, values):
        return np.arange(len(values), dtype=np.int64)
    if vocab.dtype == object or values.dtype == object:
        # One hash pass over both: several times faster than an object
        # Index's get_indexer (pandas converts it to arrow strings first).
        codes, _ = pd.factorize(np.concatenate([vocab.astype(object), values.astype(object)]))
        codes = codes[len(vocab) :].astype(np.int64, copy=False)
        codes[codes >= len(vocab)] = -1
        return codes
    return pd.Index(vocab).get_indexer(values).astype(np.int64, copy=False)


#: Below this many cells a scan runs in the calling thread.
_PARALLEL_MIN_CELLS = 1_000_000
_POOL = None


def _map_row_chunks(fn, n_rows: int, n_cells: int) -> list:
    """``fn(lo, hi)`` over row ranges, on two threads for large inputs.

    numpy releases the GIL in element-wise kernels, so memory-bound scans of
    ``(nq, k)`` arrays run about twice as fast on two cores. Results come
    back in row order.
    """
    global _POOL
    workers = min(2, os.cpu_count() or 1)
    if n_cells < _PARALLEL_MIN_CELLS or workers < 2 or n_rows < 2:
        return [fn(0, n_rows)]
    if _POOL is None:
        from concurrent.futures import ThreadPoolExecutor

        _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="imsearch-metrics")
    bounds = np.linspace(0, n_rows, workers + 1).astype(int)
    futures = [_POOL.submit(fn, int(a), int(b)) for a, b in itertools.pairwise(bounds)]
    return [f.result() for f in futures]


def _first_duplicate_pair(q: np.ndarray, d: np.ndarray) -> int | None:
    """Index of the first repeated ``(q, d)`` pair, or None (vectorised)."""
    if len(q) < 2:
        return None
    # One exact int64 key per pair. Object ids, and integer ids spread too
    # widely for the key to fit (Python ints: no int64 wrap-around), are
    # replaced by their dense codes first.
    if q.dtype == object or int(q.max()) - int(q.min()) >= 2**31:
        q = pd.factorize(q)[0].astype(np.int64)
    if d.dtype == object or int(d.max()) - int(d.min()) >= 2**31:
        d = pd.factorize(d)[0].astype(np.int64)
    qs, ds = q - q.min(), d - d.min()
    dup = pd.Series(qs * (int(ds.max()) + 1) + ds).duplicated().to_numpy()
    return int(np.argmax(dup)) if dup.any() else None


# ----------------------------------------------------------------------------- Qrels


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
        if not isinstance(df, pd.DataFrame):
            raise TypeError(
                f"Qrels.from_frame: df must be a pandas DataFrame, got {type(df).__name__}"
            )
        missing = [c for c in (query_col, doc_col, relevance_col) if c not in df.columns]
        if missing:
            raise ValueError(
                f"Qrels.from_frame: df is missing required column(s) {missing}; expected columns "
                f"{[query_col, doc_col, relevance_col]}, got {list(df.columns)}"
            )
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


# ----------------------------------------------------------------------------- Run


@dataclass(frozen=True, eq=False)
class Run:
    """Ranked results: ``doc_ids`` and ``scores`` are ``(nq, k)``, one row a query.

    Rows are kept in the canonical order (score descending, doc id
    ascending, no-hit ``-1`` last). Construct through :meth:`from_arrays` or
    :meth:`from_frame`, which sort; the constructor only checks.
    """

    query_ids: np.ndarray
    doc_ids: np.ndarray
    scores: np.ndarray
    #: ``(nq, k)`` bool, True where a row has no hit (``doc_id == -1``).
    empty: np.ndarray = field(repr=False)

    @classmethod
    def from_arrays(
        cls,
        query_ids: Sequence,
        doc_ids: np.ndarray,
        scores: np.ndarray | None = None,
        *,
        assume_sorted: bool = False,
        copy: bool = True,
    ) -> Run:
        """Build from ``(nq,)`` query ids and ``(nq, k)`` doc ids / scores.

        ``-1`` in ``doc_ids`` marks "no hit". With ``scores=None`` the column
        order is the ranking. Rows are re-sorted into the canonical order
        unless they already are in it (checked, vectorised) or
        ``assume_sorted=True``; only out-of-order rows are re-sorted. The
        inputs are never modified, unless ``copy=False``: then the caller
        hands the arrays over and out-of-order rows are fixed in place
        (saves copying ``(nq, k)`` arrays). A NaN score raises naming the query.
        """
        q = _as_id_array(query_ids, "run query_ids")
        d = np.asarray(doc_ids)
        if d.ndim != 2:
            raise ValueError(f"Run.from_arrays: doc_ids must be 2-D (nq, k), got shape {d.shape}")
        if q.ndim != 1 or len(q) != d.shape[0]:
            raise ValueError(
                f"Run.from_arrays: query_ids has {q.size} entries, doc_ids has {d.shape[0]} rows"
            )
        if len(pd.unique(q)) != len(q):
            dup = pd.Series(q)[pd.Series(q).duplicated()].iloc[0]
            raise ValueError(
                f"Run.from_arrays: query id {py_scalar(dup)!r} appears in more than one row"
            )
        d = _as_id_array(d, "run doc_ids") if d.size else d.astype(np.int64)
        if scores is None:
            gap = _no_hit_mask(d)
            holes = np.flatnonzero((gap[:, :-1] & ~gap[:, 1:]).any(axis=1)) if d.size else []
            if len(holes):  # "-1" is no hit, not a document: it takes no rank
                d = d.copy()
                for r in holes:
                    d[r] = np.concatenate([d[r][~gap[r]], d[r][gap[r]]])
            s = -np.broadcast_to(np.arange(d.shape[1], dtype=np.float64), d.shape)
            assume_sorted = True
        else:
            s = np.asarray(scores)
            if s.shape != d.shape:
                raise ValueError(
                    f"Run.from_arrays: scores has shape {s.shape}, doc_ids {d.shape}; expected equal"
                )
            if s.dtype.kind != "f":
                s = s.astype(np.float64)
        empty = _no_hit_mask(d)
        if np.isnan(s).any():
            nan = np.isnan(s) & ~empty
            rows = np.flatnonzero(nan.any(axis=1))
            if len(rows):
                raise ValueError(
                    f"Run: NaN score for query {py_scalar(q[rows[0]])!r}"
                    + (f" (and {len(rows) - 1} more queries)" if len(rows) > 1 else "")
                )
        if not assume_sorted:
            bad = _unsorted_rows(d, s, empty)
            if len(bad):
                if copy or not (d.flags.writeable and s.flags.writeable):
                    d, s = d.copy(), s.copy()
                d[bad], s[bad], empty[bad] = _sort_rows(d[bad], s[bad], empty[bad])
        # Read-only views: the Run is immutable, the caller's arrays stay writeable.
        q, d, s, empty = (a.view() for a in (q, d, s, empty))
        for arr in (q, d, s, empty):
            arr.setflags(write=False)
        return cls(q, d, s, empty)

    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        *,
        query_col: str = "query_id",
        doc_col: str = "doc_id",
        score_col: str = "score",
    ) -> Run:
        """Build from a long DataFrame with columns ``query_id, doc_id, score``."""
        if not isinstance(df, pd.DataFrame):
            raise TypeError(
                f"Run.from_frame: df must be a pandas DataFrame, got {type(df).__name__}"
            )
        missing = [c for c in (query_col, doc_col, score_col) if c not in df.columns]
        if missing:
            raise ValueError(
                f"Run.from_frame: df is missing required column(s) {missing}; expected columns "
                f"{[query_col, doc_col, score_col]}, got {list(df.columns)}"
            )
        q = _as_id_array(df[query_col].to_numpy(), "run query_id")
        d = _as_id_array(df[doc_col].to_numpy(), "run doc_id")
        s = df[score_col].to_numpy(dtype=np.float64)
        hit = ~_no_hit_mask(d)
        if not hit.all():  # a "-1" (no hit) row is not a document: it takes no rank
            q, d, s = q[hit], d[hit], s[hit]
        if np.isnan(s).any():
            raise ValueError(
                f"Run: NaN score for query {py_scalar(q[np.flatnonzero(np.isnan(s))[0]])!r}"
            )
        if pd.DataFrame({"q": q, "d": d}).duplicated().any():
            i = int(np.flatnonzero(pd.DataFrame({"q": q, "d": d}).duplicated().to_numpy())[0])
            raise ValueError(
                f"Run: doc {py_scalar(d[i])!r} appears twice for query {py_scalar(q[i])!r}"
            )
        if len(q) == 0:
            return cls.from_arrays(
                np.array([], dtype=np.int64), np.zeros((0, 0), np.int64), np.zeros((0, 0))
            )
        qcodes, uq = pd.factorize(q)
        # Sort by query, then score descending, then doc id ascending.
        dkey = d if d.dtype != object else pd.factorize(d, sort=True)[0]
        order = np.lexsort((dkey, -s, qcodes))
        qc = qcodes[order]
        counts = np.bincount(qc, minlength=len(uq))
        width = int(counts.max())
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        col = np.arange(len(qc)) - starts[qc]
        ids = np.full((len(uq), width), -1, dtype=d.dtype if d.dtype != object else object)
        sc = np.full((len(uq), width), -np.inf)
        ids[qc, col] = d[order]
        sc[qc, col] = s[order]
        return cls.from_arrays(np.asarray(uq), ids, sc, assume_sorted=True)

    def to_frame(self) -> pd.DataFrame:
        """Long format ``query_id, doc_id, score, rank`` (no-hit cells dropped)."""
        nq, k = self.doc_ids.shape
        keep = ~self.empty.ravel()
        return pd.DataFrame(
            {
                "query_id": np.repeat(self.query_ids, k)[keep],
                "doc_id": self.doc_ids.ravel()[keep],
                "score": self.scores.ravel()[keep],
                "rank": np.tile(np.arange(1, k + 1), nq)[keep],
            }
        )

    @property
    def k(self) -> int:
        """Number of ranked columns."""
        return int(self.doc_ids.shape[1])

    def __len__(self) -> int:
        return len(self.query_ids)


def _id_kind(ids: np.ndarray) -> str:
    """``"int"``, ``"str"``, ``"mixed"`` (both) or ``"empty"`` for an id array."""
    if ids.size == 0:
        return "empty"
    if ids.dtype != object:
        return "int"
    kind = pd.api.types.infer_dtype(ids.ravel(), skipna=True)
    if kind == "integer":
        return "int"
    if kind == "string":
        return "str"
    return "mixed"


def _count_str(ids: np.ndarray) -> int:
    return int(sum(isinstance(x, str) for x in ids.ravel().tolist()))


def _check_id_types(run: Run, qrels: Qrels) -> None:
    """Raise when run and qrels doc ids share no type; warn with counts when some differ.

    A store answers with integer ids; qrels read from a CSV or built from
    strings may hold ``"12"`` for ``12``. They never compare equal, so every
    query would score 0 with no other sign.
    """
    rq, qq = _id_kind(np.asarray(run.query_ids)), _id_kind(np.asarray(qrels.queries))
    if {rq, qq} == {"int", "str"}:
        raise TypeError(
            f"evaluate: the run's query ids are {rq} (e.g. {py_scalar(run.query_ids[0])!r}) but "
            f"the qrels' are {qq} (e.g. {py_scalar(qrels.queries[0])!r}); they can never match "
            "and every query would score 0. Convert one side"
        )
    qk = qrels._doc_kind
    if qk == "empty" or (qk == "int" and run.doc_ids.dtype != object):
        return
    if run.doc_ids.dtype != object:
        rk = "int"
        cells = run.doc_ids
    else:
        cells = run.doc_ids[~run.empty] if run.empty.any() else run.doc_ids.ravel()
        rk = _id_kind(cells)
    if rk == "empty" or (qk == rk and qk != "mixed"):
        return
    rel = qrels._positive[1]
    if {qk, rk} == {"int", "str"}:
        qex, rex = py_scalar(rel[0]), py_scalar(cells.ravel()[0])
        raise TypeError(
            f"evaluate: the qrels' relevant doc ids are {qk} (e.g. {qex!r}) but the run's doc ids "
            f"are {rk} (e.g. {rex!r}); they can never match and every query would score 0. "
            "Convert one side (e.g. Qrels(query_ids, doc_ids.astype(int), relevance))"
        )
    n_str_q, n_str_r = _count_str(rel), _count_str(cells)
    warnings.warn(
        f"evaluate: doc id types differ: {n_str_q} of {len(rel)} relevant qrels doc ids and "
        f"{n_str_r} of {cells.size} run doc ids are strings, the rest integers; a string id "
        "never matches an integer id",
        IdTypeWarning,
        stacklevel=3,
    )


def _no_hit_mask(d: np.ndarray) -> np.ndarray:
    """True where a cell holds the no-hit marker (-1, or None in object arrays)."""
    if d.dtype != object:
        return d == -1
    flat = d.ravel()
    mask = np.fromiter(
        (x is None or (isinstance(x, int | np.integer) and x == -1) for x in flat), bool, len(flat)
    )
    return mask.reshape(d.shape)


def _unsorted_rows(d: np.ndarray, s: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """Indices of rows not in canonical order.

    Large inputs are scanned on two threads, each in cache-sized row blocks
    (the temporaries of one block stay in cache).
    """
    step = max(1, 4096 * 128 // max(d.shape[1], 1))

    def scan(lo: int, hi: int) -> np.ndarray:
        found = []
        for b0 in range(lo, hi, step):
            b1 = min(hi, b0 + step)
            found.append(b0 + _unsorted_rows_serial(d[b0:b1], s[b0:b1], empty[b0:b1]))
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    parts = _map_row_chunks(scan, d.shape[0], d.size)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _unsorted_rows_serial(d: np.ndarray, s: np.ndarray, empty: np.ndarray) -> np.ndarray:
    """Indices of rows not in canonical order (vectorised check).

    Canonical: hits before no-hits, scores non-increasing, and ids
    increasing within a run of equal scores. Rows holding a no-hit cell are
    checked cell by cell; the others with two passes over the scores.
    """
    nq, k = d.shape
    if k < 2 or nq == 0:
        return np.zeros(0, dtype=np.int64)
    has_empty = empty.any(axis=1)
    s0, s1 = s[:, :-1], s[:, 1:]
    bad = ~(s0 >= s1).all(axis=1)
    tie = np.flatnonzero(s0 == s1)
    if len(tie):
        r, c = np.divmod(tie, k - 1)
        a, b = d[r, c], d[r, c + 1]
        if d.dtype == object:
            down = (
                np.array([x > y for x, y in zip(a.tolist(), b.tolist())], dtype=bool)
                if len(a)
                else a
            )
        else:
            down = a > b
        bad[r[np.asarray(down, dtype=bool)]] = True
    er = np.flatnonzero(has_empty)
    if len(er):
        e0, e1 = empty[er, :-1], empty[er, 1:]
        es0, es1 = s[er, :-1], s[er, 1:]
        both = ~e0 & ~e1
        bad_e = (e0 & ~e1) | (both & (es0 < es1))
        te = both & (es0 == es1)
        if te.any():
            rr, cc = np.nonzero(te)
            de = d[er]
            if d.dtype == object:
                dn = np.array(
                    [x > y for x, y in zip(de[rr, cc].tolist(), de[rr, cc + 1].tolist())],
                    dtype=bool,
                )
            else:
                dn = de[rr, cc] > de[rr, cc + 1]
            bad_e[rr[dn], cc[dn]] = True
        # Rows with no-hit cells are judged only by the cell-level check above.
        bad[er] = bad_e.any(axis=1)
    return np.flatnonzero(bad)


def _sort_rows(d: np.ndarray, s: np.ndarray, empty: np.ndarray):
    """Each row into the canonical order (hits before no-hits, score desc, doc
    asc), sorted on its own: a short sort per row, not one sort of every cell
    keyed by row (10x faster on 47,648 x 88 cells, and no cells-long temporaries
    beyond the order)."""
    dkey = (
        d
        if d.dtype != object
        else pd.factorize(np.where(empty, "", d).ravel(), sort=True)[0].reshape(d.shape)
    )
    # Keys, last is primary: hits before no-hits, score desc, doc asc.
    order = np.lexsort((dkey, -s, empty), axis=-1)
    return (
        np.take_along_axis(d, order, axis=1),
        np.take_along_axis(s, order, axis=1),
        np.take_along_axis(empty, order, axis=1),
    )


# ----------------------------------------------------------------------------- evaluation


@dataclass(frozen=True, eq=False)
class EvaluationResult:
    """Per-query scores of a set of measures.

    Attributes:
        measures: the measure names, in the requested order.
        query_ids: every qrels query, in order of first appearance.
        values: measure -> ``(n_queries,)`` float64 per-query values.
        missing_queries: qrels queries absent from the run (scored 0, counted).
        ignored_queries: run queries absent from the qrels (not scored).
        failed_queries: queries whose search failed (scored 0, counted).
    """

    measures: tuple[str, ...]
    query_ids: np.ndarray
    values: dict[str, np.ndarray]
    missing_queries: np.ndarray
    ignored_queries: np.ndarray
    failed_queries: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))

    def mean(self) -> dict[str, float]:
        """Mean of each measure over every qrels query."""
        n = len(self.query_ids)
        return {m: (float(self.values[m].mean()) if n else float("nan")) for m in self.measures}

    def _columns(self) -> dict[str, Any]:
        """The per-query columns, for one DataFrame constructor call."""
        qids = self.query_ids
        cols: dict[str, Any] = {
            # Object ids stay object: no conversion of every id to an arrow string.
            "query_id": pd.Series(qids, dtype=object, copy=False) if qids.dtype == object else qids
        }
        cols.update({m: self.values[m] for m in self.measures})
        cols["missing"] = _is_member(qids, self.missing_queries)
        if len(self.failed_queries):
            cols["failed"] = _is_member(qids, self.failed_queries)
        return cols

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: ``query_id`` and one column per measure."""
        return pd.DataFrame(self._columns())

    def confidence_intervals(
        self, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
    ) -> dict[str, tuple[float, float]]:
        """Seeded percentile bootstrap interval of each mean (queries resampled)."""
        mat = np.column_stack([self.values[m] for m in self.measures]) if self.measures else None
        if mat is None or len(mat) == 0:
            return {m: (float("nan"), float("nan")) for m in self.measures}
        lo, hi = bootstrap_ci(mat, n_resamples=n_resamples, level=level, seed=seed)
        return {m: (float(lo[i]), float(hi[i])) for i, m in enumerate(self.measures)}


def _is_member(values: np.ndarray, members: np.ndarray) -> np.ndarray:
    """``values`` that are in ``members`` (bool), by hashing for object ids."""
    if not len(members):
        return np.zeros(len(values), dtype=bool)
    members = np.asarray(members)
    if values.dtype != object and members.dtype != object:
        return np.isin(values, members)
    return _index_of(pd.unique(members.astype(object)), values.astype(object)) >= 0


def bootstrap_ci(
    values: np.ndarray, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the column means of ``values`` ``(n, m)``.

    Resamples rows with replacement ``n_resamples`` times with a seeded
    generator; returns ``(low, high)`` arrays of length ``m``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    n = v.shape[0]
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, v.shape[1]))
    # A resample's mean is (multiplicity counts) @ values / n: one bincount
    # and one matrix product per chunk instead of gathering (B, n, m) values.
    chunk = max(1, 1_000_000 // max(n, 1))  # ~24 MB of temporaries per chunk
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.int64)
        idx += (np.arange(b, dtype=np.int64) * n)[:, None]
        counts = np.bincount(idx.ravel(), minlength=b * n).reshape(b, n)
        means[start : start + b] = (counts @ v) / n
    alpha = (1 - level) / 2
    return np.quantile(means, alpha, axis=0), np.quantile(means, 1 - alpha, axis=0)


@dataclass(frozen=True)
class _Hits:
    """The non-zero cells of the gain matrix, sorted by (row, col).

    ``rows`` index the qrels queries, ``cols`` are 0-based ranks, ``gains``
    the graded relevance (> 0). A sparse view of the ``(n_queries, k)`` gain
    matrix: every measure is a segment reduction over it, so the cost is
    proportional to the number of relevant hits, not to ``n_queries * k``.
    """

    rows: np.ndarray
    cols: np.ndarray
    gains: np.ndarray

    @staticmethod
    def empty() -> _Hits:
        z = np.zeros(0, dtype=np.int64)
        return _Hits(z, z, np.zeros(0))

    @staticmethod
    def from_dense(gain: np.ndarray) -> _Hits:
        r, c = np.nonzero(gain > 0)
        return _Hits(r.astype(np.int64), c.astype(np.int64), gain[r, c].astype(np.float64))


def _map_run(run: Run, qrels: Qrels) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``run_row`` per qrels query (-1 if absent), missing and ignored query ids."""
    qq = qrels.queries
    run_row = np.full(len(qq), -1, dtype=np.int64)
    rq_pos = _index_of(qq, run.query_ids) if len(run) else np.zeros(0, dtype=np.int64)
    present = rq_pos >= 0
    run_row[rq_pos[present]] = np.flatnonzero(present)
    return run_row, qq[run_row < 0], run.query_ids[~present]


def _duplicate_error(qid) -> ValueError:
    return ValueError(
        f"Run: a relevant doc appears twice in the ranking of query {py_scalar(qid)!r}"
    )


_Found = tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray]], list[np.ndarray]]


class _HitFinder:
    """Finds the positive judgements of ``qrels`` in blocks of ranked doc ids.

    Built once per qrels; :meth:`find` is called on row blocks (the whole
    run, or each search batch as it arrives) and is thread-safe.

    Two strategies: with integer ids and at most 8 relevant docs per query,
    each relevant id is compared with its query's row (``r_max`` passes over
    an int32 cache-sized block when every id fits in int32 exactly, no
    hashing); otherwise run ids are hashed into the vocabulary of relevant
    docs and looked up by ``(query, doc)`` key.

    A relevant doc found twice in one ranking is a broken ranking (it would
    count twice): :meth:`find` reports the qrels rows where that happened.
    """

    BLOCK_CELLS = 4096 * 128
    _I32 = (-(2**31), 2**31 - 1)

    def __init__(self, qrels: Qrels, *, object_ids: bool = False) -> None:
        jq, jd, jg = qrels._positive
        self.queries = qrels.queries
        nQ = len(self.queries)
        self.empty = len(jq) == 0
        counts = np.bincount(jq, minlength=nQ) if len(jq) else np.zeros(nQ, dtype=np.int64)
        self.r_max = int(counts.max()) if nQ else 0
        self.compare = not self.empty and not object_ids and jd.dtype != object and self.r_max <= 8
        if self.empty:
            return
        if self.compare:
            starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
            rank = np.arange(len(jq)) - starts[jq]
            # Unused slots hold a real relevant id (no sentinel can be assumed
            # absent from a run); their matches are dropped by ``counts``.
            self.counts = counts
            self.rel_doc = np.full((nQ, self.r_max), jd[0], dtype=np.int64)
            self.rel_g = np.zeros((nQ, self.r_max))
            self.rel_doc[jq, rank] = jd
            self.rel_g[jq, rank] = jg
            fits = self._I32[0] <= int(jd.min()) and int(jd.max()) <= self._I32[1]
            self.rel_doc32 = self.rel_doc.astype(np.int32) if fits else None
        else:
            self.dvocab = pd.Index(pd.unique(jd), dtype=jd.dtype)
            self.nv = len(self.dvocab)
            jkey = jq.astype(np.int64) * self.nv + self.dvocab.get_indexer(jd)
            order = np.argsort(jkey, kind="stable")
            self.jkey, self.jg = jkey[order], jg[order]

    def find(self, qrows: np.ndarray, D: np.ndarray) -> _Found:
        """Hits of ``D`` (ranked doc ids, one row per query) and rows with a repeated relevant doc.

        ``qrows[i]`` is the qrels row of ``D[i]`` (every entry >= 0). Returns
        ``(parts, duplicate_rows)``: ``parts`` are ``(qrels row, rank, gain)``
        arrays, ``duplicate_rows`` arrays of qrels rows.
        """
        if self.empty or D.size == 0:
            return [], []
        return self._compare(qrows, D) if self.compare else self._hash(qrows, D)

    def _compare(self, qrows: np.ndarray, D: np.ndarray) -> _Found:
        k_cols = D.shape[1]
        step = max(1, self.BLOCK_CELLS // max(k_cols, 1))
        out, dups = [], []
        for b0 in range(0, len(qrows), step):
            b1 = min(len(qrows), b0 + step)
            qb = qrows[b0:b1]
            blk = D[b0:b1]
            # int32 halves the traffic of the r_max passes; only when the cast
            # is exact on both sides (no wrap-around of large or negative ids).
            if (
                self.rel_doc32 is not None
                and self._I32[0] <= int(blk.min())
                and int(blk.max()) <= self._I32[1]
            ):
                blk, tg = blk.astype(np.int32), self.rel_doc32[qb]
            else:
                tg = self.rel_doc[qb]
            for r in range(self.r_max):
                p = np.flatnonzero(blk == tg[:, r][:, None])  # row-major
                if not len(p):
                    continue
                rloc, c = np.divmod(p, k_cols)
                used = self.counts[qb[rloc]] > r
                if not used.all():
                    rloc, c = rloc[used], c[used]
                if len(rloc) > 1:
                    again = rloc[1:] == rloc[:-1]
                    if again.any():
                        dups.append(qb[rloc[1:][again]])
                qi = qb[rloc]
                out.append((qi, c, self.rel_g[qi, r]))
        return out, dups

    def _hash(self, qrows: np.ndarray, D: np.ndarray) -> _Found:
        codes = self.dvocab.get_indexer(D.ravel()).reshape(D.shape)
        r_idx, c_idx = np.nonzero(codes >= 0)
        if not len(r_idx):
            return [], []
        keys = qrows[r_idx].astype(np.int64) * self.nv + codes[r_idx, c_idx]
        pos = np.minimum(np.searchsorted(self.jkey, keys), len(self.jkey) - 1)
        hit = self.jkey[pos] == keys
        found = pos[hit]
        dups = []
        if len(np.unique(found)) != len(found):
            dup_keys = self.jkey[np.flatnonzero(np.bincount(found) > 1)]
            dups.append(np.unique(dup_keys // self.nv))
        return [(qrows[r_idx[hit]], c_idx[hit].astype(np.int64), self.jg[found])], dups

    @staticmethod
    def assemble(
        parts: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
        k: int,
        drop_rows: np.ndarray | None = None,
    ) -> _Hits:
        """One :class:`_Hits`, sorted by (query row, rank), from found parts.

        Hits of ``drop_rows`` (rows with a repeated relevant doc) are left out.
        """
        if not parts:
            return _Hits.empty()
        rows, cols, gains = (np.concatenate(x) for x in zip(*parts))
        if drop_rows is not None and len(drop_rows):
            keep = ~np.isin(rows, drop_rows)
            rows, cols, gains = rows[keep], cols[keep], gains[keep]
        order = np.argsort(rows.astype(np.int64) * (k + 1) + cols, kind="stable")
        return _Hits(rows[order].astype(np.int64), cols[order].astype(np.int64), gains[order])


def _find_hits(run: Run, qrels: Qrels, width: int, run_row: np.ndarray) -> tuple[_Hits, np.ndarray]:
    """Locate every positive judgement in the run (first ``width`` ranks).

    Returns the hits and the qrels rows whose ranking holds a relevant doc
    twice (their hits are left out: those queries score 0).
    """
    kk = min(width, run.k)
    pq = np.flatnonzero(run_row >= 0)
    no_dups = np.zeros(0, dtype=np.int64)
    if kk == 0 or len(pq) == 0:
        return _Hits.empty(), no_dups
    finder = _HitFinder(qrels, object_ids=run.doc_ids.dtype == object)
    rr = run_row[pq]
    full = len(pq) == len(run) and np.array_equal(rr, np.arange(len(run)))
    D = run.doc_ids[:, :kk] if full else run.doc_ids[rr, :kk]
    chunks = _map_row_chunks(lambda lo, hi: finder.find(pq[lo:hi], D[lo:hi]), len(pq), D.size)
    parts = [p for c in chunks for p in c[0]]
    dup_parts = [d for c in chunks for d in c[1]]
    dups = np.unique(np.concatenate(dup_parts)).astype(np.int64) if dup_parts else no_dups
    return _HitFinder.assemble(parts, run.k, dups), dups


def _ideal_dcg(qrels: Qrels, k: int) -> np.ndarray:
    """Ideal DCG@k per qrels query from its positive gains (trec_eval)."""
    jq, rank, w = qrels._ideal_weights
    if len(rank) and int(rank.max()) < k:  # every positive gain is inside the cutoff
        return np.bincount(jq, weights=w, minlength=len(qrels.queries))
    keep = rank < k
    return np.bincount(jq[keep], weights=w[keep], minlength=len(qrels.queries))


def _measures_from_hits(
    hits: _Hits,
    n_queries: int,
    n_relevant: np.ndarray,
    ideal_dcg: Any,
    measures: Sequence[str],
    relevance_level: float | None,
) -> dict[str, np.ndarray]:
    """Every measure's kernel (from the table in :mod:`.measures`) over the sparse hits."""
    ctx = _measures.Hits(
        hits.rows,
        hits.cols,
        hits.gains,
        n_queries=n_queries,
        n_relevant=n_relevant,
        ideal_dcg=ideal_dcg,
        relevance_level=relevance_level,
    )
    return _measures.compute(ctx, measures)


def compute_measures(
    gain: np.ndarray,
    n_relevant: np.ndarray,
    ideal: np.ndarray,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
) -> dict[str, np.ndarray]:
    """All measures from an ``(n_queries, K)`` gain matrix, vectorised.

    Args:
        gain: graded relevance of the doc at each rank (0 = not relevant or
            no hit); columns beyond ``K`` count as non-relevant.
        n_relevant: ``(n_queries,)`` number of relevant docs per query in the qrels.
        ideal: ``(n_queries, K')`` positive qrels gains sorted descending
            (zero padded), ``K'`` >= the largest nDCG cutoff.
        measures: canonical names.
        relevance_level: binary relevance threshold for P/R/AP/RR/HitRate;
            ``None`` means ``gain > 0``.

    Formulas (``rel_i`` binary relevance at rank i, ``R`` = ``n_relevant``):

    * ``P@k = sum_{i<=k} rel_i / k``
    * ``R@k = sum_{i<=k} rel_i / R`` (0 when ``R = 0``)
    * ``HitRate@k = 1[sum_{i<=k} rel_i > 0]``
    * ``RR@k = 1 / min{i <= k : rel_i}`` (0 when none)
    * ``AP@k = (1/R) sum_{i<=k} rel_i * P@i``
    * ``nDCG@k = sum_{i<=k} g_i / log2(i+1) / sum_{i<=k} g*_i / log2(i+1)``
      with ``g`` the graded gain and ``g*`` the ideal gains (0 when the
      ideal DCG is 0).

    The kernels (one per entry of :data:`.measures.MEASURES`) work on the
    non-zero cells of ``gain`` (segment sums with ``np.bincount``), so their
    cost grows with the number of relevant hits.
    """
    gain = np.asarray(gain, dtype=np.float64)
    ideal = np.asarray(ideal, dtype=np.float64)

    def ideal_dcg(k: int) -> np.ndarray:
        disc = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
        cut = ideal[:, :k]
        return cut @ disc[: cut.shape[1]]

    return _measures_from_hits(
        _Hits.from_dense(gain),
        gain.shape[0],
        np.asarray(n_relevant, dtype=np.float64),
        ideal_dcg,
        measures,
        relevance_level,
    )


def check_relevance_level(relevance_level: Any) -> float | None:
    """``None`` (relevance > 0 is relevant) or a positive number (trec_eval's
    ``-l``): a level <= 0 would count non-relevant and negative judgements in
    R but never as hits, a number neither trec_eval nor this package defines."""
    if relevance_level is None:
        return None
    if (
        isinstance(relevance_level, bool)
        or not isinstance(relevance_level, int | float | np.integer | np.floating)
        or not np.isfinite(relevance_level)
        or relevance_level <= 0
    ):
        raise ValueError(
            "relevance_level must be None or a number > 0 (a judged document with relevance "
            f">= level is relevant, as trec_eval -l), got {relevance_level!r}"
        )
    return float(relevance_level)


def _n_relevant(qrels: Qrels, relevance_level: float | None) -> np.ndarray:
    relevance_level = check_relevance_level(relevance_level)
    nQ = len(qrels.queries)
    if relevance_level is None:
        return np.bincount(qrels._positive[0], minlength=nQ).astype(np.float64)
    keep = qrels.relevance >= relevance_level
    return np.bincount(qrels._codes[0][keep], minlength=nQ).astype(np.float64)


def _check_measures(measures: Sequence[str] | str) -> list[str]:
    if isinstance(measures, str):
        measures = [measures]
    measures = list(dict.fromkeys(measures))
    if not measures:
        raise ValueError(f"evaluate: measures is empty; expected some of {valid_measure_names()}")
    for m in measures:
        lookup(m)
    return measures


def evaluate(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
    failed_queries: Sequence | None = None,
) -> EvaluationResult:
    """Score ``run`` against ``qrels`` with the named measures.

    ``measures`` are canonical names (``"P@10"``, ``"nDCG@10"``, ``"AP@10"``,
    ``"RR@10"``, ``"R@10"``, ``"HitRate@5"``, ``"Accuracy"``; see
    :data:`imsearch_align.framework.measures.MEASURES`). Every qrels query is
    scored; see the module docstring for the full semantics.
    ``failed_queries`` are queries whose search failed: they must not be in
    the run, score 0, count, and are listed in the result.

    Raises ``ValueError`` when a relevant doc appears twice in one ranking
    (:class:`~imsearch_align.framework.evaluator.BenchmarkEvaluator` records
    such queries as failed instead) and ``TypeError`` when the run's and the
    qrels' doc ids share no type (strings against integers).
    """
    result, dups = evaluate_lenient(
        run, qrels, measures, relevance_level=relevance_level, failed_queries=failed_queries
    )
    if len(dups):
        raise _duplicate_error(dups[0])
    return result


def evaluate_lenient(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
    failed_queries: Sequence | None = None,
) -> tuple[EvaluationResult, np.ndarray]:
    """:func:`evaluate`, but a ranking that holds a relevant doc twice fails only its query.

    Returns the result and the ids of those queries: they score 0, count in
    the means and are listed in ``failed_queries`` with the others.
    """
    if not isinstance(run, Run):
        raise TypeError(f"evaluate: run must be a Run, got {type(run).__name__}")
    if not isinstance(qrels, Qrels):
        raise TypeError(f"evaluate: qrels must be a Qrels, got {type(qrels).__name__}")
    measures = _check_measures(measures)
    _check_id_types(run, qrels)
    K = max(lookup(m)[1] for m in measures)
    run_row, missing, ignored = _map_run(run, qrels)
    hits, dup_rows = _find_hits(run, qrels, K, run_row)
    values = _measures_from_hits(
        hits,
        len(qrels.queries),
        _n_relevant(qrels, relevance_level),
        lambda k: _ideal_dcg(qrels, k),
        measures,
        relevance_level,
    )
    failed = list(failed_queries) if failed_queries is not None else []
    dup_ids = qrels.queries[dup_rows]
    if len(dup_ids):
        failed += [py_scalar(q) for q in dup_ids]
    result = EvaluationResult(
        measures=tuple(measures),
        query_ids=qrels.queries,
        values=values,
        missing_queries=missing,
        ignored_queries=ignored,
        failed_queries=np.asarray(failed, dtype=object),
    )
    return result, dup_ids
