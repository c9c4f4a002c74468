"""Qdrant as a vector store: local mode in-process, or a Qdrant server by URL.

One adapter, three ways to reach Qdrant (``pip install qdrant-client``):

* ``QdrantStore()`` or ``QdrantStore(location=":memory:")``: qdrant-client's
  local mode, in memory (pure Python and numpy; exact search). The CI store.
* ``QdrantStore(path="qdrant_data")``: local mode persisted to a folder
  (SQLite). Each point is committed on its own, so inserting is slow
  (about 20 ms a point on a busy disk): fine for tests and small sets.
  ``path=":memory:"`` is the in-memory mode, as qdrant-client reads it; a
  path that is a file is refused (a ``ConfigError``, exit 2 on the command line).
* ``QdrantStore(url="http://localhost:6333", api_key=...)``: a Qdrant server
  (``docker run -p 6333:6333 qdrant/qdrant``) or Qdrant Cloud. The api key is
  kept private: it is never logged, printed, or recorded in a result.

Vectors: dense collections have one named vector ``"dense"`` with
``Distance.DOT`` (score = inner product, no normalisation); sparse
collections (ASIF) have one named sparse vector ``"sparse"``, whose search
is an exact sparse inner product. ``exact=True`` (the default) asks a server
for a full scan (``SearchParams(exact=True)``); ``exact=False`` uses its HNSW
index with ``hnsw_ef``. Local mode is always exact.

Results follow the package's conventions: ids int64 (Qdrant point ids are
unsigned 64-bit, so every id in ``[0, 2**63 - 1]`` is kept as is), scores
float32, rows ordered by score descending then id ascending. Qdrant orders
equal scores arbitrarily, so each search asks for a few more hits than ``k``
and asks again, wider, for the rows whose ``k``-th score is still tied at
the end of what came back: the rows are finalised with every tied candidate
in hand, and an exact search returns what ExactStore returns. Dense
collections answer ``min(k, count)`` hits; sparse ones only the documents
with a non-zero inner product, padded with ``-1`` / ``-inf``.

The collection's dimension and kind are kept in Qdrant's collection
metadata, so a reopened store (``path=`` or ``url=``) knows them again;
collections without it (made by other tools) are left alone.

Filtered search (:class:`~imsearch_align.framework.interfaces.FilteredSearch`):
each attribute is an integer payload field of the point (a payload index on
a server; the names in the collection metadata), and ``search_filtered``
sends ``Filter(must=[FieldCondition(key, MatchAny(values))])`` with every
query: Qdrant filters while it searches, and the tie group at k is closed
over the kept points as for ``search``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.adapters.base import CollectionInfo, finalize_rows, search_closing_ties
from imsearch_align.adapters.filterable import FilterableStore
from imsearch_align.framework.errors import ConfigError
from imsearch_align.framework.interfaces import Filter, SearchResult, StoreUnavailableError
from imsearch_align.framework.optional import require
from imsearch_align.framework.registry import STORES
from imsearch_align.framework.validation import check_int

__all__ = ["QdrantStore"]

log = logging.getLogger(__name__)

_DENSE = "dense"
_SPARSE = "sparse"
_META = "imsearch_align"


def _import_qdrant() -> Any:
    qdrant_client = require("qdrant_client", "qdrant", "QdrantStore", needs="qdrant-client")
    return qdrant_client, require(
        "qdrant_client.models", "qdrant", "QdrantStore", needs="qdrant-client"
    )


def _make_folder(path: Path) -> None:
    """The local database's folder, made if missing; a file in its way is a usage error."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        # Imported on use: the experiment package imports the stores.

        where = "an existing file" if path.exists() else "under a file"
        raise ConfigError(
            f"path must be a folder (of a local Qdrant database), got {str(path)!r}, {where}"
        ) from None


@STORES.register("qdrant")
class QdrantStore(FilterableStore):
    """Vector store on Qdrant (local mode or a server), metric inner product.

    Args:
        location: ``":memory:"`` for in-memory local mode (the default when
            neither ``path`` nor ``url`` is given).
        path: folder of a persisted local-mode database (``":memory:"``: in memory).
        url: a Qdrant server, e.g. ``"http://localhost:6333"``.
        api_key: the server's api key (never logged or recorded).
        prefer_grpc: talk gRPC (port 6334) to the server instead of REST.
        timeout: seconds per server request.
        exact: full-scan search on a server (local mode is always exact).
        hnsw_ef: HNSW beam width of a server search when ``exact=False``.
        query_batch: queries per ``query_batch_points`` call.
        insert_batch: points per upsert call.

    Example:
        >>> import numpy as np
        >>> with QdrantStore() as s:
        ...     s.create_collection("docs", 2)
        ...     s.insert("docs", np.eye(2, dtype=np.float32), np.array([7, 3]))
        ...     s.search("docs", np.array([[1.0, 0.5]], np.float32), 3).ids.tolist()
        [[7, 3, -1]]
    """

    supports_sparse = True
    #: Checked by the conformance kit's concurrent-search test: local mode
    #: searches read numpy arrays only; the server clients (httpx, gRPC) are
    #: thread-safe.
    thread_safe = True
    provenance_packages = ("qdrant-client",)

    @classmethod
    def client_process_limit(cls, params: Mapping[str, Any]) -> tuple[int | None, str]:
        """One process for a local folder (it locks it), none in memory, no limit for a
        server (``url``)."""
        if params.get("url"):
            return None, ""
        path = params.get("path")
        if path and str(path) != ":memory:":
            return 1, (
                f"Qdrant local mode (path={str(path)!r}) locks its folder to one client; "
                "use a Qdrant server (url=...) for several client processes"
            )
        return 0, (
            "Qdrant in-memory mode keeps its collections in one process's memory; use "
            "mode='threads' or a Qdrant server (url=...)"
        )

    def __init__(
        self,
        location: str | None = None,
        *,
        path: str | os.PathLike | None = None,
        url: str | None = None,
        api_key: str | None = None,
        prefer_grpc: bool = False,
        timeout: int | None = None,
        exact: bool = True,
        hnsw_ef: int | None = None,
        query_batch: int = 256,
        insert_batch: int = 512,
    ) -> None:
        super().__init__()
        given = [n for n, v in (("location", location), ("path", path), ("url", url)) if v]
        if len(given) > 1:
            raise ValueError(f"give one of location, path or url, got {' and '.join(given)}")
        if location is not None and location != ":memory:":
            raise ValueError(
                f"location must be ':memory:' (use path= for a folder, url= for a server), "
                f"got {location!r}"
            )
        if url is not None and not (
            isinstance(url, str) and url.startswith(("http://", "https://"))
        ):
            raise ValueError(f"url must start with http:// or https://, got {url!r}")
        if api_key is not None and url is None:
            raise ValueError("api_key is only used with url= (a Qdrant server)")
        if not isinstance(exact, bool):
            raise TypeError(f"exact must be a bool, got {type(exact).__name__} {exact!r}")
        self.mode = "server" if url else "local" if path and str(path) != ":memory:" else "memory"
        if self.mode != "server" and (not exact or hnsw_ef is not None):
            # local mode has no HNSW: it scores every vector whatever is asked
            raise ValueError(
                "QdrantStore: exact=False / hnsw_ef need a Qdrant server (url=...); local and "
                f"in-memory modes always search exactly (got exact={exact!r}, hnsw_ef={hnsw_ef!r})"
            )
        self.url = url
        self.path = Path(path) if self.mode == "local" else None
        #: Whether search scores every vector (ExactSearch): local mode always does.
        self.exact = exact or self.mode != "server"
        self.hnsw_ef = None if hnsw_ef is None else check_int(hnsw_ef, "hnsw_ef", low=1)
        self.query_batch = check_int(query_batch, "query_batch", low=1)
        self.insert_batch = check_int(insert_batch, "insert_batch", low=1)
        self.timeout = None if timeout is None else check_int(timeout, "timeout", low=1)
        qdrant_client, self._models = _import_qdrant()
        if self.mode == "server":
            self._client = qdrant_client.QdrantClient(
                url=url,
                api_key=api_key,
                prefer_grpc=bool(prefer_grpc),
                timeout=self.timeout,
                check_compatibility=False,  # the version is read below, once
            )
        elif self.mode == "local":
            _make_folder(self.path)
            self._client = qdrant_client.QdrantClient(path=str(self.path))
        else:
            self._client = qdrant_client.QdrantClient(location=":memory:")
        self._server_version: str | None = None
        try:
            names = [c.name for c in self._client.get_collections().collections]
            if self.mode == "server":
                self._server_version = getattr(self._client.info(), "version", None)
        except Exception as exc:
            self._client.close()
            if self.mode != "server":
                raise
            raise StoreUnavailableError(
                f"Qdrant server at {url} is unreachable: {type(exc).__name__}: "
                f"{self._scrub(str(exc), api_key)}"
            ) from None
        for name in names:
            self._adopt(name)

    @staticmethod
    def _scrub(text: str, secret: str | None) -> str:
        return text.replace(secret, "***") if secret else text

    def __repr__(self) -> str:  # no api key
        where = {"server": f"url={self.url!r}", "local": f"path={str(self.path)!r}"}
        return f"QdrantStore({where.get(self.mode, 'location=:memory:')}, exact={self.exact})"

    def _where(self) -> str:
        return {"server": f" at {self.url}", "local": f" at {self.path}"}.get(self.mode, "")

    def provenance(self) -> dict[str, Any]:
        """``{"packages": {"qdrant-client": version}, "mode": ..., "server_version": ...}``."""
        packages = {}
        for dist in self.provenance_packages:
            try:
                packages[dist] = metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        out: dict[str, Any] = {"packages": packages, "mode": self.mode}
        if self._server_version:
            out["server_version"] = self._server_version
        return out

    # -- catalog -----------------------------------------------------------------
    def _adopt(self, name: str) -> None:
        """Register a collection found in the database, if this adapter made it."""
        try:
            meta = (self._client.get_collection(name).config.metadata or {}).get(_META)
        except Exception as exc:  # a collection another tool made, in a form we cannot read
            log.debug("qdrant: collection %r not adopted: %s", name, exc)
            return
        if not isinstance(meta, dict) or "sparse" not in meta:
            log.debug("qdrant: collection %r has no %s metadata; left alone", name, _META)
            return
        names = tuple(meta.get("attributes") or ()) or None
        ids: list[int] = []
        values: dict[str, list[int]] = {n: [] for n in names or ()}
        offset = None
        while True:
            points, offset = self._client.scroll(
                name,
                limit=10_000,
                offset=offset,
                with_payload=list(names) if names else False,
                with_vectors=False,
            )
            ids.extend(int(p.id) for p in points)
            for n, col in values.items():
                col.extend(int(p.payload[n]) for p in points)
            if offset is None:
                break
        info = CollectionInfo(
            name=name,
            dim=meta.get("dim"),
            sparse=bool(meta["sparse"]),
            ids=np.asarray(ids, dtype=np.int64),
            state=True,
            attribute_names=names,
            attributes={n: np.asarray(v, dtype=np.int64) for n, v in values.items()},
        )
        self._register(info)

    def _meta(self, info: CollectionInfo, names: tuple[str, ...] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"dim": info.dim, "sparse": info.sparse}
        if names:
            meta["attributes"] = list(names)
        return {_META: meta}

    # -- hooks ------------------------------------------------------------------
    def _create(self, info: CollectionInfo) -> None:
        m = self._models
        if info.sparse:
            self._client.create_collection(
                info.name,
                vectors_config={},
                sparse_vectors_config={_SPARSE: m.SparseVectorParams()},
                metadata=self._meta(info),
            )
        elif info.dim is not None:
            self._client.create_collection(
                info.name,
                vectors_config={_DENSE: m.VectorParams(size=info.dim, distance=m.Distance.DOT)},
                metadata=self._meta(info),
            )
        # a dense collection without dim is created by its first insert
        info.state = info.sparse or info.dim is not None

    def _insert(self, info: CollectionInfo, vectors: Any, ids: np.ndarray) -> None:
        self._upsert(info, vectors, ids, {})

    def _insert_attributed(
        self, info: CollectionInfo, vectors: Any, ids: np.ndarray, attributes: dict[str, np.ndarray]
    ) -> None:
        self._upsert(info, vectors, ids, attributes)

    def _upsert(
        self, info: CollectionInfo, vectors: Any, ids: np.ndarray, attributes: dict[str, np.ndarray]
    ) -> None:
        """Write points in batches, each attribute an integer payload field."""
        m = self._models
        names = tuple(attributes) or info.attribute_names
        declare = bool(attributes) and info.attribute_names is None
        if not info.state:  # dense, created without dim: the dim is known now
            self._client.create_collection(
                info.name,
                vectors_config={_DENSE: m.VectorParams(size=info.dim, distance=m.Distance.DOT)},
                metadata=self._meta(info, names),
            )
            info.state = True
        elif (info.sparse and info.count == 0) or declare:
            self._client.update_collection(info.name, metadata=self._meta(info, names))
        if declare and self.mode == "server":
            for name in attributes:  # a payload index: the server filters while it searches
                self._call(
                    lambda n=name: self._client.create_payload_index(
                        info.name, n, field_schema=m.PayloadSchemaType.INTEGER
                    )
                )
        for lo in range(0, len(ids), self.insert_batch):
            hi = min(len(ids), lo + self.insert_batch)
            block = vectors[lo:hi]
            if info.sparse:
                vecs = [self._sparse_vector(block, r) for r in range(block.shape[0])]
            else:
                vecs = block.tolist()
            cols = {n: v[lo:hi].tolist() for n, v in attributes.items()}
            payloads = [dict(zip(cols, row)) for row in zip(*cols.values())] if cols else None
            batch = m.Batch(
                ids=[int(i) for i in ids[lo:hi]],
                vectors={(_SPARSE if info.sparse else _DENSE): vecs},
                payloads=payloads,
            )
            self._call(lambda b=batch: self._client.upsert(info.name, points=b, wait=True))

    def _sparse_vector(self, csr: Any, row: int) -> Any:
        lo, hi = csr.indptr[row], csr.indptr[row + 1]
        vals = csr.data[lo:hi]
        keep = vals != 0  # explicit zeros are no terms
        return self._models.SparseVector(
            indices=csr.indices[lo:hi][keep].tolist(), values=vals[keep].tolist()
        )

    def _request(
        self, info: CollectionInfo, queries: Any, r: int, limit: int, qfilter: Any = None
    ) -> Any:
        m = self._models
        if info.sparse:
            query, using = self._sparse_vector(queries, r), _SPARSE
        else:
            query, using = queries[r].tolist(), _DENSE
        params = None
        if self.mode == "server" and not info.sparse:
            params = m.SearchParams(exact=self.exact, hnsw_ef=self.hnsw_ef)
        return m.QueryRequest(
            query=query,
            using=using,
            limit=limit,
            params=params,
            filter=qfilter,
            with_payload=False,
        )

    def _query(
        self, info: CollectionInfo, queries: Any, rows: np.ndarray, limit: int, qfilter: Any = None
    ) -> list[list[tuple[int, float]]]:
        """Hits ``(id, score)`` of the given query rows, ``limit`` each, in batches."""
        out: list[list[tuple[int, float]]] = []
        for lo in range(0, len(rows), self.query_batch):
            reqs = [
                self._request(info, queries, int(r), limit, qfilter)
                for r in rows[lo : lo + self.query_batch]
            ]
            if info.sparse:  # an empty sparse query shares no term with anything
                empty = [not req.query.indices for req in reqs]
                sent = [q for q, e in zip(reqs, empty) if not e]
            else:
                empty, sent = [False] * len(reqs), reqs
            resp = iter(
                self._call(lambda s=sent: self._client.query_batch_points(info.name, requests=s))
                if sent
                else []
            )
            for e in empty:
                pts = [] if e else next(resp).points
                out.append([(int(p.id), float(p.score)) for p in pts])
        return out

    def _search(self, info: CollectionInfo, queries: Any, k: int) -> SearchResult:
        return self._scan(info, queries, k, info.count)

    def _search_filtered(
        self, info: CollectionInfo, queries: Any, k: int, filter: Filter, keep: np.ndarray | None
    ) -> SearchResult:
        m = self._models
        match = m.FieldCondition(key=filter.field, match=m.MatchAny(any=list(filter.values)))
        return self._scan(info, queries, k, int(keep.sum()), m.Filter(must=[match]))

    def _scan(
        self, info: CollectionInfo, queries: Any, k: int, n: int, qfilter: Any = None
    ) -> SearchResult:
        """Top-``k`` among the ``n`` points the filter keeps (all without one)."""
        nq = queries.shape[0]

        def fetch(rows: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
            ids = np.full((len(rows), limit), -1, dtype=np.int64)
            scores = np.full((len(rows), limit), -np.inf, dtype=np.float32)
            for r, h in enumerate(self._query(info, queries, rows, limit, qfilter)):
                if h:
                    ids[r, : len(h)] = [i for i, _ in h]
                    scores[r, : len(h)] = [s for _, s in h]
            return ids, scores

        # an exact scan: the documents tied at the k-th score are chosen by id
        ids, scores = search_closing_ties(fetch, nq, n, k)
        if info.sparse:
            # the sparse rule: documents sharing terms whose inner product is 0 are no hits
            ids[scores == 0] = -1
        return finalize_rows(ids, scores, k)

    def _call(self, fn: Any) -> Any:
        """Run a request; a server that stays unreachable raises StoreUnavailableError."""
        if self.mode != "server":
            return fn()
        try:
            return fn()
        except Exception as exc:
            if not self._is_connection_error(exc):
                raise
            time.sleep(1.0)  # one short retry: a server restarting, a dropped connection
            try:
                return fn()
            except Exception as exc2:
                if not self._is_connection_error(exc2):
                    raise
                raise StoreUnavailableError(
                    f"Qdrant server at {self.url} is unreachable: {type(exc2).__name__}"
                ) from None

    @staticmethod
    def _is_connection_error(exc: BaseException) -> bool:
        name = type(exc).__name__
        return isinstance(exc, ConnectionError | TimeoutError) or name in {
            "ResponseHandlingException",
            "ConnectError",
            "ConnectTimeout",
            "ReadTimeout",
            "RemoteProtocolError",
        }

    def _drop(self, info: CollectionInfo) -> None:
        if info.state:
            self._client.delete_collection(info.name)
        info.state = None

    def close(self) -> None:
        """Release the client; in-memory data are gone, persisted data stay (idempotent)."""
        if self._closed:
            return
        self._collections.clear()
        self._client.close()
        self._closed = True
