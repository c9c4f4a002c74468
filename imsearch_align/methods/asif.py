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
#: Query rows per step we aim for when the budget allows (keeps the GEMM efficient).
_TARGET_ROWS = 256


def plan_chunks(n_queries: int, n_anchors: int, k: int, max_memory_gb: float) -> tuple[int, int]:
    """``(query_rows, anchor_block)`` per step so one step fits ``max_memory_gb``.

    One step holds a ``rows x (k + block)`` working set of about
    ``_BYTES_PER_ENTRY`` bytes per entry. The budget is a target: the smallest
    step (one query row, one anchor block of ``k`` columns) is used even when it
    exceeds a tiny budget.
    """
    budget = max_memory_gb * 1024**3
    rows_wanted = max(1, min(n_queries, _TARGET_ROWS))
    block = int(budget // (_BYTES_PER_ENTRY * rows_wanted)) - k
    block = max(1, min(n_anchors, block))
    rows = int(budget // (_BYTES_PER_ENTRY * (k + block)))
    rows = max(1, min(n_queries, rows))
    return rows, block


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
        """Chunked top-k cosines ``(n, k)`` float64 and anchor ids ``(n, k)`` int64 (unordered)."""
        from tqdm.auto import tqdm

        n, m, k = V.shape[0], anchors.shape[0], int(self.non_zeros)
        Q64 = l2_normalize(V)
        Q = Q64.astype(np.float32)
        budget = float(self.max_memory_gb) * 1024**3
        rows, block = plan_chunks(n, m, k, float(self.max_memory_gb))
        first = max(k, block)  # the first block must already hold k anchors
        starts = range(0, n, rows)
        out_vals = np.empty((n, k), dtype=np.float64)
        out_ids = np.empty((n, k), dtype=np.int64)
        for r0 in tqdm(
            starts,
            desc="ASIF transform",
            unit="chunk",
            disable=not self.progress or len(starts) < 2,
        ):
            q = Q[r0 : r0 + rows]
            blk = q @ anchors[:first].T
            vals, ids = _topk_rows(blk, np.broadcast_to(np.arange(blk.shape[1]), blk.shape), k)
            for b0 in range(first, m, block):
                blk = q @ anchors[b0 : b0 + block].T
                # Earlier candidates have lower anchor ids than this block, so
                # the concatenation stays in id order for the tie rule.
                merged_ids = np.concatenate(
                    [ids, np.broadcast_to(np.arange(b0, b0 + blk.shape[1]), blk.shape)], axis=1
                )
                vals, ids = _topk_rows(np.concatenate([vals, blk], axis=1), merged_ids, k)
            out_ids[r0 : r0 + rows] = ids
            # The float32 GEMM above only *selects* anchors: its rounding depends on
            # the block shapes BLAS sees, i.e. on the memory budget. The kept
            # cosines are recomputed per (row, anchor) in float64, which does not
            # depend on chunking, so any budget gives bit-identical output.
            sub = max(
                1, int(budget // (k * anchors.shape[1] * 12))
            )  # float32 gather + float64 copy
            for s0 in range(0, q.shape[0], sub):
                g = anchors[ids[s0 : s0 + sub]].astype(np.float64)
                qq = Q64[r0 + s0 : r0 + min(s0 + sub, q.shape[0])]
                # An elementwise product reduced along the contiguous last axis sums
                # each (row, anchor) pair the same way whatever the chunk shape
                # (einsum/BLAS pick kernels by shape).
                g *= qq[:, None, :]
                out_vals[r0 + s0 : r0 + s0 + g.shape[0]] = g.sum(axis=2)
        return out_vals, out_ids

    def _relative(self, V: np.ndarray, anchors: np.ndarray) -> sp.csr_matrix:
        out_vals, out_ids = self._relative_topk(V, anchors)
        n, m, k = V.shape[0], anchors.shape[0], int(self.non_zeros)
        order = np.argsort(out_ids, axis=1)
        out_ids = np.take_along_axis(out_ids, order, axis=1)
        out_vals = np.take_along_axis(out_vals, order, axis=1)
        w = np.maximum(out_vals, 0.0) ** float(self.exponent)
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
