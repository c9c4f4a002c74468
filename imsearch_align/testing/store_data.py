"""Seeded data of the store conformance kit: clustered dense and sparse vectors, ties.

:func:`clustered_vectors` and :func:`sparse_clustered` are public (also
re-exported by :mod:`imsearch_align.testing.store_conformance`) for
adapter-specific tests and benchmarks; :func:`dense_ties` is the kit's
data set with exact duplicate vectors under other ids.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

__all__ = ["clustered_vectors", "dense_ties", "sparse_clustered"]


def clustered_vectors(
    n: int,
    dim: int,
    *,
    n_clusters: int = 20,
    noise: float = 0.3,
    n_queries: int = 0,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Unit-norm float32 vectors around ``n_clusters`` random centres, and queries.

    Centres are random unit vectors; a document is its centre plus isotropic
    noise of expected norm ``noise`` (so its cosine to the centre is about
    ``1 / sqrt(1 + noise**2)`` in any dimension), re-normalised. Queries are
    stored rows plus noise of expected norm ``noise / 2``, re-normalised, so
    their true neighbours sit in one cluster, as real embeddings do.

    Returns:
        ``(docs (n, dim), queries (n_queries, dim))``.
    """
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, dim))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    scale = 1.0 / np.sqrt(dim)  # per-coordinate sd giving noise vectors of norm ~1
    x = centres[rng.integers(0, n_clusters, n)] + noise * scale * rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.integers(0, n, n_queries)] + 0.5 * noise * scale * rng.standard_normal(
        (n_queries, dim)
    )
    if n_queries:
        q /= np.linalg.norm(q, axis=1, keepdims=True)
    return x.astype(np.float32), q.astype(np.float32)


def sparse_clustered(
    n: int, dim: int, *, nnz: int = 12, n_queries: int = 0, seed: int = 0
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """Sparse non-negative unit rows (ASIF-like: top-``nnz`` entries kept) from clustered data."""
    docs, queries = clustered_vectors(n, dim, n_clusters=10, n_queries=n_queries, seed=seed)

    def sparsify(x: np.ndarray) -> sp.csr_matrix:
        x = np.abs(x)
        keep = np.argpartition(x, dim - nnz, axis=1)[:, dim - nnz :]
        out = np.zeros_like(x)
        np.put_along_axis(out, keep, np.take_along_axis(x, keep, axis=1), axis=1)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return sp.csr_matrix(out.astype(np.float32))

    return sparsify(docs), sparsify(queries) if n_queries else sp.csr_matrix(
        (0, dim), dtype=np.float32
    )


def dense_ties(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """400 x 24 Gaussian docs with 60 exact duplicates under other ids, 40 queries."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((400, 24)).astype(np.float32)
    x[200:260] = x[100:160]  # exact duplicates under other ids: ties
    ids = rng.choice(10**12, size=len(x), replace=False).astype(np.int64)
    q = np.concatenate([rng.standard_normal((30, 24)).astype(np.float32), x[100:110]])
    return x, ids, q
