"""Rows as pymilvus takes them, their sizes, and batches under Milvus's request limit.

An insert sends ``{"id": ..., "vector": ..., <column>: ...}`` dicts; a
sparse vector travels as an ``{index: value}`` dict (pymilvus 3.0.2 fails on
a whole CSR matrix). Every row has an estimated payload size, and
:func:`byte_batches` cuts consecutive rows into requests under a byte
budget (and a row count: Milvus's 16,384 queries per search). The checks of
what Milvus would refuse in a row (an all-zero sparse vector, a negative
weight on Lite, a bad scalar column) are here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from imsearch_align.adapters.base import CollectionInfo
from imsearch_align.adapters.milvus.config import FIELD_RE, ID_FIELD, RESERVED, VEC_FIELD

__all__ = [
    "byte_batches",
    "check_columns",
    "check_sparse_rows",
    "dense_row_bytes",
    "insert_rows",
    "sparse_row_bytes",
    "sparse_rows",
]


def dense_row_bytes(n: int, dim: int) -> np.ndarray:
    """Payload bytes of ``n`` dense rows of dimension ``dim`` (float32 plus an id)."""
    return np.full(n, 4 * dim + 16, dtype=np.int64)


def sparse_row_bytes(nnz: np.ndarray) -> np.ndarray:
    """Payload bytes of sparse rows with ``nnz`` entries each (index and value plus an id)."""
    return 8 * nnz.astype(np.int64) + 16


def check_sparse_rows(m: Any, *, lite: bool) -> np.ndarray:
    """Refuse what Milvus refuses in a CSR batch; the payload bytes of each row.

    Milvus rejects an all-zero sparse row, and Milvus Lite (``lite``) a
    negative weight.
    """
    nnz = np.diff(m.indptr)
    if (nnz == 0).any():
        raise ValueError(
            f"vectors: Milvus rejects all-zero sparse rows, got {int((nnz == 0).sum())} "
            f"(first at row {int(np.flatnonzero(nnz == 0)[0])})"
        )
    if lite and m.nnz and m.data.min() < 0:
        row = int(np.searchsorted(m.indptr, np.flatnonzero(m.data < 0)[0], "right") - 1)
        raise ValueError(
            "vectors: Milvus Lite needs non-negative sparse weights, got a negative "
            f"weight in row {row}"
        )
    return sparse_row_bytes(nnz)


def check_columns(fields: Mapping[str, Any] | None, n: int) -> dict[str, np.ndarray]:
    """Scalar columns given at insert: valid names, ``n`` int/float/bool/str values each."""
    out: dict[str, np.ndarray] = {}
    for fname, values in dict(fields or {}).items():
        if not isinstance(fname, str) or not FIELD_RE.match(fname) or fname in RESERVED:
            raise ValueError(f"fields: invalid or reserved field name {fname!r}")
        arr = np.asarray(values)
        if arr.ndim != 1 or len(arr) != n:
            raise ValueError(
                f"fields[{fname!r}] must be 1-D with {n} entries (one per vector), "
                f"got shape {arr.shape}"
            )
        if arr.dtype.kind not in "iufbU":
            raise TypeError(
                f"fields[{fname!r}] must hold int, float, bool or str, got dtype {arr.dtype}"
            )
        out[fname] = arr
    return out


def insert_rows(
    info: CollectionInfo,
    m: Any,
    ids: np.ndarray,
    columns: dict[str, np.ndarray],
    lo: int,
    hi: int,
) -> list[dict[str, Any]]:
    """Rows ``lo:hi`` of a checked insert as the dicts pymilvus sends."""
    id_list = ids[lo:hi].tolist()
    if info.sparse:
        vecs = sparse_rows(m, lo, hi)
    else:
        vecs = list(m[lo:hi])
    cols = {c: v[lo:hi].tolist() for c, v in columns.items()}
    rows = [{ID_FIELD: i, VEC_FIELD: v} for i, v in zip(id_list, vecs)]
    for c, vals in cols.items():
        for row, val in zip(rows, vals):
            row[c] = val
    return rows


def sparse_rows(m: Any, lo: int, hi: int) -> list[dict[int, float]]:
    """Rows ``lo:hi`` of a CSR matrix as ``{index: value}`` dicts (what pymilvus takes)."""
    indptr, indices, data = m.indptr, m.indices, m.data
    return [
        dict(
            zip(
                indices[indptr[i] : indptr[i + 1]].tolist(),
                data[indptr[i] : indptr[i + 1]].tolist(),
            )
        )
        for i in range(lo, hi)
    ]


def byte_batches(
    row_bytes: np.ndarray, budget: int, *, max_rows: int | None = None
) -> list[tuple[int, int]]:
    """Split rows into consecutive ``[lo, hi)`` ranges of at most ``budget`` bytes
    (and ``max_rows`` rows); a single row over budget gets a batch of its own."""
    n = len(row_bytes)
    out: list[tuple[int, int]] = []
    csum = np.concatenate([[0], np.cumsum(row_bytes, dtype=np.int64)])
    lo = 0
    while lo < n:
        hi = int(np.searchsorted(csum, csum[lo] + budget, side="right")) - 1
        hi = max(hi, lo + 1)
        if max_rows is not None:
            hi = min(hi, lo + max_rows)
        hi = min(hi, n)
        out.append((lo, hi))
        lo = hi
    return out
