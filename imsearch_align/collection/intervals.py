"""How sure a cell's task quality is, and whether an approximate index is as good as exact.

:func:`quality_intervals`: per task measure (HitRate@10, nDCG@10..., one value
per query), a percentile bootstrap interval of the approximate index's mean, of
exact search's and of their **paired** difference (approximate − exact, query by
query), all three from the same resamples.

Queries are resampled **by cluster** (:func:`clustered_bootstrap`): in
text-to-image retrieval the captions of one image are one cluster (their hits go
together), in image-to-text each query is its own. Whole clusters are drawn with
replacement; a resample's mean is the ratio estimator (the drawn clusters' sum
over their number of queries, with multiplicity). Resampling captions as if
independent makes the interval too narrow (it under-covers).

The deploy rule that reads these intervals (the fastest setting as good as exact) is
:func:`~imsearch_align.experiment.deploy.deploy_by_quality`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_int

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_RESAMPLES",
    "cell_intervals",
    "clustered_bootstrap",
    "interval_meta",
    "judged_clusters",
    "quality_intervals",
]

#: Bootstrap resamples of :func:`clustered_bootstrap` and :func:`quality_intervals`.
DEFAULT_RESAMPLES = 1000
#: Two-sided level of their intervals.
DEFAULT_LEVEL = 0.95
#: The method, as :func:`interval_meta` records it.
METHOD = "percentile bootstrap, queries resampled by cluster"


def _is_number(x: Any) -> bool:
    """Whether ``x`` is a real number (a bool is not)."""
    return not isinstance(x, bool) and isinstance(x, int | float | np.integer | np.floating)


def _check_level(level: Any) -> float:
    """``level`` as a float in the open interval (0, 1)."""
    if not _is_number(level) or not 0 < float(level) < 1:  # NaN fails the comparison
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return float(level)


def _cluster_codes(clusters: Any, n: int) -> tuple[np.ndarray | None, int]:
    """``(codes, n_clusters)``: each query's cluster as ``0..n_clusters-1``.

    ``codes`` is None when ``clusters`` is None (each query its own cluster);
    ids are numbered in sorted order (:func:`numpy.unique`).
    """
    if clusters is None:
        return None, n
    ids = np.asarray(clusters)
    if ids.ndim != 1 or len(ids) != n:
        raise ValueError(
            f"clusters must be a 1-D sequence of one id per query ({n}), got shape {ids.shape}"
        )
    uniq, codes = np.unique(ids, return_inverse=True)
    return np.asarray(codes, dtype=np.int64).reshape(n), len(uniq)


def _resampled_means(
    sums: np.ndarray, sizes: np.ndarray, n_resamples: int, seed: int
) -> np.ndarray:
    """``(n_resamples, m)`` ratio-estimator means of clusters drawn with replacement.

    A resample's multiplicity counts of the ``G`` clusters (one bincount per
    chunk) times the per-cluster sums and sizes (one matrix product) give its
    totals without gathering queries. The draws depend only on ``G``,
    ``n_resamples`` and ``seed``: columns computed together or apart see the same.
    """
    g, m = sums.shape
    table = np.column_stack([sums, sizes.astype(np.float64)])  # (G, m + 1)
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, m))
    chunk = max(1, 1_000_000 // g)  # ~16 MB of draws and counts per chunk
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, g, size=(b, g), dtype=np.int64)
        idx += (np.arange(b, dtype=np.int64) * g)[:, None]
        counts = np.bincount(idx.ravel(), minlength=b * g).reshape(b, g)
        totals = counts.astype(np.float64) @ table
        means[start : start + b] = totals[:, :m] / totals[:, m:]
    return means


def clustered_bootstrap(
    values: Any,
    clusters: Any = None,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Column means of ``values`` and their percentile interval, clusters resampled.

    Args:
        values: ``(n,)`` or ``(n, m)`` finite per-query values (rows are queries).
        clusters: ``(n,)`` cluster id of each query (ints, strings: ids
            :func:`numpy.unique` sorts); None: each query its own cluster, the row
            bootstrap of :func:`~imsearch_align.framework.metrics.result.bootstrap_ci`.
        n_resamples: bootstrap resamples (>= 1).
        level: two-sided level of the interval, in (0, 1).
        seed: seed of the generator; identical inputs give identical outputs.

    Returns:
        ``(mean, low, high)``, float64 arrays of length ``m`` (1 for 1-D ``values``):
        the column means and the ``(1 ∓ level) / 2`` quantiles of the resampled
        ratio-estimator means; all NaN when there are no queries.

    Raises:
        ValueError: ``values`` not 1-D or 2-D or not finite, ``clusters`` not one
            id per query, ``level`` outside (0, 1), ``n_resamples`` < 1.
    """
    level = _check_level(level)
    n_resamples = check_int(n_resamples, "n_resamples", low=1)
    seed = check_int(seed, "seed", low=0)
    v = np.asarray(values, dtype=np.float64)
    v = v[:, None] if v.ndim == 1 else v
    if v.ndim != 2:
        raise ValueError(f"values must be 1-D or 2-D (queries x measures), got shape {v.shape}")
    n, m = v.shape
    codes, g = _cluster_codes(clusters, n)
    if n == 0:
        nan = np.full(m, np.nan)
        return nan, nan.copy(), nan.copy()
    if not np.isfinite(v).all():
        raise ValueError("values must be finite (a NaN or infinity came)")
    if codes is None:
        sums, sizes = v, np.ones(n, dtype=np.int64)
    else:
        sums = np.column_stack([np.bincount(codes, weights=v[:, j], minlength=g) for j in range(m)])
        sizes = np.bincount(codes, minlength=g)
    means = _resampled_means(sums, sizes, n_resamples, seed)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha], axis=0)
    return v.mean(axis=0), low, high


def _columns(name: str, values: Mapping[str, Any], names: list[str], n: int) -> np.ndarray:
    """``values[k]`` for each of ``names``, one float64 column of ``n`` queries each."""
    cols = [np.asarray(values[k], dtype=np.float64) for k in names]
    for k, col in zip(names, cols):
        if col.shape != (n,):
            raise ValueError(f"{name}[{k!r}] must have shape ({n},), got shape {col.shape}")
    return np.column_stack(cols)


def quality_intervals(
    approximate: Mapping[str, Any],
    exact: Mapping[str, Any],
    clusters: Any = None,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> dict[str, dict[str, Any]]:
    """Intervals of each measure's approximate mean, exact mean and paired difference.

    Args:
        approximate: measure name -> ``(n,)`` per-query values of the approximate index.
        exact: the same measure names -> ``(n,)`` values of exact search, same query order.
        clusters: ``(n,)`` cluster id of each query, or None (each query its own);
            see :func:`clustered_bootstrap`.
        n_resamples: bootstrap resamples (>= 1).
        level: two-sided level, in (0, 1).
        seed: generator seed; all measures and all three parts use the same draws.

    Returns:
        measure -> ``{"approximate": q, "exact": q, "difference": q}`` with ``q``
        ``{"mean", "low", "high"}`` plain floats (NaN when there are no queries).
        ``difference`` is approximate − exact query by query, bootstrapped as one
        more column (its mean is the difference of the two means).

    Raises:
        ValueError: different measure names, arrays not all ``(n,)``, or as
            :func:`clustered_bootstrap`.
    """
    names = list(approximate)
    if set(names) != set(exact):
        raise ValueError(
            f"approximate and exact must name the same measures, got {sorted(names)} "
            f"and {sorted(exact)}"
        )
    if not names:
        return {}
    n = int(np.size(approximate[names[0]]))
    a, e = _columns("approximate", approximate, names, n), _columns("exact", exact, names, n)
    mean, low, high = clustered_bootstrap(
        np.hstack([a, e, a - e]), clusters, n_resamples=n_resamples, level=level, seed=seed
    )
    k = len(names)
    parts = (("approximate", 0), ("exact", k), ("difference", 2 * k))  # column offsets
    return {
        name: {
            part: {"mean": float(mean[o + j]), "low": float(low[o + j]), "high": float(high[o + j])}
            for part, o in parts
        }
        for j, name in enumerate(names)
    }


def interval_meta(
    clusters: Any,
    n_queries: int,
    *,
    n_resamples: int = DEFAULT_RESAMPLES,
    level: float = DEFAULT_LEVEL,
    seed: int = 0,
) -> dict[str, Any]:
    """How :func:`quality_intervals` was computed, JSON-ready.

    Returns:
        ``{"method", "level", "resamples", "seed", "queries", "clusters"}``, the
        last the number of distinct cluster ids (``n_queries`` for None).
    """
    n_queries = check_int(n_queries, "n_queries", low=0)
    _, g = _cluster_codes(clusters, n_queries)
    return {
        "method": METHOD,
        "level": _check_level(level),
        "resamples": check_int(n_resamples, "n_resamples", low=1),
        "seed": check_int(seed, "seed", low=0),
        "queries": n_queries,
        "clusters": int(g),
    }


def judged_clusters(qrels: Any, query_ids: Any) -> np.ndarray:
    """The cluster of each query of ``query_ids``: queries judged relevant to the same
    documents are one cluster (the captions of one image in text-to-image), every other
    query its own (an image's own captions in image-to-text; a query with no relevant
    document).

    Args:
        qrels: the judgements (:class:`~imsearch_align.framework.metrics.qrels.Qrels`).
        query_ids: the queries, in the order of the per-query values.

    Returns:
        ``(n,)`` int64 cluster codes.
    """
    qids = np.asarray(query_ids)
    rel = np.asarray(qrels.relevance) > 0
    q, d = np.asarray(qrels.query_ids)[rel], np.asarray(qrels.doc_ids)[rel]
    order = np.lexsort((d, q)) if len(q) else np.zeros(0, dtype=np.int64)
    q, d = q[order], d[order]
    judged: dict[Any, tuple] = {}
    if len(q):
        starts = np.flatnonzero(np.r_[True, q[1:] != q[:-1]])
        for a, b in zip(starts.tolist(), [*starts[1:].tolist(), len(q)], strict=True):
            judged[q[a].item()] = tuple(d[a:b].tolist())
    codes: dict[tuple, int] = {}
    out = np.empty(len(qids), dtype=np.int64)
    for i, qid in enumerate(qids.tolist()):
        key = judged.get(qid) or ("query", qid)
        out[i] = codes.setdefault(key, len(codes))
    return out


def cell_intervals(
    approximate: Any,
    exact: Any,
    qrels: Any,
    direction: str,
    *,
    seed: int = 0,
    clusters: np.ndarray | None = None,
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """A study cell's intervals: per ``direction/measure``, the approximate and exact means
    and their paired difference (:func:`quality_intervals`, clustered by
    :func:`judged_clusters`), and the method's record (:func:`interval_meta`).

    Args:
        approximate, exact: the cell's tie-aware results (``values`` per measure, one
            value per query of ``query_ids``; both over the same queries in one order).
        qrels: the judgements the measures were scored on.
        direction: the cell's direction (the keys' prefix).
        seed: the bootstrap's seed.
        clusters: the queries' :func:`judged_clusters`, when the caller has them.
    """
    if not np.array_equal(np.asarray(approximate.query_ids), np.asarray(exact.query_ids)):
        raise ValueError("cell_intervals: the approximate and exact results hold other queries")
    if clusters is None:
        clusters = judged_clusters(qrels, approximate.query_ids)
    names = [m for m in approximate.values if m in exact.values]
    found = quality_intervals(
        {m: approximate.values[m] for m in names},
        {m: exact.values[m] for m in names},
        clusters,
        seed=seed,
    )
    meta = interval_meta(clusters, len(clusters), seed=seed)
    return {f"{direction}/{m}": v for m, v in found.items()}, meta
