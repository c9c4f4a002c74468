"""A MilvusStore search on the wire: query batches under the limits, and the full-row check.

:class:`QueryBatches` sends one search's query rows in requests under the
byte budget and Milvus's 16,384 queries per request, and lays the hits out
as ``(ids, scores)`` arrays; it is the ``fetch`` that
:func:`~imsearch_align.adapters.base.search_closing_ties` widens for rows
tied at the k-th score. :func:`check_full_rows` refuses an exact dense
answer with fewer hits than the collection holds, saying whether rows
vanished or are not visible yet. :class:`OneQuery` is the request of a
single unfiltered query, made once per collection, so that its client cost
is a bare ``MilvusClient.search``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import gt
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

__all__ = ["OneQuery", "QueryBatches", "check_full_rows"]


_FLOAT32 = np.dtype(np.float32)


class OneQuery:
    """The request of one dense unfiltered query of ``k`` hits on one collection, made once.

    A single query's client cost should be a bare ``MilvusClient.search``'s
    (``benchmarks/perf_client.py``), and every Python call around the RPC
    shows there, because the RPC leaves the caches cold. So the store makes
    this once per collection and ``k``, after the full checks, and
    :meth:`answer` sends the request itself: it takes a query only in the
    shape those checks passed (a float32 ``(1, dim)`` ndarray with finite
    values, the same ``k``, no insert since the collection was made
    searchable) and returns None for anything else, which then goes the full
    way and is checked (and refused) as usual. A failed request goes through
    the connection's retries (:meth:`_again`), as every other request does.

    Args:
        run: the store's ``_run`` (a client method through the retries).
        client: the connection's client.
        info: the collection, dense and searchable.
        k: hits per query (already checked against the store's limit).
        search_params: the index's search values
            (:func:`~imsearch_align.adapters.milvus.tuning.request_params` raises ``ef``).
        consistency_level: the store's consistency level.
        timeout: the per-request timeout, or None.
    """

    __slots__ = ("_client", "_kwargs", "_name", "_run", "_state", "dim", "k")

    def __init__(
        self,
        run: Callable[..., Any],
        client: Any,
        info: CollectionInfo,
        k: int,
        *,
        search_params: dict[str, Any],
        consistency_level: str,
        timeout: float | None,
    ) -> None:
        self._run = run
        self._client = client
        self._name = info.name
        self._state = info.state
        self.dim = info.dim
        self.k = k
        self._kwargs: dict[str, Any] = {
            "limit": k,
            "search_params": {"metric_type": "IP", "params": request_params(search_params, k)},
            "anns_field": VEC_FIELD,
            "consistency_level": consistency_level,
        }
        if timeout is not None:
            self._kwargs["timeout"] = timeout

    def answer(self, queries: Any, k: Any) -> SearchResult | None:
        """The finished row, or None where ``queries``/``k`` are not what this was made for."""
        state = self._state
        if (
            type(queries) is not np.ndarray
            or queries.dtype is not _FLOAT32  # another float32 (byte order) goes the full way
            or queries.shape != (1, self.dim)
            or type(k) is not int
            or k != self.k
            or state.ready_at != state.writes
        ):
            return None
        row = queries[0].tolist()  # pymilvus packs a list faster than a numpy row
        # A float32 row's sum cannot overflow a double: it is finite iff every value is.
        if not math.isfinite(sum(row)):
            return None
        try:
            res = self._client.search(self._name, data=[row], **self._kwargs)
        except Exception as exc:
            res = self._again(exc, row)
        hits = res[0]
        ids, scores = hits.ids, hits.distances
        if len(ids) == k and min(ids) >= 0 and all(map(gt, scores, scores[1:])):
            # Full and strictly descending: as finalize_rows would leave it, without its numpy
            # calls (the distances are float32 values, exact as Python floats).
            return SearchResult.of_rows(
                np.asarray(ids, dtype=np.int64)[None], np.asarray(scores, dtype=np.float32)[None]
            )
        return finalize_rows(
            np.array(ids, dtype=np.int64).reshape(1, -1),
            np.array(scores, dtype=np.float32).reshape(1, -1),
            k,
        )

    def _again(self, exc: Exception, row: list[float]) -> Any:
        """The request that raised ``exc``, through the connection's retries: ``exc`` is
        judged there first (an outage counted and waited out, or a clear error raised),
        then the request is sent again."""
        failed = [exc]

        def attempt(client: Any, _retried: bool) -> Any:
            if failed:
                raise failed.pop()
            return client.search(self._name, data=[row], **self._kwargs)

        return self._run("search", self._name, attempt)


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
