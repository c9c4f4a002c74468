"""Milvus as a vector store: Milvus Lite in-process, or any Milvus server.

One adapter, three deployments, chosen by ``uri``:

* a path ending in ``.db`` (or an existing directory): Milvus Lite 3.x
  in-process (``milvus-lite`` runs a gRPC server in threads of this process
  on 127.0.0.1; the path is its data directory);
* ``http://host:port``: a server: ``milvus-lite server``, a Milvus
  standalone (PyPI ``milvus`` 2.3.5, ``docker/milvus-compose.yml``) or a
  cluster (Helm chart / Milvus Operator); only the URI changes.

:class:`MilvusStore` is a :class:`~imsearch_align.adapters.base.BaseStore`:
the same name rule, input checks and errors as every other store. The
server holds the catalog and the ids (``keeps_ids = False``): collections
made by other clients are found, counts are ``count(*)`` queries, and
duplicate ids are looked up on the server before an insert.

Collections have an ``INT64`` primary key ``id`` (the caller's ids), a
vector field ``vector`` (``FLOAT_VECTOR`` or ``SPARSE_FLOAT_VECTOR`` with
``SPARSE_INVERTED_INDEX``), metric ``IP``, and a dynamic field, so scalar
metadata columns given at insert can be filtered on at search.

**Index types** FLAT, IVF_FLAT, IVF_SQ8, IVF_PQ, HNSW and AUTOINDEX, with
their build parameters checked and defaulted (Milvus Lite does not build
IVF_PQ: refused before any work). Search-time parameters (``nprobe``,
``ef``) change per collection without a rebuild
(:class:`~imsearch_align.framework.interfaces.TunableSearch`); filtered
search over integer attributes sends a Milvus boolean expression
(:class:`~imsearch_align.framework.interfaces.FilteredSearch`); attributes a
collection declares are INT64 fields with a scalar index each
(``attribute_storage="typed"``, the default), or, on request, keys of the
dynamic JSON field (``"dynamic"``).

**Consistency** is ``Bounded`` by default, as production searches: a
``Strong`` search makes every request wait for the server to catch up
(about 280 ms per request on Milvus 2.3.5). What was inserted is still what
is searched: the first search after inserts waits once
(:meth:`MilvusStore.make_searchable`, :mod:`~imsearch_align.adapters.milvus.ready`)
until the collection is flushed, indexed and loaded and ``count(*)`` at
``Strong`` holds every inserted row; a ``Bounded`` search then sees every
row. ``consistency_level`` (Strong, Bounded, Session, Eventually) is
recorded in :meth:`MilvusStore.provenance`. A ``FLAT`` index is exact, so the store (without a filter) chooses the
documents tied at the k-th score by ascending id, as ExactStore does: it asks
for ``k + 8`` hits and again, wider, for rows still tied at the end
(:func:`~imsearch_align.adapters.base.search_closing_ties`); other indexes
return the server's choice among tied documents.

**Ownership** (servers are shared between runs): every collection a store
creates carries the property ``imsearch_align.owner`` = the store's
``owner`` token (random per store unless given; pass a run id so a resumed
run owns its collections again). Any store may search any collection; only
the owner may insert into it or drop it (``drop_collection(name,
force=True)`` overrides); creating an existing name raises
:class:`~imsearch_align.adapters.base.CollectionExistsError` and never
drops anything; a creation race between two stores is detected by reading
the marker back. Build unique names with
:func:`~imsearch_align.adapters.base.unique_collection_name`.

**Faults** (one retry budget per outage, ``retry_budget_s``): a broken
connection (gRPC UNAVAILABLE, connect failed, deadline exceeded) is retried
with backoff (pymilvus reconnects the channel) until the server answers
or the budget is spent; a collection the server reports as not loaded (it
was restarted: ``state 'released'``) is loaded again and the request
repeated; an insert that may have reached the server before the failure is
repeated only for the ids not stored. When the budget is spent the store
raises :class:`MilvusUnavailableError` (a
:class:`~imsearch_align.framework.interfaces.StoreUnavailableError`) with
the URI and the cause in one line, and every later call that fails the
same way raises at once (no new budget) until the server answers again.
Errors that cannot heal are never retried: a collection dropped by another
client raises :class:`~imsearch_align.adapters.base.CollectionNotFoundError`,
a refused request (bad expression, parameter) :class:`MilvusStoreError`.
pymilvus's own log of every failed RPC (a traceback each) is silenced by
:func:`quiet_pymilvus_logs`; the store logs one warning when an outage
starts and one line when it ends.

Server limits handled here (https://milvus.io/docs/limitations.md): inserts
and searches are split under the 64 MB request limit and searches under
16,384 queries per request; ``k`` above the 16,384 top-k limit is a clear
error (set ``max_k`` for a server configured higher). Sparse queries are sent
one dict per row (pymilvus 3.0.2 fails on a whole CSR matrix). The token
(argument or ``MILVUS_TOKEN``) is never logged, shown in ``repr``, put into
an error message or into :meth:`MilvusStore.provenance`.

The package, one room per job (every public name is importable from here):

* :mod:`~imsearch_align.adapters.milvus.config`: limits, the collection
  layout's names, checks of the store's options, how a ``uri`` is read;
* :mod:`~imsearch_align.adapters.milvus.errors`: what a failed call means
  (transient, not loaded, not found, refused) and the errors raised;
* :mod:`~imsearch_align.adapters.milvus.logs`: the lazy pymilvus import and
  the filters that quiet its log;
* :mod:`~imsearch_align.adapters.milvus.lite`: the Milvus Lite server of a
  data directory, shared by the stores of this process;
* :mod:`~imsearch_align.adapters.milvus.connection`: the client, retries
  through an outage, healing, error translation;
* :mod:`~imsearch_align.adapters.milvus.rows` (rows and byte-sized batches),
  :mod:`~imsearch_align.adapters.milvus.schema` (a collection on the
  server), :mod:`~imsearch_align.adapters.milvus.search` (query batches and
  the full-row check), :mod:`~imsearch_align.adapters.milvus.ready` (the
  wait after inserts: flushed, indexed, loaded, counted);
* :mod:`~imsearch_align.adapters.milvus.tuning` (the index setting: what a
  deployment builds, build and search parameters) and
  :mod:`~imsearch_align.adapters.milvus.filters` (attributes and filter
  expressions);
* :mod:`~imsearch_align.adapters.milvus.catalog`: the catalog, ownership
  and version the server holds;
* :mod:`~imsearch_align.adapters.milvus.search_options`: search-time
  parameters per collection and the filtered-search hooks;
* :mod:`~imsearch_align.adapters.milvus.store`: :class:`MilvusStore`, the
  ``BaseStore`` verbs, registered as ``"milvus"``.
"""

from __future__ import annotations

from imsearch_align.adapters.milvus.config import (
    ATTRIBUTE_STORAGES,
    CONSISTENCY_LEVELS,
    INDEX_TYPES,
    LITE_REFUSED,
    MAX_DIM,
    MAX_NQ,
    MAX_REQUEST_BYTES,
    MAX_TOPK,
    OWNER_PROPERTY,
    SCALAR_INDEXES,
)
from imsearch_align.adapters.milvus.errors import MilvusStoreError, MilvusUnavailableError
from imsearch_align.adapters.milvus.logs import quiet_pymilvus_logs
from imsearch_align.adapters.milvus.store import MilvusStore

__all__ = [
    "ATTRIBUTE_STORAGES",
    "CONSISTENCY_LEVELS",
    "INDEX_TYPES",
    "LITE_REFUSED",
    "MAX_DIM",
    "MAX_NQ",
    "MAX_REQUEST_BYTES",
    "MAX_TOPK",
    "OWNER_PROPERTY",
    "SCALAR_INDEXES",
    "MilvusStore",
    "MilvusStoreError",
    "MilvusUnavailableError",
    "quiet_pymilvus_logs",
]
