"""Judgements for the tie kernels: the relevant docs of candidate rows, ``R`` and ideal DCG.

:class:`_Judgements` finds the positive judgements in the candidate rows'
doc ids read past the largest cut-off (as far as a tie group crossing it
goes), reports rows holding a relevant doc twice, and gives ``R`` and the
ideal DCG@k as :mod:`~imsearch_align.framework.metrics` defines them.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property

import numpy as np
import pandas as pd

from imsearch_align.framework.metrics import Qrels


class _Judgements:
    """The qrels as the closed forms need them: query codes, positive judgements."""

    def __init__(self, qrels: Qrels) -> None:
        self.qrels = qrels
        # Codes in order of first appearance: the rows of ``qrels.queries``.
        self.qidx = pd.factorize(qrels.query_ids)[0].astype(np.int64)
        keep = qrels.relevance > 0
        jq, jd, jg = self.qidx[keep], qrels.doc_ids[keep], qrels.relevance[keep]
        order = np.argsort(jq, kind="stable")
        self.jq, self.jd, self.jg = jq[order], jd[order], jg[order]

    def hits(
        self, qrows: np.ndarray, D: np.ndarray, empty: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Positive judgements found in ``D`` (row ``i`` ranks for qrels row ``qrows[i]``).

        Returns ``(row, col, gain, dup_rows)``: the hits sorted by (row, col),
        and the rows in which a relevant doc appears twice (their hits left out).
        """
        none = np.zeros(0, dtype=np.int64)
        n, W = D.shape
        if not len(self.jq) or n == 0 or W == 0:
            return none, none, np.zeros(0), none
        # Only the judgements of these queries, by local row.
        loc = np.full(len(self.qrels.queries), -1, dtype=np.int64)
        loc[qrows] = np.arange(n)
        jl = loc[self.jq]
        mine = jl >= 0
        jl, jd, jg = jl[mine], self.jd[mine], self.jg[mine]
        if not len(jl):
            return none, none, np.zeros(0), none
        order = np.argsort(jl, kind="stable")
        jl, jd, jg = jl[order], jd[order], jg[order]
        counts = np.bincount(jl, minlength=n)
        found = None
        if D.dtype != object and jd.dtype != object and counts.max() <= self.COMPARE_MAX:
            lo = int(D.min())
            if lo > np.iinfo(np.int64).min:
                found = self._compare(jl, jd, jg, counts, D, empty, lo - 1)
        if found is None:
            found = self._hash(jl, jd, jg, D, empty)
        r, c, g, key = found
        if not len(r):
            return none, none, np.zeros(0), none
        order = np.lexsort((c, r))
        r, c, g, key = r[order], c[order], g[order], key[order]
        # A judgement found twice in its row: that row repeats a relevant doc.
        ko = np.argsort(key, kind="stable")
        twice = key[ko][1:] == key[ko][:-1]
        dup_rows = np.unique(r[ko][1:][twice])
        if len(dup_rows):
            keep = ~np.isin(r, dup_rows)
            r, c, g = r[keep], c[keep], g[keep]
        return r.astype(np.int64), c.astype(np.int64), g, dup_rows.astype(np.int64)

    #: Up to this many relevant docs per query, each is compared with its row
    #: (a few passes over an int32/int64 block, no hashing, as metrics does).
    COMPARE_MAX = 8

    @staticmethod
    def _compare(jl, jd, jg, counts, D, empty, sentinel):
        """Hits as ``(row, col, gain, judgement key)``, comparing each judgement with its row."""
        n, W = D.shape
        rank = np.arange(len(jl)) - np.repeat(np.cumsum(counts) - counts, counts)
        r_max = int(counts.max())
        rel_doc = np.full((n, r_max), sentinel, dtype=np.int64)  # never in D
        rel_g = np.zeros((n, r_max))
        rel_doc[jl, rank] = jd
        rel_g[jl, rank] = jg
        if sentinel >= np.iinfo(np.int32).min and int(D.max()) <= np.iinfo(np.int32).max:
            D, rel_doc = D.astype(np.int32), rel_doc.astype(np.int32)  # half the traffic
        parts = []
        for j in range(r_max):
            p = np.flatnonzero(D == rel_doc[:, j : j + 1])
            if len(p):
                r, c = np.divmod(p, W)
                ok = ~empty[r, c]
                r, c = r[ok], c[ok]
                parts.append((r, c, rel_g[r, j], r * r_max + j))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)
        return tuple(np.concatenate(x) for x in zip(*parts))

    @staticmethod
    def _hash(jl, jd, jg, D, empty):
        """Hits as ``(row, col, gain, judgement key)``, hashing doc ids into the judged ones."""
        n, W = D.shape
        vocab = pd.Index(pd.unique(jd))
        nv = len(vocab)
        jkey = jl * nv + vocab.get_indexer(jd)
        order = np.argsort(jkey, kind="stable")
        jkey, jg = jkey[order], jg[order]
        codes = vocab.get_indexer(D.ravel()).reshape(n, W)
        codes[empty] = -1
        r, c = np.nonzero(codes >= 0)
        keys = r * nv + codes[r, c]
        pos = np.minimum(np.searchsorted(jkey, keys), len(jkey) - 1)
        hit = jkey[pos] == keys
        return r[hit], c[hit], jg[pos[hit]], pos[hit]

    def n_relevant(self, qrows: np.ndarray, relevance_level: float | None) -> np.ndarray:
        """``R`` of the qrels rows ``qrows``: judgements ``> 0`` (or ``>= relevance_level``)."""
        nQ = len(self.qrels.queries)
        rel = self.qrels.relevance
        keep = rel > 0 if relevance_level is None else rel >= relevance_level
        return np.bincount(self.qidx[keep], minlength=nQ).astype(np.float64)[qrows]

    def ideal_dcg(self, qrows: np.ndarray) -> _IdealDCG:
        """Ideal DCG@k of the qrels rows ``qrows`` as a function of ``k`` (computed on first use)."""
        return _IdealDCG(self, qrows)

    def totals(
        self, qrows: np.ndarray, relevance_level: float | None, ndcg_ks: Sequence[int]
    ) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """``R`` (relevant judgements) and ideal DCG@k of the qrels rows ``qrows``, for each k.

        As :mod:`~imsearch_align.framework.metrics` defines them: ``R`` counts
        judgements ``> 0`` (or ``>= relevance_level``), the ideal DCG uses all
        positive gains sorted descending.
        """
        ideal = self.ideal_dcg(qrows)
        return self.n_relevant(qrows, relevance_level), {k: ideal(k) for k in ndcg_ks}


class _IdealDCG:
    """Ideal DCG@k of some qrels rows, per ``k`` on first call (the gains sorted once)."""

    def __init__(self, jud: _Judgements, qrows: np.ndarray) -> None:
        self._jud = jud
        self._qrows = qrows
        self._nq = len(jud.qrels.queries)
        self._at: dict[int, np.ndarray] = {}

    @cached_property
    def _ranked(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The rows' positive gains sorted by (qrels row, gain desc), with 0-based rank."""
        jud = self._jud
        mine = np.isin(jud.jq, self._qrows)
        jq, g = jud.jq[mine], jud.jg[mine]
        order = np.lexsort((-g, jq))
        jq, g = jq[order], g[order]
        starts = np.concatenate([[0], np.cumsum(np.bincount(jq, minlength=self._nq))[:-1]])
        return jq, g, np.arange(len(jq)) - starts[jq]

    def __call__(self, k: int) -> np.ndarray:
        if k not in self._at:
            jq, g, rank = self._ranked
            w = rank < k
            dcg = np.bincount(jq[w], weights=g[w] / np.log2(rank[w] + 2.0), minlength=self._nq)
            self._at[k] = dcg[self._qrows]
        return self._at[k]
