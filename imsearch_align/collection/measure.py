"""What one build of a collection costs and how fast it searches: the study's measurements.

:func:`open_store` makes the store of an index setting; :func:`insert_collection`
streams a :class:`~imsearch_align.collection.aligned.CollectionBlocks` into it
(timing only the store's own insert calls, digesting the stream for the
ground truth's key) and waits until it is searchable (:class:`BuildStats`);
:func:`search_batched` and :func:`search_latency` time the searches;
:func:`rss_tree` and :func:`server_rss` read the memory a store holds, and
:func:`disk_bytes` what it keeps on disk.

Build time: the wait until searchable, plus the seconds a store reports it
spent training inside its inserts (``train_seconds``: FAISS trains an IVF
index in the insert that reaches ``nlist`` rows), which are moved out of
insert time (:attr:`BuildStats.train_s`).

Memory: a store that counts its index's bytes (``index_bytes``: FAISS) gives
those (kind ``index_bytes``); another in-process store (Milvus Lite, Qdrant
local) the RSS growth of this process and its children from before the
collection was created to when it is searchable (``process_rss_delta``;
unreliable, memory freed by an earlier cell is reused), kept for every
in-process store as :attr:`BuildStats.rss_delta_bytes`; a server's is the
resident memory of the process listening on the URI's port when that
process runs on this machine (``server_rss``; None otherwise).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np

from imsearch_align.collection.aligned import StreamDigest
from imsearch_align.collection.settings import STORES, IndexSetting
from imsearch_align.collection.store_modes import disk_bytes

__all__ = [
    "BuildStats",
    "disk_bytes",
    "harness_memory",
    "insert_collection",
    "open_store",
    "rss_tree",
    "search_batched",
    "search_latency",
    "server_rss",
]


def open_store(
    s: IndexSetting,
    build: dict[str, int],
    search: dict[str, int],
    *,
    uri: str | None,
    workdir: Path,
) -> Any:
    """The store of setting ``s`` with these build and (initial) search parameters, opened
    as its store mode declares."""
    return STORES[s.store].open(s.index_type, build, search, uri=uri, workdir=Path(workdir))


def rss_tree(pid: int | None = None) -> int:
    """Resident bytes of a process (default this one) and its children."""
    import psutil

    p = psutil.Process(pid)
    total = p.memory_info().rss
    for c in p.children(recursive=True):
        try:
            total += c.memory_info().rss
        except psutil.Error:
            pass
    return int(total)


def server_process(uri: str | None) -> Any:
    """The local process listening on ``uri``'s port (a ``psutil.Process``; None when the
    server is not on this machine or cannot be found)."""
    import psutil

    if not uri:
        return None
    parts = urlsplit(uri)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1", "0.0.0.0") or not parts.port:
        return None
    try:
        conns = psutil.net_connections(kind="tcp")
    except (psutil.Error, OSError):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == parts.port and c.pid:
            try:
                return psutil.Process(c.pid)
            except psutil.Error:
                return None
    return None


def server_rss(uri: str | None) -> int | None:
    """Resident bytes of the local process listening on ``uri``'s port (None if not found)."""
    import psutil

    proc = server_process(uri)
    if proc is None:
        return None
    try:
        return rss_tree(proc.pid)
    except psutil.Error:
        return None


def harness_memory() -> dict[str, int]:
    """This process's resident bytes now and at its peak so far (``ru_maxrss``; with an
    in-process store they include its index)."""
    import resource

    import psutil

    rss = int(psutil.Process().memory_info().rss)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return {"rss_bytes": rss, "peak_rss_bytes": max(rss, int(peak))}  # the kernel's peak lags


def make_searchable(store: Any, name: str) -> dict[str, Any]:
    """Wait until every inserted row of ``name`` is searched (Milvus: flushed, indexed,
    loaded, counted; FAISS: an index still waiting for training rows built)."""
    if hasattr(store, "make_searchable"):
        return dict(store.make_searchable(name) or {})
    if hasattr(store, "faiss_index"):
        store.faiss_index(name)
    return {}


def training_rows(store: Any) -> int:
    """Rows a store's index should see in its first insert: FAISS trains an IVF index on
    the insert that reaches ``nlist`` rows, and asks for 39 rows per centroid (0: any)."""
    from imsearch_align.adapters.faiss_index import MIN_POINTS_PER_CENTROID

    spec = getattr(store, "index_spec", None)
    return MIN_POINTS_PER_CENTROID * spec.centroids if spec is not None and spec.ivf else 0


def _first_rows(blocks: Any, rows: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``blocks`` with the first ones joined until they hold ``rows`` rows (the training
    insert of an IVF index; the harness's peak grows by that much, once)."""
    it = iter(blocks)
    ids, parts, n = [], [], 0
    for i, b in it:
        ids.append(i)
        parts.append(b)
        n += len(i)
        if n >= rows:
            break
    if parts:
        yield np.concatenate(ids), np.concatenate(parts)
    del ids, parts
    yield from it


@dataclass
class BuildStats:
    """One build: rows, insert time, build time (of which training), memory.

    ``memory_bytes`` is of ``memory_kind`` (``index_bytes``,
    ``process_rss_delta`` or ``server_rss``, see the module docstring);
    ``rss_delta_bytes``: this process's RSS growth (None for a server).
    """

    rows: int = 0
    insert_s: float = 0.0
    build_s: float = 0.0
    train_s: float = 0.0
    ready: dict[str, Any] = field(default_factory=dict)
    memory_bytes: int | None = None
    memory_kind: str = "process_rss_delta"
    rss_delta_bytes: int | None = None
    digest: str = ""

    @property
    def insert_rows_per_s(self) -> float | None:
        """Rows inserted per second of the store's insert calls."""
        return self.rows / self.insert_s if self.insert_s > 0 else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready timings (seconds, rows/s)."""
        return {
            "insert_s": round(self.insert_s, 4),
            "insert_rows_per_s": None
            if self.insert_rows_per_s is None
            else round(self.insert_rows_per_s, 1),
            "build_s": round(self.build_s, 4),
            "train_s": round(self.train_s, 4),
            "load_s": self.ready.get("load_s"),
            "ready": self.ready,
        }


def insert_collection(
    store: Any,
    name: str,
    blocks: Any,
    dim: int,
    *,
    uri: str | None = None,
    in_process: bool = True,
    attributes: Any = None,
    declare: Mapping[str, str] | None = None,
) -> BuildStats:
    """Create ``name`` and insert every ``(ids, block)`` of ``blocks``; then make it searchable.

    Only the store's ``insert`` calls count as insert time (the blocks'
    generation and alignment do not); the stream is digested on the way
    (:attr:`BuildStats.digest`, the ground truth's documents key). An IVF
    index of FAISS gets its first :func:`training_rows` rows in one insert,
    and the seconds it trains there count as build time, not insert time.
    ``attributes``: ``ids -> {name: values}``, inserted with each block (filtered search).
    ``declare``: ``{name: "int64"}``, the attributes a store that types them (class
    attribute ``typed_attributes = True``: Milvus, INT64 fields with a scalar index)
    is created with; default ``attributes.declare`` when it has one
    (:class:`~imsearch_align.collection.filters.AttributeInserts`). Another store is
    created as without them (its attributes come with the inserts).
    """
    st = BuildStats()
    before = rss_tree() if in_process else None
    if declare is None:
        declare = getattr(attributes, "declare", None)
    if declare and getattr(store, "typed_attributes", False):
        store.create_collection(name, dim, attributes=dict(declare))
    else:
        store.create_collection(name, dim)
    digest = StreamDigest()
    first = training_rows(store)
    for ids, block in _first_rows(blocks, first) if first else blocks:
        digest.update(ids, block)
        extra = {} if attributes is None else {"attributes": attributes(ids)}
        t = time.perf_counter()
        store.insert(name, block, ids, **extra)
        st.insert_s += time.perf_counter() - t
        st.rows += len(ids)
        del block
    t = time.perf_counter()
    st.ready = make_searchable(store, name)
    st.build_s = time.perf_counter() - t
    if hasattr(store, "train_seconds"):
        st.train_s = float(store.train_seconds(name))
        st.insert_s = max(0.0, st.insert_s - st.train_s)
        st.build_s += st.train_s
    st.digest = digest.hexdigest()
    if in_process:
        st.rss_delta_bytes = max(0, rss_tree() - (before or 0))
        counted = store.index_bytes(name) if hasattr(store, "index_bytes") else None
        if counted is None:
            st.memory_bytes = st.rss_delta_bytes
        else:
            st.memory_bytes, st.memory_kind = int(counted), "index_bytes"
    else:
        st.memory_bytes, st.memory_kind = server_rss(uri), "server_rss"
    return st


def search_batched(
    store: Any, name: str, queries: np.ndarray, k: int, batch: int
) -> tuple[np.ndarray, np.ndarray, float]:
    """Every query in batches of ``batch``: ``(ids, scores, queries per second)``."""
    store.search(name, queries[:1], k)  # warm-up (a first search may load or compile)
    nq = len(queries)
    ids = np.full((nq, k), -1, dtype=np.int64)
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    t = time.perf_counter()
    for s in range(0, nq, batch):
        res = store.search(name, queries[s : s + batch], k)
        ids[s : s + batch], scores[s : s + batch] = res.ids[:, :k], res.scores[:, :k]
    seconds = time.perf_counter() - t
    return ids, scores, nq / seconds if seconds > 0 else float("inf")


def search_latency(
    store: Any, name: str, queries: np.ndarray, k: int, n: int, seed: int = 0
) -> dict[str, float]:
    """p50 / p95 / p99 milliseconds of ``n`` single-query searches (a seeded sample)."""
    n = min(n, len(queries))
    if n == 0:
        return {}
    rows = np.random.default_rng(seed).choice(len(queries), n, replace=False)
    lat = np.empty(n)
    for i, r in enumerate(rows):
        t = time.perf_counter()
        store.search(name, queries[r : r + 1], k)
        lat[i] = time.perf_counter() - t
    p = np.percentile(lat * 1e3, [50, 95, 99])
    return {
        "p50": round(float(p[0]), 4),
        "p95": round(float(p[1]), 4),
        "p99": round(float(p[2]), 4),
    }
