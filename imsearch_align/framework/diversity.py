"""Diversity of a ranked list: the vector kernel of ``Diversity@k``.

``Diversity@k`` of one query is ``1 - ILS``, ILS (intra-list similarity)
being the mean cosine over the pairs ``i < j`` of the top ``k`` returned
documents, read from the **indexed vectors** of those documents (never from
the store's scores): imsearch_eval's ``diversity`` (its ``compute_ils``:
``sklearn.metrics.pairwise.cosine_similarity`` of the returned vectors, mean
of the upper triangle without the diagonal). A zero vector has cosine 0
with every vector (sklearn's convention); a returned id that is not a
document of the index counts as such a vector. A list of fewer than two
documents has no pair: its diversity is **0**, as imsearch_eval gives an
empty result (it gives NaN for a single result; 0 keeps every query in the
mean, as a failed query's 0 is).

Cost. With ``u_i = v_i / ||v_i||``, ``sum_{i<j} u_i . u_j = (||sum_i u_i||^2
- sum_i ||u_i||^2) / 2``: one weighted sum of the top-k vectors per query
(in float64), not ``k^2/2`` dot products, and no copy of the collection;
a CSR collection (ASIF's sparse spaces) is summed by a numba kernel into
one dense accumulator of the dimension, never densified or copied.

Ties. Given the rows' tie groups (the first column of each cell's group, as
:func:`~imsearch_align.framework.ties.tie_groups` labels them), a row whose
group at rank ``k`` goes on past it (a group ``G`` of ``g`` documents from
rank ``a``, ``m = k - a`` of them inside the top ``k``) gets the expected
value over the orders of tied documents: the top ``k`` is the ``a``
documents ``F`` above ``G`` and ``m`` of ``G`` drawn uniformly, so
``E[sum] = S(F) + (m/g) (sum_F u) . (sum_G u) + m(m-1)/(g(g-1)) S(G)`` with
``S(X)`` the pair sum within ``X``; the number of pairs does not depend on
the order. Without groups the row's order is the ranking (the tie rule).

This module imports numpy, scipy.sparse and numba only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from numba import njit

__all__ = ["NOT_INDEXED", "NO_DOC", "DocVectors", "VectorKernel", "diversity"]

#: Row of a returned id that is not a document of the index (a zero vector).
NOT_INDEXED = -1
#: Row of a no-hit cell (no document: the list ends before it).
NO_DOC = -2
#: Float64 values of one block of gathered vectors (8 MB: the temporaries
#: stay far below a cell's own peak memory).
_BLOCK_VALUES = 1 << 20


class DocVectors:
    """The indexed documents' vectors, looked up by document id.

    ``docs`` is the ``(n, d)`` matrix the collection was built from (dense
    or CSR, any float dtype) and ``doc_ids`` the id of each row. The
    inverse row norms (float64) are computed once, on first use; the matrix
    is not copied (a CSR matrix with duplicate entries is summed once).
    """

    def __init__(self, docs: Any, doc_ids: Any) -> None:
        ids = np.asarray(doc_ids).ravel()
        if ids.shape[0] != docs.shape[0]:
            raise ValueError(
                f"DocVectors: doc_ids must have one id per row of docs ({docs.shape[0]}), "
                f"got {ids.shape[0]}"
            )
        self.sparse = sp.issparse(docs)
        if self.sparse:
            docs = docs.tocsr()
            if not docs.has_canonical_format:
                docs = docs.copy()
                docs.sum_duplicates()
        self.docs = docs
        self._order = np.argsort(ids, kind="stable")
        self._sorted = ids[self._order]
        self._inv: np.ndarray | None = None

    def rows(self, ids: np.ndarray, no_hit: int = -1) -> np.ndarray:
        """Row of each id (any shape) in ``docs``: :data:`NO_DOC` where the id
        is ``no_hit``, :data:`NOT_INDEXED` where it is no document's id."""
        ids = np.asarray(ids)
        out = np.full(ids.shape, NOT_INDEXED, dtype=np.int64)
        if len(self._sorted):
            pos = np.searchsorted(self._sorted, ids).clip(0, len(self._sorted) - 1)
            found = self._sorted[pos] == ids
            out[found] = self._order[pos[found]]
        out[ids == no_hit] = NO_DOC
        return out

    @property
    def inverse_norms(self) -> np.ndarray:
        """``1 / ||v||`` per row in float64, 0 for a zero row."""
        if self._inv is None:
            sq = _row_squares(self.docs, self.sparse)
            with np.errstate(divide="ignore"):
                self._inv = np.where(sq > 0, 1.0 / np.sqrt(sq), 0.0)
        return self._inv

    def unit_sum_squares(self, rows: np.ndarray) -> np.ndarray:
        """``||sum_j u[rows[i, j]]||^2`` per row ``i`` in float64, blockwise
        (cells ``< 0`` add nothing; ``u`` the unit vectors, 0 for a zero row)."""
        n, width = rows.shape
        out = np.zeros(n, dtype=np.float64)
        if not width:
            return out
        inv = self.inverse_norms
        if self.sparse:
            d = self.docs
            return _sparse_sum_squares(d.indptr, d.indices, d.data, rows, inv, d.shape[1])
        step = max(1, _BLOCK_VALUES // max(width * max(self.docs.shape[1], 1), 1))
        for s in range(0, n, step):
            r = rows[s : s + step]
            safe = np.where(r >= 0, r, 0)
            w = np.where(r >= 0, inv[safe], 0.0)
            vec = np.asarray(self.docs[safe.ravel()], dtype=np.float64)
            total = np.matmul(w[:, None, :], vec.reshape(*r.shape, -1))[:, 0, :]
            out[s : s + step] = np.einsum("cd,cd->c", total, total)
        return out

    def pair_sums(self, rows: np.ndarray) -> np.ndarray:
        """``sum_{i<j} u_i . u_j`` over each row's cells (``< 0``: none)."""
        units = ((rows >= 0) & (self.inverse_norms[np.where(rows >= 0, rows, 0)] > 0)).sum(1)
        return (self.unit_sum_squares(rows) - units) / 2


@njit(nogil=True, cache=True)
def _sparse_sum_squares(indptr, indices, data, rows, inv, dim):  # pragma: no cover - numba
    """``||sum_j u[rows[i, j]]||^2`` per row of a CSR matrix: each row's unit
    vectors scattered into one dense float64 accumulator of the dimension,
    read back and cleared over the same entries (no copy of the matrix)."""
    n, width = rows.shape
    out = np.zeros(n, dtype=np.float64)
    acc = np.zeros(dim, dtype=np.float64)
    for i in range(n):
        for j in range(width):
            r = rows[i, j]
            if r >= 0:
                c = inv[r]
                for p in range(indptr[r], indptr[r + 1]):
                    acc[indices[p]] += c * np.float64(data[p])
        s = 0.0
        for j in range(width):
            r = rows[i, j]
            if r >= 0:
                for p in range(indptr[r], indptr[r + 1]):
                    v = acc[indices[p]]
                    s += v * v
                    acc[indices[p]] = 0.0
        out[i] = s
    return out


def _row_squares(docs: Any, sparse: bool) -> np.ndarray:
    """``||v||^2`` per row, in float64, without a float64 copy of the matrix."""
    n = docs.shape[0]
    out = np.zeros(n, dtype=np.float64)
    if sparse:
        ptr = docs.indptr
        s = 0
        while s < n:  # blocks of about _BLOCK_VALUES non-zeros (at least one row)
            e = max(s + 1, int(np.searchsorted(ptr, ptr[s] + _BLOCK_VALUES, "right")) - 1)
            e = min(e, n)
            data = docs.data[ptr[s] : ptr[e]].astype(np.float64)
            full = np.flatnonzero(np.diff(ptr[s : e + 1]) > 0)
            if len(full):  # reduceat over the starts of the non-empty rows
                starts = ptr[s:e][full] - ptr[s]
                out[s + full] = np.add.reduceat(data * data, starts)
            s = e
        return out
    step = max(1, _BLOCK_VALUES // max(docs.shape[1], 1))
    for s in range(0, n, step):
        b = np.asarray(docs[s : s + step], dtype=np.float64)
        out[s : s + step] = np.einsum("nd,nd->n", b, b)
    return out


def _straddling(groups: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows whose tie group at rank ``k`` goes on past it: ``(rows, a, b)``,
    the group's columns ``[a, b)``."""
    width = groups.shape[1]
    if width <= k:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    a = groups[:, k - 1]
    hit = np.flatnonzero((a >= 0) & (groups[:, k] == a))
    a = a[hit]
    same = groups[hit] == a[:, None]
    b = width - np.argmax(same[:, ::-1], axis=1)
    return hit, a, b


def _expected_pair_sums(
    vecs: DocVectors, rows: np.ndarray, a: np.ndarray, b: np.ndarray, k: int
) -> np.ndarray:
    """The expected pair sum of the top ``k`` of each row whose tie group
    ``[a, b)`` straddles rank ``k`` (module docstring). The cross term
    ``(sum_F u) . (sum_G u)`` is ``(||sum_{F+G}||^2 - ||sum_F||^2 - ||sum_G||^2) / 2``."""
    rows = rows[:, : int(b.max())]
    col = np.arange(rows.shape[1])[None, :]
    in_f = col < a[:, None]
    in_g = (col >= a[:, None]) & (col < b[:, None])
    f_rows = np.where(in_f, rows, NOT_INDEXED)
    g_rows = np.where(in_g, rows, NOT_INDEXED)
    fg_rows = np.where(in_f | in_g, rows, NOT_INDEXED)
    s_f, s_g = vecs.pair_sums(f_rows), vecs.pair_sums(g_rows)
    sq = vecs.unit_sum_squares
    cross = (sq(fg_rows) - sq(f_rows) - sq(g_rows)) / 2
    g, m = (b - a).astype(np.float64), (k - a).astype(np.float64)
    return s_f + (m / g) * cross + (m * (m - 1) / (g * (g - 1))) * s_g


def diversity(vecs: DocVectors, rows: np.ndarray, groups: np.ndarray | None, k: int) -> np.ndarray:
    """``Diversity@k`` of each row: ``(n,)`` float64 (see the module docstring).

    Args:
        vecs: the indexed vectors.
        rows: ``(n, K)`` rows of ``vecs`` of each ranked row's documents, in
            rank order, as :meth:`DocVectors.rows` gives them
            (:data:`NOT_INDEXED` counts as a zero vector, :data:`NO_DOC` is
            no document).
        groups: ``(n, K)`` tie group labels (each cell's group's first
            column, ``-1`` for no hit), or None: the rows' order is the ranking.
        k: the cut-off.
    """
    rows = np.asarray(rows, dtype=np.int64)
    top = rows[:, :k]
    n_hits = (top >= NOT_INDEXED).sum(axis=1)
    pairs = np.where(rows >= 0, rows, NOT_INDEXED)
    sums = vecs.pair_sums(pairs[:, :k])
    if groups is not None:
        hit, a, b = _straddling(np.asarray(groups), k)
        if len(hit):
            sums[hit] = _expected_pair_sums(vecs, pairs[hit], a, b, k)
    n_pairs = n_hits * (n_hits - 1) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n_pairs > 0, 1.0 - sums / np.where(n_pairs > 0, n_pairs, 1), 0.0)


#: ``kernel(vecs, rows, groups, k) -> (n,) float64``: a measure computed from
#: the indexed vectors of the ranked documents (see :func:`diversity`).
VectorKernel = Callable[[DocVectors, np.ndarray, "np.ndarray | None", int], np.ndarray]
