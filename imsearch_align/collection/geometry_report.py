"""The distractors beside the real split, as the study reports them (``distractors.md``).

Distractors only test retrieval when they look like the real documents: a
set that is easier or harder to confuse with them than real data would be
makes every number of the study say more about the distractors than about
the method. :func:`distractor_report` puts, for one fitted method and
direction, the statistics of
:func:`~imsearch_align.collection.stats.describe` (mean pairwise cosine,
spectrum shares, nearest-neighbour cosine quantiles) of the split's
documents and of a seeded sample of the distractors side by side, raw (the
encoder's space) and aligned (the method's), and how close the sampled
queries come to each: the quantiles of a query's best cosine among the
test documents and among as many distractors. On real distractors the two
best-match distributions are alike; distractors that sit far closer to the
queries than the documents do (a smooth synthetic mixture can) explain a
collapse of quality with collection size that real data would not show.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imsearch_align.collection.prepare import Prepared
from imsearch_align.collection.stats import describe, sample_rows, side_by_side

__all__ = ["best_match_quantiles", "distractor_report"]

#: Quantiles of the best-match cosines reported.
QUANTILES = (0.1, 0.5, 0.9)


def _unit(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    n = np.linalg.norm(X, axis=1, keepdims=True)
    return X / np.where(n > 0, n, 1.0)


def best_match_quantiles(queries: np.ndarray, docs: np.ndarray) -> dict[str, float]:
    """Quantiles of each query's largest cosine to ``docs`` (float64)."""
    best = (_unit(queries) @ _unit(docs).T).max(axis=1)
    return {f"q{q}": float(np.quantile(best, q)) for q in QUANTILES}


def distractor_report(
    prep: Prepared,
    raw_docs: np.ndarray,
    source: Any,
    *,
    title: str,
    sample: int = 2000,
    seed: int = 0,
) -> str:
    """One Markdown section: ``source`` beside ``prep``'s documents, raw and aligned.

    Args:
        prep: the fitted method's :class:`~imsearch_align.collection.prepare.Prepared`.
        raw_docs: the split's documents in the encoder's space (the rows ``prep.docs`` aligns).
        source: the distractor source (raw rows of the documents' modality).
        title: the section's heading.
        sample: rows of each set sampled (the distractors: the source's first ones).
    """
    head = source.head(min(sample, source.n_rows))
    raw_d = sample_rows(head, sample, seed)[0]  # every row of the head, in order
    fn = (
        prep.method.transform_images
        if prep.doc_modality == "image"
        else prep.method.transform_texts
    )
    aligned_d = np.asarray(fn(raw_d), dtype=np.float32) if len(raw_d) else raw_d
    docs = sample_rows(np.asarray(prep.docs), sample, seed)[0]
    q = np.asarray(prep.queries)[: min(1000, len(prep.queries))]
    near_docs = best_match_quantiles(q, docs)
    near_dis = best_match_quantiles(q, aligned_d[: len(docs)])
    lines = [f"## {title}", "", "Raw (the encoder's space):", ""]
    lines.append(side_by_side({"test documents": describe(np.asarray(raw_docs), seed=seed),
                               "distractors": describe(raw_d, seed=seed)}))  # fmt: skip
    lines += ["", "Aligned (the method's space):", ""]
    lines.append(side_by_side({"test documents": describe(docs, seed=seed),
                               "distractors": describe(aligned_d, seed=seed)}))  # fmt: skip
    lines += ["", f"Best cosine of {len(q):,} queries among {len(docs):,} rows of each "
              "(aligned; a distractor set that real data would match sits near the documents):",
              "", "| quantile | test documents | distractors |", "|---|---|---|"]  # fmt: skip
    for k in near_docs:
        lines.append(f"| {k} | {near_docs[k]:.4f} | {near_dis[k]:.4f} |")
    return "\n".join(lines) + "\n"
