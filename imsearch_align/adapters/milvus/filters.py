"""Filtered search on Milvus: integer attributes in the collection, filters as expressions.

Attributes (``insert(..., attributes={"category": ints})``, checked by
:func:`~imsearch_align.adapters.attributes.check_attributes`) are ``INT64``
scalar fields of the collection's schema, each with a scalar index
(``STL_SORT`` on a Milvus server, ``INVERTED`` on Milvus Lite:
:data:`~imsearch_align.adapters.milvus.config.SCALAR_INDEXES`), when the
collection is created knowing them (``create_collection(attributes=...)``,
or a collection created with ``dim=None``, which its first insert makes on
the server). They go to the collection's dynamic JSON field instead, without
an index, when the store asks for it (``MilvusStore(attribute_storage=
"dynamic")``) or when the collection is already on the server when its first
attributed insert comes: filtered the same way, more slowly. Either way the
names are written on the collection as the property
:data:`ATTRIBUTES_PROPERTY`, so another store finds them.

A :class:`~imsearch_align.framework.interfaces.Filter` becomes the boolean
expression ``field in [v1, v2, ...]`` (:func:`expression_of`); a raw
``Filter.expression`` is sent verbatim. Before the first search with an
expression, :func:`check_expression` asks the server to evaluate it once
(a one-row query), so an expression it cannot parse raises ``ValueError``
holding the server's message and the expression, not a search failure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from imsearch_align.adapters.base import CollectionInfo
from imsearch_align.adapters.milvus.config import ID_FIELD, RESERVED, redact_uri
from imsearch_align.adapters.milvus.errors import MilvusStoreError
from imsearch_align.framework.interfaces import ATTRIBUTE_NAME_RE, Filter

__all__ = [
    "ATTRIBUTES_PROPERTY",
    "ATTRIBUTE_TYPES",
    "attributes_from_properties",
    "check_declared",
    "check_expression",
    "declare_on_server",
    "expression_of",
]

#: Collection property holding the attribute names, comma-separated.
ATTRIBUTES_PROPERTY = "imsearch_align.attributes"
#: Types an attribute may be declared with at ``create_collection`` (all INT64).
ATTRIBUTE_TYPES = ("int", "int64")


def check_declared(attributes: Mapping[str, str] | None, fields: Mapping[str, str]) -> tuple:
    """The attribute names of ``create_collection(attributes=...)``, sorted (``()``: none).

    Raises:
        ValueError: a bad or reserved name, one also given in ``fields``, or a
            type other than :data:`ATTRIBUTE_TYPES`.
    """
    out = []
    for name, kind in dict(attributes or {}).items():
        if not isinstance(name, str) or not ATTRIBUTE_NAME_RE.match(name) or name in RESERVED:
            raise ValueError(
                "attributes: a name must be a letter or underscore, then letters, digits, "
                f"underscores, at most 64 characters, and not {list(RESERVED)}; got {name!r}"
            )
        if name in fields:
            raise ValueError(f"attributes: {name!r} is also given in fields; give it once")
        if kind not in ATTRIBUTE_TYPES:
            raise ValueError(
                f"attributes[{name!r}] must be one of {list(ATTRIBUTE_TYPES)} (integer "
                f"attributes, INT64 on the server), got {kind!r}"
            )
        out.append(name)
    return tuple(sorted(out))


def attributes_from_properties(props: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The attribute names a collection's properties record (None: it declared none)."""
    raw = props.get(ATTRIBUTES_PROPERTY)
    names = tuple(n for n in str(raw or "").split(",") if n)
    return names or None


def declare_on_server(call: Callable[..., Any], name: str, names: tuple[str, ...]) -> None:
    """Write the attribute names on a collection already on the server (first attributed
    insert; the values go to its dynamic field)."""
    call(
        "insert (declaring attributes)",
        name,
        "alter_collection_properties",
        name,
        properties={ATTRIBUTES_PROPERTY: ",".join(names)},
    )


def expression_of(filter: Filter) -> str:
    """The Milvus boolean expression of ``filter``: its raw ``expression`` verbatim, else
    ``field in [v1, v2, ...]``."""
    if filter.expression is not None:
        return filter.expression
    return f"{filter.field} in [{', '.join(str(v) for v in filter.values)}]"


def check_expression(
    call: Callable[..., Any], info: CollectionInfo, expr: str, *, consistency_level: str, uri: str
) -> None:
    """Ask the server to evaluate ``expr`` on collection ``info`` once (a one-row query).

    Raises:
        ValueError: the server refused it; the message holds the server's
            message and the expression.
    """
    try:
        call(
            "search_filtered (checking the filter expression)",
            info.name,
            "query",
            info.name,
            filter=expr,
            output_fields=[ID_FIELD],
            limit=1,
            consistency_level=consistency_level,
        )
    except MilvusStoreError as exc:
        raise ValueError(
            f"filter: Milvus at {redact_uri(uri)} cannot evaluate the expression {expr!r} on "
            f"collection {info.name!r}: {exc}"
        ) from None
