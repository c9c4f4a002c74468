"""A collection as every store sees it: the one name rule, its bookkeeping, its errors.

* :func:`check_collection_name`: Milvus's rule (letters, digits,
  underscores, no leading digit, at most :data:`NAME_MAX_LEN` characters),
  one rule for every store; :func:`unique_collection_name` makes a valid
  name unique per run.
* :class:`CollectionInfo`: what a store knows about one collection.
* The errors a verb raises about a collection: :class:`CollectionNotFoundError`,
  :class:`CollectionExistsError`, :class:`CollectionOwnedError`.

Plug-in authors import these from :mod:`imsearch_align.adapters.base`.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "METRICS",
    "NAME_MAX_LEN",
    "CollectionExistsError",
    "CollectionInfo",
    "CollectionNotFoundError",
    "CollectionOwnedError",
    "check_collection_name",
    "is_collection_name",
    "unique_collection_name",
]

#: Metrics every store supports. Every aligned space is searched by inner product.
METRICS = ("ip",)

#: Longest collection name (Milvus's limit, so a name valid here is valid there).
NAME_MAX_LEN = 255

# Milvus's collection-name rule: letters, digits, underscores, no leading digit.
_NAME_RE = re.compile(rf"^[A-Za-z_][A-Za-z0-9_]{{0,{NAME_MAX_LEN - 1}}}$")


class CollectionNotFoundError(LookupError):
    """A verb named a collection the store does not have."""


class CollectionExistsError(ValueError):
    """``create_collection`` named a collection that already exists."""


class CollectionOwnedError(RuntimeError):
    """A verb would change (drop, insert into) a collection another run owns."""


def is_collection_name(name: Any) -> bool:
    """Whether ``name`` is a str that follows the collection-name rule."""
    return isinstance(name, str) and _NAME_RE.match(name) is not None


def check_collection_name(name: Any) -> str:
    """Validate a collection name: Milvus's rule, one rule for every store.

    Letters, digits and underscores, not starting with a digit, 1 to
    :data:`NAME_MAX_LEN` characters.
    """
    if not is_collection_name(name):
        shown = name if not isinstance(name, str) or len(name) <= 60 else name[:57] + "..."
        raise ValueError(
            "name must be letters, digits and underscores, not starting with a digit, "
            f"1-{NAME_MAX_LEN} characters (Milvus's rule), got {shown!r}"
        )
    return name


def unique_collection_name(base: str, suffix: str | None = None) -> str:
    """A valid collection name ``<base>_<suffix>`` that is unique per run.

    ``base`` is any label (a config key, ``"flickr30k/t2i"``): characters
    outside the name rule become ``_``, a leading digit gets a ``c_`` prefix,
    and it is cut so the whole name fits :data:`NAME_MAX_LEN`. ``suffix``
    (letters, digits, underscores) defaults to 12 random hex digits; pass a
    run id to find the same name again when the run resumes.

    >>> unique_collection_name("flickr30k/t2i-csa", "r1")
    'flickr30k_t2i_csa_r1'
    """
    if not isinstance(base, str):
        raise TypeError(f"base must be a str, got {type(base).__name__}")
    if suffix is None:
        suffix = uuid.uuid4().hex[:12]
    if not isinstance(suffix, str) or not re.fullmatch(r"[A-Za-z0-9_]{1,64}", suffix):
        raise ValueError(f"suffix must be 1-64 letters, digits or underscores, got {suffix!r}")
    stem = re.sub(r"[^A-Za-z0-9_]", "_", base) or "c"
    if stem[0].isdigit():
        stem = "c_" + stem
    stem = stem[: NAME_MAX_LEN - len(suffix) - 1]
    return check_collection_name(f"{stem}_{suffix}")


@dataclass
class CollectionInfo:
    """What a store knows about one collection.

    Attributes:
        name: collection name.
        dim: vector dimension (columns); ``None`` until known (set by the
            first insert when ``create_collection`` got no ``dim``; always
            ``None`` for a reopened sparse Milvus collection).
        sparse: whether the collection holds scipy CSR vectors.
        metric: always ``"ip"``.
        ids: every stored id, int64, in insertion order (row ``i`` of the
            store's data has id ``ids[i]``); empty and unused when the store
            sets ``keeps_ids = False`` (the server holds the ids).
        state: free slot for the subclass (an index, a data matrix, ...).
        attribute_names: the integer attributes every row carries (declared
            by the first insert that brought them, sorted); ``None``: none.
        attributes: name -> int64 values parallel to ``ids`` (kept when the
            store keeps ids; empty otherwise), what filtered search reads.
    """

    name: str
    dim: int | None
    sparse: bool
    metric: str = "ip"
    ids: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    state: Any = None
    attribute_names: tuple[str, ...] | None = None
    attributes: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """Number of ids kept in memory (the stored vectors when the store keeps ids)."""
        return len(self.ids)
