"""Integer attributes per document and the filters over them: the checks every store shares.

* :func:`check_attributes`: the ``attributes=`` of an insert (a mapping of
  names to one integer per row), against what the collection declared.
* :func:`keep_attributes`: the bookkeeping after an insert that carried them.
* :func:`check_filter`: a :class:`~imsearch_align.framework.interfaces.Filter`
  against the collection's attribute names.
* :func:`kept_rows`: the rows (insertion order) a filter keeps, from the
  values an in-process store holds in ``CollectionInfo.attributes``.
* :func:`refuse_expression`: the error of a store that does not parse raw
  filter expressions; :func:`filtering_stores`: the registered stores that
  filter, for the message of one that does not.

:class:`~imsearch_align.adapters.base.BaseStore` calls them from ``insert``
and :class:`~imsearch_align.adapters.base.FilterableStore` from
``search_filtered``; plug-in authors import them from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from imsearch_align.adapters.naming import CollectionInfo
from imsearch_align.framework.interfaces import ATTRIBUTE_NAME_RE, Filter

__all__ = [
    "check_attributes",
    "check_filter",
    "filtering_stores",
    "keep_attributes",
    "kept_rows",
    "no_filter_message",
    "refuse_expression",
]


def _names(names: tuple[str, ...] | None) -> str:
    return ", ".join(repr(n) for n in names) if names else "(none)"


def _values(name: str, raw: Any, n: int) -> np.ndarray:
    """One attribute's values: 1-D, ``n`` integers, as int64."""
    arr = np.asarray(raw)
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(
            f"attributes[{name!r}] must hold one value per row: shape ({n},), got {arr.shape}"
        )
    if arr.dtype.kind not in "iu" or arr.dtype == np.bool_:
        raise TypeError(f"attributes[{name!r}] must be integers, got dtype {arr.dtype}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > np.iinfo(np.int64).max:
        raise ValueError(
            f"attributes[{name!r}] must fit int64, got {int(arr.max())} (above 2**63 - 1)"
        )
    return arr.astype(np.int64, copy=False)


def check_attributes(
    attributes: Any, n: int, info: CollectionInfo, *, unattributed_rows: bool = False
) -> dict[str, np.ndarray]:
    """The ``attributes`` of an insert of ``n`` rows into ``info``, checked; ``{}`` for none.

    Args:
        attributes: None, or a mapping of attribute names
            (:data:`~imsearch_align.framework.interfaces.ATTRIBUTE_NAME_RE`)
            to ``n`` integers each.
        n: rows inserted.
        info: the collection (``info.attribute_names``: what it declared).
        unattributed_rows: the collection already holds rows inserted
            without attributes (they would have no value to filter on).

    Raises:
        ValueError: a bad name, a wrong length, other names than the
            collection declared, attributes missing where declared, or
            attributes for a collection that holds rows without them.
        TypeError: not a mapping, or values that are not integers.
    """
    declared = info.attribute_names
    if attributes is None:
        if declared:
            raise ValueError(
                f"attributes: collection {info.name!r} declared the attributes "
                f"{_names(declared)} at its first insert; every insert must carry them, got none"
            )
        return {}
    if not isinstance(attributes, Mapping):
        raise TypeError(
            "attributes must be a mapping of names to one integer per row, got "
            f"{type(attributes).__name__}"
        )
    for name in attributes:
        if not isinstance(name, str) or not ATTRIBUTE_NAME_RE.match(name):
            raise ValueError(
                "attributes: a name must be a letter or underscore, then letters, digits, "
                f"underscores, at most 64 characters, got {name!r}"
            )
    names = tuple(sorted(attributes))
    if declared is None and unattributed_rows and names:
        raise ValueError(
            f"attributes: collection {info.name!r} already holds rows inserted without "
            f"attributes, which could not be filtered; insert the attributes {_names(names)} "
            "with the first rows (a new collection)"
        )
    if declared is not None and names != declared:
        raise ValueError(
            f"attributes: collection {info.name!r} declared {_names(declared)} at its first "
            f"insert; every insert must carry the same names, got {_names(names)}"
        )
    return {name: _values(name, attributes[name], n) for name in names}


def keep_attributes(info: CollectionInfo, attrs: dict[str, np.ndarray], *, values: bool) -> None:
    """After rows were written: declare the names (and, when ``values``, append the
    values beside ``info.ids``, as a store that keeps ids does)."""
    if not attrs:
        return
    info.attribute_names = tuple(attrs)
    if values:
        for key, new in attrs.items():
            old = info.attributes.get(key)
            info.attributes[key] = new.copy() if old is None else np.concatenate([old, new])


def check_filter(filter: Any, info: CollectionInfo) -> Filter:
    """``filter`` checked against the collection's attribute names."""
    if not isinstance(filter, Filter):
        raise TypeError(
            "filter must be an imsearch_align.framework.interfaces.Filter, got "
            f"{type(filter).__name__}"
        )
    if filter.field not in (info.attribute_names or ()):
        hint = "" if info.attribute_names else " (insert with attributes={...} to filter)"
        raise ValueError(
            f"filter.field {filter.field!r} is not an attribute of collection {info.name!r}; "
            f"its attributes: {_names(info.attribute_names)}{hint}"
        )
    return filter


def kept_rows(info: CollectionInfo, filter: Filter) -> np.ndarray:
    """Boolean mask over the collection's rows (insertion order): those ``filter`` keeps."""
    values = info.attributes[filter.field]
    return np.isin(values, np.asarray(filter.values, dtype=np.int64))


def filtering_stores() -> list[str]:
    """Names of the registered stores that search under a filter (``FilteredSearch``)."""
    from imsearch_align.framework.interfaces import FilteredSearch
    from imsearch_align.framework.registry import STORES

    out = []
    for name in STORES.names():
        try:
            cls = STORES.get(name)
        except Exception:  # a plug-in that fails to load is not one that filters
            continue
        if isinstance(cls, type) and callable(getattr(cls, "search_filtered", None)):
            out.append(name)
        elif not isinstance(cls, type) and isinstance(cls, FilteredSearch):
            out.append(name)
    return out


def no_filter_message(store: Any) -> str:
    """Why ``store`` cannot take attributes or filters, naming the stores that can."""
    can = ", ".join(filtering_stores()) or "(none registered)"
    return (
        f"{type(store).__name__} does not search under a filter (it is not FilteredSearch); "
        f"stores that do: {can}"
    )


def refuse_expression(store: Any, filter: Filter) -> None:
    """Raise the ``ValueError`` of a store that does not parse raw filter expressions."""
    if filter.expression is not None:
        raise ValueError(
            f"{type(store).__name__} does not parse filter expressions (Milvus syntax), got "
            f"expression {filter.expression!r}; give Filter(field, values) without an "
            "expression (MilvusStore parses expressions)"
        )
