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

Transform (streamed, bounded memory): rows go in blocks of :func:`plan_rows`
rows; each block is one float32 BLAS product against the anchors (BLAS
threads), then every row's top-k is selected by numba kernels on a thread
pool (``_asif_kernels``: sampled threshold, one collecting pass, quickselect).
The selection is exact for float64 cosines: anchors within twice the float32
rounding bound of the k-th value are re-decided in float64, so the chosen
anchors never depend on the BLAS, the block size or the CPU. The weights are
computed from the float32 cosines (relative error below about
``2 * p * d * 2**-24``). Output: float32 CSR with int32 indices (8 bytes per
non-zero), columns ascending in each row.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import scipy.sparse as sp

from imsearch_align.framework.optional import require
from imsearch_align.framework.registry import METHODS
from imsearch_align.framework.validation import check_int
from imsearch_align.methods.base import AlignmentBase, l2_normalize

__all__ = ["ASIF", "plan_rows"]

#: Working bytes per (query, anchor) entry of one block: the float32 cosine.
_BYTES_PER_ENTRY = 4
#: Scratch of one selection worker per anchor (``_asif_kernels.select_rows``):
#: two float32 buffers, two int64 index buffers, a float64 buffer, a flag.
_WORKER_BYTES_PER_ANCHOR = 33
#: At most this many query rows per BLAS product: larger blocks run no faster
#: and only hold more memory.
_MAX_ROWS = 1024
_U32 = 2.0**-24  # float32 unit roundoff


def _kernels() -> Any:
    return require(  # numba missing or broken
        "imsearch_align.methods._asif_kernels",
        None,
        "the ASIF transform",
        needs="numba",
        pip="'numba>=0.59'",
        note=" (import failed: {exc})",
    )


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def plan_rows(n_queries: int, n_anchors: int, k: int, max_memory_gb: float) -> int:
    """Query rows per block so that one block's working memory fits ``max_memory_gb``.

    A block holds ``rows x n_anchors`` float32 cosines plus each selection
    worker's scratch (``33 x n_anchors`` bytes) and the block's output
    (``rows x k`` index/value pairs). The budget is a target: one row is
    used even when it does not fit; the result never depends on it.
    """
    budget = max_memory_gb * 1024**3 - _workers() * _WORKER_BYTES_PER_ANCHOR * n_anchors
    per_row = _BYTES_PER_ENTRY * n_anchors + 8 * k
    rows = int(budget // per_row) if budget > 0 else 1
    return max(1, min(rows, _MAX_ROWS, max(n_queries, 1)))


def _unit_rows32(V: np.ndarray) -> np.ndarray:
    """Float32 unit rows (norms in float64; all-zero rows stay zero)."""
    norms = np.sqrt(np.einsum("ij,ij->i", V, V, dtype=np.float64))
    scale = (1.0 / np.where(norms > 0, norms, 1.0)).astype(V.dtype)  # no float64 copy of V
    return (V * scale[:, None]).astype(np.float32, copy=False)


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
        max_memory_gb: working-memory budget of a transform: rows are
            transformed in blocks of :func:`plan_rows` rows (at most 1,024), so
            no block of cosines is larger (the stored anchors, the input and
            the output are not counted; the output never depends on it).
        progress: show a tqdm bar over blocks when there are several.

    Attributes:
        anchors_image_, anchors_text_: ``(M, d)`` float32 normalised anchors
            (``None`` after :meth:`release_transform_state`).
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

    fit_float64 = False  # the anchors are float32 unit rows: no float64 copy of the support
    transform_float64 = False  # each block is normalised in float64 (_run_blocks)

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        self.anchors_image_ = _unit_rows32(X)
        self.anchors_text_ = _unit_rows32(Y)

    def _output_dim(self) -> int:
        return int(self.anchors_image_.shape[0])

    def release_transform_state(self) -> None:
        """Drop the anchors (``(M, d_image + d_text)`` float32); transforms raise after it."""
        self.check_is_fitted()
        self.anchors_image_ = self.anchors_text_ = None

    def _anchors(self, modality: str) -> np.ndarray:
        a = self.anchors_image_ if modality == "image" else self.anchors_text_
        if a is None:
            raise RuntimeError(
                "ASIF: the anchors were released (release_transform_state) after the last "
                "transform; expected a fitted ASIF with its anchors: call fit again"
            )
        return a

    # ------------------------------------------------------------ transform
    def _run_blocks(self, V: np.ndarray, anchors: np.ndarray, weights: bool, emit: Any) -> None:
        """Blocked transform: ``emit(r0, r1, idx, val, count)`` for each block of rows.

        Each block is one BLAS product of float32 unit rows against the
        anchors (multi-threaded by the BLAS), then the exact top-k selection
        of its rows in a thread pool of numba kernels (``_asif_kernels``).
        ``weights`` selects the output: ASIF weights (float32, by anchor)
        or float64 cosines (by cosine descending). ``idx`` ``(b, k)`` int32,
        ``val`` ``(b, k)`` and ``count`` ``(b,)`` (entries written per row)
        are the block's buffers, reused by the next block: ``emit`` copies
        what it keeps, so nothing of size ``(n, k)`` is allocated here.
        """
        from tqdm.auto import tqdm

        kern = _kernels()
        n, m, k = V.shape[0], anchors.shape[0], int(self.non_zeros)
        d = anchors.shape[1]
        rows = plan_rows(n, m, k, float(self.max_memory_gb))
        # Twice the worst-case error of a float32 dot product of (near-)unit
        # vectors, plus room for the float64 recomputation: candidates within
        # it of the k-th float32 cosine are rescored exactly (kernel docstring).
        a_max = float(np.sqrt(np.max(np.einsum("ij,ij->i", anchors, anchors, dtype=np.float64))))
        gamma = d * _U32 / (1 - d * _U32)
        margin = 2.0 * gamma * 1.0001 * max(a_max, 1.0) + 1e-12
        blk_idx = np.zeros((rows, k), dtype=np.int32)
        blk_val = np.zeros((rows, k), dtype=np.float32 if weights else np.float64)
        blk_n = np.zeros(rows, dtype=np.int64)
        workers = _workers()
        cos = np.empty((rows, m), dtype=np.float32)
        anchors_t = anchors.T
        starts = range(0, n, rows)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for r0 in tqdm(
                starts,
                desc="ASIF transform",
                unit="block",
                disable=not self.progress or len(starts) < 2,
            ):
                r1 = min(n, r0 + rows)
                b = r1 - r0
                # float64 normalisation of this block only, then float32 for BLAS
                q = l2_normalize(np.asarray(V[r0:r1], dtype=np.float64)).astype(np.float32)
                c = cos[:b]
                np.matmul(q, anchors_t, out=c)
                step = -(-b // workers)
                tallies = np.zeros((workers, 1), dtype=np.int64)

                def run(w: int, q=q, c=c, b=b, step=step, tallies=tallies) -> None:
                    lo, hi = w * step, min(b, (w + 1) * step)
                    if lo < hi:
                        kern.select_rows(
                            c,
                            q,
                            anchors,
                            lo,
                            hi,
                            k,
                            margin,
                            float(self.exponent),
                            weights,
                            blk_idx,
                            blk_val,
                            blk_n,
                            tallies[w],
                        )

                list(pool.map(run, range(workers)))
                emit(r0, r1, blk_idx[:b], blk_val[:b], blk_n[:b])

    def _relative(self, V: np.ndarray, anchors: np.ndarray) -> sp.csr_matrix:
        """The CSR space of ``V``, each block's rows appended in place (8 bytes per
        non-zero, no padded ``(n, k)`` copy: rows that lost clipped cosines take
        only their entries)."""
        n, m, k = V.shape[0], anchors.shape[0], int(self.non_zeros)
        # Room for every row full; pages never written are never resident, and
        # the arrays are shrunk in place to the entries written at the end.
        data = np.empty(n * k, dtype=np.float32)
        indices = np.empty(n * k, dtype=np.int32)
        indptr = np.zeros(n + 1, dtype=np.int64)

        def emit(r0: int, r1: int, idx: np.ndarray, val: np.ndarray, cnt: np.ndarray) -> None:
            a = int(indptr[r0])
            np.cumsum(cnt, out=indptr[r0 + 1 : r1 + 1])
            indptr[r0 + 1 : r1 + 1] += a
            b = int(indptr[r1])
            if b - a == idx.size:  # every row full (the usual case)
                data[a:b], indices[a:b] = val.reshape(-1), idx.reshape(-1)
            else:  # rows that lost clipped (non-positive) cosines
                mask = np.arange(k)[None, :] < cnt[:, None]
                data[a:b], indices[a:b] = val[mask], idx[mask]

        self._run_blocks(V, anchors, True, emit)
        nnz = int(indptr[-1])
        if nnz < n * k:  # in place (realloc): the unwritten tail is given back
            data.resize(nnz, refcheck=False)
            indices.resize(nnz, refcheck=False)
        # int32 index arrays whenever they fit: 8 bytes per non-zero
        itype = np.int32 if nnz < 2**31 and m < 2**31 else np.int64
        return sp.csr_matrix(
            (data, indices.astype(itype, copy=False), indptr.astype(itype)),
            shape=(n, m),
            copy=False,
        )

    def _transform_images(self, X: np.ndarray) -> sp.csr_matrix:
        return self._relative(X, self._anchors("image"))

    def _transform_texts(self, Y: np.ndarray) -> sp.csr_matrix:
        return self._relative(Y, self._anchors("text"))

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
            self._dense_relative(X, self._anchors("image"))
            @ self._dense_relative(Y, self._anchors("text")).T
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
        anchors = self._anchors(modality)
        k = int(self.non_zeros)
        ids = np.zeros((V.shape[0], k), dtype=np.int64)
        vals = np.zeros((V.shape[0], k), dtype=np.float64)

        def emit(r0: int, r1: int, idx: np.ndarray, val: np.ndarray, cnt: np.ndarray) -> None:
            ids[r0:r1], vals[r0:r1] = idx, val

        self._run_blocks(V, anchors, False, emit)
        return vals, ids
