"""What the support set buys back: query-aware IVF indexes (issue 38, item 4).

A cross-modal index holds one modality and is searched with the other; the
modality gap sends a query's IVF list selection to the wrong lists (see
:mod:`~imsearch_align.collection.control`). These variants use the **support
set only** (the pairs the method was fitted on), never a test query:

* **document-only** (the baseline): k-means on the documents, lists chosen by
  the query itself.
* **A, shifted list selection** (:func:`shifted_search`): each query's
  ``nprobe`` lists are chosen with the query moved by the support set's mean
  query-to-document offset (:func:`support_offset`: the mean of aligned support
  document minus aligned support query over the fitted pairs); the candidates
  in those lists are scored with the **original** query's inner product
  (``search_preassigned``, the coarse scores recomputed with the original
  query), so every returned score is the true ``q . x``. The index itself is the
  document-only one. For an inner-product quantizer the moved query need not be
  renormalised: ``argmax_c (q + o) . c`` does not change when ``q + o`` is scaled.
* **B, neighbour-weighted centroids** (:func:`neighbour_weighted_index`): the
  IVF centroids are a weighted k-means of the **documents**, each document
  weighted ``1 + w * (times it is among a support query's m true nearest
  documents)``. The support queries' own vectors are never added: centroids
  trained on captions hold no documents (a probe measured recall@10 0.000 at
  nprobe 1-16 that way).

What trained what: the method on the support pairs (as in every study); the
offset on the same support pairs, mapped through the fitted method; the
document-only and B centroids on the documents (B's weights from the support
queries' true neighbours among the documents). Test queries are only searched.
Every function that trains takes ``observe(what, rows)``, called with every
array that enters the computation, so a caller can prove no test query did
(:class:`QueryGuard`).

Which stores can express it: FAISS ``IndexIVFFlat`` (``ivf_flat``) and
``IndexIVFScalarQuantizer`` (``ivf_sq8``). Not HNSW (FAISS's Python API cannot
add chosen links to a built graph short of editing its raw neighbour arrays),
not IVF-PQ (its scores are codes' approximations, not ``q . x``), not a
server (Milvus, Qdrant, LanceDB choose lists inside the server): refused by
:func:`check_expressible` / :func:`ivf_of`, naming what can.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_int

__all__ = [
    "EXPRESSIBLE",
    "VARIANTS",
    "QueryAwareError",
    "QueryGuard",
    "candidates_scanned",
    "check_expressible",
    "document_only_index",
    "ivf_of",
    "neighbour_weighted_index",
    "neighbour_weights",
    "shifted_search",
    "support_neighbours",
    "support_offset",
    "train_ivf",
]

#: The variants, by the names results use.
VARIANTS = ("document_only", "shifted", "neighbour_weighted")
#: Stores and the index types of each that can express the query-aware variants.
EXPRESSIBLE = {"faiss": ("ivf_flat", "ivf_sq8")}
#: The FAISS classes behind them.
_IVF_CLASSES = ("IndexIVFFlat", "IndexIVFScalarQuantizer")

Observe = Callable[[str, np.ndarray], None] | None


class QueryAwareError(ValueError):
    """A query-aware variant asked of a store or index that cannot express it."""


def _can() -> str:
    return "; ".join(f"{s}: {', '.join(t)}" for s, t in EXPRESSIBLE.items())


def check_expressible(variant: str, *, store: str = "faiss", index: str = "ivf_flat") -> None:
    """Refuse ``variant`` on a ``store`` / ``index`` type that cannot express it, naming
    the stores and index types that can."""
    if variant not in VARIANTS:
        raise QueryAwareError(f"unknown query-aware variant {variant!r}; known: {VARIANTS}")
    if variant == "document_only":
        return
    if index not in EXPRESSIBLE.get(store, ()):
        raise QueryAwareError(
            f"query-aware variant {variant!r} cannot be expressed by store {store!r} with index "
            f"{index!r}: it needs the IVF list choice (shifted) or the centroid training "
            f"(neighbour_weighted) in the caller's hands, with exact inner-product scores; "
            f"the stores and index types that can: {_can()}"
        )


def ivf_of(index: Any, variant: str = "shifted") -> Any:
    """The FAISS ``IndexIVF`` behind ``index`` (an ``IndexIVFFlat`` or
    ``IndexIVFScalarQuantizer``), else :class:`QueryAwareError` naming what can."""
    name = type(index).__name__
    if name in _IVF_CLASSES:
        return index
    raise QueryAwareError(
        f"query-aware variant {variant!r} cannot be expressed by a FAISS {name}; the stores and "
        f"index types that can: {_can()} (FAISS classes {', '.join(_IVF_CLASSES)})"
    )


def _seen(observe: Observe, what: str, rows: np.ndarray) -> None:
    if observe is not None:
        observe(what, rows)


def support_offset(
    method: Any, X: np.ndarray, Y: np.ndarray, *, direction: str = "t2i", observe: Observe = None
) -> np.ndarray:
    """The mean aligned query-to-document offset over the support pairs, ``(d,)`` float64.

    ``X`` (images) and ``Y`` (texts) are the raw support rows the method was fitted
    on, paired row by row as the fit paired them. Text-to-image (documents are
    images): ``mean(transform_images(X) - transform_texts(Y))``; image-to-text the
    other way. Only these rows are read.
    """
    if direction not in ("t2i", "i2t"):
        raise ValueError(f"direction must be 't2i' or 'i2t', got {direction!r}")
    X, Y = np.asarray(X), np.asarray(Y)
    if len(X) != len(Y) or len(X) == 0:
        raise ValueError(
            f"support rows must be non-empty pairs, got {len(X)} images, {len(Y)} texts"
        )
    _seen(observe, "offset: raw support images", X)
    _seen(observe, "offset: raw support texts", Y)
    xi = np.asarray(method.transform_images(X), dtype=np.float64)
    yt = np.asarray(method.transform_texts(Y), dtype=np.float64)
    _seen(observe, "offset: aligned support images", xi)
    _seen(observe, "offset: aligned support texts", yt)
    docs, queries = (xi, yt) if direction == "t2i" else (yt, xi)
    return (docs - queries).mean(axis=0)


def _ip_flat(faiss: Any, d: int) -> Any:
    return faiss.IndexFlatIP(d)


def train_ivf(
    docs: np.ndarray,
    nlist: int,
    *,
    weights: np.ndarray | None = None,
    seed: int = 1234,
    niter: int = 10,
    max_points_per_centroid: int = 256,
    observe: Observe = None,
) -> Any:
    """An inner-product ``IndexIVFFlat`` of ``nlist`` lists, centroids a (weighted)
    k-means of ``docs`` with FAISS's own IVF clustering parameters (spherical for inner
    product, 10 iterations, at most 256 rows per centroid: what ``index.train`` does,
    plus the weights), then every row of ``docs`` added (ids = row positions)."""
    import faiss

    docs = np.ascontiguousarray(docs, dtype=np.float32)
    d = docs.shape[1]
    nlist = check_int(nlist, "nlist", low=1)
    quantizer = _ip_flat(faiss, d)
    index = faiss.IndexIVFFlat(quantizer, d, nlist, faiss.METRIC_INNER_PRODUCT)
    cp = index.cp  # FAISS's own IVF clustering parameters (spherical for inner product)
    cp.niter, cp.seed, cp.max_points_per_centroid = niter, seed, max_points_per_centroid
    clus = faiss.Clustering(d, nlist, cp)
    _seen(observe, "centroid training rows", docs)
    clus.train(docs, _ip_flat(faiss, d), weights)
    quantizer.add(faiss.vector_to_array(clus.centroids).reshape(nlist, d))
    index.is_trained = True
    index.add(docs)
    return index


def document_only_index(docs: np.ndarray, nlist: int, **kw: Any) -> Any:
    """The baseline: centroids trained on the documents alone (:func:`train_ivf`)."""
    return train_ivf(docs, nlist, **kw)


def support_neighbours(
    docs: np.ndarray, support_queries: np.ndarray, m: int, *, observe: Observe = None
) -> np.ndarray:
    """``(n_docs,)`` int64: how often each document is among a support query's ``m``
    true nearest documents (exact inner product, FAISS flat)."""
    import faiss

    m = check_int(m, "m", low=1)
    q = np.ascontiguousarray(support_queries, dtype=np.float32)
    _seen(observe, "neighbour search: aligned support queries", q)
    flat = _ip_flat(faiss, docs.shape[1])
    flat.add(np.ascontiguousarray(docs, dtype=np.float32))
    _, ids = flat.search(q, min(m, len(docs)))
    return np.bincount(ids[ids >= 0].ravel(), minlength=len(docs)).astype(np.int64)


def neighbour_weights(counts: np.ndarray, share: float) -> np.ndarray:
    """Per-document k-means weights ``1 + w * counts``, ``w`` such that the neighbour
    mass is ``share`` of the total (``share`` in [0, 1))."""
    if not 0.0 <= share < 1.0:
        raise ValueError(f"share must be in [0, 1), got {share}")
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    w = 0.0 if total == 0 else share / (1.0 - share) * len(counts) / total
    return (1.0 + w * counts).astype(np.float32)


def neighbour_weighted_index(
    docs: np.ndarray,
    support_queries: np.ndarray,
    nlist: int,
    *,
    m: int = 10,
    share: float = 0.2,
    observe: Observe = None,
    **kw: Any,
) -> tuple[Any, dict[str, Any]]:
    """Variant B: centroids a k-means of the documents weighted by how often each is a
    support query's true neighbour (:func:`support_neighbours`,
    :func:`neighbour_weights`); the support queries themselves are never trained on.
    Returns the index and what trained it."""
    counts = support_neighbours(docs, support_queries, m, observe=observe)
    weights = neighbour_weights(counts, share)
    index = train_ivf(docs, nlist, weights=weights, observe=observe, **kw)
    info = {
        "m": m,
        "share": share,
        "support_queries": len(support_queries),
        "documents_weighted": int((counts > 0).sum()),
        "max_count": int(counts.max()) if len(counts) else 0,
    }
    return index, info


def shifted_search(
    index: Any, queries: np.ndarray, k: int, nprobe: int, offset: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Variant A: ``(scores, ids)`` of ``queries`` whose lists are chosen for
    ``queries + offset`` and whose candidates are scored with ``queries`` themselves.

    The coarse scores handed to FAISS are the original queries' inner products with
    the chosen centroids, so a residual-coded index (IVF-SQ8) also returns ``q . x``.
    The index's ``nprobe`` is set for the call and restored (not thread-safe on one index).
    """
    ivf = ivf_of(index, "shifted")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    off = np.asarray(offset, dtype=np.float32).reshape(1, -1)
    if off.shape[1] != q.shape[1]:
        raise ValueError(f"offset has {off.shape[1]} dimensions, the queries {q.shape[1]}")
    nprobe = min(check_int(nprobe, "nprobe", low=1), ivf.nlist)
    _, lists = ivf.quantizer.search(np.ascontiguousarray(q + off), nprobe)
    centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist)
    coarse = np.einsum("qd,qpd->qp", q, centroids[lists]).astype(np.float32)
    was = ivf.nprobe  # FAISS's wrapper reads the lists per query from the index
    ivf.nprobe = nprobe
    try:
        scores, ids = ivf.search_preassigned(q, k, lists, coarse)
    finally:
        ivf.nprobe = was
    return scores, ids


def candidates_scanned(
    index: Any, queries: np.ndarray, nprobe: int, offset: np.ndarray | None = None
) -> np.ndarray:
    """``(nq,)`` int64: documents each query's ``nprobe`` lists hold (the lists chosen
    for ``queries + offset`` when an offset is given): the work a search does, so
    variants can be compared at equal effort as well as at equal ``nprobe``."""
    ivf = ivf_of(index, "shifted" if offset is not None else "document_only")
    q = np.ascontiguousarray(queries, dtype=np.float32)
    if offset is not None:
        q = np.ascontiguousarray(q + np.asarray(offset, dtype=np.float32).reshape(1, -1))
    _, lists = ivf.quantizer.search(q, min(check_int(nprobe, "nprobe", low=1), ivf.nlist))
    sizes = np.array([ivf.invlists.list_size(i) for i in range(ivf.nlist)], dtype=np.int64)
    return np.where(lists >= 0, sizes[np.maximum(lists, 0)], 0).sum(axis=1)


class QueryGuard:
    """Refuses any test query row reaching a training or offset computation.

    Built over the test queries in every form they exist (raw encoder rows, aligned
    rows); called as ``observe(what, rows)``, it raises ``AssertionError`` when a row
    of ``rows`` equals a guarded row of the same width (float32 bytes), and records
    what it saw (``seen``: what and shape)."""

    def __init__(self, *guarded: np.ndarray) -> None:
        self._rows: dict[int, np.ndarray] = {}
        for g in guarded:
            g = np.ascontiguousarray(g, dtype=np.float32)
            if g.ndim == 2 and len(g):
                old = self._rows.get(g.shape[1])
                self._rows[g.shape[1]] = g if old is None else np.concatenate([old, g])
        self.seen: list[tuple[str, tuple[int, ...]]] = []

    def __call__(self, what: str, rows: np.ndarray) -> None:
        rows = np.asarray(rows)
        self.seen.append((what, tuple(rows.shape)))
        if rows.ndim != 2 or rows.shape[1] not in self._rows:
            return
        guarded = self._rows[rows.shape[1]]
        x = np.ascontiguousarray(rows, dtype=np.float32)
        near = np.isin(x[:, 0], guarded[:, 0])  # exact first coordinate, then the whole row
        if near.any():
            g = {row.tobytes() for row in guarded}
            if any(row.tobytes() in g for row in x[near]):
                raise AssertionError(f"a test query reached {what}")
