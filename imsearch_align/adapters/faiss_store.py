"""FaissStore: in-process FAISS indexes (flat, HNSW, IVF) behind the store verbs.

Ids: faiss stores rows at positions ``0..n-1``; the store keeps the caller's
int64 ids in a translation array (``CollectionInfo.ids``) and maps results
back with one gather, which works the same for every index type, CPU or GPU.

Results: ``k`` is capped at the collection size and rows are padded with
``-1`` / ``-inf``; each returned row is re-sorted by (score descending, id
ascending) with one vectorised ``np.lexsort``, because faiss orders equal
scores arbitrarily. A flat index is exact, so it also chooses the docs tied
at the k-th score by ascending id, as ExactStore does: it asks faiss for a
few more than ``k`` and again, wider, for rows still tied at the end
(:func:`~imsearch_align.adapters.base.search_closing_ties`). HNSW and IVF
return faiss's choice among tied docs.

Sparse collections (ASIF) are searched with the exact sparse kernel of
:mod:`imsearch_align.adapters.sparse_search`, the same one ExactStore uses
(so both stores answer sparse queries identically), with the sparse no-hit
rule: FAISS has no sparse index, and densifying (the former path) cost
``docs x dim x 4`` bytes (47,675 x 29,000 float32 = 5.2 GiB for Flickr30k's
captions at N = 29,000) and a dense product ``dim / non_zeros`` times larger
than needed. ``index`` (flat / hnsw / ivf) applies to dense collections
only; a sparse collection is always searched exactly (logged once).

Speed note (``benchmarks/perf_stores.py``): the faiss-cpu wheel's bundled
OpenBLAS falls back to a generic kernel on some CPUs, so ``IndexFlatIP`` can
be several times slower than :class:`~imsearch_align.adapters.exact.ExactStore`
(numpy's BLAS). Nothing here touches BLAS environment variables.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from imsearch_align.adapters.base import (
    BaseStore,
    CollectionInfo,
    finalize_rows,
    search_closing_ties,
)
from imsearch_align.adapters.sparse_search import SparseCollection
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.registry import STORES
from imsearch_align.framework.validation import check_int

__all__ = ["FaissStore"]

log = logging.getLogger(__name__)

_INDEXES = ("flat", "hnsw", "ivf")
#: faiss GPU k-selection supports k up to this value.
_GPU_MAX_K = 2048


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(
            "FaissStore needs faiss: pip install 'imsearch-align[faiss]' "
            "(or 'imsearch-align[gpu]' for faiss-gpu, in its own environment)"
        ) from exc
    return faiss


@STORES.register("faiss")
class FaissStore(BaseStore):
    """Vector store on FAISS, metric inner product.

    Args:
        index: ``"flat"`` (exact, ``IndexFlatIP``), ``"hnsw"``
            (``IndexHNSWFlat``) or ``"ivf"`` (``IndexIVFFlat``).
        M: HNSW graph degree.
        efConstruction: HNSW build beam width.
        efSearch: HNSW search beam width (read at every search, so it can
            be changed on a built store: ``store.efSearch = 128``).
        nlist: IVF lists; trained with k-means on the first insert into a
            collection and capped at that insert's row count (logged), so
            insert the bulk of a collection in its first call.
        nprobe: IVF lists visited per query (read at every search); a query
            whose lists hold fewer than ``k`` vectors is searched again in
            every list, so each row has ``min(k, count)`` hits.
        gpu: ``"auto"`` = faiss GPU indexes when ``faiss.get_num_gpus() > 0``,
            else CPU; ``True`` = GPU or a clear error; ``False`` = CPU. HNSW
            has no faiss GPU version and stays on CPU (logged).
        threads: faiss OpenMP threads (``faiss.omp_set_num_threads``, which
            is process-wide) and workers of the sparse search; ``None`` keeps
            faiss's default (sparse search: the CPUs this process may use).
        max_memory_mb: working-memory bound of a sparse search (see
            :func:`~imsearch_align.adapters.sparse_search.sparse_topk`).

    Example:
        >>> import numpy as np
        >>> with FaissStore(index="flat") as s:
        ...     s.create_collection("docs", 2)
        ...     s.insert("docs", np.eye(2, dtype=np.float32), np.array([7, 3]))
        ...     s.search("docs", np.array([[1.0, 0.5]], np.float32), 3).ids.tolist()
        [[7, 3, -1]]
    """

    #: Sparse collections are accepted (searched by the exact sparse kernel).
    supports_sparse = True
    #: faiss itself (CPU or GPU wheel), and numba for sparse collections.
    provenance_packages = ("faiss-cpu", "faiss-gpu", "numpy", "numba")
    #: One search call runs on every core (OpenMP): the evaluator calls it from one thread.
    parallel_search = True

    def __init__(
        self,
        index: str = "flat",
        *,
        M: int = 32,
        efConstruction: int = 100,
        efSearch: int = 64,
        nlist: int = 256,
        nprobe: int = 16,
        gpu: bool | str = "auto",
        threads: int | None = None,
        max_memory_mb: int = 512,
    ) -> None:
        super().__init__()
        if index not in _INDEXES:
            raise ValueError(f"index must be one of {list(_INDEXES)}, got {index!r}")
        self.index = index
        self.M = check_int(M, "M", low=2)
        self.efConstruction = check_int(efConstruction, "efConstruction", low=1)
        self.efSearch = check_int(efSearch, "efSearch", low=1)
        self.nlist = check_int(nlist, "nlist", low=1)
        self.nprobe = check_int(nprobe, "nprobe", low=1)
        if gpu not in ("auto", True, False):
            raise ValueError(f"gpu must be 'auto', True or False, got {gpu!r}")
        self.gpu = gpu
        self.threads = None if threads is None else check_int(threads, "threads", low=1)
        self.max_memory_mb = check_int(max_memory_mb, "max_memory_mb", low=1)

        self._faiss = _import_faiss()
        if self.threads is not None:
            self._faiss.omp_set_num_threads(self.threads)
        n_gpus = self._faiss.get_num_gpus() if hasattr(self._faiss, "get_num_gpus") else 0
        if gpu is True and n_gpus == 0:
            raise RuntimeError(
                "gpu=True but faiss reports 0 GPUs (is faiss-gpu installed and a CUDA device "
                "visible?); expected gpu='auto' or gpu=False on this machine"
            )
        #: Whether this store builds faiss GPU indexes.
        self.uses_gpu = n_gpus > 0 and gpu in ("auto", True)
        self._gpu_res = None

    @property
    def exact(self) -> bool:
        """Whether search scores every vector (``index="flat"``; sparse collections always).

        See :class:`~imsearch_align.framework.interfaces.ExactSearch`.
        """
        return self.index == "flat"

    # -- index construction ----------------------------------------------------
    def _new_index(self, dim: int, n_train: int) -> Any:
        faiss = self._faiss
        ip = faiss.METRIC_INNER_PRODUCT
        if self.index == "flat":
            idx = faiss.IndexFlatIP(dim)
        elif self.index == "hnsw":
            idx = faiss.IndexHNSWFlat(dim, self.M, ip)
            idx.hnsw.efConstruction = self.efConstruction
        else:
            nlist = min(self.nlist, n_train)
            if nlist < self.nlist:
                log.info(
                    "FaissStore: nlist capped at %d (first insert has %d rows, nlist=%d)",
                    nlist,
                    n_train,
                    self.nlist,
                )
            idx = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, ip)
        if self.uses_gpu:
            if self.index == "hnsw":
                log.info("FaissStore: faiss has no GPU HNSW; the hnsw index stays on CPU")
            else:
                if self._gpu_res is None:
                    self._gpu_res = faiss.StandardGpuResources()
                idx = faiss.index_cpu_to_gpu(self._gpu_res, 0, idx)
        return idx

    # -- hooks -------------------------------------------------------------------
    def _create(self, info: CollectionInfo) -> None:
        if info.sparse:
            info.state = SparseCollection()
            if self.index != "flat":
                log.info(
                    "FaissStore: sparse collection %r is searched exactly (FAISS has no sparse "
                    "index; index=%r applies to dense collections)",
                    info.name,
                    self.index,
                )

    def _insert(self, info: CollectionInfo, vectors: Any, ids: np.ndarray) -> None:
        if info.sparse:
            info.state.add(vectors, ids)
            return
        if info.state is None:
            info.state = self._new_index(info.dim, vectors.shape[0])
        idx = info.state
        if not idx.is_trained:
            idx.train(vectors)
        idx.add(vectors)

    def _search(self, info: CollectionInfo, queries: Any, k: int) -> SearchResult:
        if info.sparse:
            ids, scores = info.state.search(
                queries, k, max_memory_mb=self.max_memory_mb, threads=self.threads
            )
            return SearchResult(ids=ids, scores=scores)
        kk = min(k, info.count)
        if self.uses_gpu and self.index != "hnsw" and kk > _GPU_MAX_K:
            raise ValueError(
                f"k must be at most {_GPU_MAX_K} on a faiss GPU index (collection has "
                f"{info.count} rows), got {k}; use gpu=False or ExactStore"
            )
        idx = info.state
        self._set_search_params(idx)
        if self.index == "flat":
            # exact: the documents tied at the k-th score are chosen by id, not by faiss
            max_limit = _GPU_MAX_K if self.uses_gpu else None

            def search(rows: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
                scores, pos = idx.search(
                    queries if rows.size == len(queries) else queries[rows], limit
                )
                return np.where(pos >= 0, info.ids[np.maximum(pos, 0)], -1), scores

            ids, scores = search_closing_ties(
                search, len(queries), info.count, kk, max_limit=max_limit
            )
            return finalize_rows(ids, scores, k)
        scores, pos = idx.search(queries, kk)
        short = np.flatnonzero((pos < 0).any(axis=1))
        if short.size and self.index == "ivf" and idx.nprobe < idx.nlist:
            # A dense collection answers with min(k, count) hits; the probed
            # lists of these rows held fewer: search those rows in every list.
            idx.nprobe = idx.nlist
            try:
                scores[short], pos[short] = idx.search(queries[short], kk)
            finally:
                self._set_search_params(idx)
        ids = np.where(pos >= 0, info.ids[np.maximum(pos, 0)], -1)
        return finalize_rows(ids, scores, k)

    def _set_search_params(self, idx: Any) -> None:
        if self.index == "hnsw":
            idx.hnsw.efSearch = self.efSearch
        elif self.index == "ivf":
            idx.nprobe = min(self.nprobe, idx.nlist)

    def _drop(self, info: CollectionInfo) -> None:
        info.state = None

    # -- extras --------------------------------------------------------------------
    def faiss_index(self, name: str) -> Any:
        """The underlying faiss index of a dense collection (``None`` before the first insert).

        Positions in it are insertion order; ``search`` parameters
        (``efSearch``, ``nprobe``) are applied by :meth:`search` only. Meant
        for measurements against the raw library call. A sparse collection
        has no faiss index (``TypeError``).
        """
        info = self._get(name)
        if info.sparse:
            raise TypeError(
                f"name: collection {name!r} is sparse and has no faiss index "
                "(it is searched by the exact sparse kernel); expected a dense collection"
            )
        idx = info.state
        if idx is not None:
            self._set_search_params(idx)
        return idx
