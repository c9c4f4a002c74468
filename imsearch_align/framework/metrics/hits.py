"""Hit finding: where each positive judgement sits in the ranked doc ids.

:class:`_HitFinder` is built once per :class:`~imsearch_align.framework.metrics.Qrels`
and finds the hits of row blocks (the whole run, or each search batch as it
arrives); :class:`_Hits` is the sparse ``(n_queries, k)`` gain matrix the
measure kernels reduce. A relevant doc found twice in one ranking is
reported, not counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from imsearch_align.framework.metrics.chunks import _map_row_chunks
from imsearch_align.framework.metrics.qrels import Qrels
from imsearch_align.framework.metrics.run import Run


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
