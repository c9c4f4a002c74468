"""ASIF: relative representations over paired anchors (Norelli et al., NeurIPS 2023).

The M support pairs are the anchors, L2-normalised on both sides. An item is
represented by its similarities to the anchors of its own modality::

    c_j  = <x/||x||, a_j>                         (j = 1..M; cosine)
    S    = the top-k anchors by c (k = non_zeros), ties -> lower anchor index
    r_j  = max(c_j, 0) ** p  for j in S, else 0   (p = exponent)
    r̄    = r / ||r||                              (a zero row stays zero)
    sim(x, y) = <r̄(x), r̄(y)>                      (a sparse dot product)

Deliberate differences from upstream ``relreps.py`` (see the reference study):
both sides are normalised (upstream normalises only text rows, which changes
text-to-image rankings), and negative cosines are clipped to 0 before the power
(with an even ``p`` upstream would turn a strong *dis*-similarity into a
strong similarity; the top-k of a realistic anchor set is positive anyway).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from imsearch_align.framework.registry import METHODS
from imsearch_align.framework.validation import check_int
from imsearch_align.methods.base import AlignmentBase, l2_normalize

__all__ = ["ASIF", "plan_chunks"]

#: Working bytes per (query, column) entry of one step: the float32 similarity
#: block, the float32 merged values, argpartition's int64 positions, masks.
_BYTES_PER_ENTRY = 24
#: Every similarity is computed by a GEMM of exactly this shape (queries x
#: anchors), padding the last tiles. BLAS picks kernels and summation orders by
#: shape, so fixed tiles make the float32 cosines (and hence the output)
#: bit-identical whatever the memory budget; the budget only decides how many
#: tiles one step groups.
TILE_ROWS, TILE_COLS = 128, 1024


def _ceil_to(x: int, step: int) -> int:
    return -(-x // step) * step


def plan_chunks(n_queries: int, n_anchors: int, k: int, max_memory_gb: float) -> tuple[int, int]:
    """``(query_rows, anchor_block)`` per step so one step fits ``max_memory_gb``.

    One step holds a ``rows x (k + block)`` working set of about
    ``_BYTES_PER_ENTRY`` bytes per entry; ``rows`` is a multiple of
    ``TILE_ROWS`` and ``block`` of ``TILE_COLS``. The budget is a target: the
    smallest step (one tile of each) is used even when it exceeds a tiny budget.
    """
    budget = max_memory_gb * 1024**3
    max_rows = _ceil_to(max(n_queries, 1), TILE_ROWS)
    max_block = _ceil_to(max(n_anchors, 1), TILE_COLS)
    rows_wanted = min(max_rows, 2 * TILE_ROWS)
    block = int(budget // (_BYTES_PER_ENTRY * rows_wanted)) - k
    block = max(TILE_COLS, min(max_block, block // TILE_COLS * TILE_COLS))
    rows = int(budget // (_BYTES_PER_ENTRY * (k + block)))
    rows = max(TILE_ROWS, min(max_rows, rows // TILE_ROWS * TILE_ROWS))
    return rows, block


def _tiled_cosines(q: np.ndarray, anchors: np.ndarray, c0: int, c1: int) -> np.ndarray:
    """``q @ anchors[c0:c1].T`` computed tile by tile with fixed GEMM shapes.

    ``q`` has a multiple of ``TILE_ROWS`` rows; ``c0`` is a multiple of
    ``TILE_COLS``. Columns past the last anchor are dropped.
    """
    out = np.empty((q.shape[0], c1 - c0), dtype=np.float32)
    tile = np.empty((TILE_ROWS, TILE_COLS), dtype=np.float32)
    for t0 in range(c0, c1, TILE_COLS):
        At = anchors[t0 : t0 + TILE_COLS]
        w = min(TILE_COLS, c1 - t0)
        if len(At) < TILE_COLS:  # pad the last anchor tile with zero rows
            At = np.vstack([At, np.zeros((TILE_COLS - len(At), At.shape[1]), At.dtype)])
        AtT = At.T
        for r0 in range(0, q.shape[0], TILE_ROWS):
            np.matmul(q[r0 : r0 + TILE_ROWS], AtT, out=tile)
            out[r0 : r0 + TILE_ROWS, t0 - c0 : t0 - c0 + w] = tile[:, :w]
    return out


def _topk_rows(vals: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the ``k`` largest ``vals`` with ties broken by ascending ``ids``.

    ``ids`` has the shape of ``vals``. Returns ``(values, ids)`` of shape ``(rows, k)``. ``argpartition`` is
    O(columns) but picks tied entries arbitrarily, so rows where the k-th value
    is tied across the cut are redone with an exact (value, id) sort.
    """
    if vals.shape[1] == k:
        return vals, np.array(ids, dtype=np.int64)
    part = np.argpartition(-vals, k - 1, axis=1)[:, :k]
    sel = np.take_along_axis(vals, part, axis=1)
    kth = sel.min(axis=1)
    n_tied_all = np.count_nonzero(vals == kth[:, None], axis=1)
    n_tied_sel = np.count_nonzero(sel == kth[:, None], axis=1)
    sel_ids = np.take_along_axis(ids, part, axis=1).astype(np.int64, copy=False)
    for i in np.flatnonzero(n_tied_all > n_tied_sel):
        order = np.lexsort((ids[i], -vals[i]))[:k]
        sel[i] = vals[i, order]
        sel_ids[i] = ids[i, order]
    return sel, sel_ids


@METHODS.register("asif")
class ASIF(AlignmentBase):
    """ASIF relative representations: a sparse space over the M support anchors.

    Similarity: ``sim(x, y) = <r̄(x), r̄(y)>`` where ``r̄`` keeps the top
    ``non_zeros`` cosines to the same modality's anchors, clips them at 0,
    raises them to ``exponent`` and L2-normalises the row (module docstring).
    Transforms return ``(n, M)`` float32 CSR matrices with at most
    ``non_zeros`` entries per row, column indices sorted.

    Args:
        non_zeros: anchors kept per item, in ``[1, M]`` (M = support pairs).
        exponent: power ``p > 0`` applied to the kept (clipped) cosines.
        max_memory_gb: working-memory budget of a transform; queries and
            anchor blocks are processed in chunks with a running top-k merge so
            no step materialises more (the stored anchors are not counted).
        progress: show a tqdm bar over query chunks when there are several.

    Attributes:
        anchors_image_, anchors_text_: ``(M, d)`` float32 normalised anchors.
    """

    sparse_output = True

    def __init__(
        self,
        non_zeros: int = 800,
        *,
        exponent: float = 8.0,
        max_memory_gb: float = 2.0,
        progress: bool = True,
    ) -> None:
        self.non_zeros = non_zeros
        self.exponent = exponent
        self.max_memory_gb = max_memory_gb
        self.progress = progress

    def _validate_params(self, X: np.ndarray, Y: np.ndarray) -> None:
        n = X.shape[0]
        k = check_int(self.non_zeros, "non_zeros")
        if not 1 <= k <= n:
            raise ValueError(
                f"non_zeros must be in [1, {n}] (the number of anchors = support pairs), got {k}"
            )
        for name in ("exponent", "max_memory_gb"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float | np.floating):
                raise TypeError(f"{name} must be a positive float, got {type(v).__name__}")
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a finite float > 0, got {v!r}")

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        self.anchors_image_ = l2_normalize(X).astype(np.float32)
        self.anchors_text_ = l2_normalize(Y).astype(np.float32)

    def _output_dim(self) -> int:
        return int(self.anchors_image_.shape[0])

    # ------------------------------------------------------------ transform
    def _relative_topk(self, V: np.ndarray, anchors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Chunked top-k cosines ``(n, k)`` float32 and anchor ids ``(n, k)`` int64 (unordered)."""
        from tqdm.auto import tqdm

        n, m, k = V.shape[0], anchors.shape[0], int(self.non_zeros)
        Q = l2_normalize(V).astype(np.float32)
        # Zero rows pad the queries to whole tiles; their results are dropped.
        Q = np.vstack([Q, np.zeros((_ceil_to(n, TILE_ROWS) - n, Q.shape[1]), np.float32)])
        rows, block = plan_chunks(n, m, k, float(self.max_memory_gb))
        first = min(m, max(block, _ceil_to(k, TILE_COLS)))  # the first block holds >= k anchors
        starts = range(0, n, rows)
        out_vals = np.empty((n, k), dtype=np.float32)
        out_ids = np.empty((n, k), dtype=np.int64)
        for r0 in tqdm(
            starts,
            desc="ASIF transform",
            unit="chunk",
            disable=not self.progress or len(starts) < 2,
        ):
            q = Q[r0 : r0 + rows]
            blk = _tiled_cosines(q, anchors, 0, first)
            vals, ids = _topk_rows(blk, np.broadcast_to(np.arange(first), blk.shape), k)
            for b0 in range(first, m, block):
                blk = _tiled_cosines(q, anchors, b0, min(m, b0 + block))
                # Earlier candidates have lower anchor ids than this block, so
                # the concatenation stays in id order for the tie rule.
                merged_ids = np.concatenate(
                    [ids, np.broadcast_to(np.arange(b0, b0 + blk.shape[1]), blk.shape)], axis=1
                )
                vals, ids = _topk_rows(np.concatenate([vals, blk], axis=1), merged_ids, k)
            take = min(rows, n - r0)
            out_vals[r0 : r0 + take] = vals[:take]
            out_ids[r0 : r0 + take] = ids[:take]
        return out_vals, out_ids

    def _relative(self, V: np.ndarray, anchors: np.ndarray) -> sp.csr_matrix:
        out_vals, out_ids = self._relative_topk(V, anchors)
        n, m, k = V.shape[0], anchors.shape[0], int(self.non_zeros)
        order = np.argsort(out_ids, axis=1)
        out_ids = np.take_along_axis(out_ids, order, axis=1)
        out_vals = np.take_along_axis(out_vals, order, axis=1)
        w = np.maximum(out_vals.astype(np.float64), 0.0) ** float(self.exponent)
        w = l2_normalize(w).astype(np.float32)
        mat = sp.csr_matrix((w.ravel(), out_ids.ravel(), np.arange(0, n * k + 1, k)), shape=(n, m))
        mat.eliminate_zeros()  # clipped negatives carry no information
        return mat

    def _transform_images(self, X: np.ndarray) -> sp.csr_matrix:
        return self._relative(X, self.anchors_image_)

    def _transform_texts(self, Y: np.ndarray) -> sp.csr_matrix:
        return self._relative(Y, self.anchors_text_)

    def _dense_relative(self, V: np.ndarray, anchors: np.ndarray) -> np.ndarray:
        """The definition in float64, dense: cosines, stable top-k, clip, power, normalise."""
        C = l2_normalize(V) @ l2_normalize(anchors.astype(np.float64)).T
        # A stable sort of -C keeps equal cosines in ascending anchor order.
        top = np.argsort(-C, axis=1, kind="stable")[:, : int(self.non_zeros)]
        R = np.zeros_like(C)
        rows = np.arange(C.shape[0])[:, None]
        R[rows, top] = np.maximum(C[rows, top], 0.0) ** float(self.exponent)
        return l2_normalize(R)

    def _similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        return (
            self._dense_relative(X, self.anchors_image_)
            @ self._dense_relative(Y, self.anchors_text_).T
        )

    def top_anchors(self, X: Any, modality: str = "image") -> tuple[np.ndarray, np.ndarray]:
        """The ``(n, non_zeros)`` top cosines and anchor ids per row, by cosine descending.

        Ties are broken by ascending anchor id. This is the chunked kNN step of
        the transform, exposed for inspection and testing.
        """
        if modality not in ("image", "text"):
            raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
        name = "X" if modality == "image" else "Y"
        V = self._check_input(X, name, modality, self._fitted_dim(modality))
        anchors = self.anchors_image_ if modality == "image" else self.anchors_text_
        vals, ids = self._relative_topk(V, anchors)
        order = np.lexsort((ids, -vals), axis=1)
        return np.take_along_axis(vals, order, axis=1), np.take_along_axis(ids, order, axis=1)
