"""FAISS index specs: the index types FaissStore builds, their parameters, their checks.

An :class:`IndexSpec` is what :class:`~imsearch_align.adapters.faiss_store.FaissStore`
builds for every dense collection: an index type, its build-time parameters
(fixed once the index is built) and the search-time defaults (changed on a
built index with ``FaissStore.set_search_params``, no rebuild). Parameter
names are FAISS's own, as Milvus spells its build parameters:

* ``flat``: ``IndexFlatIP``, exact; no parameters.
* ``hnsw``: ``IndexHNSWFlat``; build ``M`` (32), ``efConstruction`` (100);
  search ``efSearch`` (64).
* ``ivf_flat`` (also ``"ivf"``): ``IndexIVFFlat``; build ``nlist`` (256);
  search ``nprobe`` (16).
* ``ivf_sq8``: ``IndexIVFScalarQuantizer`` with 8-bit codes; as ``ivf_flat``.
* ``ivf_pq``: ``IndexIVFPQ``; build ``nlist`` (256), ``m`` sub-quantizers (a
  divisor of the dimension; default the largest up to dim / 4), ``nbits``
  per code (8); search ``nprobe`` (16).

Every index uses ``METRIC_INNER_PRODUCT`` (vectors need not be unit norm).
``nprobe`` defaults to ``min(16, nlist)`` and may not exceed ``nlist``.

Training (IVF): k-means needs at least one row per centroid, so a collection
with fewer than :attr:`IndexSpec.min_rows` rows (``nlist``; for ``ivf_pq``
also ``2**nbits``, the codebook size) cannot be built, and its search is
refused, naming both numbers. FAISS asks for 39 rows per centroid (below
that it warns, and so does the store) and samples 256 per centroid at most
(:attr:`IndexSpec.train_rows`), so the store trains on at most that many
rows, a seeded sample (:func:`training_sample`) of the rows inserted.

A setting an index does not take (``nprobe`` on ``hnsw``, ``M`` on
``ivf_flat``), a wrong type or value, is refused before any work by
:func:`make_spec` and :func:`check_search_params`, naming the parameter, the
index and the parameters it accepts.

Filtered search: :func:`row_selector` turns a mask over an index's rows
(positions ``0..n-1``, insertion order) into an ``IDSelectorBitmap``, passed
to every index type through its search parameters (``SearchParameters``,
``SearchParametersIVF`` with ``nprobe``, ``SearchParametersHNSW`` with
``efSearch``): faiss skips the rows it does not keep while it searches.

Memory: :func:`index_nbytes` counts the bytes a CPU index holds from its own
structures (vectors or codes, ids of the inverted lists, the coarse
centroids, the quantizer tables, the HNSW graph), without copying it; it
agrees with ``len(faiss.serialize_index(index))`` within a few KB (the
serialized header and small tables).
:func:`spec_nbytes` is the same count from a spec, a dimension and a row
count, for an index faiss keeps on the GPU (whose structures are not
readable from Python).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_int

__all__ = [
    "ALIASES",
    "BUILD_PARAMS",
    "DEFAULTS",
    "INDEX_TYPES",
    "MAX_POINTS_PER_CENTROID",
    "MIN_POINTS_PER_CENTROID",
    "SEARCH_PARAMS",
    "TRAIN_SEED",
    "IndexSpec",
    "check_search_params",
    "check_train_rows",
    "index_nbytes",
    "make_spec",
    "new_index",
    "pq_subquantizers",
    "row_selector",
    "search_parameters",
    "spec_nbytes",
    "training_sample",
]

#: Index types, in order of cost.
INDEX_TYPES = ("flat", "hnsw", "ivf_flat", "ivf_sq8", "ivf_pq")
#: Other names accepted for an index type.
ALIASES = {"ivf": "ivf_flat"}
#: Build-time parameters of each index type.
BUILD_PARAMS: dict[str, tuple[str, ...]] = {
    "flat": (),
    "hnsw": ("M", "efConstruction"),
    "ivf_flat": ("nlist",),
    "ivf_sq8": ("nlist",),
    "ivf_pq": ("nlist", "m", "nbits"),
}
#: Search-time parameters of each index type.
SEARCH_PARAMS: dict[str, tuple[str, ...]] = {
    "flat": (),
    "hnsw": ("efSearch",),
    "ivf_flat": ("nprobe",),
    "ivf_sq8": ("nprobe",),
    "ivf_pq": ("nprobe",),
}
#: Defaults of the parameters (``m`` depends on the dimension; ``nprobe`` is capped at ``nlist``).
DEFAULTS = {"M": 32, "efConstruction": 100, "efSearch": 64, "nlist": 256, "nprobe": 16, "nbits": 8}
_LOW = {"M": 2}
_HIGH = {"nbits": 16}
#: Training rows per centroid below which FAISS's k-means warns.
MIN_POINTS_PER_CENTROID = 39
#: Training rows per centroid FAISS's k-means samples down to.
MAX_POINTS_PER_CENTROID = 256
#: Seed of the training sample (FAISS's own k-means seed).
TRAIN_SEED = 1234


def _accepts(index: str) -> str:
    names = BUILD_PARAMS[index] + SEARCH_PARAMS[index]
    return ", ".join(names) if names else "no index parameters"


@dataclass(frozen=True)
class IndexSpec:
    """A validated index setting: type, build-time parameters, search-time defaults.

    Attributes:
        index: one of :data:`INDEX_TYPES`.
        build: build-time parameters by name (``m`` only when given: by
            default it is chosen from the dimension, :func:`pq_subquantizers`).
        search: search-time parameters by name, defaults filled.
    """

    index: str
    build: Mapping[str, int]
    search: Mapping[str, int]

    @property
    def ivf(self) -> bool:
        """Whether the index is an inverted file (trained, searched with ``nprobe``)."""
        return self.index.startswith("ivf")

    @property
    def centroids(self) -> int:
        """Size of the largest k-means the training runs (0 for untrained indexes)."""
        if not self.ivf:
            return 0
        codebook = 2 ** self.build["nbits"] if self.index == "ivf_pq" else 0
        return max(self.build["nlist"], codebook)

    @property
    def min_rows(self) -> int:
        """Rows a collection needs before its index can be built (1 when nothing is trained)."""
        return max(1, self.centroids)

    @property
    def train_rows(self) -> int:
        """Rows the training uses at most (FAISS's 256 per centroid; 1 when nothing is trained)."""
        return MAX_POINTS_PER_CENTROID * self.centroids if self.ivf else 1

    @property
    def accepted(self) -> str:
        """The parameters this index accepts, for messages."""
        return _accepts(self.index)


def _not_for(name: str, index: str) -> str:
    owners = [t for t in INDEX_TYPES if name in BUILD_PARAMS[t] + SEARCH_PARAMS[t]]
    return (
        f"{name} is not a parameter of index {index!r} (it is one of "
        f"{', '.join(repr(t) for t in owners)}); index {index!r} accepts {_accepts(index)}"
    )


def make_spec(index: Any, params: Mapping[str, Any]) -> IndexSpec:
    """The spec of ``index`` with ``params`` (``None`` = not given), checked before any work.

    Raises:
        ValueError: an unknown index type, a parameter ``index`` does not
            take, a value out of range (``nprobe`` above ``nlist``).
        TypeError: a value that is not an integer.
    """
    name = ALIASES.get(index, index) if isinstance(index, str) else index
    if name not in INDEX_TYPES:
        raise ValueError(
            f"index must be one of {list(INDEX_TYPES)} ('ivf' = 'ivf_flat'), got {index!r}"
        )
    given = {p: v for p, v in params.items() if v is not None}
    for p in given:
        if p not in BUILD_PARAMS[name] + SEARCH_PARAMS[name]:
            raise ValueError(_not_for(p, name))
    values = {p: check_int(v, p, low=_LOW.get(p, 1), high=_HIGH.get(p)) for p, v in given.items()}
    build = {p: values.get(p, DEFAULTS.get(p)) for p in BUILD_PARAMS[name]}
    if build.get("m") is None:
        build.pop("m", None)
    search = {p: values.get(p, DEFAULTS[p]) for p in SEARCH_PARAMS[name]}
    if "nprobe" in search:
        if "nprobe" in values:
            _check_nprobe(values["nprobe"], build["nlist"], name)
        search["nprobe"] = min(search["nprobe"], build["nlist"])
    return IndexSpec(name, build, search)


def _check_nprobe(nprobe: int, nlist: int, index: str) -> int:
    if nprobe > nlist:
        raise ValueError(
            f"nprobe must be in [1, {nlist}] for index {index!r} with nlist={nlist} "
            f"(lists visited per query), got {nprobe}"
        )
    return nprobe


def check_search_params(spec: IndexSpec, params: Mapping[str, Any]) -> dict[str, int]:
    """``params`` checked as search-time parameters of ``spec``'s index, nothing changed yet.

    Raises:
        ValueError: a build-time parameter (fixed once built), a name the
            index does not take, a value out of range.
        TypeError: a value that is not an integer.
    """
    accepted = SEARCH_PARAMS[spec.index]
    for p in params:
        if p in accepted:
            continue
        if p in BUILD_PARAMS[spec.index]:
            raise ValueError(
                f"{p} is a build-time parameter of index {spec.index!r}, fixed once the index "
                "is built (a new value needs a new store); its search-time parameters: "
                f"{', '.join(accepted)}"
            )
        if not accepted:
            raise ValueError(
                f"{p}: index {spec.index!r} has no search-time parameters (it scores every "
                "vector); search-time parameters belong to 'hnsw' (efSearch) and the ivf "
                "indexes (nprobe)"
            )
        raise ValueError(
            f"{p} is not a search-time parameter of index {spec.index!r}; it accepts "
            f"{', '.join(accepted)}"
        )
    out = {p: check_int(v, p, low=1) for p, v in params.items()}
    if "nprobe" in out:
        _check_nprobe(out["nprobe"], spec.build["nlist"], spec.index)
    return out


def check_train_rows(spec: IndexSpec, n: int, collection: str) -> None:
    """Refuse to build ``spec`` on ``n`` rows of ``collection`` when they cannot train it."""
    if n >= spec.min_rows:
        return
    codebook = f", 2**nbits={2 ** spec.build['nbits']}" if spec.index == "ivf_pq" else ""
    raise ValueError(
        f"collection {collection!r} has {n} rows, too few to train index {spec.index!r} "
        f"(nlist={spec.build['nlist']}{codebook}): it needs at least {spec.min_rows} "
        f"(FAISS asks for {MIN_POINTS_PER_CENTROID * spec.centroids}); use a smaller "
        "nlist, insert more rows, or index='flat'"
    )


def pq_subquantizers(spec: IndexSpec, dim: int) -> int:
    """``m`` of an ``ivf_pq`` spec for vectors of ``dim``: given (it must divide ``dim``),
    else the largest divisor of ``dim`` up to ``dim / 4``."""
    m = spec.build.get("m")
    if m is None:
        return max(d for d in range(1, max(1, dim // 4) + 1) if dim % d == 0)
    if dim % m:
        divisors = [d for d in range(1, dim + 1) if dim % d == 0]
        shown = ", ".join(map(str, divisors[:12])) + (", ..." if len(divisors) > 12 else "")
        raise ValueError(
            f"m must divide the dimension {dim} for index 'ivf_pq' (each sub-quantizer codes "
            f"dim / m coordinates), got m={m}; divisors of {dim}: {shown}"
        )
    return m


def new_index(faiss: Any, spec: IndexSpec, dim: int) -> Any:
    """An empty CPU faiss index of ``spec`` for ``dim``-dimensional vectors, inner product."""
    ip = faiss.METRIC_INNER_PRODUCT
    if spec.index == "flat":
        return faiss.IndexFlatIP(dim)
    if spec.index == "hnsw":
        idx = faiss.IndexHNSWFlat(dim, spec.build["M"], ip)
        idx.hnsw.efConstruction = spec.build["efConstruction"]
        return idx
    nlist = spec.build["nlist"]
    quantizer = faiss.IndexFlatIP(dim)
    if spec.index == "ivf_flat":
        idx = faiss.IndexIVFFlat(quantizer, dim, nlist, ip)
    elif spec.index == "ivf_sq8":
        idx = faiss.IndexIVFScalarQuantizer(
            quantizer, dim, nlist, faiss.ScalarQuantizer.QT_8bit, ip
        )
    else:
        m = pq_subquantizers(spec, dim)
        idx = faiss.IndexIVFPQ(quantizer, dim, nlist, m, spec.build["nbits"], ip)
    return idx  # faiss's Python wrapper keeps ``quantizer`` alive with the index


def training_sample(blocks: list[np.ndarray], rows: int, seed: int = TRAIN_SEED) -> np.ndarray:
    """At most ``rows`` rows of the stacked ``blocks``: all of them, or a seeded sample
    in insertion order, gathered block by block (the blocks are never stacked whole)."""
    n = sum(len(b) for b in blocks)
    if n <= rows:
        return blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    pos = np.sort(np.random.default_rng(seed).choice(n, size=rows, replace=False))
    parts, start = [], 0
    for b in blocks:
        lo, hi = np.searchsorted(pos, [start, start + len(b)])
        parts.append(b[pos[lo:hi] - start])
        start += len(b)
    return np.concatenate(parts)


def row_selector(faiss: Any, keep: np.ndarray) -> tuple[Any, np.ndarray]:
    """A faiss ``IDSelectorBitmap`` keeping the index rows where ``keep`` (bool ``(n,)``) is set.

    Returns ``(selector, bitmap)``: the selector reads the bitmap's memory,
    so the caller holds ``bitmap`` until its searches are done.
    """
    bitmap = np.packbits(np.asarray(keep, dtype=bool), bitorder="little")
    return faiss.IDSelectorBitmap(len(keep), faiss.swig_ptr(bitmap)), bitmap


def search_parameters(
    faiss: Any,
    spec: IndexSpec,
    effective: Mapping[str, int],
    nlist: int | None,
    *,
    nprobe: int | None = None,
    sel: Any = None,
) -> dict[str, Any]:
    """``params=`` of one faiss search call of ``spec``'s index (empty: unfiltered flat).

    ``effective``: the search-time values now (``efSearch`` / ``nprobe``);
    ``nprobe`` overrides the latter, both capped at the built index's
    ``nlist``; ``sel``: an ``IDSelector`` of the rows a filter keeps. Flat
    closes its tie group over the kept rows; IVF re-searches a short row
    in every list (the store's rule); HNSW keeps what its beam finds.
    """
    extra = {} if sel is None else {"sel": sel}
    if spec.index == "hnsw":
        return {"params": faiss.SearchParametersHNSW(efSearch=effective["efSearch"], **extra)}
    if spec.ivf:
        probe = min(nprobe or effective["nprobe"], nlist)
        return {"params": faiss.SearchParametersIVF(nprobe=probe, **extra)}
    return {"params": faiss.SearchParameters(**extra)} if extra else {}


def _hnsw_graph_nbytes(hnsw: Any) -> int:
    """Bytes of an HNSW graph: neighbors (int32), levels (int32 a row), offsets (uint64)."""
    return 4 * hnsw.neighbors.size() + 4 * hnsw.levels.size() + 8 * hnsw.offsets.size()


def index_nbytes(faiss: Any, index: Any) -> int | None:
    """Bytes a CPU faiss ``index`` holds, read from its own structures (nothing copied).

    ``IndexFlat``: ``ntotal * d * 4``. ``IndexHNSWFlat``: its flat storage and
    the graph (:func:`_hnsw_graph_nbytes`). IVF: ``ntotal * (code_size + 8)``
    (each list's codes and int64 ids), the coarse quantizer (``nlist * d * 4``)
    and the scalar quantizer's trained ranges or the PQ codebooks (and PQ
    precomputed tables when built). ``IndexIDMap``: the wrapped index and its
    ids. ``None`` for an index of another kind (a GPU index).
    """
    idx = faiss.downcast_index(index)
    if isinstance(idx, faiss.IndexIDMap):
        inner = index_nbytes(faiss, idx.index)
        return None if inner is None else inner + 8 * idx.ntotal
    if isinstance(idx, faiss.IndexFlat):
        return 4 * idx.ntotal * idx.d
    if isinstance(idx, faiss.IndexHNSW):
        storage = index_nbytes(faiss, idx.storage)
        return None if storage is None else storage + _hnsw_graph_nbytes(idx.hnsw)
    if isinstance(idx, faiss.IndexIVF):
        coarse = index_nbytes(faiss, idx.quantizer)
        if coarse is None:
            return None
        tables = 0
        if isinstance(idx, faiss.IndexIVFScalarQuantizer):
            tables = 4 * idx.sq.trained.size()
        elif isinstance(idx, faiss.IndexIVFPQ):
            tables = 4 * (idx.pq.centroids.size() + idx.precomputed_table.size())
        return idx.ntotal * (idx.code_size + 8) + coarse + tables
    return None


def spec_nbytes(spec: IndexSpec, dim: int, ntotal: int) -> int | None:
    """Bytes the structures of ``spec``'s index hold for ``ntotal`` rows of ``dim``, by formula.

    Vectors or codes per row (``flat`` / ``ivf_flat``: ``4 * dim``; ``ivf_sq8``:
    ``dim``; ``ivf_pq``: ``ceil(m * nbits / 8)``), plus for IVF the int64 ids
    per row, the ``nlist * dim * 4`` centroids and the SQ ranges / PQ
    codebooks: what :func:`index_nbytes` reads off a CPU index, for an index
    on the GPU. ``None`` for ``hnsw`` (faiss has no GPU HNSW; its graph's
    size is known only once built).
    """
    if spec.index == "flat":
        return 4 * dim * ntotal
    if spec.index == "hnsw":
        return None
    nlist = spec.build["nlist"]
    if spec.index == "ivf_flat":
        code, tables = 4 * dim, 0
    elif spec.index == "ivf_sq8":
        code, tables = dim, 4 * 2 * dim
    else:
        m, nbits = pq_subquantizers(spec, dim), spec.build["nbits"]
        code, tables = (m * nbits + 7) // 8, 4 * (2**nbits) * dim
    return ntotal * (code + 8) + 4 * nlist * dim + tables
