"""Index, score, drop: how every search-based task measures a ranking.

:func:`index_and_evaluate` creates a collection owned by this run (a unique
name: two runs sharing a server never touch each other's collections),
inserts the documents, scores each query set (the queries and perturbed
variants of them) with one call of
:func:`~imsearch_align.framework.ranking.score_ranking`, checks the store's
answers against the vectors (:mod:`.truth`), records each ranking in the
cell and drops the collection. Checkpoints are keyed on everything that
fixes the ranking: the documents and their ids, the config (method, store
and dataset parameters) and the ranking's name; and on the run token, so a
run resumes only the checkpoints of a run whose process is gone
(:mod:`imsearch_align.experiment.runs`), never a live run's.

What it needs of the cell is :class:`SearchContext` (a
:class:`~imsearch_align.experiment.context.TaskContext` is one).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.experiment.search_context import SearchContext
from imsearch_align.experiment.truth import check_truth
from imsearch_align.framework._heap import release_freed_memory
from imsearch_align.framework.evaluator import EvaluationAborted
from imsearch_align.framework.interfaces import CollectionCatalog, VectorStoreAdapter
from imsearch_align.framework.measures import default_measures as table_defaults
from imsearch_align.framework.metrics import Qrels, Run
from imsearch_align.framework.ranking import RankingResult, RankingSettings, score_ranking
from imsearch_align.framework.validation import array_buffer, is_sparse

__all__ = ["SearchContext", "default_measures", "index_and_evaluate"]

log = logging.getLogger(__name__)


def default_measures(k_values: tuple[int, ...]) -> list[str]:
    """The measures reported at each cutoff, from the measure table."""
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


def index_and_evaluate(
    ctx: SearchContext,
    name: str,
    docs: Any,
    doc_ids: Any,
    queries: Any,
    query_ids: Any,
    qrels: Qrels,
    *,
    measures: list[str] | None = None,
    k: int | None = None,
    searcher: VectorStoreAdapter | None = None,
    variants: Mapping[str, Any] | None = None,
    runs: dict[str, Run] | None = None,
) -> dict[str, RankingResult]:
    """Index ``docs`` in a new collection, score each query set, drop; one result per ranking.

    ``variants`` (label -> query vectors, same rows as ``queries``) are
    scored against the same index as ``f"{name}[{label}]"``. ``searcher``
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
        # A server store that makes inserted rows searchable in a step of its own
        # (Milvus: flush, index every row, load, count) does it here, inside the
        # build time, not in the first search.
        make_searchable = getattr(store, "make_searchable", None)
        if make_searchable is not None:
            make_searchable(collection)
        build_s = time.perf_counter() - t
        # One untimed query first: lazy imports and thread-pool start-up of the
        # store are not search speed.
        store.search(collection, queries[:1], k)
        settings = RankingSettings(
            k=k,
            measures=tuple(measures),
            batch_size=cfg.batch_size,
            workers=cfg.workers,
            seed=cfg.seed,
            progress=ctx.progress,
            checkpoint_key=(
                f"{cfg.key()}|{name}|{_digest(docs)}|{_digest(doc_ids)}|k={k}|run={ctx.run_token}"
            ),
            tie_tolerance=cfg.tie_tolerance,
        )
        out: dict[str, RankingResult] = {}
        labelled = {name: queries, **{f"{name}[{v}]": vq for v, vq in (variants or {}).items()}}
        for label, q in labelled.items():
            scored = _score(
                ctx,
                store if searcher is None else searcher,
                collection,
                label,
                docs=docs,
                doc_ids=doc_ids,
                queries=q,
                query_ids=query_ids,
                qrels=qrels,
                settings=replace(settings, checkpoint_dir=_checkpoint_dir(ctx, label)),
                rescore=searcher is None,
                index_build_s=build_s,
            )
            ranking = scored.result
            if label == name and searcher is None:
                ranking = check_truth(ctx, store, collection, docs, doc_ids, q, k, ranking)
            out[label] = ctx.done[label] = ranking
            if runs is not None:
                runs[label] = scored.run
            ctx.per_query.append(scored.per_query)
            del scored  # its per-query arrays are in the cell's table now
    finally:
        try:
            store.drop_collection(collection)
        except Exception as exc:  # dropping must not hide the real error
            log.warning("dropping collection %s failed: %s", collection, exc)
        release_freed_memory()  # the index, the runs and their tables
    return out


def _score(
    ctx: SearchContext, searcher: VectorStoreAdapter, collection: str, label: str, **kw: Any
):
    """One query set scored; a store that became unavailable fails the run
    (the error propagates), but the batches that finished are kept: their
    ranking goes to ``ctx.done``, so the failed result still holds what was
    measured."""
    try:
        return score_ranking(searcher, collection, label, **kw)
    except EvaluationAborted as err:
        if isinstance(err.partial, RankingResult):
            ctx.done[label] = err.partial
        raise


def _drop_leftover(store: VectorStoreAdapter, collection: str) -> None:
    """Drop this run's own collection left by an interrupted attempt (same run
    token, so the same name: nobody else's), before indexing again."""
    if isinstance(store, CollectionCatalog) and store.has_collection(collection):
        log.info("dropping %s, left by an interrupted attempt of this run", collection)
        store.drop_collection(collection)


def _checkpoint_dir(ctx: SearchContext, label: str) -> Path | None:
    """The ranking's checkpoint folder under the cell's (None: not checkpointed)."""
    if ctx.checkpoint_root is None:
        return None
    slug = "".join(c if c.isalnum() else "_" for c in label)
    return ctx.checkpoint_root / slug
