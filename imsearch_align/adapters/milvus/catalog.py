"""The server's side of a MilvusStore: its catalog, ownership markers and version.

Milvus holds the catalog and the ids (the store sets ``keeps_ids =
False``), so :class:`MilvusCatalog` answers :class:`~imsearch_align.adapters.base.BaseStore`'s
bookkeeping hooks by asking the server: a collection made by another client
is found, counts are ``count(*)`` queries, duplicate ids are looked up
before an insert. Every collection a store creates carries the property
``imsearch_align.owner`` (:data:`~imsearch_align.adapters.milvus.config.OWNER_PROPERTY`);
any store may search a collection, only its owner may change it. Requests
go through the store's
:class:`~imsearch_align.adapters.milvus.connection.MilvusConnection`.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from imsearch_align.adapters.base import (
    CollectionInfo,
    CollectionNotFoundError,
    CollectionOwnedError,
)
from imsearch_align.adapters.filterable import FilterableStore
from imsearch_align.adapters.milvus.config import (
    ID_FIELD,
    OWNER_PROPERTY,
    SCALAR_INDEXES,
    redact_uri,
)
from imsearch_align.adapters.milvus.connection import MilvusConnection
from imsearch_align.adapters.milvus.logs import import_pymilvus
from imsearch_align.adapters.milvus.ready import count_rows
from imsearch_align.adapters.milvus.schema import create_on_server, info_from_description
from imsearch_align.adapters.milvus.tuning import pq_subquantizers

__all__ = ["MilvusCatalog"]


class MilvusCatalog(FilterableStore):
    """BaseStore's catalog hooks, ownership and server facts, answered by a Milvus server.

    A :class:`~imsearch_align.adapters.filterable.FilterableStore` (a
    BaseStore with the ``search_filtered`` verb). The base of :class:`~imsearch_align.adapters.milvus.MilvusStore`, which
    sets the attributes below in its constructor.
    """

    uri: str
    owner: str
    index: str
    index_params: dict[str, int]
    attribute_storage: str
    timeout: float | None
    check_duplicates: bool
    consistency_level: str
    _conn: MilvusConnection
    _lock: Any
    _server_version: str | None

    def _where(self) -> str:
        return f" at {redact_uri(self.uri)}"

    def _no_sparse_reason(self) -> str:
        return (
            f"Milvus {self.server_version()} at {redact_uri(self.uri)} has no sparse vectors "
            "(SPARSE_FLOAT_VECTOR needs Milvus >= 2.4 or Milvus Lite)"
        )

    @property
    def supports_sparse(self) -> bool:  # type: ignore[override]
        """Whether the target has SPARSE_FLOAT_VECTOR: Milvus Lite and servers >= 2.4.

        For a server this asks its version once (Milvus 2.3 accepts a sparse
        schema but fails every insert, so it is refused up front).
        """
        if self.is_lite:
            return True
        version = self.server_version()
        found = re.search(r"(\d+)\.(\d+)", version)
        # Lite servers report "milvus_lite-3.x"; unknown formats get the benefit of the doubt.
        return found is None or (int(found[1]), int(found[2])) >= (2, 4)

    @property
    def is_lite(self) -> bool:
        """Whether ``uri`` selects Milvus Lite in-process."""
        return self._conn.is_lite

    def server_version(self) -> str:
        """The version the server reports (``get_server_version``), asked once."""
        if self._server_version is None:
            self._server_version = str(self._call("get_server_version", None, "get_server_version"))
        return self._server_version

    @property
    def lite_server(self) -> bool:
        """Whether the target is Milvus Lite: in-process, or a ``milvus-lite server`` at a
        URL (its version says so; asked once)."""
        return self.is_lite or self.server_version().startswith("milvus_lite")

    @property
    def deployment(self) -> str:
        """``"milvus-lite (in-process)"``, ``"milvus-lite server"`` or ``"milvus server"``."""
        if self.is_lite:
            return "milvus-lite (in-process)"
        if self.server_version().startswith("milvus_lite"):
            return "milvus-lite server"
        return "milvus server (standalone or cluster)"

    @property
    def scalar_index(self) -> str | None:
        """The index built on each typed attribute field: ``STL_SORT`` on a Milvus server,
        ``INVERTED`` on Milvus Lite (which builds no other); None with
        ``attribute_storage="dynamic"`` (the dynamic field has none)."""
        if self.attribute_storage != "typed":
            return None
        return SCALAR_INDEXES["lite" if self.lite_server else "server"]

    def provenance(self) -> dict[str, Any]:
        """Client package versions, the server's version, the deployment, the consistency
        level, and where declared attributes are kept.

        ``consistency_level`` is the level every search used (the default
        too, which ``config.store_params`` does not hold);
        ``attribute_storage`` (``typed`` or ``dynamic``) and ``scalar_index``
        (the index on each typed attribute, None for ``dynamic``) say how a
        filter was evaluated. Never the token or a local path (a Lite data
        directory is not recorded).
        """
        out = super().provenance()
        out["server_version"] = self.server_version()
        out["deployment"] = self.deployment
        out["consistency_level"] = self.consistency_level
        out["attribute_storage"] = self.attribute_storage
        out["scalar_index"] = self.scalar_index
        return out

    def _create_on_server(self, info: CollectionInfo) -> None:
        """Make ``info`` on the server: its vector index, its attributes typed with a scalar
        index each (or in the dynamic field), loaded (see
        :func:`~imsearch_align.adapters.milvus.schema.create_on_server`)."""
        params = dict(self.index_params)
        if self.index == "IVF_PQ" and not info.sparse:
            params["m"] = pq_subquantizers(params.get("m"), info.dim, info.name)
        typed = self.attribute_storage == "typed"
        create_on_server(
            self._call,
            self._run,
            info,
            index=self.index,
            index_params=params,
            consistency_level=self.consistency_level,
            owner=self.owner,
            uri=self.uri,
            lite=bool(params) and (self.is_lite or self.lite_server),
            timeout=self.timeout,
            typed_attributes=typed,
            scalar_index=self.scalar_index if typed and info.attribute_names else None,
        )

    # -- requests (through the connection: retries, healing, clear errors) --------------
    def _call(self, op: str, collection: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        """A client method through :meth:`_run` (retries, reload, clear errors)."""
        return self._conn.call(op, collection, method, *args, **kwargs)

    def _run(self, op: str, collection: str | None, fn: Any) -> Any:
        """Run ``fn(client, retried)`` through the connection's retries (see MilvusConnection.run)."""
        return self._conn.run(op, collection, fn)

    # -- catalog (the server holds it) --------------------------------------------------
    def _lookup(self, name: str) -> CollectionInfo | None:
        with self._lock:
            info = self._collections.get(name)
        if info is not None:
            return info
        try:
            desc = self._call("describe_collection", name, "describe_collection", name)
        except CollectionNotFoundError:
            return None
        info = info_from_description(import_pymilvus(), self.uri, name, desc)
        with self._lock:
            return self._collections.setdefault(name, info)

    def _exists(self, name: str) -> bool:
        with self._lock:
            info = self._collections.get(name)
        if info is not None and info.state.pending:
            return True
        found = bool(self._call("has_collection", name, "has_collection", name))
        if not found and info is not None:
            self._forget(name)  # dropped by another client
        return found

    def _catalog(self) -> list[str]:
        with self._lock:
            pending = {n for n, i in self._collections.items() if i.state.pending}
        return sorted(set(self._call("list_collections", None, "list_collections")) | pending)

    def _forget(self, name: str) -> None:
        with self._lock:
            self._collections.pop(name, None)

    def _count(self, info: CollectionInfo) -> int:
        if info.state.pending:
            return 0
        # At Strong, whatever the search level: the count is the bound every
        # dense answer is checked against (read once per evaluation, not per search).
        n = count_rows(self._call, info.name, "Strong")
        info.state.count = n
        return n

    def _is_empty(self, info: CollectionInfo) -> bool:
        return info.state.pending

    def _stored_among(self, info: CollectionInfo, ids: np.ndarray) -> np.ndarray:
        """Milvus keeps duplicate primary keys: look the ids up before inserting."""
        if info.state.pending or not self.check_duplicates:
            return ids[:0]
        found: list[int] = []
        for lo in range(0, len(ids), 8192):
            found += self._run(
                "insert (id check)",
                info.name,
                lambda client, _, chunk=ids[lo : lo + 8192]: self._ids_present(
                    client, info.name, chunk
                ),
            )
        return np.asarray(sorted(found), dtype=np.int64)

    def _ids_present(self, client: Any, name: str, ids: np.ndarray) -> list[int]:
        expr = f"{ID_FIELD} in [{','.join(map(str, ids.tolist()))}]"
        kwargs: dict[str, Any] = {"consistency_level": "Strong"}
        if self.timeout is not None:
            kwargs["timeout"] = self.timeout
        hits = client.query(name, filter=expr, output_fields=[ID_FIELD], **kwargs)
        return [int(h[ID_FIELD]) for h in hits]

    # -- ownership --------------------------------------------------------------------
    def segment_count(self, name: str) -> int | None:
        """Segments of ``name`` loaded on the query nodes (a Milvus server), None on Milvus
        Lite, which lists none. A study records it per timed pass and, before timing, waits
        until it settles (a server compacting small segments after a load changes it)."""
        if self.deployment.startswith("milvus-lite"):
            return None
        loaded = self._call("segments", name, "list_loaded_segments", name)
        return len({s.segment_id for s in loaded})

    def owner_of(self, name: str) -> str | None:
        """The owner token on the collection, read from the server (None: no marker)."""
        info = self._get(name)
        if info.state.pending:
            return info.state.owner
        desc = self._call("describe_collection", name, "describe_collection", name)
        return (desc.get("properties") or {}).get(OWNER_PROPERTY)

    def _check_writable(self, info: CollectionInfo, verb: str) -> None:
        owner = info.state.owner
        if owner == self.owner:
            return
        whose = (
            f"another run (owner {owner!r})"
            if owner
            else "no run of imsearch_align (it has no owner marker)"
        )
        raise CollectionOwnedError(
            f"{verb}: collection {info.name!r} at {redact_uri(self.uri)} belongs to {whose}; "
            f"this store (owner {self.owner!r}) may search it but not change it. Use a name of "
            "your own (unique_collection_name), or open the store with that owner"
            + (", or drop_collection(name, force=True)" if verb == "drop_collection" else "")
        )
