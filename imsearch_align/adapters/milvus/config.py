"""Milvus's limits, the collection layout, and the checks of MilvusStore's options.

What a :class:`~imsearch_align.adapters.milvus.MilvusStore` accepts and why:
the index types with the parameters each takes (their ranges and defaults,
and the types Milvus Lite does not build), Milvus's request limits
(https://milvus.io/docs/limitations.md), the consistency levels, the owner
marker, the field names every collection uses, and one check per option,
each raising the error the store's constructor raises. Also how a ``uri``
is read: which select Milvus Lite in-process, and how one is shown without
its credentials.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from imsearch_align.framework.validation import check_int

__all__ = [
    "ATTRIBUTE_STORAGES",
    "CONSISTENCY_LEVELS",
    "FIELD_RE",
    "ID_FIELD",
    "INDEX_TYPES",
    "LITE_REFUSED",
    "MAX_DIM",
    "MAX_NQ",
    "MAX_REQUEST_BYTES",
    "MAX_TOPK",
    "OWNER_PROPERTY",
    "PARAM_DEFAULTS",
    "PARAM_RANGES",
    "RESERVED",
    "SCALAR_INDEXES",
    "SCALAR_TYPES",
    "VEC_FIELD",
    "check_attribute_storage",
    "check_consistency_level",
    "check_index",
    "check_owner",
    "check_params",
    "check_schema_fields",
    "check_seconds",
    "check_timeout",
    "is_lite_uri",
    "redact_uri",
]

#: Dense index types and the parameters each accepts (build, search); Milvus's names.
INDEX_TYPES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "FLAT": (frozenset(), frozenset()),
    "IVF_FLAT": (frozenset({"nlist"}), frozenset({"nprobe"})),
    "IVF_SQ8": (frozenset({"nlist"}), frozenset({"nprobe"})),
    "IVF_PQ": (frozenset({"nlist", "m", "nbits"}), frozenset({"nprobe"})),
    "HNSW": (frozenset({"M", "efConstruction"}), frozenset({"ef"})),
    "AUTOINDEX": (frozenset(), frozenset({"level"})),
}
#: Index types Milvus Lite (3.2.2) does not build: it accepts the index and then
#: fails every segment's build in the background, searching by brute force.
LITE_REFUSED = frozenset({"IVF_PQ"})
#: Accepted values of each parameter, ``(low, high)`` (Milvus's documented ranges;
#: ``nprobe`` is also at most the index's ``nlist``, ``m`` a divisor of the dimension).
PARAM_RANGES: dict[str, tuple[int, int | None]] = {
    "nlist": (1, 65_536),
    "nprobe": (1, 65_536),
    "m": (1, 32_768),
    "nbits": (1, 16),
    "M": (2, 2_048),
    "efConstruction": (1, None),
    "ef": (1, None),
    "level": (1, None),
}
#: Values sent when a parameter is not given, so that every deployment builds and
#: searches alike (Milvus Lite's own defaults differ from a server's: nprobe 10 vs 8).
#: ``m`` defaults to the dimension's largest divisor up to dim / 4; ``nprobe`` is
#: capped at ``nlist``.
PARAM_DEFAULTS: dict[str, int] = {
    "nlist": 128,
    "nbits": 8,
    "M": 16,
    "efConstruction": 200,
    "nprobe": 8,
    "ef": 64,
}
#: Milvus's request limits (https://milvus.io/docs/limitations.md).
MAX_NQ = 16_384
MAX_TOPK = 16_384
MAX_REQUEST_BYTES = 64 * 1024 * 1024
MAX_DIM = 32_768
CONSISTENCY_LEVELS = ("Strong", "Bounded", "Session", "Eventually")
#: Where integer attributes are kept: ``"typed"``, INT64 fields of the schema with a
#: scalar index each (:data:`SCALAR_INDEXES`); ``"dynamic"``, the dynamic JSON field,
#: without an index (filtered the same way, more slowly: on request only).
ATTRIBUTE_STORAGES = ("typed", "dynamic")
#: The scalar index built on each typed INT64 attribute, by deployment: a Milvus
#: server (2.3.5 builds only STL_SORT on a numeric field) and Milvus Lite 3.x (INVERTED
#: only: it refuses STL_SORT as "not implemented").
SCALAR_INDEXES = {"server": "STL_SORT", "lite": "INVERTED"}
#: Collection property holding the owner token of the store that created it.
OWNER_PROPERTY = "imsearch_align.owner"

#: The primary key field (the caller's int64 ids).
ID_FIELD = "id"
#: The vector field (FLOAT_VECTOR or SPARSE_FLOAT_VECTOR).
VEC_FIELD = "vector"
#: Field names a scalar column may not take.
RESERVED = (ID_FIELD, VEC_FIELD)
#: Scalar column types (``create_collection(fields=...)``) -> Milvus DataType names.
SCALAR_TYPES = {"int": "INT64", "float": "DOUBLE", "str": "VARCHAR", "bool": "BOOL"}
#: A scalar column's name: Milvus's field-name rule.
FIELD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
_OWNER_RE = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")


def check_owner(owner: Any) -> str:
    """``owner`` if it is a valid ownership token (1-128 of letters, digits, ``_.:-``)."""
    if not isinstance(owner, str) or not _OWNER_RE.match(owner):
        raise ValueError(f"owner must be 1-128 letters, digits or '_.:-' characters, got {owner!r}")
    return owner


def check_index(index: Any) -> str:
    """The upper-cased index type, one of :data:`INDEX_TYPES`."""
    idx = str(index).upper()
    if idx not in INDEX_TYPES:
        raise ValueError(f"index must be one of {sorted(INDEX_TYPES)}, got {index!r}")
    return idx


def check_params(params: Mapping[str, Any] | None, allowed: frozenset[str], name: str) -> dict:
    """Index build or search parameters: known keys only, integers in :data:`PARAM_RANGES`."""
    params = dict(params or {})
    unknown = sorted(set(params) - allowed)
    if unknown:
        raise ValueError(
            f"{name}: unknown key(s) {unknown} for this index; expected a subset of "
            f"{sorted(allowed) or '(none)'}"
        )
    for key, value in params.items():
        low, high = PARAM_RANGES.get(key, (1, None))
        check_int(value, f"{name}[{key!r}]", low=low, high=high)
        params[key] = int(value)
    return params


def check_consistency_level(consistency_level: Any) -> str:
    """``consistency_level`` if it is one of :data:`CONSISTENCY_LEVELS`."""
    if consistency_level not in CONSISTENCY_LEVELS:
        raise ValueError(
            f"consistency_level must be one of {list(CONSISTENCY_LEVELS)}, "
            f"got {consistency_level!r}"
        )
    return consistency_level


def check_attribute_storage(attribute_storage: Any) -> str:
    """``attribute_storage`` if it is one of :data:`ATTRIBUTE_STORAGES`."""
    if not isinstance(attribute_storage, str) or attribute_storage not in ATTRIBUTE_STORAGES:
        raise ValueError(
            f"attribute_storage must be one of {list(ATTRIBUTE_STORAGES)} (INT64 fields with a "
            f"scalar index, or the dynamic JSON field), got {attribute_storage!r}"
        )
    return attribute_storage


def check_timeout(timeout: Any) -> float | None:
    """A per-request timeout: a positive number of seconds, or None (no timeout)."""
    if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    return timeout


def check_seconds(name: str, value: Any) -> float:
    """A duration option (retry budget, backoff) as a float >= 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return float(value)


def check_schema_fields(fields: Mapping[str, str] | None) -> dict[str, str]:
    """Typed scalar columns of ``create_collection``: valid names, known types."""
    out = dict(fields or {})
    for fname, ftype in out.items():
        if not isinstance(fname, str) or not FIELD_RE.match(fname) or fname in RESERVED:
            raise ValueError(f"fields: invalid or reserved field name {fname!r}")
        if ftype not in SCALAR_TYPES:
            raise ValueError(
                f"fields[{fname!r}] must be one of {sorted(SCALAR_TYPES)}, got {ftype!r}"
            )
    return out


def redact_uri(uri: str) -> str:
    """``uri`` without user:password (a token can also travel there)."""
    parts = urlsplit(uri)
    if parts.scheme and parts.hostname and (parts.username or parts.password):
        host = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))
    return uri


def is_lite_uri(uri: str) -> bool:
    """Whether ``uri`` selects Milvus Lite in-process: a ``.db`` path or an existing directory."""
    return uri.endswith(".db") or (not re.match(r"^[a-z]+://", uri) and Path(uri).is_dir())
