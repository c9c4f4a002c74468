"""Exact, tie-aware top-k over a collection streamed in blocks: :func:`exact_truth`.

For each block of documents and each chunk of queries, a float32 GEMM
(``numpy.matmul`` into one reused buffer of at most ``gemm_cells`` scores)
gives the scores, and one fused pass (:mod:`._kernels`) keeps each query's
running top ``c = k + margin``; a candidate entering from a block is
rescored in float64 at once (the block is still in memory). Then each row is
put in true order (float64 score descending, id ascending) and its tie group
at rank k (links within the tie tolerance, default
:data:`~imsearch_align.framework.ranking.tie_aware.EXACT_TIE_TOL`: equal true
scores) is checked closed: an unlisted document's float32 score is at most
the row's ``c``-th kept one, so its true score is at most that plus the
float32 error bound (:func:`~imsearch_align.framework.ties.default_tolerance`
of the dimension times ``||q|| max ||x||``): the *floor*. A row is closed when
its group at k ends before the last candidate and stays clear of the floor.
Rows still open (more than ``margin`` near-ties) are streamed again, only
them, ``8 c`` deep; any still open are flagged (``closed`` False) and scored
as truncated.

The result is cached under ``cache_dir`` keyed by content
(:func:`~imsearch_align.collection.truth_result.truth_key`); the documents'
key is their :class:`~imsearch_align.collection.aligned.StreamDigest`,
given by the caller (computed while inserting the blocks into a store) or
computed by one extra pass. The computing pass then digests the stream again
and refuses a mismatch (the documents changed between passes); without a
cache or a given digest nothing is hashed (the truth's ``key`` is then ``""``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.collection.aligned import StreamDigest, blocks_digest
from imsearch_align.collection.sources import DEFAULT_BLOCK_ROWS, DistractorSource
from imsearch_align.collection.truth_result import CollectionTruth, truth_key, truth_path
from imsearch_align.framework.metrics import Run, _map_row_chunks
from imsearch_align.framework.ranking.tie_aware import EXACT_TIE_TOL
from imsearch_align.framework.ties import _is_link, default_tolerance
from imsearch_align.framework.validation import check_int, check_matrix

__all__ = ["GEMM_CELLS", "as_stream", "exact_truth"]

#: Scores per GEMM buffer (64 MiB of float32): query chunk x document block.
GEMM_CELLS = 1 << 24
#: How much deeper than ``k + margin`` the rows left open are streamed again.
DEEPER = 8

Stream = Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]


def as_stream(docs: Any, block_rows: int = DEFAULT_BLOCK_ROWS) -> Stream:
    """A function that streams ``docs`` from the start each time it is called.

    ``docs``: an ``(ids, matrix)`` pair (served in blocks of ``block_rows``),
    a :class:`~imsearch_align.collection.sources.DistractorSource` (raw
    rows), a :class:`~imsearch_align.collection.aligned.CollectionBlocks` or
    any re-iterable of ``(ids, block)`` pairs, or a zero-argument callable
    returning such an iterator. A one-shot iterator is refused (the truth
    may stream twice).
    """
    if isinstance(docs, tuple) and len(docs) == 2 and np.ndim(docs[1]) == 2:
        ids, mat = np.asarray(docs[0]), docs[1]
        return lambda: ((ids[s : s + block_rows], mat[s : s + block_rows])
                        for s in range(0, len(ids), block_rows))  # fmt: skip
    if isinstance(docs, DistractorSource):
        return lambda: docs.blocks(block_rows)
    if callable(docs):
        return docs
    if hasattr(docs, "__iter__"):
        if iter(docs) is docs:
            raise TypeError(
                "exact_truth: docs is a one-shot iterator; pass a re-iterable (CollectionBlocks, "
                "a DistractorSource, a list of blocks) or a function returning a fresh iterator"
            )
        return lambda: iter(docs)
    raise TypeError(
        "exact_truth: docs must be (ids, matrix), a DistractorSource, CollectionBlocks, a "
        f"re-iterable of (ids, block) pairs or a function returning one, got {type(docs).__name__}"
    )


@dataclass
class _Best:
    """The running top ``c`` of each query row, and what the stream showed."""

    s: np.ndarray  # float32 scores, descending
    p: np.ndarray  # stream positions
    i: np.ndarray  # ids
    t: np.ndarray  # float64 true scores
    n_docs: int = 0
    max_norm: float = 0.0
    ids: list = None  # type: ignore[assignment]  # every block's ids, for the uniqueness check


def _scan(Q: np.ndarray, stream: Stream, c: int, cells: int, digest: StreamDigest | None) -> _Best:
    """One pass over the documents: the running top ``c`` of every query."""
    from imsearch_align.collection._kernels import merge_block
    from imsearch_align.framework._pair_kernels import dense_pair_dots

    nq, d = Q.shape
    best = _Best(
        np.full((nq, c), -np.inf, np.float32),
        np.full((nq, c), -1, np.int64),
        np.full((nq, c), -1, np.int64),
        np.full((nq, c), np.nan),
        ids=[],
    )
    buf = np.empty(cells, dtype=np.float32)
    for ids, block in stream():
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        block = np.ascontiguousarray(block, dtype=np.float32)
        if block.ndim != 2 or block.shape[1] != d or ids.shape != (block.shape[0],):
            raise ValueError(
                f"exact_truth: expected document blocks (b, {d}) with (b,) ids, got "
                f"{block.shape} and {ids.shape}"
            )
        if digest is not None:
            digest.update(ids, block)
        best.ids.append(ids)
        B = block.shape[0]
        if B == 0:
            continue
        if (ids < 0).any():
            raise ValueError(f"exact_truth: document ids must be >= 0, got {int(ids.min())}")
        # float32 norms, widened by far more than their rounding (a bound, not a value)
        sq = float(np.einsum("ij,ij->i", block, block).max()) * (1 + 1e-5)
        best.max_norm = max(best.max_norm, float(np.sqrt(sq)))
        step = max(1, min(nq, cells // B))
        pos = best.n_docs
        for q0 in range(0, nq, step):
            S = buf[: min(step, nq - q0) * B].reshape(-1, B)
            np.matmul(Q[q0 : q0 + S.shape[0]], block.T, out=S)

            def part(lo: int, hi: int, S=S, q0=q0, pos=pos, ids=ids) -> None:
                merge_block(S, q0, lo, hi, pos, ids, best.s, best.p, best.i, best.t)

            _map_row_chunks(part, S.shape[0], S.size)
        r, col = np.nonzero(np.isnan(best.t) & (best.p >= pos))
        if len(r):
            rows = (best.p[r, col] - pos)[:, None]
            best.t[r, col] = dense_pair_dots(Q, block, r.astype(np.int64), rows)[:, 0]
        best.n_docs += B
    return best


@dataclass
class _Rows:
    """Candidates of some query rows in true order, and their closure."""

    ids: np.ndarray
    t: np.ndarray
    g_end: np.ndarray  # last column of the tie group at rank k
    closed: np.ndarray
    kth: np.ndarray
    floor: np.ndarray


def _settle(best: _Best, k: int, tol: float, err: np.ndarray) -> _Rows:
    """Sort candidates by true score (ids ascending among equals) and check closure."""

    nq, c = best.i.shape
    t = np.where(best.i >= 0, best.t, -np.inf)
    order = np.lexsort((best.i, -t), axis=1)
    ids = np.take_along_axis(best.i, order, axis=1)
    t = np.take_along_axis(t, order, axis=1)
    m = min(k, best.n_docs)
    whole = best.n_docs <= c
    floor = np.full(nq, -np.inf) if whole else best.s[:, -1].astype(np.float64) + err
    if m == 0:
        return _Rows(ids, t, np.full(nq, -1), np.ones(nq, bool), np.full(nq, -np.inf), floor)
    link = _is_link(t[:, m - 1 : -1], t[:, m:], tol) & (ids[:, m:] >= 0)
    run_len = np.where(link.all(axis=1), link.shape[1], np.argmin(link, axis=1))
    g_end = m - 1 + run_len
    last = t[np.arange(nq), g_end]
    if whole:
        closed = np.ones(nq, dtype=bool)
    else:
        closed = (g_end < c - 1) & ~_is_link(last, floor, tol) & (last > floor)
    return _Rows(ids, t, g_end, closed, t[:, m - 1].copy(), floor)


def exact_truth(
    queries: Any,
    query_ids: Any,
    docs: Any,
    k: int,
    *,
    margin: int | None = None,
    tie_tolerance: float | None = None,
    cache_dir: Any = None,
    docs_digest: str | None = None,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    gemm_cells: int = GEMM_CELLS,
) -> CollectionTruth:
    """The exact top-k of every query over a streamed collection, in true order.

    Args:
        queries: ``(nq, d)`` aligned query vectors (dense).
        query_ids: ``(nq,)`` their ids (the run's query ids).
        docs: the collection, streamed (see :func:`as_stream`).
        k: the cut-off (the largest of the measures to be scored).
        margin: candidates kept beyond ``k`` (default ``max(16, k)``).
        tie_tolerance: relative tie tolerance of the true scores (default
            ``EXACT_TIE_TOL``: equal true scores tie).
        cache_dir: folder of the on-disk cache (None: no cache).
        docs_digest: the documents' :class:`StreamDigest`, when the caller has
            it (saves the digest pass of a cache lookup); checked.
        block_rows: block size for an ``(ids, matrix)`` ``docs``.
        gemm_cells: scores per GEMM buffer (memory: 4 bytes each).

    Returns:
        :class:`~imsearch_align.collection.truth_result.CollectionTruth`.
    """

    t0 = time.perf_counter()
    Q = np.ascontiguousarray(check_matrix(queries, "queries"), dtype=np.float32)
    qids = np.asarray(query_ids)
    if qids.shape != (Q.shape[0],):
        raise ValueError(f"exact_truth: expected {Q.shape[0]} query ids, got shape {qids.shape}")
    k = check_int(k, "k", low=1)
    margin = max(16, k) if margin is None else check_int(margin, "margin", low=1)
    tol = EXACT_TIE_TOL if tie_tolerance is None else float(tie_tolerance)
    stream = as_stream(docs, block_rows)
    path = None
    if cache_dir is not None:
        if docs_digest is None:
            docs_digest = blocks_digest(stream())
        path = truth_path(cache_dir, truth_key(Q, qids, docs_digest, k, margin, tol))
        if path.exists():
            return CollectionTruth.load(path)
    # The stream is hashed only where a key is needed (a cache, or a digest to check).
    digest = StreamDigest() if docs_digest is not None else None
    best = _scan(Q, stream, k + margin, int(gemm_cells), digest)
    if digest is not None and digest.hexdigest() != docs_digest:
        raise ValueError(
            "exact_truth: the documents streamed differ from docs_digest (expected "
            f"{docs_digest[:16]}..., streamed {digest.hexdigest()[:16]}...): the collection "
            "changed between passes, or the digest belongs to another collection"
        )
    _check_unique_ids(best.ids)
    best.ids = []
    scale = np.sqrt(np.einsum("ij,ij->i", Q, Q, dtype=np.float64)) * best.max_norm
    err = default_tolerance(Q.shape[1]) * scale
    rows = _settle(best, k, tol, err)
    open_rows = np.flatnonzero(~rows.closed)
    if len(open_rows):
        deep = _scan(
            Q[open_rows], stream, min(best.n_docs, DEEPER * (k + margin)), int(gemm_cells), None
        )
        rows = _merge_rows(rows, open_rows, _settle(deep, k, tol, err[open_rows]))
    key = "" if docs_digest is None else truth_key(Q, qids, docs_digest, k, margin, tol)
    seconds = time.perf_counter() - t0
    truth = _assemble(rows, qids, k, best.n_docs, Q.shape[1], tol, key, scale, seconds)
    if path is not None:
        truth.save(path)
    return truth


def _check_unique_ids(blocks: list) -> None:
    """Refuse a collection holding one id twice (naming it)."""
    if not blocks:
        return
    u, c = np.unique(np.concatenate(blocks), return_counts=True)
    if (c > 1).any():
        raise ValueError(
            f"exact_truth: document id {int(u[c > 1][0])} appears {int(c[c > 1][0])} times in "
            "the collection; expected unique ids"
        )


def _merge_rows(rows: _Rows, sel: np.ndarray, deep: _Rows) -> _Rows:
    """``rows`` with rows ``sel`` replaced by the deeper pass's (widened to fit)."""
    nq, c = rows.ids.shape
    C = max(c, deep.ids.shape[1])
    ids = np.full((nq, C), -1, np.int64)
    t = np.full((nq, C), -np.inf)
    ids[:, :c], t[:, :c] = rows.ids, rows.t
    ids[sel] = -1
    t[sel] = -np.inf
    ids[sel, : deep.ids.shape[1]], t[sel, : deep.ids.shape[1]] = deep.ids, deep.t
    out = _Rows(ids, t, rows.g_end.copy(), rows.closed.copy(), rows.kth.copy(), rows.floor.copy())
    out.g_end[sel], out.closed[sel], out.kth[sel], out.floor[sel] = (
        deep.g_end,
        deep.closed,
        deep.kth,
        deep.floor,
    )
    return out


def _assemble(rows: _Rows, qids: np.ndarray, k: int, n_docs: int, dim: int, tol: float,
              key: str, scale: np.ndarray, seconds: float) -> CollectionTruth:  # fmt: skip
    """The truth: a closed row shows its candidates through its group at rank k
    and one closing column (no-hit after); an open row shows every column."""
    nq, C = rows.ids.shape
    close_col = rows.g_end + 1
    need = int(close_col[rows.closed].max()) + 1 if rows.closed.any() else C
    W = max(1, min(C + 1, max(need, min(k, C))))
    ids = np.full((nq, W), -1, np.int64)
    sc = np.full((nq, W), -np.inf)
    w = min(W, C)
    ids[:, :w], sc[:, :w] = rows.ids[:, :w], rows.t[:, :w]
    past = (np.arange(W)[None, :] > close_col[:, None]) & rows.closed[:, None]
    ids[past], sc[past] = -1, -np.inf
    run = Run.from_arrays(qids, ids, sc, assume_sorted=True, copy=False)
    return CollectionTruth(
        run, k, rows.closed, rows.kth, rows.floor, rows.ids, rows.t, scale, n_docs, dim, tol,
        key, seconds,
    )  # fmt: skip
