"""The measures of a ranking computed from the indexed vectors of its
documents (``Diversity@k``), beside the measures of the judgements.

:class:`VectorMeasures` picks them out of a ranking's measure names (the
entries of :mod:`~imsearch_align.framework.measures` with a
``vector_kernel``), refuses them where the store's ids are not rows of the
indexed documents, and computes them per qrels query: on the true ranking
as the expected value over the orders of the tie groups crossing the
cut-off (the groups the tie-aware pass forms, with its tolerance; a group
an inexact store cut off at the end of its answer counts its returned
members, as the tie-aware pass does), on the store's run in its order (the
tie rule). Failed queries and queries without a row score 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.diversity import DocVectors
from imsearch_align.framework.interfaces import NO_HIT
from imsearch_align.framework.measures import lookup, needs_vectors
from imsearch_align.framework.metrics import EvaluationResult, Run
from imsearch_align.framework.ties import tie_groups

__all__ = ["VectorMeasures"]


@dataclass(frozen=True)
class VectorMeasures:
    """The measures of the indexed vectors asked of a ranking, and the vectors
    (:class:`~imsearch_align.framework.diversity.DocVectors`; None without such measures)."""

    names: tuple[str, ...]
    vecs: DocVectors | None

    @classmethod
    def of(cls, measures: tuple[str, ...], docs: Any, doc_ids: Any, rescore: bool):
        """The vector measures among ``measures``; refused where the ids are no rows of docs."""
        names = tuple(m for m in measures if needs_vectors(m))
        if not names:
            return cls((), None)
        if not rescore or docs is None:
            raise ValueError(
                f"{', '.join(names)}: computed from the indexed vectors of the returned "
                "documents, but this searcher's ids are not rows of the indexed documents "
                "(e.g. classification's classes), so their vectors are not available; "
                "leave these measures out for it"
            )
        if len(names) == len(measures):
            raise ValueError(
                f"{', '.join(names)}: a measure of the vectors needs at least one measure of "
                "the relevance judgements beside it (e.g. HitRate@10), which fixes the "
                "queries scored and the failures"
            )
        return cls(names, DocVectors(docs, doc_ids))

    def values(
        self, run: Run, groups: np.ndarray | None, plain: EvaluationResult
    ) -> dict[str, np.ndarray]:
        """Each measure per qrels query of ``plain`` (0 where failed or not in ``run``)."""
        if not self.names:
            return {}
        if not len(run):
            return {m: np.zeros(len(plain.query_ids)) for m in self.names}
        rows = self.vecs.rows(run.doc_ids, no_hit=NO_HIT)
        by_row = {}
        for m in self.names:
            meas, k = lookup(m)
            by_row[m] = meas.vector_kernel(self.vecs, rows, groups, k)
        pos = pd.Index(run.query_ids).get_indexer(np.asarray(plain.query_ids))
        zero = (pos < 0) | np.isin(plain.query_ids, plain.failed_queries)
        return {m: np.where(zero, 0.0, v[np.maximum(pos, 0)]) for m, v in by_row.items()}

    def expected_and_rule(
        self, true_run: Run, tol: float, store_run: Run, plain: EvaluationResult
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The expected values over tie orders on the true ranking, and the
        tie-rule values on the store's run (one pass when they are the same
        run and no tie group crosses a cut-off)."""
        if not self.names:
            return {}, {}
        groups = tie_groups(true_run, tol=tol)
        crossing = False  # a tie group at some cut-off k going on past it
        for k in (lookup(m)[1] for m in self.names):
            if groups.shape[1] > k:
                at_k = groups[:, k - 1]
                crossing |= bool(((at_k >= 0) & (groups[:, k] == at_k)).any())
        if true_run is store_run and not crossing:
            same = self.values(true_run, None, plain)
            return same, same
        return self.values(true_run, groups, plain), self.values(store_run, None, plain)

    @staticmethod
    def means(values: dict[str, np.ndarray]) -> dict[str, float]:
        """Mean of each measure over the qrels queries (NaN without any)."""
        return {m: float(v.mean()) if len(v) else float("nan") for m, v in values.items()}
