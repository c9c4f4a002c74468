"""The ground truth's speed against the GEMM it is built on: :func:`bench_truth`.

Both run the same blocked float32 GEMM (document blocks x query chunks into
one reused buffer of :data:`~imsearch_align.collection.truth.GEMM_CELLS`
scores) over the same cone-shaped, clustered unit vectors (mean pairwise
cosine about 0.5, like a real encoder's); the GEMM alone does nothing with
the scores, the truth keeps the running top ``k + margin``, rescores the
candidates in float64 and closes the tie groups. The target is a truth rate
of at least half the GEMM's. ``benchmarks/perf.py`` calls it as its
``collection`` section.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from imsearch_align.collection.sources import DEFAULT_BLOCK_ROWS
from imsearch_align.collection.truth import GEMM_CELLS, exact_truth

__all__ = ["bench_truth", "cone_vectors"]


def cone_vectors(
    n: int, dim: int, *, seed: int = 0, clusters: int = 64, cone: float = 1.0, spread: float = 0.8
) -> np.ndarray:
    """``(n, dim)`` float32 unit rows around a common direction, in ``clusters`` clusters.

    Each cluster centre is ``cone * m + g`` (``m`` the shared unit
    direction, ``g`` Gaussian with ``1/sqrt(dim)`` per coordinate), each row
    its centre plus Gaussian noise of norm about ``spread``, normalised: mean
    pairwise cosine about 0.3-0.5 with the defaults (a real encoder's cone).
    """
    rng = np.random.default_rng(seed)
    m = rng.standard_normal(dim)
    m /= np.linalg.norm(m)
    centres = cone * m + rng.standard_normal((clusters, dim)) / np.sqrt(dim)
    out = np.empty((n, dim), dtype=np.float32)
    for s in range(0, n, 65536):
        b = min(n, s + 65536) - s
        x = centres[rng.integers(0, clusters, b)]
        x += rng.standard_normal((b, dim)) * (spread / np.sqrt(dim))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        out[s : s + b] = x
    return out


def bench_truth(
    n_docs: int = 200_000,
    n_queries: int = 2000,
    dim: int = 256,
    *,
    k: int = 10,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    seed: int = 0,
    repeat: int = 2,
    quiet: bool = False,
) -> dict[str, Any]:
    """Time the blocked GEMM alone and the ground truth over the same data; print both.

    Returns a JSON-ready dict: sizes, the best of ``repeat`` runs of each in
    seconds, their GFLOP/s (``2 n_queries n_docs dim`` per run) and
    ``ratio`` = truth rate / GEMM rate.
    """
    docs = cone_vectors(n_docs, dim, seed=seed)
    queries = cone_vectors(n_queries, dim, seed=seed + 1)
    ids = np.arange(n_docs, dtype=np.int64)
    flop = 2.0 * n_queries * n_docs * dim
    buf = np.empty(GEMM_CELLS, dtype=np.float32)

    def gemm_alone() -> None:
        """The blocked GEMM of the truth, the scores left unread."""
        for s in range(0, n_docs, block_rows):
            block = docs[s : s + block_rows]
            step = max(1, min(n_queries, GEMM_CELLS // len(block)))
            for q0 in range(0, n_queries, step):
                S = buf[: min(step, n_queries - q0) * len(block)].reshape(-1, len(block))
                np.matmul(queries[q0 : q0 + S.shape[0]], block.T, out=S)

    exact_truth(queries[:8], np.arange(8), (ids[:1000], docs[:1000]), k)  # compile the kernels
    times: dict[str, float] = {"gemm": np.inf, "truth": np.inf}
    truth = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        gemm_alone()
        times["gemm"] = min(times["gemm"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        truth = exact_truth(queries, np.arange(n_queries), (ids, docs), k, block_rows=block_rows)
        times["truth"] = min(times["truth"], time.perf_counter() - t0)
    out = {
        "n_docs": n_docs,
        "n_queries": n_queries,
        "dim": dim,
        "k": k,
        "block_rows": block_rows,
        "gemm_s": round(times["gemm"], 3),
        "truth_s": round(times["truth"], 3),
        "gemm_gflops": round(flop / times["gemm"] / 1e9, 1),
        "truth_gflops": round(flop / times["truth"] / 1e9, 1),
        "ratio": round(times["gemm"] / times["truth"], 3),
        "open_rows": int((~truth.closed).sum()) if truth is not None else 0,
    }
    if not quiet:
        print(
            f"collection truth {n_queries} queries x {n_docs} docs x {dim}: GEMM alone "
            f"{out['gemm_s']} s ({out['gemm_gflops']} GFLOP/s), truth {out['truth_s']} s "
            f"({out['truth_gflops']} GFLOP/s), ratio {out['ratio']}"
        )
    return out
