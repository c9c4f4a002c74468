"""BenchmarkEvaluator: batched, parallel search of a store, scored once.

The flow is: split the queries into batches, run ``store.search`` on a
thread pool that stays full (every batch is submitted up front, so a slow
batch never stalls the others), stitch one :class:`~imsearch_align.Run`
together, and compute every measure once with the vectorised kernels in
:mod:`imsearch_align.framework.metrics`.

Failure semantics (the reference harness got these wrong, see the README):

* A batch that raises is retried ``retries`` times; then its queries are
  recorded as failed: they score 0, count in every mean and are listed in
  ``result.failed_queries`` with the error. Never silently dropped.
* A NaN score is an error naming the query. It is raised only after every
  batch has finished, and carries the result computed over the other
  queries (``err.partial``), so nothing is lost.
* With ``checkpoint_dir`` each finished batch is written atomically; a run
  killed mid-way resumes without redoing finished batches and gives the
  same numbers as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.interfaces import SearchResult, VectorStoreAdapter
from imsearch_align.framework.metrics import (
    EvaluationResult,
    Qrels,
    Run,
    evaluate,
    parse_measure,
    py_scalar,
)
from imsearch_align.framework.validation import check_int, check_matrix, is_sparse

__all__ = [
    "DEFAULT_MEASURES",
    "BenchmarkEvaluator",
    "BenchmarkResult",
    "NaNScoreError",
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


class NaNScoreError(ValueError):
    """A store returned a NaN score. ``partial`` holds the other queries' result."""

    def __init__(self, message: str, query_ids: np.ndarray, partial: BenchmarkResult | None):
        super().__init__(message)
        self.query_ids = query_ids
        self.partial = partial


@dataclass(frozen=True, eq=False)
class BenchmarkResult:
    """What one evaluation produced.

    Attributes:
        evaluation: the per-query measure values (every qrels query).
        run: the ranked results actually returned by the store.
        metadata: per-query metadata columns (indexed like the qrels queries).
        timings: ``total_s``, ``search_s``, ``metrics_s``, ``queries_per_s``,
            ``batch_p50_ms``, ``batch_p95_ms``, ``batch_p99_ms``, ``n_batches``.
        errors: ``query_id -> error text`` for failed queries.
        extra: more measures added by options (e.g. ANN fidelity).
        seed: seed of the bootstrap intervals.
        n_bootstrap: number of bootstrap resamples for the intervals.
    """

    evaluation: EvaluationResult
    run: Run
    metadata: pd.DataFrame | None = None
    timings: dict[str, float] = field(default_factory=dict)
    errors: dict[Any, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    n_bootstrap: int = 1000

    @property
    def measures(self) -> tuple[str, ...]:
        """Measure names, in order."""
        return self.evaluation.measures

    @property
    def failed_queries(self) -> np.ndarray:
        """Queries whose search failed (scored 0, counted)."""
        return self.evaluation.failed_queries

    def mean(self) -> dict[str, float]:
        """Mean of each measure over every qrels query."""
        return self.evaluation.mean()

    @cached_property
    def intervals(self) -> dict[str, tuple[float, float]]:
        """Seeded 95% percentile-bootstrap interval of each mean (computed once, on use)."""
        return self.evaluation.confidence_intervals(n_resamples=self.n_bootstrap, seed=self.seed)

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: id, measures, missing/failed flags, metadata."""
        df = self.evaluation.per_query.copy()
        df["failed"] = np.isin(df["query_id"].to_numpy(), self.failed_queries)
        if self.errors:
            df["error"] = df["query_id"].map(self.errors)
        if self.metadata is not None and len(self.metadata.columns):
            md = self.metadata.reindex(df["query_id"].to_numpy())
            for c in md.columns:
                df[c] = md[c].to_numpy()
        return df

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
        """JSON-ready summary: means, intervals, timings, failures."""
        ci = self.intervals
        return {
            "metrics": self.mean(),
            "intervals": {m: list(v) for m, v in ci.items()},
            "timings": dict(self.timings),
            "n_queries": len(self.evaluation.query_ids),
            "n_failed": len(self.failed_queries),
            "n_missing": len(self.evaluation.missing_queries),
            "n_ignored": len(self.evaluation.ignored_queries),
            "failed_queries": [py_scalar(q) for q in self.failed_queries[:100]],
            "extra": {k: v for k, v in self.extra.items() if _is_scalar(v)},
        }


def _is_scalar(v: Any) -> bool:
    return isinstance(v, int | float | str | bool | np.generic)


@dataclass
class _BatchOutcome:
    index: int
    result: SearchResult | None
    latency_s: float
    error: str | None = None


class BenchmarkEvaluator:
    """Searches a store with query vectors in parallel batches and scores the run.

    Args:
        store: any :class:`VectorStoreAdapter`.
        collection: the collection to search.
        k: ranking depth requested from the store; at least the largest
            cutoff among ``measures``.
        measures: canonical measure names (default :data:`DEFAULT_MEASURES`).
        batch_size: queries per ``store.search`` call.
        workers: threads searching concurrently (the pool stays full).
        retries: extra attempts for a batch that raises, before its queries
            are recorded as failed.
        retry_backoff_s: sleep before retry ``i`` is ``retry_backoff_s * 2**i``.
        progress: show a tqdm progress bar.
        n_bootstrap: resamples for the 95% intervals (computed lazily).
        seed: bootstrap seed.
        checkpoint_dir: where finished batches are saved for resuming.
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
        progress: bool = True,
        n_bootstrap: int = 1000,
        seed: int = 0,
        checkpoint_dir: str | os.PathLike | None = None,
        relevance_level: float | None = None,
    ) -> None:
        self.store = store
        self.collection = collection
        self.k = check_int(k, "k", low=1)
        self.measures = tuple(dict.fromkeys(measures))
        if not self.measures:
            raise ValueError("measures is empty; expected at least one measure name")
        kmax = max(parse_measure(m)[1] for m in self.measures)
        if kmax > self.k:
            raise ValueError(
                f"k must be >= the largest cutoff among measures ({kmax}), got k={self.k}"
            )
        self.batch_size = check_int(batch_size, "batch_size", low=1)
        self.workers = check_int(workers, "workers", low=1)
        self.retries = check_int(retries, "retries", low=0)
        self.retry_backoff_s = float(retry_backoff_s)
        self.progress = progress
        self.n_bootstrap = check_int(n_bootstrap, "n_bootstrap", low=1)
        self.seed = seed
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir is not None else None
        self.relevance_level = relevance_level

    # ------------------------------------------------------------------ public
    def evaluate(
        self,
        queries: Any,
        qrels: Qrels,
        *,
        query_ids: Sequence | np.ndarray | None = None,
        metadata: pd.DataFrame | None = None,
    ) -> BenchmarkResult:
        """Search ``queries`` (dense ``(nq, d)`` or CSR) and score against ``qrels``.

        Args:
            queries: query vectors, one row a query.
            qrels: relevance judgements; every qrels query is scored.
            query_ids: id of each query row (default ``0..nq-1``).
            metadata: optional per-query columns, indexed by query id, for
                :meth:`BenchmarkResult.breakdown`.
        """
        if not isinstance(qrels, Qrels):
            raise TypeError(f"qrels must be a Qrels, got {type(qrels).__name__}")
        q = check_matrix(queries, "queries", allow_sparse=True)
        nq = q.shape[0]
        qids = np.arange(nq, dtype=np.int64) if query_ids is None else np.asarray(query_ids)
        if qids.ndim != 1 or len(qids) != nq:
            raise ValueError(f"query_ids has {np.size(qids)} entries, queries has {nq} rows")
        if len(pd.unique(qids)) != nq:
            raise ValueError("query_ids must be unique")
        if metadata is not None and not isinstance(metadata, pd.DataFrame):
            raise TypeError(
                f"metadata must be a DataFrame indexed by query id, got {type(metadata).__name__}"
            )

        t0 = time.perf_counter()
        outcomes, asm = self._search_all(q, qids)
        t_search = time.perf_counter() - t0

        t1 = time.perf_counter()
        result, nan_queries = self._score(outcomes, asm, q, qids, qrels, metadata)
        t_metrics = time.perf_counter() - t1
        lat = np.array([o.latency_s for o in outcomes if o.result is not None]) * 1e3
        total = time.perf_counter() - t0
        result.timings.update(
            {
                "total_s": total,
                "search_s": t_search,
                "metrics_s": t_metrics,
                "queries_per_s": nq / total if total > 0 else float("inf"),
                "search_queries_per_s": nq / t_search if t_search > 0 else float("inf"),
                "n_batches": float(len(outcomes)),
                "batch_p50_ms": float(np.percentile(lat, 50)) if lat.size else float("nan"),
                "batch_p95_ms": float(np.percentile(lat, 95)) if lat.size else float("nan"),
                "batch_p99_ms": float(np.percentile(lat, 99)) if lat.size else float("nan"),
            }
        )
        if nan_queries.size:
            raise NaNScoreError(
                f"store returned a NaN score for query {py_scalar(nan_queries[0])!r}"
                + (f" and {nan_queries.size - 1} more" if nan_queries.size > 1 else "")
                + f" (collection {self.collection!r}); the other queries' result is in err.partial",
                nan_queries,
                result,
            )
        return result

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
    ) -> BenchmarkResult:
        """imsearch_eval-style input: one row per judged ``(query, doc)``.

        Queries are de-duplicated by **id** (not text: two ids with the same
        text are two queries), embedded once with ``embed(list_of_texts)``,
        and searched; the qrels come from the frame's ``query_id, doc_id,
        relevance`` columns unless given. ``metadata_cols`` (default: every
        other column) are kept per query for breakdowns.
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
        first = df.drop_duplicates(subset=[query_id_col], keep="first")
        texts = first[query_col].astype(str).tolist()
        qids = first[query_id_col].to_numpy()
        vectors = embed(texts)
        if qrels is None:
            qrels = Qrels.from_frame(
                df, query_col=query_id_col, doc_col=doc_id_col, relevance_col=relevance_col
            )
        skip = {query_col, query_id_col, doc_id_col, relevance_col}
        cols = (
            [c for c in df.columns if c not in skip]
            if metadata_cols is None
            else list(metadata_cols)
        )
        md = first.set_index(query_id_col)[cols] if cols else None
        return self.evaluate(vectors, qrels, query_ids=qids, metadata=md)

    # ------------------------------------------------------------------ search
    def _batches(self, nq: int) -> list[tuple[int, int]]:
        return [(s, min(s + self.batch_size, nq)) for s in range(0, nq, self.batch_size)]

    def _search_one(self, index: int, q: Any) -> _BatchOutcome:
        last_err = None
        for attempt in range(self.retries + 1):
            t = time.perf_counter()
            try:
                res = self.store.search(self.collection, q, self.k)
            except Exception as exc:  # a failed batch is recorded, never dropped
                last_err = f"{type(exc).__name__}: {exc}"
                log.warning("batch %d attempt %d failed: %s", index, attempt + 1, last_err)
                if attempt < self.retries and self.retry_backoff_s > 0:
                    time.sleep(self.retry_backoff_s * 2**attempt)
                continue
            lat = time.perf_counter() - t
            if res.ids.shape[0] != q.shape[0]:
                last_err = f"store returned {res.ids.shape[0]} rows for {q.shape[0]} queries"
                continue
            return _BatchOutcome(index, res, lat)
        return _BatchOutcome(index, None, float("nan"), last_err)

    def _search_all(self, q: Any, qids: np.ndarray) -> tuple[list[_BatchOutcome], _Assembly]:
        spans = self._batches(q.shape[0])
        asm = _Assembly(q.shape[0], self.k)
        ckpt = self._checkpoint(q, qids)
        outcomes: list[_BatchOutcome | None] = [None] * len(spans)
        todo = []
        for i in range(len(spans)):
            saved = ckpt.load(i) if ckpt is not None else None
            if saved is not None:
                outcomes[i] = _BatchOutcome(i, saved, float("nan"))
                asm.place(spans[i], saved)
            else:
                todo.append(i)
        bar = _progress(len(spans), self.progress, desc=f"search {self.collection}")
        bar.update(len(spans) - len(todo))
        lock = threading.Lock()

        def work(i: int) -> _BatchOutcome:
            s, e = spans[i]
            out = self._search_one(i, q[s:e])
            if out.result is not None:
                # Each worker copies its rows into place: the assembly runs in
                # parallel with the other searches instead of after them.
                asm.place(spans[i], out.result)
                if ckpt is not None:
                    with lock:
                        ckpt.save(i, out.result)
            return out

        if todo:
            with ThreadPoolExecutor(max_workers=min(self.workers, len(todo))) as pool:
                futures = [pool.submit(work, i) for i in todo]
                for fut in as_completed(futures):
                    out = fut.result()
                    outcomes[out.index] = out
                    bar.update(1)
        bar.close()
        return [o for o in outcomes if o is not None], asm

    def _checkpoint(self, q: Any, qids: np.ndarray) -> _Checkpoint | None:
        if self.checkpoint_dir is None:
            return None
        h = hashlib.sha256()
        h.update(f"{self.collection}|{self.k}|{self.batch_size}|{q.shape}".encode())
        data = q.data if is_sparse(q) else q
        h.update(np.ascontiguousarray(data).tobytes())
        if is_sparse(q):
            h.update(q.indices.tobytes())
            h.update(q.indptr.tobytes())
        h.update(pd.util.hash_array(np.asarray(qids, dtype=object)).tobytes())
        return _Checkpoint(self.checkpoint_dir / h.hexdigest()[:16])

    # ------------------------------------------------------------------ scoring
    def _score(
        self,
        outcomes: list[_BatchOutcome],
        asm: _Assembly,
        q: Any,
        qids: np.ndarray,
        qrels: Qrels,
        metadata: pd.DataFrame | None,
    ) -> tuple[BenchmarkResult, np.ndarray]:
        spans = self._batches(q.shape[0])
        ok_rows: list[np.ndarray] = []
        errors: dict[Any, str] = {}
        for o in sorted(outcomes, key=lambda o: o.index):
            s, e = spans[o.index]
            if o.result is None:
                for qid in qids[s:e]:
                    errors[py_scalar(qid)] = o.error or "unknown error"
                continue
            ok_rows.append(np.arange(s, e))
        rows = np.concatenate(ok_rows) if ok_rows else np.zeros(0, np.int64)
        all_ok = len(rows) == q.shape[0]
        res = asm.result() if all_ok else asm.result(rows)
        # NaN scores: name the queries, score the rest, keep everything.
        nan_rows = np.zeros(len(rows), dtype=bool)
        if np.isnan(res.scores).any():
            nan_rows = (np.isnan(res.scores) & (res.ids != -1)).any(axis=1)
        nan_queries = qids[rows[nan_rows]]
        for qid in nan_queries:
            errors[py_scalar(qid)] = "NaN score"
        keep = ~nan_rows
        if keep.all():  # the common case: no copies of the (nq, k) arrays
            run = Run.from_arrays(qids[rows], res.ids, res.scores, copy=not all_ok)
        else:
            run = Run.from_arrays(qids[rows[keep]], res.ids[keep], res.scores[keep])
        failed = np.asarray(list(errors), dtype=object)
        ev = evaluate(
            run, qrels, self.measures, relevance_level=self.relevance_level, failed_queries=failed
        )
        extra_values = self._extra_score_ndcg(res, keep, rows, qids, qrels)
        if extra_values:
            ev = EvaluationResult(
                measures=ev.measures + tuple(extra_values),
                query_ids=ev.query_ids,
                values={**ev.values, **extra_values},
                missing_queries=ev.missing_queries,
                ignored_queries=ev.ignored_queries,
                failed_queries=ev.failed_queries,
            )
        result = BenchmarkResult(
            evaluation=ev,
            run=run,
            metadata=metadata,
            errors=errors,
            seed=self.seed,
            n_bootstrap=self.n_bootstrap,
        )
        return result, nan_queries

    def _extra_score_ndcg(
        self, res: SearchResult, keep: np.ndarray, rows: np.ndarray, qids: np.ndarray, qrels: Qrels
    ) -> dict[str, np.ndarray]:
        """nDCG@k for every extra score column the store returned, ranked by it."""
        out: dict[str, np.ndarray] = {}
        ks = sorted({parse_measure(m)[1] for m in self.measures if m.startswith("nDCG@")})
        if not ks or not res.extra_scores:
            return out
        for name, col in res.extra_scores.items():
            sc = np.asarray(col, dtype=np.float64)[keep]
            sc = np.where(res.ids[keep] == -1, -np.inf, sc)
            run = Run.from_arrays(qids[rows[keep]], res.ids[keep], sc)
            ev = evaluate(run, qrels, [f"nDCG@{k}" for k in ks])
            for k in ks:
                out[f"nDCG@{k}[{name}]"] = ev.values[f"nDCG@{k}"]
        return out


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
            self.ids[s:e, w:] = -1
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
    """Finished batches on disk: ``batch_<i>.npz`` written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, i: int) -> Path:
        return self.root / f"batch_{i:06d}.npz"

    def load(self, i: int) -> SearchResult | None:
        p = self._path(i)
        if not p.exists():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                extra = {k[6:]: z[k] for k in z.files if k.startswith("extra_")}
                return SearchResult(z["ids"], z["scores"], extra)
        except Exception as exc:  # a torn or corrupt file is redone, never used
            log.warning("checkpoint %s unreadable (%s); the batch is searched again", p, exc)
            return None

    def save(self, i: int, r: SearchResult) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                np.savez(
                    f,
                    ids=r.ids,
                    scores=r.scores,
                    **{f"extra_{k}": v for k, v in r.extra_scores.items()},
                )
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._path(i))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


class _NullBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool, desc: str):
    if not enabled:
        return _NullBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch", leave=False)
