"""Index, evaluate, drop: how every search-based task measures a ranking.

:func:`index_and_evaluate` creates a collection owned by this run (a unique
name: two runs sharing a server never touch each other's collections),
inserts the documents, evaluates the queries (and perturbed variants of
them) with :class:`~imsearch_align.framework.evaluator.BenchmarkEvaluator`,
optionally measures ANN fidelity from the true inner products of the
returned ids, and drops the collection. Checkpoints are keyed on everything
that fixes the ranking: the documents and their ids, the config (method,
store and dataset parameters) and the ranking's name.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from imsearch_align.experiment.result import RankingResult, SearchTimings
from imsearch_align.framework._heap import release_freed_memory
from imsearch_align.framework.evaluator import (
    BenchmarkEvaluator,
    BenchmarkResult,
    EvaluationAborted,
    NaNScoreError,
)
from imsearch_align.framework.metrics import bootstrap_ci
from imsearch_align.framework.validation import array_buffer, is_sparse

__all__ = ["default_measures", "index_and_evaluate", "ranking_result"]

log = logging.getLogger(__name__)


def default_measures(k_values: tuple[int, ...]) -> list[str]:
    """The measures reported at each cutoff, from the measure table."""
    from imsearch_align.framework.measures import default_measures as table_defaults

    return table_defaults(k_values)


def _digest(x: Any) -> str:
    """Content digest of a dense or CSR matrix (or id array)."""
    h = hashlib.sha256()
    # hashed through the array's buffer: no bytes copy of the (largest) matrix
    if is_sparse(x):
        for part in (x.data, x.indices, x.indptr):
            h.update(array_buffer(part))
        h.update(str(x.shape).encode())
    else:
        a = np.ascontiguousarray(x)
        h.update(str((a.shape, a.dtype)).encode())
        h.update(array_buffer(a))
    return h.hexdigest()[:16]


def _distinct_errors(res: BenchmarkResult, limit: int = 5) -> tuple[str, ...]:
    return tuple(dict.fromkeys(str(e) for e in res.errors.values()))[:limit]


def _opt(x: Any) -> float | None:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else f


def ranking_result(
    name: str,
    res: BenchmarkResult,
    *,
    n_docs: int,
    index_build_s: float,
    fidelity: Mapping[str, float] | None = None,
    ties: Any = None,
) -> RankingResult:
    """The typed summary of one evaluation; with ``ties`` (a tie-aware result)
    the metrics and their intervals are the expected values over tie orders
    and ``tie_rule`` keeps the id-ascending values."""
    t = res.timings
    n_batches = int(t.get("n_batches", 0) or 0)
    searched = int(t.get("n_batches_searched", n_batches) or 0)
    timings = SearchTimings(
        index_build_s=float(index_build_s),
        search_s=float(t.get("search_s", 0.0)),
        metrics_s=float(t.get("metrics_s", 0.0)),
        queries_per_s=_opt(t.get("queries_per_s")) if searched else None,
        batch_p50_ms=_opt(t.get("batch_p50_ms")),
        batch_p95_ms=_opt(t.get("batch_p95_ms")),
        batch_p99_ms=_opt(t.get("batch_p99_ms")),
        n_batches=n_batches,
        n_batches_searched=searched,
        n_batches_resumed=int(t.get("n_batches_resumed", n_batches - searched) or 0),
    )
    ev = res.evaluation
    metrics, tie_rule = res.mean(), {}
    if ties is None:
        intervals = dict(res.intervals)
    else:
        # The intervals are those of the reported (tie-aware) values; the bootstrap
        # runs once, over them (the tie-rule intervals are not computed).
        tie_rule = {m: metrics[m] for m in ties.measures}
        metrics = {**metrics, **ties.mean()}
        others = [m for m in res.measures if m not in ties.values]
        cols = [ties.values[m] for m in ties.measures] + [ev.values[m] for m in others]
        names = [*ties.measures, *others]
        intervals = {m: (float("nan"), float("nan")) for m in names}
        if len(ev.query_ids) and names:
            lo, hi = bootstrap_ci(np.column_stack(cols), n_resamples=res.n_bootstrap, seed=res.seed)
            intervals = {m: (lo[i], hi[i]) for i, m in enumerate(names)}
    return RankingResult(
        name=name,
        metrics=metrics,
        tie_rule=tie_rule,
        intervals={m: (float(lo), float(hi)) for m, (lo, hi) in intervals.items()},
        n_queries=len(ev.query_ids),
        n_docs=int(n_docs),
        n_failed=len(res.failed_queries),
        n_missing=len(ev.missing_queries),
        n_ignored=len(ev.ignored_queries),
        failed_queries=tuple(_py(q) for q in res.failed_queries[:100]),
        errors=_distinct_errors(res),
        timings=timings,
        fidelity=dict(fidelity or {}),
        reasons=tuple(res.notes),
    )


def _py(x: Any) -> Any:
    return x.item() if isinstance(x, np.generic) else x


def _evaluate(
    ctx: Any,
    label: str,
    ev: BenchmarkEvaluator,
    queries: Any,
    qrels: Any,
    query_ids: Any,
    doc_ids: np.ndarray,
    n_docs: int,
    build_s: float,
) -> BenchmarkResult:
    """Evaluate; a NaN score fails those queries (kept and named), not the run.

    A store that became unavailable fails the run (the error propagates), but
    the batches that finished are kept: their ranking goes to ``ctx.done``, so
    the failed result still holds what was measured.
    """
    try:
        return ev.evaluate(queries, qrels, query_ids=query_ids, collection_ids=doc_ids)
    except NaNScoreError as err:
        if err.partial is None:
            raise
        return err.partial
    except EvaluationAborted as err:
        if err.partial is not None:
            ctx.done[label] = ranking_result(
                label, err.partial, n_docs=n_docs, index_build_s=build_s
            )
        raise


def index_and_evaluate(
    ctx: Any,
    name: str,
    docs: Any,
    doc_ids: Any,
    queries: Any,
    query_ids: Any,
    qrels: Any,
    *,
    measures: list[str] | None = None,
    k: int | None = None,
    searcher: Any = None,
    variants: Mapping[str, Any] | None = None,
    runs: dict[str, Any] | None = None,
) -> dict[str, RankingResult]:
    """Index ``docs`` in a new collection, evaluate, drop; one result per ranking.

    ``variants`` (label -> query vectors, same rows as ``queries``) are
    evaluated against the same index as ``f"{name}[{label}]"``. ``searcher``
    wraps the store for searching (classification's best-prompt mapping).
    Per-query frames are added to ``ctx.per_query``; with ``runs`` (a dict)
    each ranking's :class:`~imsearch_align.framework.metrics.Run` is put there too.
    """
    cfg = ctx.config
    store = ctx.store
    measures = default_measures(cfg.k_values) if measures is None else list(measures)
    k = max(cfg.k_values) if k is None else k
    doc_ids = np.asarray(doc_ids, dtype=np.int64)
    collection = ctx.collection_name(name)
    _drop_leftover(store, collection)
    # What the previous phase freed (the transform's blocks, the last index's
    # rankings and tables, dropped only once its function returned) goes back
    # to the OS before this index is built: ASIF's caption postings were built
    # on top of ~50 MiB of it.
    release_freed_memory()
    t = time.perf_counter()
    store.create_collection(
        collection, int(docs.shape[1]), sparse=bool(is_sparse(docs)), metric="ip"
    )
    try:
        store.insert(collection, docs, doc_ids)
        build_s = time.perf_counter() - t
        # One untimed query first: lazy imports and thread-pool start-up of the
        # store are not search speed.
        store.search(collection, queries[:1], k)
        spec = _Spec(
            collection=collection,
            searcher=store if searcher is None else searcher,
            measures=measures,
            k=k,
            ckpt_key=f"{cfg.key()}|{name}|{_digest(docs)}|{_digest(doc_ids)}|k={k}",
            build_s=build_s,
        )
        out: dict[str, RankingResult] = {}
        labelled = {name: queries, **{f"{name}[{v}]": vq for v, vq in (variants or {}).items()}}
        for label, q in labelled.items():
            res, ranking, ta = _one_ranking(ctx, spec, label, docs, doc_ids, q, query_ids, qrels)
            if label == name and searcher is None:
                ranking = _check_truth(ctx, store, collection, docs, doc_ids, q, k, ranking)
            out[label] = ctx.done[label] = ranking
            if runs is not None:
                runs[label] = res.run
            frame = per_query_frame(res.per_query, ta)
            del ta  # its per-query arrays are in the frame now
            frame.insert(0, "ranking", label)
            ctx.per_query.append(frame)
    finally:
        try:
            store.drop_collection(collection)
        except Exception as exc:  # dropping must not hide the real error
            log.warning("dropping collection %s failed: %s", collection, exc)
        release_freed_memory()  # the index, the runs and their tables
    return out


@dataclass(frozen=True)
class _Spec:
    """What every ranking of one index shares."""

    collection: str
    searcher: Any
    measures: list[str]
    k: int
    ckpt_key: str
    build_s: float


def _one_ranking(
    ctx: Any,
    spec: _Spec,
    label: str,
    docs: Any,
    doc_ids: np.ndarray,
    q: Any,
    query_ids: Any,
    qrels: Any,
) -> tuple[BenchmarkResult, RankingResult]:
    """Evaluate one query set (one rank deeper than the cut-offs, to see tie
    groups crossing them), then score it tie-aware."""
    from imsearch_align.experiment.tie_aware import (
        Rescorer,
        close_groups,
        error_bound,
        is_exact,
        tie_summary,
        tolerance_for,
    )
    from imsearch_align.framework.interfaces import CollectionCatalog
    from imsearch_align.framework.ties import tie_aware_evaluate

    cfg = ctx.config
    ev = BenchmarkEvaluator(
        spec.searcher,
        spec.collection,
        k=spec.k + 1,
        measures=spec.measures,
        batch_size=cfg.batch_size,
        workers=cfg.workers,
        progress=ctx.progress,
        seed=cfg.seed,
        checkpoint_dir=_checkpoint_dir(ctx, label),
        checkpoint_key=spec.ckpt_key,
    )
    res = _evaluate(ctx, label, ev, q, qrels, query_ids, doc_ids, docs.shape[0], spec.build_s)
    exact = is_exact(spec.searcher)
    # Float64 scores of the vectors where the store's float32 scores cannot
    # order neighbours; a wrapped searcher (classification's best-prompt
    # mapping) returns ids that are not rows of docs: its scores stand.
    rescorable = spec.searcher is ctx.store
    tol = tolerance_for(cfg, q, rescored=rescorable)
    # deeper until no unreturned document can reach rank k (module tie_aware)
    reach = max(tol, error_bound(q)) if rescorable else tol
    rescore = None
    if rescorable:
        qids = np.arange(q.shape[0]) if query_ids is None else query_ids
        rescore = Rescorer(docs, doc_ids, q, qids, tol)
    run, n_ext, n_open, ext_s = res.run, 0, 0, 0.0
    if rescore is not None:
        run = rescore(run)
    if exact:
        s = spec.searcher
        count = s.count(spec.collection) if isinstance(s, CollectionCatalog) else docs.shape[0]
        run, n_ext, n_open, ext_s = close_groups(
            s,
            spec.collection,
            run,
            q,
            query_ids,
            spec.k,
            reach,
            count,
            rescore,
            window=rescorable and cfg.tie_tolerance is None,
            group_tol=tol,
        )
    ta = tie_aware_evaluate(
        run,
        qrels,
        [m for m in spec.measures if m in res.measures],
        tol=tol,
        groups_closed=exact and not n_open,
        failed_queries=list(res.errors),
        lenient=True,
    )
    ranking = ranking_result(label, res, n_docs=docs.shape[0], index_build_s=spec.build_s, ties=ta)
    summary = tie_summary(
        ta,
        exact=exact,
        n_extended=n_ext,
        n_open=n_open,
        extend_s=ext_s,
        n_rescored=rescore.n_rescored if rescore is not None else None,
        error=reach,
    )
    ranking = replace(ranking, ties=summary)
    return res, ranking, ta


def per_query_frame(plain: Any, ta: Any) -> Any:
    """The per-query table a result file keeps: each tie-aware measure's
    column holds the value its mean is reported from (the expected value over
    the orders of tied documents, on the true ranking), so the column's mean
    is the headline number. (The store's tie-rule means are in the result's
    ``tie_rule``; a per-query copy of them would double the table, which a
    study holds until its cell is written.)"""
    import pandas as pd

    # Rows of the tie-aware arrays for the table's queries (no (queries x
    # measures x 5) frame of ta.per_query: 38 MB at 47,675 queries).
    pos = pd.Index(ta.query_ids).get_indexer(plain["query_id"].to_numpy())
    if (pos < 0).any():  # the two passes score the same qrels queries
        raise RuntimeError(
            f"per-query table: {int((pos < 0).sum())} queries have no tie-aware values "
            f"(e.g. {plain['query_id'][pos < 0].iloc[0]!r})"
        )
    frame = plain.copy()
    for c in ta.measures:
        if c in frame.columns:
            frame[c] = np.asarray(ta.values[c])[pos]
    return frame


#: Queries whose answers are checked against the vectors when ann_fidelity is off.
TRUTH_SAMPLE = 200


def _check_truth(
    ctx: Any,
    store: Any,
    collection: str,
    docs: Any,
    doc_ids: np.ndarray,
    q: Any,
    k: int,
    ranking: RankingResult,
) -> RankingResult:
    """Never believe the store: recompute the inner products of the ids it
    returns (all queries with ``ann_fidelity``, else a seeded sample of
    ``TRUTH_SAMPLE``); a wrong score or id makes the run degraded, with the fault named."""
    from imsearch_align.framework.interfaces import StoreUnavailableError

    cfg = ctx.config
    try:
        if cfg.ann_fidelity:
            rep = _fidelity(store, collection, docs, doc_ids, q, k, cfg.batch_size)
            ranking = replace(ranking, fidelity=rep.as_metrics())
            what = "the store's results fail the truth check"
        else:
            n = q.shape[0]
            pick = np.random.default_rng(cfg.seed).choice(n, min(TRUTH_SAMPLE, n), replace=False)
            rows = np.sort(pick)
            rep = _fidelity(store, collection, docs, doc_ids, q[rows], k, len(rows))  # one call
            what = f"the store's answers to a sample of {len(rows)} queries fail the truth check"
    except StoreUnavailableError:
        raise
    except Exception as exc:  # unchecked is not the same as checked: say so
        ctx.note(f"{ranking.name}: the truth check could not run ({type(exc).__name__}: {exc})")
        return ranking
    if not rep.ok:
        ctx.note(f"{ranking.name}: {what} ({rep.first_problem})")
    return ranking


def _drop_leftover(store: Any, collection: str) -> None:
    """Drop this run's own collection left by an interrupted attempt (same run
    token, so the same name: nobody else's), before indexing again."""
    from imsearch_align.framework.interfaces import CollectionCatalog

    if isinstance(store, CollectionCatalog) and store.has_collection(collection):
        log.info("dropping %s, left by an interrupted attempt of this run", collection)
        store.drop_collection(collection)


def _checkpoint_dir(ctx: Any, label: str) -> Any:
    if ctx.checkpoint_root is None:
        return None
    slug = "".join(c if c.isalnum() else "_" for c in label)
    return ctx.checkpoint_root / slug


def _fidelity(
    store: Any, collection: str, docs: Any, doc_ids: np.ndarray, queries: Any, k: int, step: int
) -> Any:
    """The store's recall@k and score truth, from the true inner products of the
    ids it returns (a :class:`~imsearch_align.framework.fidelity.FidelityReport`);
    searched in batches of ``step`` queries, as the evaluator does."""
    from imsearch_align.framework.fidelity import ann_recall
    from imsearch_align.framework.interfaces import SearchResult

    parts = [
        store.search(collection, queries[i : i + step], k) for i in range(0, queries.shape[0], step)
    ]
    return ann_recall(SearchResult.concat(parts), docs, doc_ids, queries, k)
