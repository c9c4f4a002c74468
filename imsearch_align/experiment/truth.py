"""Never believe a store: the truth check of a ranking's answers.

:func:`check_truth` recomputes the inner products of the ids the store
returned (every query with ``ann_fidelity``, else a seeded sample of
:data:`TRUTH_SAMPLE`) and names the fault in the run's reasons; with
``ann_fidelity`` the store's recall and score truth go into the ranking's
``fidelity``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from imsearch_align.framework.interfaces import (
    SearchResult,
    StoreUnavailableError,
    VectorStoreAdapter,
)
from imsearch_align.framework.ranking import RankingResult

if TYPE_CHECKING:
    from imsearch_align.experiment.search_context import SearchContext

__all__ = ["TRUTH_SAMPLE", "check_truth"]

#: Queries whose answers are checked against the vectors when ann_fidelity is off.
TRUTH_SAMPLE = 200


def check_truth(
    ctx: SearchContext,
    store: VectorStoreAdapter,
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


def _fidelity(
    store: VectorStoreAdapter,
    collection: str,
    docs: Any,
    doc_ids: np.ndarray,
    queries: Any,
    k: int,
    step: int,
) -> Any:
    """The store's recall@k and score truth, from the true inner products of the
    ids it returns (a :class:`~imsearch_align.framework.fidelity.FidelityReport`);
    searched in batches of ``step`` queries, as the evaluator does."""
    from imsearch_align.framework.fidelity import ann_recall

    parts = [
        store.search(collection, queries[i : i + step], k) for i in range(0, queries.shape[0], step)
    ]
    return ann_recall(SearchResult.concat(parts), docs, doc_ids, queries, k)
