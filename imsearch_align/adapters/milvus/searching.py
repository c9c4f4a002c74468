"""The search verb of a MilvusStore: wait until the rows are visible, send the requests.

:class:`MilvusSearching` is the part of
:class:`~imsearch_align.adapters.milvus.MilvusStore` that answers
``search`` (and, through
:class:`~imsearch_align.adapters.milvus.search_options.MilvusSearchOptions`,
``search_filtered``):

* **Readiness**: the first search after inserts waits until the server
  shows every row at the store's consistency level
  (:func:`~imsearch_align.adapters.milvus.ready.wait_searchable`);
  ``make_searchable`` does it on request, to time the build apart.
* **One query**: a single dense unfiltered query goes through the
  collection's prepared request
  (:class:`~imsearch_align.adapters.milvus.search.OneQuery`), so that its
  client cost is a bare ``MilvusClient.search``'s.
* **Batches**: other searches go in requests under the limits
  (:class:`~imsearch_align.adapters.milvus.search.QueryBatches`); FLAT
  closes the group tied at the k-th score and checks its rows are full.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from imsearch_align.adapters.base import CollectionInfo, finalize_rows, search_closing_ties
from imsearch_align.adapters.milvus.ready import wait_searchable
from imsearch_align.adapters.milvus.search import OneQuery, QueryBatches, check_full_rows
from imsearch_align.adapters.milvus.search_options import MilvusSearchOptions
from imsearch_align.framework.interfaces import SearchResult

__all__ = ["MilvusSearching"]


class MilvusSearching(MilvusSearchOptions):
    """``search`` and the wait for readiness; the base of MilvusStore, which sets the
    attributes below and the connection."""

    consistency_level: str
    ready_timeout_s: float
    request_bytes: int
    deployment: str
    timeout: float | None
    _ready_lock: threading.Lock

    def search(
        self,
        name: str,
        queries: Any,
        k: int,
        *,
        filter: str = "",
    ) -> SearchResult:
        """Top-``k`` by inner product per query row; ``filter`` is a Milvus expression.

        Rows are ordered by (score descending, id ascending) and padded with
        id ``-1``: a dense row holds ``min(k, count)`` hits (fewer only
        under a filter or an approximate index); a sparse row holds the
        documents whose inner product with the query is non-zero, at most
        ``k``.

        Raises:
            MilvusStoreError: a FLAT dense search without filter returned
                fewer than ``min(k, count)`` hits (rows inserted but not
                visible, or the collection changed under this run).
        """
        if filter == "":
            # A single query in the shape the last one was: its request is made already.
            known = self._collections.get(name)
            prepared = known.state.one_query if known is not None else None
            if prepared is not None and (done := prepared.answer(queries, k)) is not None:
                return done
        if not isinstance(filter, str):
            raise TypeError(
                f"filter must be a Milvus expression string, got {type(filter).__name__}"
            )
        info, q, k, done = self._prepare_search(name, queries, k)
        if done is not None:
            return done
        return self._search(info, q, k, filter=filter)

    def make_searchable(self, name: str) -> dict[str, Any]:
        """Wait until a search at this store's level sees every row of ``name``.

        Flush, wait until the index covers every row and the collection is
        loaded, check ``count(*)`` once at ``Strong`` against the rows this
        store inserted, and confirm the count at ``consistency_level``
        (:func:`~imsearch_align.adapters.milvus.ready.wait_searchable`).
        The first search after inserts calls it; call it yourself to time
        the index build apart from the search. Once done it returns at once
        until the next insert.

        Returns:
            ``flush_s``, ``index_s``, ``load_s``, ``count_s`` (seconds) and
            ``rows`` of the last wait.

        Raises:
            MilvusStoreError: rows were lost, an index build failed, or
                ``ready_timeout_s`` passed first.
        """
        info = self._get(name)
        if not info.state.pending:
            self._ensure_searchable(info, "make_searchable")
        return dict(info.state.readiness)

    def _ensure_searchable(self, info: CollectionInfo, verb: str) -> None:
        """Make ``info`` searchable unless nothing was inserted since it last was.

        Errors name ``verb`` (the call that waited) and the request that failed.
        """
        state = info.state
        if state.searchable:
            return
        with self._ready_lock:
            if state.searchable:
                return
            writes = state.writes  # inserts after this point need a new wait
            ready = wait_searchable(
                lambda op, *args, **kw: self._call(
                    f"{verb} (waiting until searchable: {op})", *args, **kw
                ),
                info,
                expected=state.count,
                consistency_level=self.consistency_level,
                timeout_s=self.ready_timeout_s,
                lists_segments=lambda: not self.deployment.startswith("milvus-lite"),
                uri=self.uri,
            )
            with self._lock:
                state.readiness = ready.to_dict()
                state.count = max(ready.rows, state.count or 0)
                state.ready_at = writes

    def _search(self, info: CollectionInfo, q: Any, k: int, *, filter: str = "") -> SearchResult:
        """Checked queries in batches under the request limits; finished rows."""
        self._ensure_searchable(info, "search")
        nq = int(q.shape[0])
        if nq == 1 and not info.sparse and not filter and self.index != "FLAT":
            prepared = info.state.one_query
            if prepared is None or prepared.k != k:
                prepared = OneQuery(
                    self._run,
                    self._conn.connect(),
                    info,
                    k,
                    search_params=self._search_values(info),
                    consistency_level=self.consistency_level,
                    timeout=self.timeout,
                )
                info.state.one_query = prepared
            done = prepared.answer(q, k)
            if done is not None:
                return done  # else inserted meanwhile (another thread): the general request
        fetch = QueryBatches(
            self._call,
            info,
            q,
            search_params={} if info.sparse else self._search_values(info),
            consistency_level=self.consistency_level,
            request_bytes=self.request_bytes,
            filter=filter,
        )
        if self.index == "FLAT":
            # exact: the documents tied at the k-th score are chosen by id, not by
            # the server. Bounded by the server's top-k limit, not by this store's
            # count, which another client's inserts can leave behind: a row that
            # ends in no-hits (all the documents a filter keeps) ends the widening.
            ids, scores = search_closing_ties(fetch, nq, self.max_k, k)
        else:
            ids, scores = fetch(np.arange(nq, dtype=np.int64), k)
        if info.sparse:
            # The package rule: a document with a zero inner product is no hit
            # (explicit zero weights can make a shared term score 0).
            ids[scores == 0] = -1
        elif self.index == "FLAT" and not filter:
            check_full_rows(
                info,
                ids,
                k,
                count=self._count,
                uri=self.uri,
                consistency_level=self.consistency_level,
            )
        return finalize_rows(ids, scores, k)
