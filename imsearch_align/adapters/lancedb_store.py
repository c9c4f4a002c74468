"""LanceDB as a vector store: embedded, persistent, columnar (Lance format).

Why LanceDB as the third database: it installs from PyPI as one wheel
(``pip install lancedb``) with no server, works offline, persists to a
directory (or object storage) in the open Lance columnar format, and is
widely used as the embedded default of retrieval stacks. Its flat search is
exact brute force, so it passes the exact half of the conformance kit; an
IVF index (``index="ivf_flat"``) exercises the ANN half.

This module is also the worked example of ``docs/adding-a-vector-store.md``:
it subclasses :class:`~imsearch_align.adapters.base.BaseStore`, which does
all input validation and bookkeeping, and writes four hooks.

Filtered search (:class:`~imsearch_align.framework.interfaces.FilteredSearch`):
each attribute is an int64 column of the table (a collection that declares
attributes at its first insert gets them in its schema), and
``search_filtered`` adds ``where("field IN (...)", prefilter=True)``: LanceDB
filters before the vector search, so a flat search stays exact over the kept
rows.

Scores: LanceDB's ``dot`` distance is ``1 - <q, x>``, so the score is
``1 - distance`` (float32 rounding of about 1e-7 relative to ``|1 - <q,x>|``).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.adapters.base import CollectionInfo, finalize_rows, search_closing_ties
from imsearch_align.adapters.filterable import FilterableStore
from imsearch_align.framework.interfaces import Filter, SearchResult
from imsearch_align.framework.optional import require
from imsearch_align.framework.registry import STORES
from imsearch_align.framework.validation import check_int

__all__ = ["LanceDBStore"]

log = logging.getLogger(__name__)

_ID = "id"
_VEC = "vector"
_INDEXES = ("flat", "ivf_flat")


def _import_lancedb() -> Any:
    lancedb = require("lancedb", "lancedb", "LanceDBStore")
    return lancedb, require("pyarrow", "lancedb", "LanceDBStore", needs="lancedb")


@STORES.register("lancedb")
class LanceDBStore(FilterableStore):
    """An embedded LanceDB database in a directory; one table per collection.

    Args:
        path: database directory (created if missing); data persist there
            and are found again by a new store on the same path. None (the
            default): a fresh temporary directory this store owns and removes
            on :meth:`close` (never the working directory).
        index: ``"flat"`` (exact brute force, the default) or ``"ivf_flat"``
            (IVF partitions of full vectors; approximate).
        nlist: IVF partitions (``ivf_flat``); capped at the row count.
        nprobe: partitions searched per query (``ivf_flat``).
        query_batch: queries per LanceDB call (bounds memory).

    Sparse vectors are not supported (``supports_sparse = False``): use
    ExactStore or MilvusStore for ASIF's sparse spaces.
    """

    supports_sparse = False
    #: Checked by the conformance kit's concurrent-search test (flat and
    #: IVF): searches only read the table, LanceDB's reads are thread-safe.
    thread_safe = True
    #: The client library and the Arrow it hands data through.
    provenance_packages = ("lancedb", "pyarrow")

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        *,
        index: str = "flat",
        nlist: int = 64,
        nprobe: int = 8,
        query_batch: int = 1024,
    ) -> None:
        super().__init__()
        if index not in _INDEXES:
            raise ValueError(f"index must be one of {list(_INDEXES)}, got {index!r}")
        self._owned = path is None
        self.path = Path(tempfile.mkdtemp(prefix="imsearch-lancedb-") if path is None else path)
        self.index = index
        self.nlist = check_int(nlist, "nlist", low=1)
        self.nprobe = check_int(nprobe, "nprobe", low=1)
        self.query_batch = check_int(query_batch, "query_batch", low=1)
        lancedb, self._pa = _import_lancedb()
        self.path.mkdir(parents=True, exist_ok=True)
        self._db = lancedb.connect(str(self.path))
        # Persistent: register the tables a previous store left here.
        for name in self._db.list_tables().tables:
            table = self._db.open_table(name)
            dim = table.schema.field(_VEC).type.list_size
            data = table.to_arrow()
            ids = data.column(_ID).to_numpy().astype(np.int64)
            names = tuple(sorted(n for n in table.schema.names if n not in (_ID, _VEC))) or None
            attrs = {n: data.column(n).to_numpy().astype(np.int64) for n in names or ()}
            self._register(
                CollectionInfo(
                    name=name,
                    dim=dim,
                    sparse=False,
                    ids=ids,
                    state=table,
                    attribute_names=names,
                    attributes=attrs,
                )
            )

    @property
    def exact(self) -> bool:
        """Whether search scores every vector (``index="flat"``; see ExactSearch)."""
        return self.index == "flat"

    def __repr__(self) -> str:
        return f"LanceDBStore(path={str(self.path)!r}, index={self.index!r})"

    def _schema(self, dim: int, names: tuple[str, ...] | None = None) -> Any:
        pa = self._pa
        fields = [pa.field(_ID, pa.int64()), pa.field(_VEC, pa.list_(pa.float32(), dim))]
        return pa.schema(fields + [pa.field(n, pa.int64()) for n in names or ()])

    # -- hooks ------------------------------------------------------------------
    def _create(self, info: CollectionInfo) -> None:
        # Without a dimension the table is created by the first insert.
        if info.dim is not None:
            info.state = self._db.create_table(info.name, schema=self._schema(info.dim))

    def _insert(self, info: CollectionInfo, vectors: np.ndarray, ids: np.ndarray) -> None:
        self._insert_attributed(info, vectors, ids, {})

    def _insert_attributed(
        self,
        info: CollectionInfo,
        vectors: np.ndarray,
        ids: np.ndarray,
        attributes: dict[str, np.ndarray],
    ) -> None:
        """Append rows (and their attribute columns); (re)train an IVF index."""
        pa = self._pa
        names = tuple(attributes) or None
        flat = pa.array(vectors.reshape(-1), type=pa.float32())
        columns = {
            _ID: pa.array(ids, type=pa.int64()),
            _VEC: pa.FixedSizeListArray.from_arrays(flat, info.dim),
        }
        columns.update({n: pa.array(v, type=pa.int64()) for n, v in attributes.items()})
        batch = pa.table(columns, schema=self._schema(info.dim, names))
        if info.state is None or (names and info.attribute_names is None):
            # no table yet, or an empty one whose schema gains the attribute columns
            mode = "overwrite" if info.state is not None else "create"
            info.state = self._db.create_table(
                info.name, schema=self._schema(info.dim, names), mode=mode
            )
        info.state.add(batch)
        if self.index == "ivf_flat":
            n = info.count + len(ids)
            # IVF is (re)trained on all rows after each insert, so the
            # partitions fit the data actually searched.
            from lancedb.index import IvfFlat

            info.state.create_index(
                _VEC,
                config=IvfFlat(distance_type="dot", num_partitions=max(1, min(self.nlist, n // 4))),
                replace=True,
            )

    def _search(self, info: CollectionInfo, queries: np.ndarray, k: int) -> SearchResult:
        return self._run(info, queries, k, int(info.state.count_rows()))

    def _search_filtered(
        self, info: CollectionInfo, queries: Any, k: int, filter: Filter, keep: np.ndarray | None
    ) -> SearchResult:
        where = f"{filter.field} IN ({', '.join(str(v) for v in filter.values)})"
        return self._run(info, queries, k, int(keep.sum()), where)

    def _run(
        self, info: CollectionInfo, queries: np.ndarray, k: int, n: int, where: str | None = None
    ) -> SearchResult:
        """Top-``k`` among the ``n`` rows ``where`` keeps (all without it)."""
        if self.index == "ivf_flat":  # approximate: the index's own k
            ids, scores = self._fetch(info, queries, k, where)
            return finalize_rows(ids, scores, k)
        # Exact: LanceDB keeps any k of the documents tied at the k-th score;
        # the tie rule (lowest ids) needs the whole group (search_closing_ties).
        ids, scores = search_closing_ties(
            lambda rows, limit: self._fetch(info, queries[rows], limit, where),
            queries.shape[0],
            n,
            k,
        )
        return finalize_rows(ids, scores, k)

    def _fetch(
        self, info: CollectionInfo, queries: np.ndarray, k: int, where: str | None = None
    ) -> tuple[Any, Any]:
        """``(ids, scores)`` ``(nq, k)`` of LanceDB's top-k per query row (padded)."""
        nq = queries.shape[0]
        ids = np.full((nq, k), -1, dtype=np.int64)
        scores = np.full((nq, k), -np.inf, dtype=np.float32)
        for lo in range(0, nq, self.query_batch):
            block = queries[lo : lo + self.query_batch]
            q = (
                info.state.search(list(block), vector_column_name=_VEC)
                .distance_type("dot")
                .limit(k)
            )
            if where is not None:
                q = q.where(where, prefilter=True)
            if self.index == "ivf_flat":
                q = q.nprobes(self.nprobe)
            else:
                q = q.bypass_vector_index()
            res = q.select([_ID]).to_arrow()
            qi = (
                res.column("query_index").to_numpy()
                if "query_index" in res.column_names
                else np.zeros(res.num_rows, dtype=np.int64)
            )
            hid = res.column(_ID).to_numpy()
            sc = 1.0 - res.column("_distance").to_numpy().astype(np.float64)
            # Column of each hit within its query's row, vectorised.
            order = np.argsort(qi, kind="stable")
            qi, hid, sc = qi[order], hid[order], sc[order]
            start = np.searchsorted(qi, qi, side="left")
            col = np.arange(len(qi)) - start
            ids[lo + qi, col] = hid
            scores[lo + qi, col] = sc
        return ids, scores

    def _drop(self, info: CollectionInfo) -> None:
        if info.state is not None:
            self._db.drop_table(info.name)
        info.state = None

    def close(self) -> None:
        """Forget the open tables; the data stay on disk, unless the store made its own
        temporary directory (no ``path``): that is removed (idempotent)."""
        if self._closed:
            return
        self._collections.clear()
        self._db = None
        self._closed = True
        if self._owned:
            shutil.rmtree(self.path, ignore_errors=True)
