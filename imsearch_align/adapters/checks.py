"""Input checks of the store verbs: ``k``, vectors and queries against a collection, new ids.

Free functions any adapter can call, whatever its base class;
:class:`~imsearch_align.adapters.base.BaseStore` calls them from every
public verb. Plug-in authors import them from :mod:`imsearch_align.adapters.base`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imsearch_align.adapters.naming import CollectionInfo
from imsearch_align.framework.validation import check_ids, check_int, check_matrix, is_sparse

__all__ = ["check_k", "check_new_ids", "check_vectors", "refuse_stored"]


def check_k(k: Any, high: int | None = None) -> int:
    """Validate ``k`` as an integer >= 1 (and <= ``high``, a store's top-k limit)."""
    return check_int(k, "k", low=1, high=high)


def check_vectors(x: Any, name: str, info: CollectionInfo) -> Any:
    """Validate vectors (or queries) against a collection.

    Dense input must meet a dense collection and sparse input a sparse one;
    the matrix must be 2-D, finite, and have the collection's dimension
    (when it is known). Returns a C-contiguous float32 array or a float32
    CSR matrix.
    """
    sparse_in = is_sparse(x)
    if info.sparse and not sparse_in:
        raise TypeError(
            f"{name} must be a scipy sparse matrix for the sparse collection {info.name!r}, "
            f"got dense {type(x).__name__}"
        )
    if not info.sparse and sparse_in:
        raise TypeError(
            f"{name} must be a dense array for the dense collection {info.name!r}, "
            f"got scipy sparse {type(x).__name__}"
        )
    m = check_matrix(x, name, allow_sparse=info.sparse)
    if info.dim is not None and m.shape[1] != info.dim:
        raise ValueError(
            f"{name} must have dimension {info.dim} (collection {info.name!r}), got {m.shape[1]}"
        )
    if info.sparse and not m.has_canonical_format:
        # Duplicate (row, column) entries mean their sum (scipy's reading, and
        # the truth check's); a store that maps a row to {column: value}
        # (Milvus) would keep only one of them. Sorted, summed: one per column.
        m = m.copy()
        m.sum_duplicates()
    return m


def refuse_stored(clash: np.ndarray, collection: str) -> None:
    """Raise the ``ValueError`` for ids already stored (``clash``), if there are any."""
    if clash.size:
        raise ValueError(
            f"ids must be new to collection {collection!r}, got {clash.size} id(s) "
            f"already stored: {np.sort(clash)[:5].tolist()}"
        )


def check_new_ids(ids: Any, n: int, existing: np.ndarray, collection: str) -> np.ndarray:
    """Validate ``n`` unique non-negative int64 ids not already in ``existing``."""
    arr = check_ids(ids, "ids", n=n)
    if existing.size and arr.size:
        refuse_stored(arr[np.isin(arr, existing)], collection)
    return arr
