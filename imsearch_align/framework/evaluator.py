"""BenchmarkEvaluator: batched, parallel search of a store, scored once, never silently wrong.

The flow is: split the queries into batches, run ``store.search`` on a
small pool of worker threads that stays full (a slow batch never stalls the
others), check every answer, stitch one :class:`~imsearch_align.Run`
together, and compute every measure once with the kernels of the measure
table (:mod:`imsearch_align.framework.measures`).

What a result promises (the reference harness got these wrong, see the README):

* **Failures are counted, never hidden.** A query whose search failed
  scores 0, counts in every mean, is listed in ``result.failed_queries``
  with its error, and makes the result degraded
  (:meth:`BenchmarkResult.degraded_reasons`). A query fails when its batch
  raised, when the store answered a dense collection with fewer than
  ``min(k, collection size)`` hits (another client dropped or emptied the
  collection), when it returned an id that is not in the collection (when
  the caller gives the collection's ids), a NaN score, or a ranking that
  holds a relevant doc twice. Rankings not sorted by score are scored after
  re-sorting and reported.
* **One retry budget per call.** Transient errors are retried with
  exponential backoff, at most ``retries`` times per batch and
  ``retry_budget`` times in all. Errors that cannot heal (``LookupError``
  such as a collection that no longer exists, ``TypeError``,
  ``ValueError``...) are not retried. ``StoreUnavailableError``, or
  ``max_consecutive_failures`` failed searches in a row, declare the store
  unavailable: the remaining batches are cancelled, the finished ones kept
  (and checkpointed), and one :class:`EvaluationAborted` carries the
  partial result. Each distinct error is logged once, without a traceback.
* **Ctrl-C** (``KeyboardInterrupt``) cancels the queued batches and is
  re-raised at once; every batch finished before it is already
  checkpointed. Workers are daemon threads, so a search stuck in a dead
  server does not hold the process.
* **Checkpoints are keyed on everything that fixes the ranking**: the
  queries and their ids, ``k``, the batch size, and ``checkpoint_key``, a
  digest the caller computes of everything else (documents, method, store
  parameters). A checkpoint under another key is never read. Without a key
  nothing is checkpointed. Files are written with
  :func:`~imsearch_align.framework.atomic.atomic_write`; a batch with a
  failed query is never written. :meth:`BenchmarkEvaluator.clear_checkpoints`
  removes them once the result is safe.
* **Timings cover only what was searched in this call**: queries/s and
  batch latency percentiles come from the searched batches alone; a result
  resumed entirely from checkpoints reports NaN speed and says how many
  batches were searched (``n_batches_searched``) and loaded
  (``n_batches_resumed``).
* **A store that declares** ``thread_safe = False``
  (:class:`~imsearch_align.framework.interfaces.ThreadSafety`) has its
  ``search`` calls serialised; the other work stays parallel.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.atomic import atomic_write
from imsearch_align.framework.interfaces import (
    NO_HIT,
    CollectionCatalog,
    SearchResult,
    StoreUnavailableError,
    VectorStoreAdapter,
    is_thread_safe,
)
from imsearch_align.framework.measures import lookup
from imsearch_align.framework.metrics import (
    EvaluationResult,
    Qrels,
    Run,
    _as_id_array,
    _index_of,
    _unsorted_rows_serial,
    check_relevance_level,
    evaluate_lenient,
    py_scalar,
)
from imsearch_align.framework.validation import (
    array_buffer,
    check_float,
    check_int,
    check_matrix,
    is_sparse,
)

__all__ = [
    "DEFAULT_MEASURES",
    "BenchmarkEvaluator",
    "BenchmarkResult",
    "EvaluationAborted",
    "NaNScoreError",
    "remove_checkpoints",
]

log = logging.getLogger(__name__)

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

#: Errors that the same request cannot heal: never retried.
NOT_RETRIED: tuple[type[BaseException], ...] = (
    LookupError,  # a collection that no longer exists (CollectionNotFoundError), a bad key
    TypeError,
    ValueError,
    AttributeError,
    NotImplementedError,
    MemoryError,
)

_CHECKPOINT_FORMAT = 2
_MANIFEST = "manifest.json"


class NaNScoreError(ValueError):
    """A store returned a NaN score. ``partial`` holds the result, those queries failed."""

    def __init__(self, message: str, query_ids: np.ndarray, partial: BenchmarkResult | None):
        super().__init__(message)
        self.query_ids = query_ids
        self.partial = partial


class EvaluationAborted(StoreUnavailableError):
    """The store became unavailable during an evaluation; the rest was cancelled.

    Attributes:
        partial: the result over the finished batches; the queries of the
            cancelled and failed batches are failed queries (score 0, counted).
        cause: the error that declared the store unavailable.
        n_batches_done: batches that finished (searched now or resumed).
        n_batches_cancelled: batches never searched.
    """

    def __init__(
        self,
        message: str,
        *,
        partial: BenchmarkResult | None,
        cause: BaseException | None,
        n_batches_done: int,
        n_batches_cancelled: int,
    ) -> None:
        super().__init__(message)
        self.partial = partial
        self.cause = cause
        self.n_batches_done = n_batches_done
        self.n_batches_cancelled = n_batches_cancelled


@dataclass(frozen=True, eq=False)
class BenchmarkResult:
    """What one evaluation produced.

    Attributes:
        evaluation: the per-query measure values (every qrels query).
        run: the ranked results the store returned for the queries that did not fail.
        metadata: per-query metadata columns (indexed by query id).
        timings: ``total_s``, ``search_s`` (wall time of the batches searched
            in this call), ``metrics_s``, ``queries_per_s`` (queries searched
            in this call / ``search_s``; NaN when nothing was searched),
            ``batch_p50_ms``, ``batch_p95_ms``, ``batch_p99_ms`` (searched
            batches only; NaN when none), ``n_batches``, ``n_batches_searched``,
            ``n_batches_resumed`` (loaded from checkpoints),
            ``n_batches_failed``, ``n_queries_searched``, ``n_retries``.
        errors: ``query_id -> error text`` for every failed query.
        notes: other reasons the numbers are not what they seem (rankings
            not sorted by score, relevant docs missing from the collection).
        extra: more measures added by options (e.g. ANN fidelity).
        seed: seed of the bootstrap intervals.
        n_bootstrap: number of bootstrap resamples for the intervals.
        checkpoint: the checkpoint folder used, or None.
    """

    evaluation: EvaluationResult
    run: Run
    metadata: pd.DataFrame | None = None
    timings: dict[str, float] = field(default_factory=dict)
    errors: dict[Any, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    n_bootstrap: int = 1000
    checkpoint: Path | None = None

    @property
    def measures(self) -> tuple[str, ...]:
        """Measure names, in order."""
        return self.evaluation.measures

    @property
    def failed_queries(self) -> np.ndarray:
        """Queries whose search failed (scored 0, counted)."""
        return self.evaluation.failed_queries

    @property
    def n_failed(self) -> int:
        """Number of failed queries."""
        return len(self.evaluation.failed_queries)

    @property
    def n_batches_searched(self) -> int:
        """Batches searched in this call (not loaded from checkpoints)."""
        return int(self.timings.get("n_batches_searched", 0))

    @property
    def n_batches_resumed(self) -> int:
        """Batches loaded from checkpoints."""
        return int(self.timings.get("n_batches_resumed", 0))

    @property
    def degraded(self) -> bool:
        """Whether the numbers are not the whole truth (see :meth:`degraded_reasons`)."""
        return bool(self.errors or self.notes)

    def degraded_reasons(self) -> list[str]:
        """Human-readable reasons this result is degraded; empty when it is clean.

        One line per distinct error of the failed queries (with their
        count), then the notes.
        """
        out = []
        n = len(self.evaluation.query_ids)
        if self.errors:
            counts = Counter(self.errors.values())
            for msg, c in counts.most_common(5):
                out.append(f"{c} of {n} queries failed: {msg}")
            if len(counts) > 5:
                rest = sum(c for _, c in counts.most_common()[5:])
                out.append(f"{rest} more queries failed with {len(counts) - 5} other errors")
        return out + list(self.notes)

    def mean(self) -> dict[str, float]:
        """Mean of each measure over every qrels query."""
        return self.evaluation.mean()

    @cached_property
    def intervals(self) -> dict[str, tuple[float, float]]:
        """Seeded 95% percentile-bootstrap interval of each mean (computed once, on use)."""
        return self.evaluation.confidence_intervals(n_resamples=self.n_bootstrap, seed=self.seed)

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: id, measures, missing/failed flags, error, metadata."""
        cols = self.evaluation._columns()
        qids = self.evaluation.query_ids
        cols.setdefault("failed", np.zeros(len(qids), dtype=bool))
        if self.errors:
            cols["error"] = [self.errors.get(q) for q in qids.tolist()]
        if self.metadata is not None and len(self.metadata.columns):
            idx = self.metadata.index.to_numpy()
            aligned = len(idx) == len(qids) and np.array_equal(idx, qids)
            md = self.metadata if aligned else self.metadata.reindex(qids)
            for c in md.columns:
                if c not in cols:
                    cols[c] = md[c].array  # as stored: no per-column conversion
        return pd.DataFrame(cols)

    def summary(self) -> pd.DataFrame:
        """Measure, mean, 95% CI low/high, as a DataFrame (one row a measure)."""
        means = self.mean()
        ci = self.intervals
        return pd.DataFrame(
            {
                "measure": list(means),
                "mean": list(means.values()),
                "ci_low": [ci[m][0] for m in means],
                "ci_high": [ci[m][1] for m in means],
            }
        )

    def breakdown(self, by: str | Sequence[str]) -> pd.DataFrame:
        """Means of every measure per value of metadata column(s) ``by``, with counts."""
        cols = [by] if isinstance(by, str) else list(by)
        df = self.per_query
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise KeyError(
                f"breakdown: by={missing} is not a metadata column; available: "
                f"{[c for c in df.columns if c not in self.measures]}"
            )
        g = df.groupby(cols, dropna=False)
        out = g[list(self.measures)].mean()
        out.insert(0, "n_queries", g.size())
        return out.reset_index()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary: means, intervals, timings, failures, degraded reasons."""
        ci = self.intervals
        return {
            "metrics": self.mean(),
            "intervals": {m: list(v) for m, v in ci.items()},
            "timings": dict(self.timings),
            "n_queries": len(self.evaluation.query_ids),
            "n_failed": self.n_failed,
            "n_missing": len(self.evaluation.missing_queries),
            "n_ignored": len(self.evaluation.ignored_queries),
            "n_batches_searched": self.n_batches_searched,
            "n_batches_resumed": self.n_batches_resumed,
            "failed_queries": [py_scalar(q) for q in self.failed_queries[:100]],
            "degraded_reasons": self.degraded_reasons(),
            "extra": {k: v for k, v in self.extra.items() if _is_scalar(v)},
        }


def _is_scalar(v: Any) -> bool:
    return isinstance(v, int | float | str | bool | np.generic)


# ----------------------------------------------------------------------------- batches


@dataclass
class _Batch:
    """The outcome of one batch: a result (searched or resumed) or an error."""

    index: int
    result: SearchResult | None = None
    latency_s: float = float("nan")
    error: str | None = None
    searched: bool = False
    cancelled: bool = False
    #: Local row -> error text, for rows of an otherwise good answer.
    row_errors: dict[int, str] = field(default_factory=dict)
    n_unsorted: int = 0
    #: Local rows not in the canonical order (score desc, id asc, no-hits last): re-sorted.
    reorder: np.ndarray | None = None
    #: Hits per row, kept for a dense collection of unknown size (see ``_Context.check_rows``).
    n_hits: np.ndarray | None = None


class _Attempts:
    """Retry budget, failure streak and the unavailable verdict, shared by the workers."""

    def __init__(
        self,
        retries: int,
        budget: int,
        max_consecutive: int,
        backoff_s: float,
        max_backoff_s: float,
    ) -> None:
        self.retries = retries
        self.budget = budget
        self.max_consecutive = max_consecutive
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.n_retries = 0
        self.streak = 0
        self.unavailable: BaseException | None = None
        self.seen: Counter[str] = Counter()

    def note_error(self, msg: str, collection: str) -> None:
        """Count an error; log it the first time it is seen (one line, no traceback)."""
        with self.lock:
            self.seen[msg] += 1
            first = self.seen[msg] == 1
        if first:
            log.warning("search of %s failed: %s", collection, msg)

    def may_retry(self, attempt: int) -> bool:
        """Whether attempt ``attempt`` (0-based) of a batch may be followed by another."""
        if attempt >= self.retries or self.stop.is_set():
            return False
        with self.lock:
            if self.n_retries >= self.budget:
                return False
            self.n_retries += 1
            return True

    def wait_backoff(self, attempt: int) -> None:
        delay = min(self.backoff_s * 2**attempt, self.max_backoff_s)
        if delay > 0:
            self.stop.wait(delay)  # returns at once when the run is stopped

    def failed(self, msg: str) -> None:
        with self.lock:
            self.streak += 1
            if self.streak >= self.max_consecutive and self.unavailable is None:
                self.unavailable = StoreUnavailableError(
                    f"{self.streak} searches failed in a row; last error: {msg}"
                )
                self.stop.set()

    def succeeded(self) -> None:
        with self.lock:
            self.streak = 0

    def declare_unavailable(self, exc: BaseException) -> None:
        with self.lock:
            if self.unavailable is None:
                self.unavailable = exc
            self.stop.set()


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


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
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
        need = [query_col, query_id_col] + (
            [] if qrels is not None else [doc_id_col, relevance_col]
        )
        missing = [c for c in need if c not in df.columns]
        if missing:
            raise ValueError(
                f"df is missing required column(s) {missing}; expected {need}, got {list(df.columns)}"
            )
        skip = {query_col, query_id_col, doc_id_col, relevance_col}
        cols = (
            [c for c in df.columns if c not in skip]
            if metadata_cols is None
            else list(metadata_cols)
        )
        absent = [c for c in cols if c not in df.columns]
        if absent:
            raise ValueError(
                f"metadata_cols {absent} are not columns of df; got {list(df.columns)}"
            )
        qid_col = df[query_id_col]
        if qid_col.isna().any():
            row = int(np.flatnonzero(qid_col.isna().to_numpy())[0])
            raise ValueError(f"df column {query_id_col!r} has a missing query id in row {row}")
        # Factorised on the column itself: an arrow-backed string column is
        # hashed natively instead of being converted to Python objects first.
        codes, uniques = pd.factorize(qid_col)
        codes = codes.astype(np.int64, copy=False)
        uniq = np.asarray(uniques, dtype=None if uniques.dtype.kind in "iuf" else object)
        labels = _as_id_array(uniq, f"df column {query_id_col!r}")
        n_q = len(labels)
        # Codes number the ids in order of first appearance: the first row of
        # each id is where its code first occurs.
        first = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
        text_col = df[query_col].take(first)
        texts = text_col.tolist()
        if not pd.api.types.is_string_dtype(text_col.dtype) or (
            text_col.dtype == object and pd.api.types.infer_dtype(texts) != "string"
        ):
            texts = [str(t) for t in texts]
        vectors = embed(texts)
        if qrels is None:
            qrels_c = Qrels(codes, df[doc_id_col].to_numpy(), df[relevance_col].to_numpy())
        else:
            if not isinstance(qrels, Qrels):
                raise TypeError(f"qrels must be a Qrels, got {type(qrels).__name__}")
            qc = _index_of(labels, qrels.query_ids) if len(qrels) else np.zeros(0, np.int64)
            other = qc < 0
            if other.any():  # judged queries without a row in df: scored 0 as missing
                c2, u2 = pd.factorize(qrels.query_ids[other])
                qc[other] = n_q + c2
                labels = np.concatenate([labels.astype(object), np.asarray(u2, dtype=object)])
            qrels_c = Qrels._trusted(qc, qrels.doc_ids, qrels.relevance)
        md = None
        if cols:
            md = df[cols].take(first)
            md.index = pd.RangeIndex(n_q)
        return self._evaluate(
            vectors,
            qrels_c,
            np.arange(n_q, dtype=np.int64),
            md,
            collection_ids,
            labels=labels,
        )

    def clear_checkpoints(self) -> int:
        """Remove the checkpoints this evaluator wrote or read; returns the files removed.

        Call it once the result is written: a later run then searches
        again instead of loading stale batches.
        """
        n = sum(c.clear() for c in self._checkpoints)
        self._checkpoints.clear()
        return n

    # ------------------------------------------------------------------ core
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
        if not isinstance(qrels, Qrels):
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
        if qrels._doc_kind == "str":
            ex = py_scalar(qrels._positive[1][0])
            raise TypeError(
                f"qrels: the relevant doc ids are strings (e.g. {ex!r}) but a store answers with "
                "integer ids; they can never match and every query would score 0. Convert them "
                "(e.g. Qrels(query_ids, doc_ids.astype(int), relevance))"
            )
        cids = None
        if collection_ids is not None:
            cids = _as_id_array(np.asarray(collection_ids).ravel(), "collection_ids")
        ctx = _Context(self, q, qids, labels, cids)

        t0 = time.perf_counter()
        attempts = ctx.attempts
        try:
            batches = self._search_all(ctx)
        except KeyboardInterrupt:
            attempts.stop.set()
            raise

        t1 = time.perf_counter()
        result, nan_queries = self._score(ctx, batches, qrels, metadata)
        t_metrics = time.perf_counter() - t1
        searched = [b for b in batches if b.searched and b.result is not None]
        lat = np.array([b.latency_s for b in searched]) * 1e3
        n_searched_q = sum(ctx.spans[b.index][1] - ctx.spans[b.index][0] for b in searched)
        search_s = ctx.search_wall_s
        result.timings.update(
            {
                "total_s": time.perf_counter() - t0,
                "search_s": search_s,
                "metrics_s": t_metrics,
                "queries_per_s": n_searched_q / search_s
                if n_searched_q and search_s > 0
                else float("nan"),
                "n_batches": float(len(ctx.spans)),
                "n_batches_searched": float(sum(b.searched for b in batches)),
                "n_batches_resumed": float(
                    sum(not b.searched and b.result is not None for b in batches)
                ),
                "n_batches_failed": float(sum(b.result is None for b in batches)),
                "n_queries_searched": float(n_searched_q),
                "n_retries": float(attempts.n_retries),
                "batch_p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
                "batch_p95_ms": float(np.percentile(lat, 95)) if lat.size else float("nan"),
                "batch_p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
            }
        )
        if attempts.seen:
            log.warning(
                "search of %s: %d failed attempt(s) with %d distinct error(s); %d of %d queries "
                "failed",
                self.collection,
                sum(attempts.seen.values()),
                len(attempts.seen),
                result.n_failed,
                nq,
            )
        if labels is not None:
            result = _relabel(result, labels)
            nan_queries = labels[nan_queries] if len(nan_queries) else nan_queries
        if attempts.unavailable is not None:
            done = sum(b.result is not None for b in batches)
            cancelled = sum(b.cancelled for b in batches)
            raise EvaluationAborted(
                f"store unavailable while searching collection {self.collection!r}: "
                f"{_describe(attempts.unavailable)}; {done} of {len(ctx.spans)} batches finished"
                + (" (checkpointed)" if ctx.checkpoint is not None else "")
                + f", {cancelled} cancelled; {result.n_failed} of {len(result.evaluation.query_ids)}"
                " queries failed; the partial result is in err.partial",
                partial=result,
                cause=attempts.unavailable,
                n_batches_done=done,
                n_batches_cancelled=cancelled,
            ) from (
                attempts.unavailable if isinstance(attempts.unavailable, BaseException) else None
            )
        if nan_queries.size:
            raise NaNScoreError(
                f"store returned a NaN score for query {py_scalar(nan_queries[0])!r}"
                + (f" and {nan_queries.size - 1} more" if nan_queries.size > 1 else "")
                + f" (collection {self.collection!r}); those queries are failed in err.partial",
                nan_queries,
                result,
            )
        return result

    # ------------------------------------------------------------------ search
    def _search_all(self, ctx: _Context) -> list[_Batch]:
        spans = ctx.spans
        batches: list[_Batch | None] = [None] * len(spans)
        todo: list[int] = []
        for i in range(len(spans)):
            saved = ctx.checkpoint.load(i, spans[i]) if ctx.checkpoint is not None else None
            if saved is not None:
                reorder, n_unsorted = _order_problems(
                    saved.ids[:, : ctx.k], saved.scores[:, : ctx.k]
                )
                batches[i] = _Batch(
                    i,
                    saved,
                    n_hits=ctx.hits_per_row(saved),
                    reorder=reorder,
                    n_unsorted=n_unsorted,
                )
                ctx.asm.place(spans[i], saved)
            else:
                todo.append(i)
        bar = _progress(len(spans), self.progress, desc=f"search {self.collection}")
        bar.update(len(spans) - len(todo))
        if todo:
            work: queue.SimpleQueue[int] = queue.SimpleQueue()
            for i in todo:
                work.put(i)
            done: queue.SimpleQueue[_Batch] = queue.SimpleQueue()
            stop = ctx.attempts.stop

            def worker() -> None:
                while not stop.is_set():
                    try:
                        i = work.get_nowait()
                    except queue.Empty:
                        return
                    try:
                        out = self._run_batch(ctx, i)
                    except BaseException as exc:  # a bug in the checks: fail the batch, loudly
                        out = _Batch(i, error=f"internal error: {_describe(exc)}")
                        log.exception("batch %d of %s", i, self.collection)
                    done.put(out)

            threads = [
                threading.Thread(target=worker, daemon=True, name=f"imsearch-search-{j}")
                for j in range(min(self._effective_workers(), len(todo)))
            ]
            t0 = time.perf_counter()
            try:
                for t in threads:
                    t.start()
                remaining = len(todo)
                while remaining:
                    try:
                        out = done.get(timeout=0.05)
                    except queue.Empty:
                        if not any(t.is_alive() for t in threads) and done.empty():
                            break  # stopped: the rest is cancelled
                        continue
                    batches[out.index] = out
                    remaining -= 1
                    bar.update(1)
            except BaseException:
                stop.set()
                bar.close()
                raise
            ctx.search_wall_s = time.perf_counter() - t0
        bar.close()
        for i in range(len(spans)):
            if batches[i] is None:
                batches[i] = _Batch(
                    i, error="not searched: the store became unavailable", cancelled=True
                )
        return [b for b in batches if b is not None]

    def _run_batch(self, ctx: _Context, i: int) -> _Batch:
        s, e = ctx.spans[i]
        q = ctx.q[s:e]
        att = ctx.attempts
        attempt = 0
        while True:
            if att.stop.is_set():
                return _Batch(i, error="not searched: the run was stopped", cancelled=True)
            try:
                with self._search_lock or nullcontext():
                    t = time.perf_counter()
                    res = self.store.search(self.collection, q, self.k)
                    lat = time.perf_counter() - t
                if not isinstance(res, SearchResult):
                    raise TypeError(
                        f"store.search must return a SearchResult, got {type(res).__name__}"
                    )
                if res.ids.shape[0] != e - s:
                    raise ValueError(f"store returned {res.ids.shape[0]} rows for {e - s} queries")
            except StoreUnavailableError as exc:
                att.note_error(_describe(exc), self.collection)
                att.declare_unavailable(exc)
                return _Batch(i, error=_describe(exc))
            except Exception as exc:
                msg = _describe(exc)
                att.note_error(msg, self.collection)
                att.failed(msg)
                if isinstance(exc, NOT_RETRIED) or not att.may_retry(attempt):
                    return _Batch(i, error=msg)
                att.wait_backoff(attempt)
                attempt += 1
                continue
            row_errors, (reorder, n_unsorted), n_hits = ctx.check_rows(res)
            if row_errors and att.may_retry(attempt):
                # Short rows or foreign ids: another client may be rebuilding
                # the collection; asking again is cheap.
                att.note_error(next(iter(row_errors.values())), self.collection)
                att.wait_backoff(attempt)
                attempt += 1
                continue
            att.succeeded()
            ctx.asm.place((s, e), res)
            if ctx.checkpoint is not None and not row_errors and not att.stop.is_set():
                ctx.checkpoint.save(i, res)
            return _Batch(
                i,
                res,
                lat,
                searched=True,
                row_errors=row_errors,
                n_unsorted=n_unsorted,
                n_hits=n_hits,
                reorder=reorder,
            )

    # ------------------------------------------------------------------ scoring
    def _score(
        self,
        ctx: _Context,
        batches: list[_Batch],
        qrels: Qrels,
        metadata: pd.DataFrame | None,
    ) -> tuple[BenchmarkResult, np.ndarray]:
        qids = ctx.qids
        nq = len(qids)
        ok = np.ones(nq, dtype=bool)
        errors: dict[Any, str] = {}
        n_unsorted = 0
        self._fail_short_rows(ctx, batches)
        for b in batches:
            s, e = ctx.spans[b.index]
            if b.result is None:
                ok[s:e] = False
                msg = b.error or "unknown error"
                errors.update(dict.fromkeys(qids[s:e].tolist(), msg))
                continue
            n_unsorted += b.n_unsorted
            for r, msg in b.row_errors.items():
                ok[s + r] = False
                errors[py_scalar(qids[s + r])] = msg
        nan_mask = np.zeros(nq, dtype=bool)
        for b in batches:
            for r, msg in b.row_errors.items():
                if msg == _NAN_ERROR:
                    nan_mask[ctx.spans[b.index][0] + r] = True
        nan_rows = np.flatnonzero(nan_mask)
        nan_queries = qids[nan_rows]
        all_ok = bool(ok.all())
        rows = None if all_ok else np.flatnonzero(ok)
        res = ctx.asm.result(rows)
        run_qids = qids if all_ok else qids[rows]
        # Rows the workers found out of canonical order are re-sorted here (with
        # their extra score columns); the rest are handed over as they are.
        fix = [
            ctx.spans[b.index][0] + b.reorder
            for b in batches
            if b.result is not None and b.reorder is not None and len(b.reorder)
        ]
        if fix:
            glob = np.concatenate(fix)
            loc = glob if rows is None else np.searchsorted(rows, glob)
            keep = loc < len(run_qids)
            if rows is not None:
                keep &= rows[np.minimum(loc, len(rows) - 1)] == glob
            _sort_in_place(res, loc[keep])
        run = Run.from_arrays(run_qids, res.ids, res.scores, assume_sorted=True, copy=False)
        failed = list(errors)
        ev, dup_ids = evaluate_lenient(
            run, qrels, self.measures, relevance_level=self.relevance_level, failed_queries=failed
        )
        for qid in dup_ids.tolist():
            errors[qid] = "the ranking holds a relevant doc twice"
        extra_values = self._extra_score_ndcg(res, run_qids, qrels)
        if extra_values:
            ev = replace(
                ev, measures=ev.measures + tuple(extra_values), values={**ev.values, **extra_values}
            )
        notes = []
        if n_unsorted:
            notes.append(
                f"{n_unsorted} of {nq} rankings were not sorted by score (scored after re-sorting "
                "them by the store's scores)"
            )
        if ctx.cids is not None:
            unknown = qrels.unknown_docs(ctx.cids)
            if unknown:
                n_rel = len(qrels._positive[1])
                msg = (
                    f"{unknown} of {n_rel} relevant judgements name a doc that is not in the "
                    "collection (it can never be retrieved: recall and nDCG are capped)"
                )
                log.warning("collection %s: %s", self.collection, msg)
                notes.append(msg)
        result = BenchmarkResult(
            evaluation=ev,
            run=run,
            metadata=metadata,
            errors=errors,
            notes=tuple(notes),
            seed=self.seed,
            n_bootstrap=self.n_bootstrap,
            checkpoint=ctx.checkpoint.root if ctx.checkpoint is not None else None,
        )
        return result, nan_queries

    @staticmethod
    def _fail_short_rows(ctx: _Context, batches: list[_Batch]) -> None:
        """Dense collection of unknown size: a row with fewer hits than the longest answer fails.

        Its batch's checkpoint is discarded, so a resume searches it again.
        """
        counts = [b.n_hits for b in batches if b.result is not None and b.n_hits is not None]
        if not counts:
            return
        most = max(int(c.max()) for c in counts if len(c))
        for b in batches:
            if b.result is None or b.n_hits is None:
                continue
            short = np.flatnonzero(b.n_hits < most)
            for r in short.tolist():
                b.row_errors.setdefault(r, _SHORT_UNKNOWN)
            if len(short) and ctx.checkpoint is not None:
                ctx.checkpoint.discard(b.index)

    def _extra_score_ndcg(
        self, res: SearchResult, run_qids: np.ndarray, qrels: Qrels
    ) -> dict[str, np.ndarray]:
        """nDCG@k for every extra score column the store returned, ranked by it."""
        out: dict[str, np.ndarray] = {}
        ks = sorted({k for m in self.measures for meas, k in [lookup(m)] if meas.family == "nDCG"})
        if not ks or not res.extra_scores:
            return out
        for name, col in res.extra_scores.items():
            sc = np.asarray(col, dtype=np.float64)
            sc = np.where(res.ids == NO_HIT, -np.inf, sc)
            run = Run.from_arrays(run_qids, res.ids, sc)
            ev, _ = evaluate_lenient(run, qrels, [f"nDCG@{k}" for k in ks])
            for k in ks:
                out[f"nDCG@{k}[{name}]"] = ev.values[f"nDCG@{k}"]
        return out


_NAN_ERROR = "NaN score"
_SHORT_UNKNOWN = (
    "the store answered a dense collection with fewer hits than its other answers "
    "(collection size unknown)"
)


class _Context:
    """Everything one :meth:`BenchmarkEvaluator.evaluate` call shares with its workers."""

    def __init__(
        self,
        ev: BenchmarkEvaluator,
        q: Any,
        qids: np.ndarray,
        labels: np.ndarray | None,
        cids: np.ndarray | None,
    ) -> None:
        self.q = q
        self.qids = qids
        self.labels = labels
        self.cids = cids
        self.k = ev.k
        nq = q.shape[0]
        self.spans = [(s, min(s + ev.batch_size, nq)) for s in range(0, nq, ev.batch_size)]
        self.asm = _Assembly(nq, ev.k)
        self.sparse = bool(is_sparse(q))
        self.search_wall_s = 0.0
        budget = ev.retry_budget
        if budget is None:
            budget = max(8, math.ceil(len(self.spans) / 10))
        self.attempts = _Attempts(
            ev.retries, budget, ev.max_consecutive_failures, ev.retry_backoff_s, ev.max_backoff_s
        )
        # The collection size, read once: a dense answer must hold min(k, count) hits.
        self.count: int | None = None
        if not self.sparse and isinstance(ev.store, CollectionCatalog):
            try:
                self.count = int(ev.store.count(ev.collection))
            except StoreUnavailableError:
                raise
            except Exception as exc:  # short rows are then judged within each batch
                log.warning(
                    "could not read the size of collection %s (%s); short answers are judged "
                    "against the longest answer of their batch",
                    ev.collection,
                    _describe(exc),
                )
        self.id_table = _IdTable(cids) if cids is not None else None
        self.checkpoint: _Checkpoint | None = None
        if ev.checkpoint_dir is not None and ev.checkpoint_key is not None:
            self.checkpoint = _Checkpoint.open(ev, q, qids, len(self.spans))
            ev._checkpoints.append(self.checkpoint)

    def hits_per_row(self, res: SearchResult) -> np.ndarray | None:
        """Hits per row, for a dense collection of unknown size (else None)."""
        if self.sparse or self.count is not None:
            return None
        return (res.ids[:, : self.k] != NO_HIT).sum(axis=1)

    def check_rows(self, res: SearchResult) -> tuple[dict[int, str], int, np.ndarray | None]:
        """Row errors of one answer (short, foreign ids, NaN), its unsorted rows, hits per row.

        A dense collection must answer ``min(k, count)`` hits. When its
        size is unknown (the store is no
        :class:`~imsearch_align.framework.interfaces.CollectionCatalog`), a
        row with fewer hits than another row of its batch fails here and one
        with fewer than the longest answer of the call fails at scoring.
        """
        ids, sc = res.ids[:, : self.k], res.scores[:, : self.k]
        errors: dict[int, str] = {}
        n_hits = self.hits_per_row(res)
        if n_hits is not None:
            short = n_hits < n_hits.max() if len(n_hits) else n_hits.astype(bool)
            errors.update(dict.fromkeys(np.flatnonzero(short).tolist(), _SHORT_UNKNOWN))
        elif not self.sparse:
            need = min(self.k, self.count)
            if ids.shape[1] < need:
                short = np.ones(len(ids), dtype=bool)
            else:
                short = (ids[:, :need] == NO_HIT).any(axis=1)
            what = f"fewer than min(k={self.k}, collection size {self.count}) = {need} hits"
            for r in np.flatnonzero(short).tolist():
                errors[r] = f"the store answered a dense collection with {what}"
        if self.id_table is not None:
            foreign = self.id_table.foreign_rows(ids)
            for r in foreign.tolist():
                errors.setdefault(r, "the store returned an id that is not in the collection")
        nan = np.isnan(sc)
        if nan.any():
            for r in np.flatnonzero((nan & (ids != NO_HIT)).any(axis=1)).tolist():
                errors[r] = _NAN_ERROR
        return errors, _order_problems(ids, sc), n_hits


def _order_problems(ids: np.ndarray, sc: np.ndarray) -> tuple[np.ndarray, int]:
    """Rows out of the canonical order, and how many of them break the score order.

    Canonical: score descending, ties by id ascending, no-hits last. A row
    with only its ties in another order is the store's tie rule (re-sorted,
    not reported); a row whose scores go up is reported.
    """
    bad = _unsorted_rows_serial(ids, sc, ids == NO_HIT)
    if not len(bad):
        return bad, 0
    s = np.where(ids[bad] == NO_HIT, -np.inf, sc[bad])
    return bad, int((s[:, 1:] > s[:, :-1]).any(axis=1).sum())


def _sort_in_place(res: SearchResult, rows: np.ndarray) -> None:
    """Put ``rows`` of ``res`` in canonical order, extra score columns alike."""
    if not len(rows):
        return
    d, s = res.ids[rows], res.scores[rows]
    m, k = d.shape
    empty = d == NO_HIT
    flat_rows = np.repeat(np.arange(m), k)
    order = np.lexsort((d.ravel(), -s.ravel().astype(np.float64), empty.ravel(), flat_rows))
    cols = order.reshape(m, k) - (np.arange(m) * k)[:, None]
    res.ids[rows] = np.take_along_axis(d, cols, 1)
    res.scores[rows] = np.take_along_axis(s, cols, 1)
    for col in res.extra_scores.values():
        col[rows] = np.take_along_axis(col[rows], cols, 1)


class _IdTable:
    """Membership of returned ids in the collection (a bitmap when ids are compact)."""

    def __init__(self, cids: np.ndarray) -> None:
        self.table = None
        self.index = None
        if (
            cids.dtype != object
            and len(cids)
            and cids.min() >= 0
            and cids.max() < 8 * len(cids) + 2**20
        ):
            self.table = np.zeros(int(cids.max()) + 1, dtype=bool)
            self.table[cids] = True
        else:
            self.index = pd.Index(pd.unique(cids))

    def foreign_rows(self, ids: np.ndarray) -> np.ndarray:
        hit = ids != NO_HIT
        if self.table is not None:
            safe = np.where(hit & (ids >= 0) & (ids < len(self.table)), ids, 0)
            known = self.table[safe] & (ids >= 0) & (ids < len(self.table))
        else:
            known = (self.index.get_indexer(ids.ravel()) >= 0).reshape(ids.shape)
        return np.flatnonzero((hit & ~known).any(axis=1))


class _Assembly:
    """The ``(nq, k)`` result arrays, filled batch by batch by the workers.

    Rows a store did not fill (fewer than ``k`` hits) are padded with ``-1``
    and ``-inf``; extra score columns are allocated when first seen.
    """

    def __init__(self, nq: int, k: int) -> None:
        self.k = k
        self.ids = np.empty((nq, k), dtype=np.int64)
        self.scores = np.empty((nq, k), dtype=np.float32)
        self.extra: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def place(self, span: tuple[int, int], r: SearchResult) -> None:
        s, e = span
        w = min(r.k, self.k)
        self.ids[s:e, :w] = r.ids[:, :w]
        self.scores[s:e, :w] = r.scores[:, :w]
        if w < self.k:
            self.ids[s:e, w:] = NO_HIT
            self.scores[s:e, w:] = -np.inf
        for name, col in r.extra_scores.items():
            with self._lock:
                if name not in self.extra:
                    self.extra[name] = np.full(self.ids.shape, -np.inf, dtype=np.float32)
            self.extra[name][s:e, :w] = np.asarray(col)[:, :w]

    def result(self, rows: np.ndarray | None = None) -> SearchResult:
        if rows is None:
            return SearchResult(self.ids, self.scores, dict(self.extra))
        return SearchResult(
            self.ids[rows], self.scores[rows], {n: v[rows] for n, v in self.extra.items()}
        )


class _Checkpoint:
    """Finished batches on disk: ``<dir>/<digest>/batch_<i>.npz``, one manifest.

    The digest covers the caller's ``checkpoint_key``, ``k``, the batch
    size, the queries and their ids, so a folder is only ever read back by
    an evaluation that would produce the same ranking.
    """

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self._write_failed = False

    @classmethod
    def open(cls, ev: BenchmarkEvaluator, q: Any, qids: np.ndarray, n_batches: int) -> _Checkpoint:
        h = hashlib.sha256()
        h.update(f"format={_CHECKPOINT_FORMAT}|key={ev.checkpoint_key}|".encode())
        h.update(f"k={ev.k}|batch_size={ev.batch_size}|shape={q.shape}|".encode())
        if is_sparse(q):
            h.update(b"csr|")
            for part in (q.data, q.indices, q.indptr):
                h.update(array_buffer(part))
        else:
            h.update(b"dense|")
            h.update(array_buffer(q))
        if qids.dtype == object:
            h.update(pd.util.hash_array(qids.astype(object)).tobytes())
        else:
            h.update(np.ascontiguousarray(qids, dtype=np.int64).tobytes())
        digest = h.hexdigest()
        manifest = {
            "format": _CHECKPOINT_FORMAT,
            "digest": digest,
            "k": ev.k,
            "batch_size": ev.batch_size,
            "n_queries": int(q.shape[0]),
            "n_batches": n_batches,
        }
        root = ev.checkpoint_dir / digest[:32]
        ck = cls(root, manifest)
        path = root / _MANIFEST
        if path.exists():
            try:
                same = json.loads(path.read_text()) == manifest
            except (OSError, ValueError):
                same = False
            if not same:  # a torn or foreign folder: start it over
                log.warning("checkpoint folder %s does not match this run; starting over", root)
                ck.clear()
        if not path.exists():
            atomic_write(path, json.dumps(manifest, sort_keys=True))
        return ck

    def _path(self, i: int) -> Path:
        return self.root / f"batch_{i:06d}.npz"

    def load(self, i: int, span: tuple[int, int]) -> SearchResult | None:
        p = self._path(i)
        if not p.exists():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                extra = {k[6:]: z[k] for k in z.files if k.startswith("extra_")}
                res = SearchResult(z["ids"], z["scores"], extra)
        except Exception as exc:  # a torn or corrupt file is redone, never used
            log.warning("checkpoint %s unreadable (%s); the batch is searched again", p, exc)
            return None
        if res.nq != span[1] - span[0]:
            log.warning(
                "checkpoint %s holds %d rows, expected %d; searched again",
                p,
                res.nq,
                span[1] - span[0],
            )
            return None
        return res

    def discard(self, i: int) -> None:
        """Forget batch ``i`` (its answer turned out to be wrong)."""
        self._path(i).unlink(missing_ok=True)

    def save(self, i: int, r: SearchResult) -> None:
        """Write batch ``i``; a failed write (disk full) is logged once and never fails the run."""
        arrays = {"ids": r.ids, "scores": r.scores}
        arrays.update({f"extra_{k}": np.asarray(v) for k, v in r.extra_scores.items()})
        try:
            atomic_write(self._path(i), lambda f: np.savez(f, **arrays))
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                log.warning(
                    "checkpoint %s not written (%s); the run goes on, a resume searches again",
                    self.root,
                    _describe(exc),
                )

    def clear(self) -> int:
        """Remove this folder's batch files and manifest (and the folder if then empty)."""
        n = 0
        if not self.root.is_dir():
            return 0
        for p in self.root.iterdir():
            if p.name == _MANIFEST or (p.name.startswith("batch_") and p.suffix == ".npz"):
                p.unlink(missing_ok=True)
                n += 1
            elif p.name.startswith(".batch_") and p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)  # left by a write cut short
        try:
            self.root.rmdir()
        except OSError:
            pass
        return n


def remove_checkpoints(checkpoint_dir: str | os.PathLike) -> int:
    """Remove every evaluator checkpoint folder under ``checkpoint_dir``; returns files removed.

    Only folders holding an evaluator manifest are touched.
    """
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return 0
    n = 0
    for man in sorted(root.rglob(_MANIFEST)):
        n += _Checkpoint(man.parent, {}).clear()
    return n


def _relabel(res: BenchmarkResult, labels: np.ndarray) -> BenchmarkResult:
    """The result with integer query codes replaced by the caller's ids (``labels[code]``)."""

    def lab(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)
        return labels[a.astype(np.int64)] if len(a) else labels[:0]

    ev = res.evaluation
    ev2 = EvaluationResult(
        measures=ev.measures,
        query_ids=lab(ev.query_ids),
        values=ev.values,
        missing_queries=lab(ev.missing_queries),
        ignored_queries=lab(ev.ignored_queries),
        failed_queries=lab(ev.failed_queries).astype(object),
    )
    run_q = lab(res.run.query_ids).view()
    run_q.setflags(write=False)
    run = replace(res.run, query_ids=run_q)
    md = res.metadata
    if md is not None:
        md = md.copy(deep=False)
        labs = lab(md.index.to_numpy())
        md.index = pd.Index(labs, dtype=labs.dtype)  # object stays object (no arrow copy)
    errors = {py_scalar(labels[int(k)]): v for k, v in res.errors.items()}
    return replace(res, evaluation=ev2, run=run, metadata=md, errors=errors)


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool, desc: str):
    """A transient bar over ``total`` batches; none for a single batch (a 0-of-1
    bar per search says nothing and, in a study's log, floods it)."""
    if not enabled or total < 2:
        return _NullBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch", leave=False)
