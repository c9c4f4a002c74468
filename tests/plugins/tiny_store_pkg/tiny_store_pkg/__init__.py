"""TinyStore: an exact brute-force vector store in numpy, written outside imsearch_align.

It shows the whole contract of a plug-in store in one screen: subclass
``BaseStore`` (validation, bookkeeping and errors come with it), write the
four hooks, declare what the store promises (``supports_sparse``,
``thread_safe``, ``provenance_packages``), and finish each search with
``finalize_rows`` (the tie rule and the ``-1`` padding).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imsearch_align.adapters.base import BaseStore, CollectionInfo, finalize_rows
from imsearch_align.framework.interfaces import SearchResult

__all__ = ["TinyStore"]
__version__ = "0.1.0"


class TinyStore(BaseStore):
    """Exact inner-product search over dense float32 vectors, kept in memory.

    Args:
        block: queries scored per matrix product (bounds memory).
    """

    supports_sparse = False  # dense only: create_collection(sparse=True) raises
    thread_safe = True  # search only reads arrays: safe from the evaluator's threads
    provenance_packages = ("tiny-store-pkg", "numpy")  # versions a result records

    def __init__(self, *, block: int = 256) -> None:
        super().__init__()
        if not isinstance(block, int) or block < 1:
            raise ValueError(f"block must be an integer >= 1, got {block!r}")
        self.block = block

    def _create(self, info: CollectionInfo) -> None:
        info.state = []  # list of float32 blocks, in insertion order (row i <-> info.ids[i])

    def _insert(self, info: CollectionInfo, vectors: Any, ids: np.ndarray) -> None:
        info.state.append(np.asarray(vectors, dtype=np.float32))

    def _search(self, info: CollectionInfo, queries: Any, k: int) -> SearchResult:
        data = np.concatenate(info.state) if len(info.state) > 1 else info.state[0]
        ids = info.ids
        kk = min(k, len(ids))
        out_ids, out_scores = [], []
        for lo in range(0, queries.shape[0], self.block):
            s = queries[lo : lo + self.block] @ data.T
            top = np.argpartition(-s, kk - 1, axis=1)[:, :kk] if kk < len(ids) else None
            if top is None:
                top = np.broadcast_to(np.arange(len(ids)), s.shape)
            # every doc tied with the k-th score joins the candidates, so that
            # finalize_rows can apply the tie rule (score desc, id asc) exactly
            kth = np.take_along_axis(s, top, axis=1).min(axis=1, keepdims=True)
            rows, cols = np.nonzero(s >= kth)
            width = np.bincount(rows, minlength=s.shape[0]).max()
            cand = np.full((s.shape[0], width), -1, dtype=np.int64)
            start = np.searchsorted(rows, np.arange(s.shape[0]))
            cand[rows, np.arange(len(rows)) - start[rows]] = cols
            sc = np.where(cand >= 0, np.take_along_axis(s, np.maximum(cand, 0), axis=1), -np.inf)
            res = finalize_rows(np.where(cand >= 0, ids[np.maximum(cand, 0)], -1), sc, k)
            out_ids.append(res.ids)
            out_scores.append(res.scores)
        return SearchResult(np.concatenate(out_ids), np.concatenate(out_scores))

    def _drop(self, info: CollectionInfo) -> None:
        info.state = None
