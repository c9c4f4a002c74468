"""The truth a store's answers are checked against: true inner products of given pairs.

:class:`_Truth` holds the indexed vectors, their ids and the queries as given
(no float64 copy): the row of each id, float64 inner products of any (query,
row) pairs read in place (:mod:`~imsearch_align.framework._pair_kernels`),
row norms, and the true k-th best score of each query by brute force: dense
in query blocks of ``_BLOCK_CELLS`` cells, sparse in query chunks x document
row blocks of ``_SPARSE_BLOCK_CELLS`` cells (no transposed copy), its float32
candidates rescored in float64. :class:`TrueScores` is its public face: float64
scores of any (query, id) pairs.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_matrix, is_sparse

__all__ = ["TrueScores"]

#: Floor of the ``||q|| * ||x||`` scale that tolerances are relative to.
_TINY = float(np.finfo(np.float32).tiny)
#: Score cells per block of the brute-force pass (bounds its memory to ~64 MiB).
_BLOCK_CELLS = 1 << 21
#: (query, document) cells per block of the sparse candidate pass: its
#: float64 score block and merge buffers stay near 30 MiB.
_SPARSE_BLOCK_CELLS = 1 << 18


class _Truth:
    """Stored vectors, their ids, and the queries, in float64-ready form."""

    def __init__(self, docs: Any, doc_ids: Any, queries: Any) -> None:
        self.sparse = is_sparse(docs)
        if is_sparse(queries) != self.sparse:
            raise TypeError(
                "queries must be sparse when docs are sparse and dense when docs are dense, got "
                f"docs {'sparse' if self.sparse else 'dense'} and queries "
                f"{'sparse' if is_sparse(queries) else 'dense'}"
            )
        self.docs = check_matrix(docs, "docs", allow_sparse=True)
        self.queries = check_matrix(queries, "queries", allow_sparse=True)
        if self.queries.shape[1] != self.docs.shape[1]:
            raise ValueError(
                f"queries must have the dimension of docs ({self.docs.shape[1]}), "
                f"got {self.queries.shape[1]}"
            )
        ids = np.asarray(doc_ids)
        if ids.ndim != 1 or ids.shape[0] != self.docs.shape[0]:
            raise ValueError(
                f"doc_ids must be 1-D with one id per row of docs ({self.docs.shape[0]}), "
                f"got shape {ids.shape}"
            )
        if ids.size and ids.dtype.kind not in "iu":
            raise TypeError(f"doc_ids must be integers, got dtype {ids.dtype}")
        self.ids = ids.astype(np.int64, copy=False)
        self._order = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._order]
        if self._sorted.size > 1 and (self._sorted[1:] == self._sorted[:-1]).any():
            dup = self._sorted[1:][self._sorted[1:] == self._sorted[:-1]][:5]
            raise ValueError(f"doc_ids must be unique, got repeated ids {dup.tolist()}")
        if self.sparse:
            nnz = np.diff(self.queries.indptr)
            self.eff_dim = int(nnz.max()) if nnz.size else 1
        else:
            self.eff_dim = int(self.docs.shape[1])

    # Norms in float64 without a float64 copy of the vectors (the documents can
    # be the largest array of the run: ASIF captions, 38M non-zeros); computed
    # on first use (rescoring a few pairs needs none).
    @cached_property
    def xnorm(self) -> np.ndarray:
        return _row_norms(self.docs)

    @cached_property
    def qnorm(self) -> np.ndarray:
        return _row_norms(self.queries)

    @property
    def n(self) -> int:
        return int(self.docs.shape[0])

    @property
    def nq(self) -> int:
        return int(self.queries.shape[0])

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id in ``docs``; -1 for ids never inserted (and for -1)."""
        pos = np.full(ids.shape, -1, dtype=np.int64)
        if self.n == 0:
            return pos
        at = np.searchsorted(self._sorted, ids)
        at = np.minimum(at, self.n - 1)
        known = (self._sorted[at] == ids) & (ids >= 0)
        pos[known] = self._order[at[known]]
        return pos

    def pair_scores(self, qrows: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """True inner products of query ``qrows[i]`` with doc row ``pos[i, j]`` (NaN for -1),
        in float64, read in place (:mod:`~imsearch_align.framework._pair_kernels`)."""
        from imsearch_align.framework._pair_kernels import dense_pair_dots, sparse_pair_dots
        from imsearch_align.framework.metrics import _map_row_chunks

        qrows = np.ascontiguousarray(qrows, dtype=np.int64)
        pos = np.ascontiguousarray(pos, dtype=np.int64)
        if pos.size == 0:
            return np.full(pos.shape, np.nan)
        q, x = self.queries, self.docs
        if self.sparse:

            def part(lo: int, hi: int) -> np.ndarray:
                return sparse_pair_dots(
                    q.indptr, q.indices, q.data, x.indptr, x.indices, x.data,
                    qrows[lo:hi], pos[lo:hi], x.shape[1],
                )  # fmt: skip
        else:

            def part(lo: int, hi: int) -> np.ndarray:
                return dense_pair_dots(q, x, qrows[lo:hi], pos[lo:hi])

        # The kernels release the GIL: a request of about 4M multiply-adds (a
        # few ms) or more runs on two threads (one threshold cell per 4).
        chunks = _map_row_chunks(part, len(qrows), pos.size * max(1, self.eff_dim) // 4)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def doc_against_all_queries(self, row: int) -> np.ndarray:
        """True inner products of doc ``row`` with every query (for diagnoses)."""
        if self.sparse:
            x = self.docs[row].astype(np.float64)
            return np.asarray((self.queries.astype(np.float64) @ x.T).toarray()).ravel()
        return self.queries.astype(np.float64) @ self.docs[row].astype(np.float64)

    def _sparse_candidates(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(cand, counts)``: for each query the rows of its best ``min(4k, n)``
        documents by a float32 product (-1 where it has fewer non-zero products),
        and how many documents have a non-zero inner product with it.

        Queries go in chunks of 256 and documents in row blocks (views of the
        CSR arrays, no copy, no transposed copy of the documents) of about
        ``_SPARSE_BLOCK_CELLS`` (query, document) cells, so the working memory
        stays in the tens of MiB; a chunk's running best ``4k`` are merged
        block by block. A chunk whose rows fill more than 1/8 of the columns
        (ASIF with few anchors: nearly every pair shares a term) is multiplied
        as a dense float32 block, sparse x sparse otherwise. The best ``4k``
        hold the true top-k unless more than ``3k`` documents tie within
        float32 rounding.
        """
        import scipy.sparse as sp

        nq, n, d = self.nq, self.n, self.docs.shape[1]
        c = int(min(4 * k, n))
        cand = np.full((nq, c), -1, dtype=np.int64)
        counts = np.zeros(nq, dtype=np.int64)
        qc = min(nq, 256)
        docs = self.docs
        avg = max(1, docs.nnz // max(1, n))
        step = max(1, min(_SPARSE_BLOCK_CELLS // qc, _SPARSE_BLOCK_CELLS * 4 // avg))
        for q0 in range(0, nq, qc):
            qs = self.queries[q0 : q0 + qc]
            nb = qs.shape[0]
            dense_q = qs.nnz > nb * d / 8 and nb * d <= _BLOCK_CELLS
            qT = (
                np.ascontiguousarray(qs.astype(np.float32).toarray().T)
                if dense_q
                else qs.T.tocsr().astype(np.float32)
            )
            best_s = np.full((nb, c), -np.inf)
            best_i = np.full((nb, c), -1, dtype=np.int64)
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                a, b = int(docs.indptr[r0]), int(docs.indptr[r1])
                block = sp.csr_matrix(
                    (
                        docs.data[a:b],
                        docs.indices[a:b],
                        (docs.indptr[r0 : r1 + 1] - a).astype(docs.indptr.dtype),
                    ),
                    shape=(r1 - r0, d),
                )
                scores = np.full((nb, r1 - r0), -np.inf)
                if dense_q:
                    prod = np.asarray(block @ qT).T  # (nb, r1 - r0) float32
                    nz = prod != 0
                    counts[q0 : q0 + nb] += nz.sum(axis=1)
                    scores[nz] = prod[nz]
                else:
                    coo = (block @ qT).tocoo()
                    keep = coo.data != 0
                    rows, cols = coo.row[keep], coo.col[keep]
                    counts[q0 : q0 + nb] += np.bincount(cols, minlength=nb)
                    scores[cols, rows] = coo.data[keep]
                both_s = np.concatenate([best_s, scores], axis=1)
                both_i = np.concatenate(
                    [best_i, np.broadcast_to(np.arange(r0, r1), (nb, r1 - r0))], axis=1
                )
                sel = np.argpartition(-both_s, c - 1, axis=1)[:, :c]
                best_s = np.take_along_axis(both_s, sel, axis=1)
                best_i = np.take_along_axis(both_i, sel, axis=1)
            cand[q0 : q0 + nb] = np.where(np.isfinite(best_s), best_i, -1)
        return cand, counts

    def kth(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(t, m)``: the true ``m_i``-th best score and ``m_i`` for each query (brute force).

        Dense: ``m_i = min(k, n)``, scores from a float32 matrix product
        (its rounding is far inside the tolerance). Sparse: only documents
        with a non-zero inner product count; the candidates of a float32
        product are rescored exactly in float64.
        """
        nq, n = self.nq, self.n
        t = np.full(nq, np.inf)
        m = np.zeros(nq, dtype=np.int64)
        if nq == 0 or n == 0:
            return t, m
        kk = min(k, n)
        if self.sparse:
            cand, counts = self._sparse_candidates(k)
            exact = self.pair_scores(np.arange(nq), cand)
            m = np.minimum(counts, k)
            srt = np.sort(np.where(cand >= 0, exact, -np.inf), axis=1)[:, ::-1]
            val = srt[np.arange(nq), np.maximum(m - 1, 0)]
            return np.where(m > 0, val, np.inf), m
        step = max(1, _BLOCK_CELLS // n)
        for q0 in range(0, nq, step):
            sl = slice(q0, q0 + step)
            dense = self.queries[sl] @ self.docs.T
            srt = -np.partition(-dense, kk - 1, axis=1)[:, :kk]
            srt = np.sort(srt, axis=1)[:, ::-1]
            t[sl] = srt[:, kk - 1].astype(np.float64)
            m[sl] = kk
        return t, m


class TrueScores:
    """Inner products recomputed in float64 from the indexed vectors, for any
    ``(query row, doc id)`` pairs (what a store returned).

    Args:
        docs: the vectors the store indexed, dense ``(n, d)`` or CSR.
        doc_ids: their ids, ``(n,)``, unique integers.
        queries: the query vectors, dense or CSR like ``docs``.
    """

    def __init__(self, docs: Any, doc_ids: Any, queries: Any) -> None:
        self._truth = _Truth(docs, doc_ids, queries)

    def __call__(self, query_rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``(m, c)`` float64: row ``i`` scores query ``query_rows[i]`` against
        the docs ``ids[i]``; NaN for ``-1`` and for ids never indexed."""
        qrows = np.asarray(query_rows, dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 2 or qrows.shape != (ids.shape[0],):
            raise ValueError(
                f"TrueScores: ids must be (m, c) and query_rows (m,), got {ids.shape} and "
                f"{qrows.shape}"
            )
        if len(qrows) and (qrows.min() < 0 or qrows.max() >= self._truth.nq):
            raise ValueError(
                f"TrueScores: query_rows must lie in [0, {self._truth.nq}), got "
                f"[{qrows.min()}, {qrows.max()}]"
            )
        return self._truth.pair_scores(qrows, self._truth.positions(ids))


def _row_norms(m: Any) -> np.ndarray:
    """Euclidean norm of every row, in float64 (dense or CSR)."""
    if is_sparse(m):
        return _sparse_row_norms(m)
    return np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float64))


def _sparse_row_norms(m: Any) -> np.ndarray:
    """Row L2 norms of a CSR matrix, summed in float64 over row blocks of its data."""
    out = np.zeros(m.shape[0])
    n = m.shape[0]
    r0 = 0
    while r0 < n:
        # about 1M stored values a block (at least one row): 24 MiB of temporaries
        r1 = int(np.searchsorted(m.indptr, m.indptr[r0] + (1 << 20), side="right")) - 1
        r1 = min(n, max(r1, r0 + 1))
        a, b = int(m.indptr[r0]), int(m.indptr[r1])
        d = m.data[a:b].astype(np.float64)
        rows = np.repeat(np.arange(r1 - r0), np.diff(m.indptr[r0 : r1 + 1]))
        out[r0:r1] = np.bincount(rows, weights=d * d, minlength=r1 - r0)
        r0 = r1
    return np.sqrt(out)
