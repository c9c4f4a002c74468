"""One call scores a ranking: :func:`score_ranking`.

Search the store through the evaluator (the search phase alone: a run and
bookkeeping), rescore in float64 the rows whose near-ties the store's
float32 scores cannot decide, close the tie groups crossing the cut-off by
searching an exact store deeper, score the tie-aware measures, and build
the :class:`~imsearch_align.framework.ranking.result.RankingResult`, its
per-query table and tie report. Inputs are typed; the settings are one
:class:`RankingSettings` (no experiment config).

Each run is scored once. The tie-aware pass scores the true ranking (the
store's run after rescoring and closing); the tie-rule values reported
beside it are the store's own run. When rescoring and closing changed
nothing (the same run) and no document repeats in a row, the tie-aware
pass's tie-rule evaluation *is* the store's and is used as it is; otherwise
the store's run is a different run and is scored on its own.

Measures of the indexed vectors (``Diversity@k``: an entry with a
``vector_kernel`` in :mod:`~imsearch_align.framework.measures`) are
computed here, where the documents are: the reported value on the true
ranking, as the expected value over the orders of the tie groups crossing
the cut-off (the groups the tie-aware pass uses), the tie-rule value on the
store's run in its order. Failed and missing queries score 0, as in every
measure. They are refused for a searcher whose ids are not rows of
``docs`` (``rescore=False``: classification's classes have no vector).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from imsearch_align.framework.evaluator import BenchmarkEvaluator, Searched
from imsearch_align.framework.evaluator.scoring import score
from imsearch_align.framework.interfaces import NO_HIT, CollectionCatalog, VectorStoreAdapter
from imsearch_align.framework.measures import needs_vectors
from imsearch_align.framework.metrics import EvaluationResult, Qrels, Run, bootstrap_ci
from imsearch_align.framework.ranking.result import RankingResult, SearchTimings
from imsearch_align.framework.ranking.tie_aware import (
    Rescorer,
    close_groups,
    error_bound,
    is_exact,
    tie_summary,
    tolerance_for,
)
from imsearch_align.framework.ranking.vectors import VectorMeasures
from imsearch_align.framework.ties import TieAwareResult, tie_aware_evaluate

__all__ = ["RankingSettings", "Scored", "score_ranking"]


@dataclass(frozen=True)
class RankingSettings:
    """How a ranking is searched and scored.

    Attributes:
        k: the largest cut-off (the store is asked for ``k + 1`` results, to
            see tie groups crossing it).
        measures: canonical measure names.
        batch_size: queries per search call.
        workers: threads searching at once.
        seed: seed of the bootstrap intervals.
        progress: show a progress bar.
        checkpoint_dir: where finished batches are saved (None: nowhere).
        checkpoint_key: digest of everything else that fixes the ranking
            (documents, method, store parameters); required to checkpoint.
        tie_tolerance: relative tolerance within which scores tie (None: equal
            true scores only where scores are recomputed, see
            :func:`~imsearch_align.framework.ranking.tie_aware.tolerance_for`).
        n_bootstrap: resamples of the bootstrap intervals.
    """

    k: int
    measures: tuple[str, ...]
    batch_size: int = 1024
    workers: int = 2
    seed: int = 0
    progress: bool = False
    checkpoint_dir: Path | None = None
    checkpoint_key: str | None = None
    tie_tolerance: float | None = None
    n_bootstrap: int = 1000


class Scored(NamedTuple):
    """What :func:`score_ranking` returns."""

    #: The ranking's result (metrics, intervals, tie report, failures, timings).
    result: RankingResult
    #: One row per qrels query: ``ranking``, ``query_id``, each measure (its
    #: tie-aware value where it has one), ``missing``, ``failed``, ``error``.
    per_query: pd.DataFrame
    #: The store's run (failed queries left out), as it answered.
    run: Run


def score_ranking(
    store: VectorStoreAdapter,
    collection: str,
    name: str,
    *,
    docs: Any,
    doc_ids: np.ndarray,
    queries: Any,
    query_ids: Any,
    qrels: Qrels,
    settings: RankingSettings,
    rescore: bool = True,
    index_build_s: float = 0.0,
) -> Scored:
    """Search ``queries`` in ``collection`` (holding ``docs`` under ``doc_ids``)
    and score the ranking tie-aware; see the module docstring.

    ``rescore``: the store's ids are rows of ``docs``, so near-tie scores can
    be recomputed from the vectors (False for a searcher that maps them to
    something else, e.g. classes: its scores stand, and measures of the
    vectors are refused).

    Raises:
        ValueError: a measure of the vectors asked with ``rescore=False``, or
            without a measure of the judgements beside it.
        EvaluationAborted: the store became unavailable; ``err.partial`` is the
            :class:`RankingResult` of the finished batches (tie-rule values).
    """
    judged = tuple(m for m in settings.measures if not needs_vectors(m))
    vectored = VectorMeasures.of(settings.measures, docs, doc_ids, rescore)
    ev = BenchmarkEvaluator(
        store,
        collection,
        k=settings.k + 1,
        measures=judged,
        batch_size=settings.batch_size,
        workers=settings.workers,
        progress=settings.progress,
        seed=settings.seed,
        checkpoint_dir=settings.checkpoint_dir,
        checkpoint_key=settings.checkpoint_key,
    )
    searched = ev.search(queries, qrels=qrels, query_ids=query_ids, collection_ids=doc_ids)
    facts = _Facts(name, int(docs.shape[0]), float(index_build_s))
    if searched.unavailable is not None:
        t0 = time.perf_counter()
        plain, errors, notes = score(searched, qrels, ev.measures)
        searched.log_failures(len(plain.failed_queries), queries.shape[0])
        intervals = plain.confidence_intervals(n_resamples=settings.n_bootstrap, seed=settings.seed)
        metrics = {**plain.mean(), **vectored.means(vectored.values(searched.run, None, plain))}
        metrics_s = time.perf_counter() - t0
        partial = facts.result(searched, plain, errors, notes, metrics, {}, intervals, metrics_s)
        raise searched.aborted(partial, len(plain.failed_queries), len(plain.query_ids))
    closed = _true_ranking(
        store, collection, searched.run, docs, doc_ids, queries, query_ids, settings, rescore
    )
    t0 = time.perf_counter()
    ta = tie_aware_evaluate(
        closed.run,
        qrels,
        list(ev.measures),
        tol=closed.tol,
        groups_closed=closed.exact and not closed.n_open,
        failed_queries=list(searched.errors),
        lenient=True,
    )
    same = closed.run is searched.run and not _repeats(searched.run)
    plain, errors, notes = score(searched, qrels, ev.measures, plain=ta.plain if same else None)
    searched.log_failures(len(plain.failed_queries), queries.shape[0])
    metrics = plain.mean()
    tie_rule = {m: metrics[m] for m in ta.measures}
    vec, vec_rule = vectored.expected_and_rule(closed.run, closed.tol, searched.run, plain)
    metrics = {**metrics, **ta.mean(), **vectored.means(vec)}
    tie_rule.update(vectored.means(vec_rule))
    intervals = _intervals(plain, ta, settings, vec)
    metrics_s = time.perf_counter() - t0
    result = facts.result(searched, plain, errors, notes, metrics, tie_rule, intervals, metrics_s)
    ties = tie_summary(
        ta,
        exact=closed.exact,
        n_extended=closed.n_extended,
        n_open=closed.n_open,
        extend_s=closed.extend_s,
        n_rescored=closed.n_rescored,
        error=closed.reach,
    )
    result = replace(result, ties=ties)
    frame = _per_query(name, plain, errors, ta, vec)
    return Scored(result, frame, searched.run)


class _Closed(NamedTuple):
    """The true ranking of a searched run and how it was reached."""

    run: Run
    tol: float
    reach: float
    exact: bool
    n_extended: int
    n_open: int
    extend_s: float
    n_rescored: int | None


def _true_ranking(
    store: Any,
    collection: str,
    run: Run,
    docs: Any,
    doc_ids: np.ndarray,
    queries: Any,
    query_ids: Any,
    settings: RankingSettings,
    rescore: bool,
) -> _Closed:
    """Near-tie rows rescored in float64 from the vectors (where ``rescore``),
    then, for an exact store, rows searched deeper until no unreturned
    document can reach rank ``k`` (:mod:`.tie_aware`)."""
    exact = is_exact(store)
    tol = tolerance_for(settings.tie_tolerance, queries, rescored=rescore)
    # deeper until no unreturned document can reach rank k (module tie_aware)
    reach = max(tol, error_bound(queries)) if rescore else tol
    rescorer = None
    if rescore:
        qids = np.arange(queries.shape[0]) if query_ids is None else query_ids
        rescorer = Rescorer(docs, doc_ids, queries, qids, tol)
        run = rescorer(run)
    n_ext, n_open, ext_s = 0, 0, 0.0
    if exact:
        count = store.count(collection) if isinstance(store, CollectionCatalog) else docs.shape[0]
        run, n_ext, n_open, ext_s = close_groups(
            store,
            collection,
            run,
            queries,
            query_ids,
            settings.k,
            reach,
            count,
            rescorer,
            window=rescore and settings.tie_tolerance is None,
            group_tol=tol,
        )
    n_rescored = rescorer.n_rescored if rescorer is not None else None
    return _Closed(run, tol, reach, exact, n_ext, n_open, ext_s, n_rescored)


def _repeats(run: Run) -> bool:
    """Whether some row returns a document twice (the tie-aware pass may then
    fail a query the store's run does not: the two are scored apart)."""
    if run.doc_ids.shape[1] < 2:
        return False
    d = np.sort(run.doc_ids, axis=1)
    return bool(((d[:, 1:] == d[:, :-1]) & (d[:, 1:] != NO_HIT)).any())


def _intervals(
    plain: EvaluationResult,
    ta: TieAwareResult,
    settings: RankingSettings,
    vec: dict[str, np.ndarray],
) -> dict[str, tuple[float, float]]:
    """Bootstrap intervals of the reported values: the tie-aware ones, the
    store's for measures without a tie-aware value (extra score columns), and
    the measures of the vectors. The bootstrap runs once, over them (the
    tie-rule intervals are not computed)."""
    others = [m for m in plain.measures if m not in ta.values]
    cols = [ta.values[m] for m in ta.measures] + [plain.values[m] for m in others]
    cols += list(vec.values())
    names = [*ta.measures, *others, *vec]
    if not (len(plain.query_ids) and names):
        return {m: (float("nan"), float("nan")) for m in names}
    lo, hi = bootstrap_ci(
        np.column_stack(cols), n_resamples=settings.n_bootstrap, seed=settings.seed
    )
    return {m: (lo[i], hi[i]) for i, m in enumerate(names)}


def _per_query(
    name: str,
    plain: EvaluationResult,
    errors: dict[Any, str],
    ta: TieAwareResult,
    vec: dict[str, np.ndarray],
) -> pd.DataFrame:
    """The per-query table: each tie-aware measure's column holds the value its
    mean is reported from (the expected value over the orders of tied
    documents, on the true ranking), so the column's mean is the headline
    number. (The store's tie-rule means are in the result's ``tie_rule``; a
    per-query copy of them would double the table, which a study holds until
    its cell is written.)"""
    cols = plain._columns()
    qids = plain.query_ids
    cols.setdefault("failed", np.zeros(len(qids), dtype=bool))
    if errors:
        cols["error"] = [errors.get(q) for q in qids.tolist()]
    # Rows of the tie-aware arrays for the table's queries (no (queries x
    # measures x 5) frame of ta.per_query: 38 MB at 47,675 queries).
    pos = pd.Index(ta.query_ids).get_indexer(np.asarray(qids))
    if (pos < 0).any():  # the two passes score the same qrels queries
        raise RuntimeError(
            f"per-query table: {int((pos < 0).sum())} queries have no tie-aware values "
            f"(e.g. {qids[pos < 0][0]!r})"
        )
    for m in ta.measures:
        if m in cols:
            cols[m] = np.asarray(ta.values[m])[pos]
    if vec:  # after the other measures, before missing/failed/error
        cols = {**{c: cols.pop(c) for c in [*cols][: 1 + len(plain.measures)]}, **vec, **cols}
    frame = pd.DataFrame(cols)
    frame.insert(0, "ranking", name)
    return frame


def _opt(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else f


def _py(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


@dataclass(frozen=True)
class _Facts:
    """What a ranking's result records beside its measures."""

    name: str
    n_docs: int
    index_build_s: float

    def result(
        self,
        searched: Searched,
        plain: EvaluationResult,
        errors: dict[Any, str],
        notes: tuple[str, ...],
        metrics: dict[str, float],
        tie_rule: dict[str, float],
        intervals: dict[str, tuple[float, float]],
        metrics_s: float,
    ) -> RankingResult:
        """The result: measures as given, failures and timings from the search."""
        return RankingResult(
            name=self.name,
            metrics=metrics,
            tie_rule=tie_rule,
            intervals={m: (float(lo), float(hi)) for m, (lo, hi) in intervals.items()},
            n_queries=len(plain.query_ids),
            n_docs=self.n_docs,
            n_failed=len(plain.failed_queries),
            n_missing=len(plain.missing_queries),
            n_ignored=len(plain.ignored_queries),
            failed_queries=tuple(_py(q) for q in plain.failed_queries[:100]),
            errors=tuple(dict.fromkeys(str(e) for e in errors.values()))[:5],
            timings=self.timings(searched.timings, metrics_s),
            reasons=tuple(notes),
        )

    def timings(self, t: dict[str, float], metrics_s: float) -> SearchTimings:
        """Speed of what was searched in this call; ``metrics_s`` the scoring."""
        n_batches = int(t.get("n_batches", 0) or 0)
        searched = int(t.get("n_batches_searched", n_batches) or 0)
        return SearchTimings(
            index_build_s=self.index_build_s,
            search_s=float(t.get("search_s", 0.0)),
            metrics_s=float(metrics_s),
            queries_per_s=_opt(t.get("queries_per_s")) if searched else None,
            batch_p50_ms=_opt(t.get("batch_p50_ms")),
            batch_p95_ms=_opt(t.get("batch_p95_ms")),
            batch_p99_ms=_opt(t.get("batch_p99_ms")),
            n_batches=n_batches,
            n_batches_searched=searched,
            n_batches_resumed=int(t.get("n_batches_resumed", n_batches - searched) or 0),
        )
