"""A MilvusStore search on the wire: query batches under the limits, and the full-row check.

:class:`QueryBatches` sends one search's query rows in requests under the
byte budget and Milvus's 16,384 queries per request, and lays the hits out
as ``(ids, scores)`` arrays; it is the ``fetch`` that
:func:`~imsearch_align.adapters.base.search_closing_ties` widens for rows
tied at the k-th score. :func:`check_full_rows` refuses an exact dense
answer with fewer hits than the collection holds, saying whether rows
vanished or are not visible yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from imsearch_align.adapters.base import CollectionInfo, finalize_rows
from imsearch_align.adapters.milvus.config import MAX_NQ, VEC_FIELD, redact_uri
from imsearch_align.adapters.milvus.errors import MilvusStoreError
from imsearch_align.adapters.milvus.rows import (
    byte_batches,
    dense_row_bytes,
    sparse_row_bytes,
    sparse_rows,
)
from imsearch_align.adapters.milvus.tuning import request_params
from imsearch_align.framework.interfaces import SearchResult

__all__ = ["QueryBatches", "check_full_rows", "one_query"]


def one_query(
    call: Callable[..., Any],
    info: CollectionInfo,
    q: np.ndarray,
    k: int,
    *,
    search_params: dict[str, Any],
    consistency_level: str,
) -> SearchResult:
    """The finished row of one dense query, unfiltered: one request and nothing around it
    (a single query's client cost is the bare client call's; ``benchmarks/perf_client.py``)."""
    res = call(
        "search",
        info.name,
        "search",
        info.name,
        data=[q[0].tolist()],  # pymilvus packs a list faster than a numpy row
        limit=k,
        search_params={"metric_type": "IP", "params": request_params(search_params, k)},
        anns_field=VEC_FIELD,
        consistency_level=consistency_level,
    )
    hits = res[0]
    ids = np.asarray(hits.ids, dtype=np.int64).reshape(1, -1)
    return finalize_rows(ids, np.asarray(hits.distances, dtype=np.float32).reshape(1, -1), k)


class QueryBatches:
    """The queries of one search; calling it fetches hits for some rows.

    Args:
        call: the store's ``_call`` (a client method through the retries).
        info: the collection searched.
        q: checked queries, float32 ``(nq, d)`` or CSR.
        search_params: the index's search parameters (HNSW's ``ef`` is raised to
            the hits asked for, :func:`~imsearch_align.adapters.milvus.tuning.request_params`).
        consistency_level: the store's consistency level.
        request_bytes: payload budget of one request.
        filter: a Milvus boolean expression ("" for none).
    """

    def __init__(
        self,
        call: Callable[..., Any],
        info: CollectionInfo,
        q: Any,
        *,
        search_params: dict[str, Any],
        consistency_level: str,
        request_bytes: int,
        filter: str,
    ) -> None:
        self._call = call
        self._info = info
        self._q = q
        self._request_bytes = request_bytes
        nq = int(q.shape[0])
        if info.sparse:
            nnz = np.diff(q.indptr)
            self._row_bytes = sparse_row_bytes(nnz)
            # Milvus rejects an empty sparse query; it matches nothing anyway.
            self._asked = nnz > 0
        else:
            self._row_bytes = dense_row_bytes(nq, q.shape[1])
            self._asked = np.ones(nq, dtype=bool)
        self._params = dict(search_params)
        self._kwargs: dict[str, Any] = {
            "anns_field": VEC_FIELD,
            "filter": filter,
            "consistency_level": consistency_level,
        }

    def __call__(self, rows: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
        """Hits of query rows ``rows``, ``limit`` per row, in requests under the limits."""
        name, q, sparse = self._info.name, self._q, self._info.sparse
        ids = np.full((len(rows), limit), -1, dtype=np.int64)
        scores = np.full((len(rows), limit), -np.inf, dtype=np.float32)
        todo = np.flatnonzero(self._asked[rows])
        batches = byte_batches(self._row_bytes[rows[todo]], self._request_bytes, max_rows=MAX_NQ)
        params = {"metric_type": "IP", "params": request_params(self._params, limit)}
        for lo, hi in batches:
            sel = todo[lo:hi]
            qs = q[rows[sel]]
            data = sparse_rows(qs, 0, len(sel)) if sparse else list(qs)
            res = self._call(
                "search",
                name,
                "search",
                name,
                data=data,
                limit=limit,
                search_params=params,
                **self._kwargs,
            )
            for r, hits in zip(sel, res):
                h_ids = hits.ids
                if h_ids:
                    cnt = len(h_ids)
                    ids[r, :cnt] = h_ids
                    scores[r, :cnt] = hits.distances
        return ids, scores


def check_full_rows(
    info: CollectionInfo,
    ids: np.ndarray,
    k: int,
    *,
    count: Callable[[CollectionInfo], int],
    uri: str,
    consistency_level: str,
) -> None:
    """An exact dense search returns ``min(k, count)`` hits per row, or it failed.

    ``count`` is what this store inserted (or found on first use); a
    short row makes the store read the server's count again (``count(info)``,
    which also refreshes the cached count), to say whether rows vanished
    (changed by another client) or are not visible yet (consistency).

    Raises:
        MilvusStoreError: a row is short.
    """
    hits = (ids >= 0).sum(axis=1)
    if not hits.size or hits.min() >= k:
        return
    if info.state.count is None:
        count(info)
    expected = int(info.state.count)
    if hits.min() >= min(k, expected):
        return
    held = count(info)  # also refreshes the cached count
    r = int(np.argmin(hits))
    short = int((hits < min(k, expected)).sum())
    if held < expected:
        why = (
            f"the collection lost rows (this store counted {expected}, the server holds "
            f"{held}): it was changed by another client"
        )
    else:
        why = (
            f"the server holds {held} rows but they are not all visible to search "
            f"(consistency_level={consistency_level!r})"
        )
    raise MilvusStoreError(
        f"search on collection {info.name!r} at {redact_uri(uri)} returned "
        f"{int(hits[r])} hits for query row {r} ({short} short rows) where a FLAT index "
        f"returns min(k, count) = {min(k, expected)}: {why}"
    )
