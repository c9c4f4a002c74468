"""A MilvusStore collection on the server: its schema and index, and reading one back.

Collections have an ``INT64`` primary key ``id`` (the caller's ids), a
vector field ``vector`` (``FLOAT_VECTOR``, or ``SPARSE_FLOAT_VECTOR`` with
``SPARSE_INVERTED_INDEX``), metric ``IP``, typed scalar columns if asked
for, ``INT64`` fields for the integer attributes it knows at creation, each
with a scalar index (``STL_SORT`` on a server, ``INVERTED`` on Milvus Lite;
none with ``attribute_storage="dynamic"``, see
:mod:`~imsearch_align.adapters.milvus.filters`), and a dynamic field, so
other metadata given at insert can be filtered on too. :func:`create_on_server`
makes one with its indexes (build parameters as the deployment reads them,
:func:`~imsearch_align.adapters.milvus.tuning.wire_params`) and detects a
creation race by reading the owner marker back. :class:`CollectionMeta` is what the store keeps about each one
(``CollectionInfo.state``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from imsearch_align.adapters.base import CollectionExistsError, CollectionInfo
from imsearch_align.adapters.milvus.config import (
    ID_FIELD,
    OWNER_PROPERTY,
    SCALAR_TYPES,
    VEC_FIELD,
    redact_uri,
)
from imsearch_align.adapters.milvus.errors import MilvusStoreError
from imsearch_align.adapters.milvus.filters import ATTRIBUTES_PROPERTY, attributes_from_properties
from imsearch_align.adapters.milvus.logs import import_pymilvus
from imsearch_align.adapters.milvus.tuning import wire_params

__all__ = [
    "CollectionMeta",
    "build_index_params",
    "build_schema",
    "create_on_server",
    "info_from_description",
]


@dataclass
class CollectionMeta:
    """What MilvusStore keeps about a collection (``CollectionInfo.state``)."""

    owner: str | None
    #: Rows known to be stored (None: not read yet); inserts add to it.
    count: int | None = None
    #: A dense collection created with ``dim=None``: made on the server by
    #: the first insert, which brings the dimension.
    pending: bool = False
    fields: dict[str, str] = field(default_factory=dict)
    #: Insert requests this store sent to the collection.
    writes: int = 0
    #: ``writes`` when the collection was last made searchable (None: not
    #: since this store found it); searches wait for readiness when it differs.
    ready_at: int | None = None
    #: What the last readiness wait took (``Readiness.to_dict()``).
    readiness: dict[str, Any] = field(default_factory=dict)
    #: Times the collection's index was built: 1 once it is on the server (Milvus
    #: builds each sealed segment's index from the one definition made at creation).
    builds: int = 0
    #: The build parameters the index was created with (empty: not known).
    index_params: dict[str, int] = field(default_factory=dict)
    #: Search-time parameters of this collection (``set_search_params``).
    search: dict[str, int] = field(default_factory=dict)
    #: Whether the attributes are typed INT64 fields (else in the dynamic field).
    typed_attributes: bool = False
    #: The scalar index type on each typed attribute field (None: none).
    scalar_index: str | None = None
    #: Filter expressions the server evaluated on this collection (checked once).
    expressions: set[str] = field(default_factory=set)
    #: The prepared single-query request (:class:`~imsearch_align.adapters.milvus.search.OneQuery`)
    #: of the last single unfiltered search; None once the search values change.
    one_query: Any = None

    @property
    def searchable(self) -> bool:
        """Whether every row this store inserted is known visible to a search."""
        return self.ready_at == self.writes


def build_schema(pymilvus: Any, info: CollectionInfo) -> Any:
    """The pymilvus schema of ``info``: id, vector and its typed scalar columns."""
    DataType = pymilvus.DataType
    schema = pymilvus.MilvusClient.create_schema(auto_id=False, enable_dynamic_field=True)
    schema.add_field(ID_FIELD, DataType.INT64, is_primary=True)
    if info.sparse:
        schema.add_field(VEC_FIELD, DataType.SPARSE_FLOAT_VECTOR)
    else:
        schema.add_field(VEC_FIELD, DataType.FLOAT_VECTOR, dim=info.dim)
    for fname, ftype in info.state.fields.items():
        extra = {"max_length": 65_535} if ftype == "str" else {}
        schema.add_field(fname, getattr(DataType, SCALAR_TYPES[ftype]), **extra)
    if info.state.typed_attributes:
        for fname in info.attribute_names or ():
            schema.add_field(fname, DataType.INT64)
    return schema


def build_index_params(
    pymilvus: Any, info: CollectionInfo, index: str, params: Mapping[str, Any], *, lite: bool
) -> Any:
    """The vector index: ``SPARSE_INVERTED_INDEX`` for sparse, else ``index`` with ``params``
    (nested as Milvus Lite reads them when ``lite``); then ``info.state.scalar_index`` on
    each typed attribute field (index name: the field's)."""
    index_params = pymilvus.MilvusClient.prepare_index_params()
    if info.sparse:
        index_params.add_index(
            field_name=VEC_FIELD, index_type="SPARSE_INVERTED_INDEX", metric_type="IP"
        )
    else:
        index_params.add_index(
            field_name=VEC_FIELD,
            index_type=index,
            metric_type="IP",
            params=wire_params(params, lite=lite),
        )
    if info.state.typed_attributes and info.state.scalar_index:
        for fname in info.attribute_names or ():
            index_params.add_index(
                field_name=fname, index_type=info.state.scalar_index, index_name=fname
            )
    return index_params


def _finish_indexes(call: Callable[..., Any], name: str, indexes: Any) -> None:
    """Create the indexes of ``indexes`` (an ``IndexParams``) that ``name`` lacks, matched
    by field: a create cut short may have made the collection without some of them."""
    have = {
        call("describe_index", name, "describe_index", name, index_name).get("field_name")
        for index_name in call("list_indexes", name, "list_indexes", name)
    }
    missing = [p for p in indexes if p.field_name not in have]
    if missing:
        call("create_index", name, "create_index", name, type(indexes)(missing))


def create_on_server(
    call: Callable[..., Any],
    run: Callable[..., Any],
    info: CollectionInfo,
    *,
    index: str,
    index_params: Mapping[str, Any],
    consistency_level: str,
    owner: str,
    uri: str,
    lite: bool,
    timeout: float | None = None,
    typed_attributes: bool = True,
    scalar_index: str | None = None,
) -> None:
    """Create ``info``'s collection on the server, with its indexes and the owner marker.

    A create is three requests (collection, indexes, load). When the server
    goes away in the middle (a restart), the retry finds the name taken by
    the lost attempt: the marker read back says whether it is this store's,
    and then the missing indexes (the vector one, and a scalar one per typed
    attribute) and the load are finished instead of failing on "already
    exists".

    Args:
        call: the store's ``_call`` (a client method through the retries).
        run: the store's ``_run`` (``fn(client, retried)`` through the retries).
        info: the collection; ``info.state.pending`` is cleared once made.
        index: the dense index type.
        index_params: its build parameters (defaults filled).
        consistency_level: the collection's consistency level.
        owner: the token written as :data:`OWNER_PROPERTY`.
        uri: the store's uri (for the error message).
        lite: the deployment is Milvus Lite (its encoding of build parameters).
        timeout: the store's per-request timeout (None: pymilvus's).
        typed_attributes: the attributes ``info`` knows become INT64 fields (else
            they go to the dynamic field).
        scalar_index: the index type built on each typed attribute field (None: none).

    Raises:
        CollectionExistsError: another store created the name at the same moment.
    """
    pymilvus = import_pymilvus()
    info.state.typed_attributes = typed = bool(typed_attributes and info.attribute_names)
    info.state.scalar_index = scalar_index if typed else None
    properties = {OWNER_PROPERTY: owner}
    if info.attribute_names:
        properties[ATTRIBUTES_PROPERTY] = ",".join(info.attribute_names)
    indexes = build_index_params(pymilvus, info, index, index_params, lite=lite)
    extra = {} if timeout is None else {"timeout": timeout}

    def create(client: Any, retried: bool) -> bool:
        if retried and client.has_collection(info.name, **extra):
            return False  # the lost attempt reached the server (the marker says whose)
        client.create_collection(
            info.name,
            schema=build_schema(pymilvus, info),
            index_params=indexes,
            consistency_level=consistency_level,
            properties=properties,
            **extra,
        )
        return True

    whole = run("create_collection", info.name, create)
    # Two stores may race for a free name; some servers answer the second
    # create with success. The marker read back says who won.
    desc = call("describe_collection", info.name, "describe_collection", info.name)
    winner = (desc.get("properties") or {}).get(OWNER_PROPERTY)
    if winner != owner:
        raise CollectionExistsError(
            f"name: collection {info.name!r} at {redact_uri(uri)} was created at the "
            f"same moment by another run (owner {winner!r}); pick another name"
        )
    if not whole:  # this store's create was cut short: finish its indexes and load
        _finish_indexes(call, info.name, indexes)
        call("load_collection", info.name, "load_collection", info.name)
    info.state.pending = False
    info.state.builds = 1
    info.state.index_params = {} if info.sparse else dict(index_params)


def info_from_description(
    pymilvus: Any, uri: str, name: str, desc: Mapping[str, Any]
) -> CollectionInfo:
    """A collection found on the server (``describe_collection``) as the store's record.

    Raises:
        MilvusStoreError: it has no ``vector`` field (not made by MilvusStore).
    """
    vec = next((f for f in desc.get("fields", []) if f.get("name") == VEC_FIELD), None)
    if vec is None:
        raise MilvusStoreError(
            f"collection {name!r} at {redact_uri(uri)} was not created by "
            f"MilvusStore: it has no {VEC_FIELD!r} field"
        )
    sparse = vec["type"] == pymilvus.DataType.SPARSE_FLOAT_VECTOR
    dim = None if sparse else int(vec["params"]["dim"])
    props = desc.get("properties") or {}
    names = attributes_from_properties(props)
    typed = {f.get("name") for f in desc.get("fields", [])}
    state = CollectionMeta(
        owner=props.get(OWNER_PROPERTY),
        builds=1,  # MilvusStore creates every collection with its index
        typed_attributes=bool(names) and set(names) <= typed,
    )
    info = CollectionInfo(name=name, dim=dim, sparse=sparse, state=state)
    info.attribute_names = names
    return info
