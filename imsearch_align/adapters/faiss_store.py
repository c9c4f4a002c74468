"""FaissStore: in-process FAISS indexes (flat, HNSW, IVF-Flat/SQ8/PQ) behind the store verbs.

Index types and parameters are the specs of :mod:`~imsearch_align.adapters.faiss_index`,
checked in the constructor. Each dense collection's index is built once
(``build_count``): ``flat`` and ``hnsw`` at the first insert; an IVF index
at the first insert that brings the collection to ``nlist`` rows (``ivf_pq``:
also ``2**nbits``), training on every row so far (a seeded sample of 256 per
centroid when more), so insert the bulk first, or a first block of at least
39 rows per centroid (FAISS's guidance; fewer is logged); later inserts are
added to the trained index. A search of a collection still too small to
train is refused, naming both numbers. Search-time
parameters (``efSearch``, ``nprobe``) go to faiss with each search call, so
a sweep over them (:meth:`FaissStore.set_search_params`, the
:class:`~imsearch_align.framework.interfaces.TunableSearch` capability)
never rebuilds. Costs a study reads: :meth:`FaissStore.train_seconds` (the
k-means time spent inside an insert) and :meth:`FaissStore.index_bytes` (the
bytes an index holds, counted from its structures).

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
return faiss's choice among tied docs; ``ivf_sq8`` and ``ivf_pq`` report the
score of the compressed vector (approximate), as their Milvus namesakes do.

Sparse collections (ASIF) need ``index="flat"``: they are searched with the
exact sparse kernel of :mod:`imsearch_align.adapters.sparse_search`, the
same one ExactStore uses (so both stores answer sparse queries identically),
with the sparse no-hit rule. FAISS has no sparse index, so an ANN index type
refuses a sparse collection (a result labelled HNSW would be an exact search).

Filtered search (FilteredSearch): the kept rows (attributes are kept in
faiss row order) go to faiss as an ``IDSelectorBitmap`` in every index
type's search parameters (:mod:`~imsearch_align.adapters.faiss_index`),
built once per filter while the collection is unchanged
(:class:`~imsearch_align.adapters.filterable.KeptRowsCache`);
HNSW then returns what its beam finds among them (fewer than ``k`` and lower
recall at a low selectivity); a sparse collection is searched exactly.

GPU (faiss-gpu, ``gpu="auto"``): the rules a GPU index needs (filtered search
on a CPU copy, one call at a time, ``k`` and ``nprobe`` limits) are
:class:`~imsearch_align.adapters.faiss_device.FaissDevice`'s.

Speed note (``benchmarks/perf_stores.py``): the faiss-cpu wheel's bundled
OpenBLAS falls back to a generic kernel on some CPUs, so ``IndexFlatIP`` can
be several times slower than :class:`~imsearch_align.adapters.exact.ExactStore`
(numpy's BLAS). Nothing here touches BLAS environment variables.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imsearch_align.adapters.base import CollectionInfo, finalize_rows, search_closing_ties
from imsearch_align.adapters.faiss_device import GPU_MAX_K, FaissDevice
from imsearch_align.adapters.faiss_index import (
    MIN_POINTS_PER_CENTROID,
    IndexSpec,
    check_search_params,
    check_train_rows,
    index_nbytes,
    make_spec,
    new_index,
    pq_subquantizers,
    row_selector,
    search_parameters,
    spec_nbytes,
    training_sample,
)
from imsearch_align.adapters.filterable import FilterableStore, sparse_search_kept
from imsearch_align.adapters.sparse_search import SparseCollection
from imsearch_align.framework.interfaces import Filter, SearchResult
from imsearch_align.framework.registry import STORES
from imsearch_align.framework.validation import check_int

__all__ = ["FaissStore"]

log = logging.getLogger(__name__)


def _import_faiss() -> Any:
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(
            "FaissStore needs faiss: pip install 'imsearch-align[faiss]' "
            "(or 'imsearch-align[gpu]' for faiss-gpu, in its own environment)"
        ) from exc
    return faiss


@dataclass
class _Dense:
    """A dense collection: its faiss index, rows waiting for training, builds, search settings."""

    index: Any = None
    pending: list[np.ndarray] = field(default_factory=list)
    n_pending: int = 0
    builds: int = 0
    train_s: float = 0.0
    search: dict[str, int] = field(default_factory=dict)
    #: A CPU copy of a GPU index, for filtered search (dropped when rows are added).
    cpu_copy: Any = None


@STORES.register("faiss")
class FaissStore(FilterableStore):
    """Vector store on FAISS, metric inner product.

    Index parameters (see :mod:`~imsearch_align.adapters.faiss_index`; one
    an index does not take is refused, naming the ones it does; ``None``
    = the default):

    Args:
        index: ``"flat"`` (exact, ``IndexFlatIP``), ``"hnsw"``
            (``IndexHNSWFlat``), ``"ivf_flat"`` (or ``"ivf"``, ``IndexIVFFlat``),
            ``"ivf_sq8"`` (8-bit scalar quantizer) or ``"ivf_pq"`` (product quantizer).
        M: HNSW graph degree (32).
        efConstruction: HNSW build beam width (100).
        efSearch: HNSW search beam width (64; search-time).
        nlist: IVF lists (256); a collection needs at least ``nlist`` rows
            (``ivf_pq``: also ``2**nbits``) to train them.
        nprobe: IVF lists visited per query (``min(16, nlist)``; search-time);
            a query whose lists hold fewer than ``k`` vectors is searched again
            in every list, so each row has ``min(k, count)`` hits.
        m: ``ivf_pq`` sub-quantizers, a divisor of the dimension (default:
            the largest divisor up to dim / 4).
        nbits: ``ivf_pq`` bits per sub-quantizer code (8).
        gpu: ``"auto"`` = faiss GPU indexes when ``faiss.get_num_gpus() > 0``,
            else CPU; ``True`` = GPU or a clear error; ``False`` = CPU. HNSW
            has no faiss GPU version and stays on CPU (logged).
        threads: faiss OpenMP threads (``faiss.omp_set_num_threads``, which
            is process-wide) and workers of the sparse search; ``None`` keeps
            faiss's default (sparse search: the CPUs this process may use).
        max_memory_mb: working-memory bound of a sparse search (see
            :func:`~imsearch_align.adapters.sparse_search.sparse_topk`).

    Search-time parameters change on a built collection without rebuilding:
    :meth:`set_search_params` for one collection, or the attributes
    ``efSearch`` / ``nprobe`` for every collection without its own setting.

    Example:
        >>> import numpy as np
        >>> with FaissStore(index="flat") as s:
        ...     s.create_collection("docs", 2)
        ...     s.insert("docs", np.eye(2, dtype=np.float32), np.array([7, 3]))
        ...     s.search("docs", np.array([[1.0, 0.5]], np.float32), 3).ids.tolist()
        [[7, 3, -1]]
    """

    #: faiss itself (CPU or GPU wheel), and numba for sparse collections.
    provenance_packages = ("faiss-cpu", "faiss-gpu", "numpy", "numba")

    @classmethod
    def client_process_limit(cls, params: Mapping[str, Any]) -> tuple[int | None, str]:
        """None: the collections live in the memory of the process that filled the store,
        so a client process would open an empty one."""
        return 0, (
            "store 'faiss' keeps its collections in the memory of the process "
            "that filled it, so a client process would open an empty store; use mode='threads'"
        )

    #: One search call runs on every core (OpenMP): the evaluator calls it from one thread.
    parallel_search = True

    def __init__(
        self,
        index: str = "flat",
        *,
        M: int | None = None,
        efConstruction: int | None = None,
        efSearch: int | None = None,
        nlist: int | None = None,
        nprobe: int | None = None,
        m: int | None = None,
        nbits: int | None = None,
        gpu: bool | str = "auto",
        threads: int | None = None,
        max_memory_mb: int = 512,
    ) -> None:
        super().__init__()
        given = {"M": M, "efConstruction": efConstruction, "efSearch": efSearch}
        given.update(nlist=nlist, nprobe=nprobe, m=m, nbits=nbits)
        spec = make_spec(index, given)
        self._spec = spec
        self.index = spec.index
        #: Build-time parameters (None where the index has none of that name).
        self.M = spec.build.get("M")
        self.efConstruction = spec.build.get("efConstruction")
        self.nlist = spec.build.get("nlist")
        self.m = spec.build.get("m")
        self.nbits = spec.build.get("nbits")
        #: Search-time defaults of every collection, read at every search.
        self.efSearch = spec.search.get("efSearch")
        self.nprobe = spec.search.get("nprobe")
        self.gpu = gpu
        self.threads = None if threads is None else check_int(threads, "threads", low=1)
        self.max_memory_mb = check_int(max_memory_mb, "max_memory_mb", low=1)

        self._faiss = _import_faiss()
        if self.threads is not None:
            self._faiss.omp_set_num_threads(self.threads)
        self._device = FaissDevice(self._faiss, gpu, self.index, self.nbits)
        #: Whether this store builds faiss GPU indexes.
        self.uses_gpu = self._device.uses_gpu
        self._build_lock = threading.Lock()

    @property
    def index_spec(self) -> IndexSpec:
        """The index type and build-time parameters every dense collection is built with."""
        return self._spec

    @property
    def exact(self) -> bool:
        """Whether search scores every vector (``index="flat"``).

        See :class:`~imsearch_align.framework.interfaces.ExactSearch`.
        """
        return self.index == "flat"

    @property
    def supports_sparse(self) -> bool:  # type: ignore[override]
        """Sparse collections are accepted with ``index="flat"`` (the exact sparse kernel)."""
        return self.index == "flat"

    def _no_sparse_reason(self) -> str:
        return (
            f"FaissStore(index={self.index!r}) has no sparse index (FAISS's ANN indexes are "
            "dense); use index='flat', which searches a sparse collection exactly, or ExactStore"
        )

    # -- tunable search (TunableSearch) ------------------------------------------------
    def search_params(self, name: str) -> dict[str, int]:
        """The search-time parameters collection ``name`` is searched with now ({} for flat)."""
        info = self._get(name)
        return {} if info.sparse else self._effective(info.state)

    def set_search_params(self, name: str, **params: Any) -> None:
        """Change search-time parameters of collection ``name`` for its next searches.

        The built index is kept (``build_count`` does not change). Every
        parameter is checked first: a build-time one, one the index does not
        take (``nprobe`` on ``hnsw``), a wrong type or an ``nprobe`` above
        ``nlist`` raises, naming the parameter, the index and what it
        accepts, and nothing changes.
        """
        info = self._get(name)
        checked = check_search_params(self._spec, params)
        if checked:  # flat (and every sparse collection) takes none: nothing reaches here
            info.state.search.update(checked)

    def build_count(self, name: str) -> int:
        """How many times collection ``name``'s index was built (0 before it exists; sparse: 0)."""
        info = self._get(name)
        return 0 if info.sparse else info.state.builds

    def train_seconds(self, name: str) -> float:
        """Seconds collection ``name``'s index spent in FAISS ``train`` (the IVF k-means),
        summed over its builds; 0.0 when nothing was trained (flat, hnsw, sparse, unbuilt).

        The training runs inside the insert that builds the index, so a caller
        timing inserts can move these seconds to build time.
        """
        info = self._get(name)
        return 0.0 if info.sparse else info.state.train_s

    def index_bytes(self, name: str) -> int | None:
        """Bytes collection ``name``'s FAISS index holds, counted from its structures.

        :func:`~imsearch_align.adapters.faiss_index.index_nbytes` (vectors or
        codes, list ids, centroids, quantizer tables, HNSW graph; nothing
        copied); an index on the GPU by
        :func:`~imsearch_align.adapters.faiss_index.spec_nbytes`. ``None``
        for a sparse collection or one whose index is not built yet.
        """
        info = self._get(name)
        if info.sparse or info.state.index is None:
            return None
        idx = info.state.index
        if self._device.on_gpu:
            return spec_nbytes(self._spec, info.dim, int(idx.ntotal))
        return index_nbytes(self._faiss, idx)

    def _effective(self, st: _Dense) -> dict[str, int]:
        out = {"efSearch": self.efSearch} if self.index == "hnsw" else {}
        if self._spec.ivf:
            out["nprobe"] = self.nprobe
        out.update(st.search)
        return out

    def _search_args(
        self, st: _Dense, nprobe: int | None = None, sel: Any = None
    ) -> dict[str, Any]:
        """``params=`` of one faiss search call (:func:`search_parameters`)."""
        nlist = st.index.nlist if self._spec.ivf else None
        eff = self._effective(st)
        return search_parameters(self._faiss, self._spec, eff, nlist, nprobe=nprobe, sel=sel)

    # -- building ------------------------------------------------------------------
    def _build(self, info: CollectionInfo) -> None:
        """Create the index of a dense collection and add (training on) its pending rows."""
        st: _Dense = info.state
        spec, n = self._spec, st.n_pending
        check_train_rows(spec, n, info.name)
        if spec.ivf and n < (want := MIN_POINTS_PER_CENTROID * spec.centroids):
            msg = "FaissStore: training %d centroids of collection %r on %d rows (FAISS asks for"
            log.warning(msg + " at least %d)", spec.centroids, info.name, n, want)
        idx = self._device.place(new_index(self._faiss, spec, info.dim))
        if spec.ivf:
            sample = training_sample(st.pending, spec.train_rows)
            t = time.perf_counter()
            with self._device.call():
                idx.train(sample)
            st.train_s += time.perf_counter() - t
            del sample
        while st.pending:
            with self._device.call():
                idx.add(st.pending.pop(0))  # each block freed once added
        st.index, st.n_pending = idx, 0
        st.builds += 1

    def _built(self, info: CollectionInfo) -> Any:
        """The collection's index, built now from its pending rows if needed (thread-safe)."""
        st: _Dense = info.state
        if st.index is None:
            with self._build_lock:
                if st.index is None:
                    self._build(info)
        return st.index

    # -- hooks -------------------------------------------------------------------
    def _create(self, info: CollectionInfo) -> None:
        if info.sparse:
            info.state = SparseCollection()
            return
        if info.dim is not None and self.index == "ivf_pq":
            pq_subquantizers(self._spec, info.dim)  # m must divide dim: refused before any work
        info.state = _Dense()

    def _insert(self, info: CollectionInfo, vectors: Any, ids: np.ndarray) -> None:
        if info.sparse:
            info.state.add(vectors, ids)
            return
        st: _Dense = info.state
        if st.index is not None:
            with self._device.call():
                st.index.add(vectors)
            st.cpu_copy = None
            return
        if self.index == "ivf_pq":
            pq_subquantizers(self._spec, info.dim)
        st.n_pending += int(vectors.shape[0])
        if st.n_pending < self._spec.min_rows:  # too few to train: kept (a copy) until more come
            st.pending.append(np.array(vectors, dtype=np.float32))
            return
        st.pending.append(vectors)
        with self._build_lock:
            self._build(info)

    def _search(self, info: CollectionInfo, queries: Any, k: int) -> SearchResult:
        if info.sparse:
            ids, scores = info.state.search(
                queries, k, max_memory_mb=self.max_memory_mb, threads=self.threads
            )
            return SearchResult(ids=ids, scores=scores)
        return self._dense_search(info, queries, k, info.count)

    def _search_filtered(
        self, info: CollectionInfo, queries: Any, k: int, filter: Filter, keep: np.ndarray | None
    ) -> SearchResult:
        if info.sparse:
            mem, threads = self.max_memory_mb, self.threads
            kept = info.ids[keep]
            return sparse_search_kept(
                info.state, queries, k, kept, max_memory_mb=mem, threads=threads
            )
        # built once per filter while the collection is unchanged; the cached pair keeps
        # the bitmap the selector reads alive (and this call holds it until it returns)
        sel, _bitmap, n_kept = self._kept_derived(info, filter, "faiss_selector", self._selector)
        return self._dense_search(info, queries, k, n_kept, sel)

    def _selector(self, keep: np.ndarray) -> tuple[Any, np.ndarray, int]:
        """The ``IDSelectorBitmap`` of the kept rows, its bitmap, and how many rows it keeps."""
        sel, bitmap = row_selector(self._faiss, keep)
        return sel, bitmap, int(keep.sum())

    def _dense_search(
        self, info: CollectionInfo, queries: Any, k: int, n: int, sel: Any = None
    ) -> SearchResult:
        """Top-``k`` of a dense collection among its ``n`` searchable rows (all, or those
        the selector ``sel`` keeps)."""
        kk = min(k, n)
        st, dev = info.state, self._device
        idx = self._built(info)
        args = self._search_args(st, sel=sel)
        on_gpu = dev.on_gpu and sel is None  # a GPU index ignores a selector: its CPU copy
        if on_gpu:
            dev.check_search(kk, getattr(args.get("params"), "nprobe", None), info.count)
        else:
            idx = dev.cpu_index(st, idx)
        if self.index == "flat":
            # exact: the documents tied at the k-th score are chosen by id, not by faiss
            max_limit = GPU_MAX_K if on_gpu else None

            def search(rows: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
                with dev.call():
                    scores, pos = idx.search(
                        queries if rows.size == len(queries) else queries[rows], limit, **args
                    )
                return np.where(pos >= 0, info.ids[np.maximum(pos, 0)], -1), scores

            ids, scores = search_closing_ties(search, len(queries), n, kk, max_limit=max_limit)
            return finalize_rows(ids, scores, k)
        with dev.call():
            scores, pos = idx.search(queries, kk, **args)
        short = np.flatnonzero((pos < 0).any(axis=1))
        if short.size and self._spec.ivf and args["params"].nprobe < idx.nlist:
            # A dense collection answers with min(k, count) hits; the probed
            # lists of these rows held fewer: search those rows in every list
            # (past GPU_MAX_K lists, on the CPU copy of a GPU index).
            every = self._search_args(st, nprobe=idx.nlist, sel=sel)
            every_idx = idx if idx.nlist <= GPU_MAX_K else dev.cpu_index(st, idx)
            with dev.call():
                scores[short], pos[short] = every_idx.search(queries[short], kk, **every)
        ids = np.where(pos >= 0, info.ids[np.maximum(pos, 0)], -1)
        return finalize_rows(ids, scores, k)

    def _drop(self, info: CollectionInfo) -> None:
        info.state = None

    # -- extras --------------------------------------------------------------------
    def faiss_index(self, name: str) -> Any:
        """The underlying faiss index of a dense collection (``None`` before the first insert).

        Building it first if rows wait for training. Positions in it are
        insertion order; the collection's search-time parameters (``efSearch``,
        ``nprobe``) are set on it, so a raw ``index.search`` matches
        :meth:`search`. Meant for measurements against the raw library call.
        A sparse collection has no faiss index (``TypeError``).
        """
        info = self._get(name)
        if info.sparse:
            raise TypeError(
                f"name: collection {name!r} is sparse and has no faiss index "
                "(it is searched by the exact sparse kernel); expected a dense collection"
            )
        if info.state.index is None and info.state.n_pending == 0:
            return None
        idx = self._built(info)
        p = self._effective(info.state)
        if self.index == "hnsw":
            idx.hnsw.efSearch = p["efSearch"]
        elif self._spec.ivf:
            idx.nprobe = min(p["nprobe"], idx.nlist)
        return idx
