"""Pairwise scans of the Gram matrix in row chunks: the engine of uniformity and k-NN.

One pass over ``u @ u.T`` (dense or sparse, one reused ``(chunk, n)`` buffer)
folds the streaming logsumexp of ``-t ||u_i - u_j||^2`` over ``i < j`` and keeps
each row's nearest-by-dot candidates (blocked top-k); :func:`_cross_lse` does
the same logsumexp across two sets. No ``n x n`` matrix is ever held.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_int, is_sparse

#: Bytes one Gram chunk may take; bounds memory of the pairwise scans.
_CHUNK_BYTES = 1 << 28
#: Column block width of the blocked top-k (see ``_topk_rows``).
_BLOCK = 64


def _chunk_rows(n_cols: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        return check_int(chunk_size, "chunk_size", low=1)
    return max(1, _CHUNK_BYTES // (8 * max(n_cols, 1)))


def _lse_update_inplace(acc: tuple[float, float], G: np.ndarray, t: float) -> tuple[float, float]:
    """Fold ``logsumexp(-t ||u_i - u_j||^2)`` over the entries of ``G`` into ``acc``.

    ``G`` holds inner products of unit vectors (``-inf`` marks excluded
    entries) and is overwritten: on the sphere ``-t ||u_i - u_j||^2 = 2t (g - 1)``,
    so with ``g_max`` the largest entry the block contributes
    ``2t (g_max - 1) + log sum exp(2t (g - g_max))``. In-place passes avoid a
    fresh ``chunk x n`` temporary per operation (allocation dominated the time).
    ``acc`` is ``(max, sum exp(. - max))``, a streaming logsumexp in float64.
    """
    if G.size == 0:
        return acc
    gmax = float(G.max())
    if gmax == -np.inf:
        return acc
    G -= G.dtype.type(gmax)
    G *= G.dtype.type(2.0 * t)
    np.exp(G, out=G)
    s = float(G.sum(axis=1, dtype=np.float64).sum())
    m = 2.0 * t * (gmax - 1.0)
    am, asum = acc
    if m > am:
        return m, asum * math.exp(am - m) + s
    return am, asum + s * math.exp(m - am)


def _lse_value(acc: tuple[float, float]) -> float:
    m, s = acc
    return m + math.log(s) if s > 0 else -np.inf


class _Gram:
    """Row chunks of ``rows @ cols.T`` into one reused buffer (dense or sparse)."""

    def __init__(self, cols: Any, rows_per: int, dtype: Any) -> None:
        self.cols = cols
        self.colsT = None if is_sparse(cols) else cols.T
        self.buf = np.empty((rows_per, cols.shape[0]), dtype)

    def __call__(self, rows: Any) -> np.ndarray:
        out = self.buf[: rows.shape[0]]
        if is_sparse(rows) or self.colsT is None:
            out[...] = (rows @ self.cols.T).toarray()
        else:
            np.matmul(rows, self.colsT, out=out)
        return out


def _topk_rows(G: np.ndarray, m: int) -> np.ndarray:
    """Column indices of the ``m`` largest entries of each row (unordered).

    Blocked selection: the ``m`` largest entries of a row lie in the ``m``
    blocks (of ``_BLOCK`` columns) with the largest block maxima, so a cheap
    max-reduction narrows ``argpartition`` from n columns to ``m * _BLOCK``
    (``argpartition`` over full rows cost 20x more here).
    ``G``'s width must be a multiple of ``_BLOCK``.
    """
    r, w = G.shape
    nb = w // _BLOCK
    blocks = G.reshape(r, nb, _BLOCK)
    if nb > m:
        bmax = blocks.max(axis=2)
        top_b = np.argpartition(bmax, nb - m, axis=1)[:, nb - m :]
    else:
        top_b = np.broadcast_to(np.arange(nb), (r, nb))
    rows = np.arange(r)[:, None]
    cand = blocks[rows, top_b].reshape(r, -1)
    cols = (top_b[:, :, None] * _BLOCK + np.arange(_BLOCK)).reshape(r, -1)
    sel = np.argpartition(cand, cand.shape[1] - m, axis=1)[:, -m:]
    return np.take_along_axis(cols, sel, axis=1)


def _gram_dtype(u: Any) -> Any:
    return np.float64 if is_sparse(u) else u.dtype


def _self_scan(
    u: Any, *, t: float | None, n_neighbors: int | None, chunk_size: int | None, progress: bool
) -> tuple[float | None, np.ndarray | None]:
    """One pass over the Gram matrix of ``u`` in row chunks.

    Returns the logsumexp over ``i < j`` of ``-t ||u_i - u_j||^2`` (if ``t``)
    and the ``n_neighbors`` nearest-by-dot candidates of each row, self
    excluded (if ``n_neighbors``). Memory: one ``(chunk, n)`` block.
    """
    n = u.shape[0]
    pad = (-n) % _BLOCK if n_neighbors else 0
    if is_sparse(u):
        import scipy.sparse as sp

        cols = sp.vstack([u, sp.csr_matrix((pad, u.shape[1]))]).tocsr() if pad else u
    else:
        cols = np.vstack([u, np.zeros((pad, u.shape[1]), u.dtype)]) if pad else u
    rows_per = _chunk_rows(n + pad, chunk_size)
    gram = _Gram(cols, min(rows_per, n), _gram_dtype(u))
    acc = (-np.inf, 0.0)
    cand = np.empty((n, n_neighbors), np.int64) if n_neighbors else None
    starts = range(0, n, rows_per)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="pairwise scan", unit="chunk", leave=False)
    for a in starts:
        b = min(a + rows_per, n)
        G = gram(u[a:b])
        if n_neighbors:
            G[np.arange(b - a), np.arange(a, b)] = -np.inf
            if pad:
                G[:, n:] = -np.inf
            cand[a:b] = _topk_rows(G, n_neighbors)
        if t is not None:
            # Keep j > i only: columns a..n, minus the lower triangle (and the
            # diagonal) of the leading square block.
            up = G[:, a:n]
            tri = np.arange(b - a)
            up[:, : b - a][tri[:, None] >= tri[None, :]] = -np.inf
            acc = _lse_update_inplace(acc, up, t)
    return (_lse_value(acc) if t is not None else None), cand


def _cross_lse(x: Any, y: Any, t: float, chunk_size: int | None) -> float:
    """logsumexp over all (i, j) of ``-t ||x_i - y_j||^2``, chunked."""
    rows_per = _chunk_rows(y.shape[0], chunk_size)
    gram = _Gram(y, min(rows_per, x.shape[0]), _gram_dtype(y))
    acc = (-np.inf, 0.0)
    for a in range(0, x.shape[0], rows_per):
        acc = _lse_update_inplace(acc, gram(x[a : a + rows_per]), t)
    return _lse_value(acc)
