"""Exact top-k inner-product search of sparse CSR queries against sparse CSR docs.

This is the search behind every sparse collection of
:class:`~imsearch_align.adapters.exact.ExactStore` and
:class:`~imsearch_align.adapters.faiss_store.FaissStore` (ASIF's relative
representations: rows with at most ``non_zeros`` entries over ``N`` anchor
columns). It never forms a ``(queries x docs)`` score block: each worker holds
one float64 accumulator over the docs and one dense copy of the current query,
so the working memory is ``workers x (12 x docs + 8 x dim)`` bytes whatever
the number of queries.

Result rule (``imsearch_align.framework.interfaces``): a row holds the docs
whose inner product with the query is non-zero, at most ``k``, ordered by
score descending then doc position ascending, padded with ``-1`` / ``-inf``.
A score is the float64 sum of the exact float64 products of the float32
values, in the doc row's column order, rounded once to float32; so it does
not depend on the block sizes, the thread count or the CPU.

Algorithm, per query row (Gustavson's row-by-row product, with safe pruning
in the spirit of MaxScore; numba kernels in ``_sparse_kernels``):

1. the query's terms are sorted into magnitude buckets (a factor 2 apart),
   heaviest first;
2. rounds of 16, 32, 64, ... terms are scattered through the docs' posting
   lists (the transposed doc matrix) into a float64 accumulator: ``acc[d]``
   is the partial inner product over the visited terms;
3. after each round, with ``r`` the L2 norm of the unvisited terms,
   Cauchy-Schwarz bounds every doc's full score to
   ``acc[d] +- r * ||d||`` (plus a float64 rounding term). Let ``theta``
   be the k-th largest *lower* bound among docs whose lower bound is
   positive: at least ``k`` docs score ``>= theta``, so a doc whose *upper*
   bound is below ``theta`` (minus a guard of 8 float32 ulps) cannot be in
   the top ``k``, nor tie with its k-th score after rounding;
4. the round loop stops when rescoring the surviving candidates exactly
   (a gather over each candidate's row) costs less than the next round of
   scatter; with every term visited the bound is exact. A row with fewer
   than ``k`` certain hits takes every doc that shares a term with it as
   a candidate (walking its postings once more), so the no-hit rule is
   exact too;
5. the candidates are rescored exactly (the score defined above) and the
   ``k`` best non-zero ones kept.

ASIF's rows are very skewed (cosines raised to the 8th power and
normalised: a few dozen of the 800 terms hold almost all of a row's norm),
so step 4 usually stops after 32 to 128 terms; flatter rows need more. Each
doc's entries are split into a heavy part (its largest 1/8) and a light
part with separate posting lists, so the query's terms run through the
short heavy lists far ahead of the light ones and the bound is the sum of
two Cauchy-Schwarz terms. Measured figures are produced by part (c) of
``benchmarks/perf_stores.py`` (``--flickr``), which also times scipy and
sparse-dot-topn on the same queries; torch sparse, a plain numba scatter
and Seismic (``pyseismic-lsr``) were measured and not kept (README).

Threads: the kernels release the GIL and run on disjoint query rows from a
Python thread pool (not numba's threading layer, which is not re-entrant
under concurrent callers such as the evaluator's workers).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

__all__ = [
    "SparseCollection",
    "SparseDocs",
    "SparseSearchStats",
    "sparse_topk",
    "working_bytes_per_worker",
]

#: A doc's heaviest entries (this fraction of them) form its heavy part.
HEAVY_FRACTION = 0.125
#: Query terms run through the heavy postings this many times further ahead
#: than through the light ones (heavy postings are 1/8 of the work per term).
LEAD = 8


def _kernels() -> Any:
    try:
        from imsearch_align.adapters import _sparse_kernels
    except ImportError as exc:  # numba missing or broken
        raise ImportError(
            "sparse search needs numba: pip install 'numba>=0.59' "
            f"(importing the kernels failed: {exc})"
        ) from exc
    return _sparse_kernels


def _as_csr32(m: Any, name: str) -> sp.csr_matrix:
    """float32 CSR with int32 column indices, int64 indptr, sorted, no duplicates."""
    if not sp.issparse(m):
        raise TypeError(f"{name} must be a scipy sparse matrix, got {type(m).__name__}")
    m = sp.csr_matrix(m, dtype=np.float32)
    if not m.has_canonical_format:
        m = m.copy()
        m.sum_duplicates()  # also sorts the indices
    indices = m.indices.astype(np.int32, copy=False)
    indptr = m.indptr.astype(np.int64, copy=False)
    data = np.ascontiguousarray(m.data, dtype=np.float32)
    out = sp.csr_matrix(m.shape, dtype=np.float32)
    out.data, out.indices, out.indptr = data, indices, indptr
    return out


def working_bytes_per_worker(n_docs: int, dim: int) -> int:
    """Working memory of one search worker: accumulator, candidates, marks, dense query."""
    return 13 * int(n_docs) + 8 * int(dim) + 4096


@dataclass
class SparseSearchStats:
    """What the last :func:`sparse_topk` call did (for benchmarks and tests).

    Attributes:
        scattered: posting entries visited (multiply-adds of the scatter).
        rescored: candidate docs rescored exactly.
        full_rows: query rows that needed every term (fewer than k certain hits).
        workers: threads used.
    """

    scattered: int = 0
    rescored: int = 0
    full_rows: int = 0
    workers: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class SparseDocs:
    """A CSR doc matrix prepared for :func:`sparse_topk`.

    Holds the rows (float32 values, int32 columns: 8 bytes per non-zero),
    their transpose (the posting lists, another 8 bytes per non-zero) and
    the float64 row norms. Doc ``i`` is row ``i``.

    Args:
        docs: ``(n_docs, dim)`` scipy sparse matrix; converted to float32
            CSR (values are float32 on input to every store anyway).
    """

    def __init__(self, docs: Any, *, heavy_fraction: float = HEAVY_FRACTION) -> None:
        kern = _kernels()
        self.csr = _as_csr32(docs, "docs")
        self.n_docs, self.dim = self.csr.shape
        self.heavy_fraction = float(heavy_fraction)
        self.postings = kern.split_postings(
            self.csr.indptr, self.csr.indices, self.csr.data, self.dim, self.heavy_fraction
        )

    @property
    def nbytes(self) -> int:
        """Bytes held: rows, postings and norms."""
        c = self.csr
        return int(c.data.nbytes + c.indices.nbytes + c.indptr.nbytes) + sum(
            int(a.nbytes) for a in self.postings
        )


def _default_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def sparse_topk(
    queries: Any,
    docs: SparseDocs | Any,
    k: int,
    *,
    max_memory_mb: float = 512,
    threads: int | None = None,
    stats: SparseSearchStats | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` docs of every query row by sparse inner product (module docstring).

    Args:
        queries: ``(nq, dim)`` scipy sparse matrix.
        docs: a :class:`SparseDocs` (prepared once, reused) or a sparse matrix.
        k: hits per row, ``>= 1``.
        max_memory_mb: bound on the working memory of the search (every
            worker's accumulator and dense query; the doc matrix, its
            postings and the ``(nq, k)`` result are not counted). Fewer
            workers are used when all of them do not fit; a budget below one
            worker's need raises ``MemoryError`` naming the need.
        threads: workers; ``None`` = the CPUs this process may use.
        stats: filled with what the call did, when given.

    Returns:
        ``(positions, scores)``: ``(nq, k)`` int64 doc rows (``-1`` = no hit)
        and float32 scores (``-inf`` for no hit), each row by score
        descending then position ascending.
    """
    from imsearch_align.framework.validation import check_int

    k = check_int(k, "k", low=1)
    if not isinstance(docs, SparseDocs):
        docs = SparseDocs(docs)
    q = _as_csr32(queries, "queries")
    if q.shape[1] != docs.dim:
        raise ValueError(f"queries must have dimension {docs.dim} (the docs'), got {q.shape[1]}")
    if not (isinstance(max_memory_mb, int | float) and max_memory_mb > 0):
        raise ValueError(f"max_memory_mb must be a positive number, got {max_memory_mb!r}")
    n_threads = _default_threads() if threads is None else check_int(threads, "threads", low=1)
    nq, nd = q.shape[0], docs.n_docs
    kk = min(k, nd)
    out_c = np.full((nq, k), -1, dtype=np.int64)
    out_s = np.full((nq, k), -np.inf, dtype=np.float32)
    if nq == 0 or nd == 0:
        return out_c, out_s
    need = working_bytes_per_worker(nd, docs.dim)
    budget = float(max_memory_mb) * 2**20
    if need > budget:
        raise MemoryError(
            f"max_memory_mb={max_memory_mb:g} is too small for one query row against "
            f"{nd:,} docs of dimension {docs.dim:,}: one search worker needs "
            f"{need / 2**20:.2f} MiB (a float64 accumulator over the docs and a dense "
            f"float64 copy of the query); expected max_memory_mb >= {need / 2**20:.2f}"
        )
    workers = int(max(1, min(n_threads, budget // need, nq)))
    n_out = np.zeros(nq, dtype=np.int64)
    kern = _kernels()
    # Rows are handed out in chunks of at most a few hundred so that a slow
    # chunk does not leave the other workers idle at the end.
    step = int(max(1, min(256, -(-nq // (8 * workers)))))
    spans = [(s, min(s + step, nq)) for s in range(0, nq, step)]
    tallies = np.zeros((len(spans), 3), dtype=np.int64)

    def run(i: int) -> None:
        r0, r1 = spans[i]
        kern.pruned_topk(
            q.indptr,
            q.indices,
            q.data,
            r0,
            r1,
            docs.csr.indptr,
            docs.csr.indices,
            docs.csr.data,
            *docs.postings,
            kk,
            LEAD,
            out_c,
            out_s,
            n_out,
            tallies[i],
        )

    if workers == 1 or len(spans) == 1:
        for i in range(len(spans)):
            run(i)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(run, range(len(spans))))
    if stats is not None:
        tot = tallies.sum(axis=0)
        stats.scattered, stats.rescored, stats.full_rows = (int(x) for x in tot)
        stats.workers = workers
    # Each row's hits came out of a heap: order them by (score desc, position asc),
    # the unfilled slots (-1, -inf) last.
    order = np.lexsort((np.where(out_c < 0, np.iinfo(np.int64).max, out_c), -out_s), axis=1)
    return np.take_along_axis(out_c, order, axis=1), np.take_along_axis(out_s, order, axis=1)


class SparseCollection:
    """The sparse collection state shared by the stores: CSR chunks in, one :class:`SparseDocs`.

    Vectors are appended with their ids; the first search after an insert
    stacks them, sorts the rows by id (so the kernel's tie rule, position
    ascending, is the store's, id ascending) and prepares the postings. The
    chunks are dropped then: the prepared docs are the only copy the store
    holds (a single chunk already in id order is used without copying).
    """

    def __init__(self) -> None:
        self._chunks: list[tuple[sp.csr_matrix, np.ndarray]] = []
        self._docs: SparseDocs | None = None
        self._ids: np.ndarray | None = None

    def add(self, vectors: Any, ids: np.ndarray) -> None:
        """Append CSR ``vectors`` with their (new, unique) int64 ``ids``."""
        if self._docs is not None:  # re-open the prepared docs as the first chunk
            self._chunks = [(self._docs.csr, self._ids)]
            self._docs = self._ids = None
        self._chunks.append((vectors, np.asarray(ids, dtype=np.int64)))

    def prepared(self) -> tuple[SparseDocs, np.ndarray]:
        """``(docs, ids)``: the prepared docs and the id of each row (ascending)."""
        if self._docs is None:
            ids = np.concatenate([i for _, i in self._chunks])
            order = np.argsort(ids, kind="stable")
            if len(self._chunks) == 1 and np.array_equal(order, np.arange(len(ids))):
                mat = self._chunks[0][0]
            else:
                mat = sp.vstack([m for m, _ in self._chunks], format="csr")[order]
            self._docs, self._ids = SparseDocs(mat), ids[order]
            self._chunks = []
        return self._docs, self._ids

    def search(
        self, queries: Any, k: int, *, max_memory_mb: float, threads: int | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, scores)`` of :func:`sparse_topk`, positions mapped to ids (``-1`` kept)."""
        docs, ids = self.prepared()
        pos, scores = sparse_topk(queries, docs, k, max_memory_mb=max_memory_mb, threads=threads)
        return np.where(pos >= 0, ids[np.maximum(pos, 0)], -1), scores

    @property
    def nbytes(self) -> int:
        """Bytes held (prepared docs, or the pending chunks)."""
        if self._docs is not None:
            return self._docs.nbytes + int(self._ids.nbytes)
        return sum(int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes) for m, _ in self._chunks)
