""":class:`BenchmarkEvaluator`: its settings and verbs.

:meth:`~BenchmarkEvaluator.search` is the search phase alone (the batch loop
of :mod:`.pool`, given the store and settings as a plan, assembled by
:mod:`.batches`: a run and bookkeeping, no measure); :meth:`~BenchmarkEvaluator.evaluate` searches and scores
(:mod:`.scoring`) into a :class:`~.result.BenchmarkResult`;
:meth:`~BenchmarkEvaluator.evaluate_frame` takes imsearch_eval-style frames
(:mod:`.frame`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.evaluator.batches import Searched, assemble
from imsearch_align.framework.evaluator.checkpoint import _Checkpoint
from imsearch_align.framework.evaluator.frame import frame_inputs, relabel
from imsearch_align.framework.evaluator.pool import _Context, _SearchPlan, search_all
from imsearch_align.framework.evaluator.result import BenchmarkResult, NaNScoreError
from imsearch_align.framework.evaluator.scoring import score
from imsearch_align.framework.interfaces import VectorStoreAdapter, is_thread_safe
from imsearch_align.framework.measures import lookup
from imsearch_align.framework.metrics import (
    Qrels,
    _as_id_array,
    check_relevance_level,
    py_scalar,
)
from imsearch_align.framework.validation import check_float, check_int, check_matrix

__all__ = ["DEFAULT_MEASURES", "BenchmarkEvaluator"]

log = logging.getLogger("imsearch_align.framework.evaluator")

DEFAULT_MEASURES: tuple[str, ...] = (
    "P@1",
    "P@5",
    "P@10",
    "R@1",
    "R@5",
    "R@10",
    "nDCG@10",
    "AP@10",
    "RR@10",
    "HitRate@1",
    "HitRate@5",
    "HitRate@10",
    "Accuracy",
)


class BenchmarkEvaluator:
    """Searches a store with query vectors in parallel batches and scores the run.

    Args:
        store: any :class:`VectorStoreAdapter`.
        collection: the collection to search.
        k: ranking depth requested from the store; at least the largest
            cutoff among ``measures``.
        measures: canonical measure names (default :data:`DEFAULT_MEASURES`).
        batch_size: queries per ``store.search`` call.
        workers: threads searching concurrently (the pool stays full). A
            store with ``thread_safe = False`` is called by one at a time.
        retries: extra attempts for a batch that raised a transient error.
        retry_backoff_s: sleep before retry ``i`` is ``retry_backoff_s * 2**i``
            (at most ``max_backoff_s``).
        retry_budget: retries allowed in all, per :meth:`evaluate` call
            (default ``max(8, ceil(n_batches / 10))``).
        max_consecutive_failures: failed searches in a row after which the
            store is declared unavailable and the evaluation aborted.
        max_backoff_s: the longest single backoff sleep.
        progress: show a tqdm progress bar.
        n_bootstrap: resamples for the 95% intervals (computed lazily).
        seed: bootstrap seed.
        checkpoint_dir: where finished batches are saved for resuming.
        checkpoint_key: a digest of everything else that determines the
            ranking (documents and their ids, method, store and index
            parameters). Required to checkpoint: without it
            ``checkpoint_dir`` is ignored with a warning, since a checkpoint
            keyed on the queries alone would be reused after the documents
            or the method changed.
        relevance_level: binary relevance threshold (see :func:`evaluate`).
    """

    def __init__(
        self,
        store: VectorStoreAdapter,
        collection: str,
        *,
        k: int = 100,
        measures: Sequence[str] = DEFAULT_MEASURES,
        batch_size: int = 1024,
        workers: int = 2,
        retries: int = 2,
        retry_backoff_s: float = 0.05,
        retry_budget: int | None = None,
        max_consecutive_failures: int = 8,
        max_backoff_s: float = 2.0,
        progress: bool = True,
        n_bootstrap: int = 1000,
        seed: int = 0,
        checkpoint_dir: str | os.PathLike | None = None,
        checkpoint_key: str | None = None,
        relevance_level: float | None = None,
    ) -> None:
        self.store = store
        self.collection = collection
        self.k = check_int(k, "k", low=1)
        if isinstance(measures, str):
            measures = [measures]
        self.measures = tuple(dict.fromkeys(measures))
        if not self.measures:
            raise ValueError("measures is empty; expected at least one measure name")
        kmax = max(lookup(m)[1] for m in self.measures)
        if kmax > self.k:
            raise ValueError(
                f"k must be >= the largest cutoff among measures ({kmax}), got k={self.k}"
            )
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.workers = check_int(workers, "workers", low=1)
        self.retries = check_int(retries, "retries", low=0)
        self.retry_backoff_s = check_float(retry_backoff_s, "retry_backoff_s", low=0)
        self.max_backoff_s = check_float(max_backoff_s, "max_backoff_s", low=0)
        self.retry_budget = (
            None if retry_budget is None else check_int(retry_budget, "retry_budget", low=0)
        )
        self.max_consecutive_failures = check_int(
            max_consecutive_failures, "max_consecutive_failures", low=1
        )
        self.progress = progress
        self.n_bootstrap = check_int(n_bootstrap, "n_bootstrap", low=1)
        self.seed = seed
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        if checkpoint_key is not None and (
            not isinstance(checkpoint_key, str) or not checkpoint_key
        ):
            raise TypeError(
                "checkpoint_key must be a non-empty str (a digest of documents, method and store "
                f"parameters), got {type(checkpoint_key).__name__} {checkpoint_key!r}"
            )
        self.checkpoint_key = checkpoint_key
        if self.checkpoint_dir is not None and checkpoint_key is None:
            log.warning(
                "checkpoint_dir %s given without checkpoint_key: not checkpointing (a checkpoint "
                "keyed on the queries alone would be reused after the documents or the method "
                "changed); pass checkpoint_key, a digest of everything else that fixes the ranking",
                self.checkpoint_dir,
            )
        self.relevance_level = check_relevance_level(relevance_level)
        self._search_lock = None if is_thread_safe(store) else threading.Lock()
        self._checkpoints: list[_Checkpoint] = []

    def _effective_workers(self) -> int:
        """``workers``, or 1 for a store whose one call already uses every core."""
        from imsearch_align.framework.interfaces import ParallelSearch

        s = self.store
        return 1 if isinstance(s, ParallelSearch) and s.parallel_search else self.workers

    def _plan(self) -> _SearchPlan:
        """The store and this evaluator's settings, as the batch loop takes them."""
        return _SearchPlan(
            store=self.store,
            collection=self.collection,
            k=self.k,
            batch_size=self.batch_size,
            workers=self._effective_workers(),
            retries=self.retries,
            retry_backoff_s=self.retry_backoff_s,
            max_backoff_s=self.max_backoff_s,
            retry_budget=self.retry_budget,
            max_consecutive_failures=self.max_consecutive_failures,
            progress=self.progress,
            checkpoint_dir=self.checkpoint_dir,
            checkpoint_key=self.checkpoint_key,
            search_lock=self._search_lock,
        )

    # ------------------------------------------------------------------ public
    def evaluate(
        self,
        queries: Any,
        qrels: Qrels,
        *,
        query_ids: Sequence | np.ndarray | None = None,
        metadata: pd.DataFrame | None = None,
        collection_ids: Sequence | np.ndarray | None = None,
    ) -> BenchmarkResult:
        """Search ``queries`` (dense ``(nq, d)`` or CSR) and score against ``qrels``.

        Args:
            queries: query vectors, one row a query. CSR queries mean a
                sparse collection (rows may be padded with no-hits); dense
                queries a dense one (every row must hold ``min(k, count)`` hits).
            qrels: relevance judgements; every qrels query is scored.
            query_ids: id of each query row (default ``0..nq-1``).
            metadata: optional per-query columns, indexed by query id, for
                :meth:`BenchmarkResult.breakdown`.
            collection_ids: the ids stored in the collection, when known:
                relevant qrels docs outside it are reported (with a count) and
                a returned id outside it fails its query.

        Raises:
            NaNScoreError: the store returned NaN scores (``err.partial`` has
                the result with those queries failed).
            EvaluationAborted: the store became unavailable (``err.partial``).
            KeyboardInterrupt: re-raised after cancelling the queued batches.
        """
        return self._evaluate(queries, qrels, query_ids, metadata, collection_ids, labels=None)

    def search(
        self,
        queries: Any,
        *,
        qrels: Qrels | None = None,
        query_ids: Sequence | np.ndarray | None = None,
        collection_ids: Sequence | np.ndarray | None = None,
    ) -> Searched:
        """The search phase of :meth:`evaluate` alone: every batch searched (or
        resumed), checked and assembled into one run, no measure computed.

        Nothing is raised for NaN scores or an unavailable store: those queries
        are failed in the returned :class:`~.batches.Searched`, which says
        so (``nan_queries``, ``unavailable``; :meth:`~.batches.Searched.aborted`
        builds the error). ``KeyboardInterrupt`` is re-raised. ``qrels``, when
        given, is checked as :meth:`evaluate` checks it (before searching).
        """
        q, qids, cids = self._check_inputs(queries, qrels, query_ids, None, collection_ids, None)
        return self._search(q, qids, None, cids)

    def evaluate_frame(
        self,
        df: pd.DataFrame,
        embed: Callable[[list[str]], np.ndarray],
        *,
        query_col: str = "query",
        query_id_col: str = "query_id",
        doc_id_col: str = "doc_id",
        relevance_col: str = "relevance",
        metadata_cols: Sequence[str] | None = None,
        qrels: Qrels | None = None,
        collection_ids: Sequence | np.ndarray | None = None,
    ) -> BenchmarkResult:
        """imsearch_eval-style input: one row per judged ``(query, doc)``.

        Queries are de-duplicated by **id** (not text: two ids with the same
        text are two queries), embedded once with ``embed(list_of_texts)``
        (the text of each id's first row), and searched; the qrels come from
        the frame's ``query_id, doc_id, relevance`` columns unless given.
        ``metadata_cols`` (default: every other column) are kept per query
        (first row) for breakdowns. Query ids are hashed once into integer
        codes, so string ids cost no more than integers.
        """
        vectors, qrels_c, codes, md, labels = frame_inputs(
            df,
            embed,
            query_col=query_col,
            query_id_col=query_id_col,
            doc_id_col=doc_id_col,
            relevance_col=relevance_col,
            metadata_cols=metadata_cols,
            qrels=qrels,
        )
        return self._evaluate(vectors, qrels_c, codes, md, collection_ids, labels=labels)

    def clear_checkpoints(self) -> int:
        """Remove the checkpoints this evaluator wrote or read; returns the files removed.

        Call it once the result is written: a later run then searches
        again instead of loading stale batches.
        """
        n = sum(c.clear() for c in self._checkpoints)
        self._checkpoints.clear()
        return n

    # ------------------------------------------------------------------ core
    def _check_inputs(
        self,
        queries: Any,
        qrels: Qrels | None,
        query_ids: Any,
        metadata: pd.DataFrame | None,
        collection_ids: Any,
        labels: np.ndarray | None,
    ) -> tuple[Any, np.ndarray, np.ndarray | None]:
        """The queries, their ids and the collection's ids, checked (``qrels``
        too, unless None: the search phase alone has none)."""
        if qrels is not None and not isinstance(qrels, Qrels):
            raise TypeError(f"qrels must be a Qrels, got {type(qrels).__name__}")
        q = check_matrix(queries, "queries", allow_sparse=True)
        nq = q.shape[0]
        if query_ids is None:
            qids = np.arange(nq, dtype=np.int64)
        else:
            qids = _as_id_array(np.asarray(query_ids), "query_ids")
        if qids.ndim != 1 or len(qids) != nq:
            raise ValueError(f"query_ids has {np.size(qids)} entries, queries has {nq} rows")
        if labels is None and len(pd.unique(qids)) != nq:
            raise ValueError("query_ids must be unique")
        if metadata is not None and not isinstance(metadata, pd.DataFrame):
            raise TypeError(
                f"metadata must be a DataFrame indexed by query id, got {type(metadata).__name__}"
            )
        if qrels is not None and qrels._doc_kind == "str":
            ex = py_scalar(qrels._positive[1][0])
            raise TypeError(
                f"qrels: the relevant doc ids are strings (e.g. {ex!r}) but a store answers with "
                "integer ids; they can never match and every query would score 0. Convert them "
                "(e.g. Qrels(query_ids, doc_ids.astype(int), relevance))"
            )
        cids = None
        if collection_ids is not None:
            cids = _as_id_array(np.asarray(collection_ids).ravel(), "collection_ids")
        return q, qids, cids

    def _search(
        self, q: Any, qids: np.ndarray, labels: np.ndarray | None, cids: np.ndarray | None
    ) -> Searched:
        """Every batch searched or resumed, checked and assembled."""
        plan = self._plan()
        ctx = _Context(plan, q, qids, labels, cids)
        if ctx.checkpoint is not None:
            self._checkpoints.append(ctx.checkpoint)
        try:
            batches = search_all(plan, ctx)
        except KeyboardInterrupt:
            ctx.attempts.stop.set()
            raise
        return assemble(ctx, batches)

    def _evaluate(
        self,
        queries: Any,
        qrels: Qrels,
        query_ids: Any,
        metadata: pd.DataFrame | None,
        collection_ids: Any,
        *,
        labels: np.ndarray | None,
    ) -> BenchmarkResult:
        q, qids, cids = self._check_inputs(
            queries, qrels, query_ids, metadata, collection_ids, labels
        )
        t0 = time.perf_counter()
        searched = self._search(q, qids, labels, cids)
        t1 = time.perf_counter()
        ev, errors, notes = score(
            searched, qrels, self.measures, relevance_level=self.relevance_level
        )
        result = BenchmarkResult(
            evaluation=ev,
            run=searched.run,
            metadata=metadata,
            errors=errors,
            notes=notes,
            seed=self.seed,
            n_bootstrap=self.n_bootstrap,
            checkpoint=searched.checkpoint,
        )
        t_metrics = time.perf_counter() - t1
        timings = {"total_s": time.perf_counter() - t0, "search_s": 0.0, "metrics_s": t_metrics}
        result.timings.update({**timings, **searched.timings})
        searched.log_failures(result.n_failed, q.shape[0])
        nan_queries = searched.nan_queries
        if labels is not None:
            result = relabel(result, labels)
            nan_queries = labels[nan_queries] if len(nan_queries) else nan_queries
        aborted = searched.aborted(result, result.n_failed, len(result.evaluation.query_ids))
        if aborted is not None:
            raise aborted
        if nan_queries.size:
            raise NaNScoreError(
                f"store returned a NaN score for query {py_scalar(nan_queries[0])!r}"
                + (f" and {nan_queries.size - 1} more" if nan_queries.size > 1 else "")
                + f" (collection {self.collection!r}); those queries are failed in err.partial",
                nan_queries,
                result,
            )
        return result
