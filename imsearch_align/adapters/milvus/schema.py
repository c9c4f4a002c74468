"""A MilvusStore collection on the server: its schema and index, and reading one back.

Collections have an ``INT64`` primary key ``id`` (the caller's ids), a
vector field ``vector`` (``FLOAT_VECTOR``, or ``SPARSE_FLOAT_VECTOR`` with
``SPARSE_INVERTED_INDEX``), metric ``IP``, typed scalar columns if asked
for, and a dynamic field, so other metadata given at insert can be filtered
on too. :func:`create_on_server` makes one (and detects a creation race
by reading the owner marker back). :class:`CollectionMeta` is what the store keeps about each one
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
from imsearch_align.adapters.milvus.logs import import_pymilvus

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
    return schema


def build_index_params(
    pymilvus: Any, info: CollectionInfo, index: str, params: Mapping[str, Any]
) -> Any:
    """The vector index: ``SPARSE_INVERTED_INDEX`` for sparse, else ``index`` with ``params``."""
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
            params=dict(params),
        )
    return index_params


def create_on_server(
    call: Callable[..., Any],
    info: CollectionInfo,
    *,
    index: str,
    index_params: Mapping[str, Any],
    consistency_level: str,
    owner: str,
    uri: str,
) -> None:
    """Create ``info``'s collection on the server, with its index and the owner marker.

    Args:
        call: the store's ``_call`` (a client method through the retries).
        info: the collection; ``info.state.pending`` is cleared once made.
        index: the dense index type.
        index_params: its build parameters.
        consistency_level: the collection's consistency level.
        owner: the token written as :data:`OWNER_PROPERTY`.
        uri: the store's uri (for the error message).

    Raises:
        CollectionExistsError: another store created the name at the same moment.
    """
    pymilvus = import_pymilvus()
    call(
        "create_collection",
        info.name,
        "create_collection",
        info.name,
        schema=build_schema(pymilvus, info),
        index_params=build_index_params(pymilvus, info, index, index_params),
        consistency_level=consistency_level,
        properties={OWNER_PROPERTY: owner},
    )
    # Two stores may race for a free name; some servers answer the second
    # create with success. The marker read back says who won.
    desc = call("describe_collection", info.name, "describe_collection", info.name)
    winner = (desc.get("properties") or {}).get(OWNER_PROPERTY)
    if winner != owner:
        raise CollectionExistsError(
            f"name: collection {info.name!r} at {redact_uri(uri)} was created at the "
            f"same moment by another run (owner {winner!r}); pick another name"
        )
    info.state.pending = False


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
    return CollectionInfo(
        name=name, dim=dim, sparse=sparse, state=CollectionMeta(owner=props.get(OWNER_PROPERTY))
    )
