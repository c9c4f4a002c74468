"""The ground truth of one collection: :class:`CollectionTruth`, its content key, its file.

A truth holds, per query, the exact top-k in true (float64) order as a
:class:`~imsearch_align.framework.metrics.Run` (columns through the tie
group at rank k and one closing column; later cells are no-hit), whether
that group is closed (no unlisted document can tie with it or outrank it),
and the candidates it was chosen from with their true scores (what
:func:`~imsearch_align.collection.recall.ann_recall_at_k` reads). It is
saved as one ``.npz`` written by
:func:`~imsearch_align.framework.atomic.atomic_write`, under a name made of
:func:`truth_key`: the digests of the queries, their ids and the document
stream, k, the candidate margin and the tie tolerance.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.framework.atomic import atomic_write
from imsearch_align.framework.measures import lookup
from imsearch_align.framework.metrics import Qrels, Run
from imsearch_align.framework.ties import tie_aware_evaluate
from imsearch_align.framework.validation import array_buffer

__all__ = ["CollectionTruth", "truth_key", "truth_path"]

_FORMAT = "collection-truth/1"


def truth_key(
    queries: np.ndarray, query_ids: np.ndarray, docs_digest: str, k: int, margin: int, tol: float
) -> str:
    """SHA-256 (hex) naming a truth by content: queries (shape and float32
    bytes), query ids, the documents' stream digest, ``k``, margin, tolerance."""
    h = hashlib.sha256(f"{_FORMAT};q{queries.shape};".encode())
    h.update(array_buffer(np.ascontiguousarray(queries, dtype=np.float32)))
    qi = np.asarray(query_ids)
    h.update(f";ids:{qi.dtype.str}:{qi.shape};".encode())
    h.update(array_buffer(qi) if qi.dtype.kind in "iuU" else repr(qi.tolist()).encode())
    h.update(f";docs={docs_digest};k={k};margin={margin};tol={tol!r}".encode())
    return h.hexdigest()


def truth_path(cache_dir: str | os.PathLike, key: str) -> Path:
    """Where the truth with ``key`` lives under ``cache_dir``."""
    return Path(cache_dir) / f"truth-{key[:40]}.npz"


@dataclass(frozen=True, eq=False)
class CollectionTruth:
    """Exact, tie-aware top-k of every query over one collection.

    Attributes:
        run: the top-k in true order (float64 scores, ties by ascending id),
            through each row's tie group at rank k and one closing column.
        k: the cut-off it is exact at.
        closed: ``(nq,)`` bool, the tie group at rank k is whole and nothing
            unlisted reaches it (checked against :attr:`floor`).
        kth: ``(nq,)`` true k-th score (``min(k, n_docs)``-th; ``-inf`` without documents).
        floor: ``(nq,)`` highest true score an unlisted document can have
            (its float32 score is at most the ``c``-th kept, plus the float32
            error bound); ``-inf`` when every document was listed.
        cand_ids, cand_scores: ``(nq, c)`` candidates (id, true score) in true
            order, ``-1`` / ``-inf`` padded.
        scale: ``(nq,)`` ``||q|| * max ||x||``, the scale of float32 rounding.
        n_docs, dim: collection size and dimension.
        tol: the tie tolerance of :attr:`run` (relative, as ``tie_aware_evaluate``'s).
        key: the content key (:func:`truth_key`; ``""`` when computed without a
            cache and without a documents digest).
        seconds: time the computation took (0 when loaded).
    """

    run: Run
    k: int
    closed: np.ndarray
    kth: np.ndarray
    floor: np.ndarray
    cand_ids: np.ndarray
    cand_scores: np.ndarray
    scale: np.ndarray
    n_docs: int
    dim: int
    tol: float
    key: str
    seconds: float = 0.0

    @property
    def groups_closed(self) -> bool:
        """Whether every row's tie group at rank k is closed."""
        return bool(self.closed.all())

    def evaluate(self, qrels: Qrels, measures: Any, *, relevance_level: float | None = None) -> Any:
        """The task's measures on the exact ranking (tie-aware, groups closed where they are).

        Returns :class:`~imsearch_align.framework.ties.TieAwareResult`. Cut-offs
        above :attr:`k` are refused (the truth is exact to rank k only).
        """

        names = [measures] if isinstance(measures, str) else list(measures)
        deep = [m for m in names if lookup(m)[1] > self.k]
        if deep:
            raise ValueError(
                f"CollectionTruth.evaluate: the truth is exact to rank {self.k}, got measures "
                f"{deep} with a deeper cut-off"
            )
        return tie_aware_evaluate(
            self.run,
            qrels,
            names,
            tol=self.tol,
            groups_closed=self.groups_closed,
            relevance_level=relevance_level,
        )

    def record(self) -> dict[str, Any]:
        """JSON-ready summary: sizes, k, open rows, key, seconds."""
        return {
            "queries": len(self.run),
            "documents": self.n_docs,
            "dim": self.dim,
            "k": self.k,
            "open_rows": int((~self.closed).sum()),
            "tie_tolerance": self.tol,
            "key": self.key,
            "seconds": round(self.seconds, 3),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write to ``path`` (``.npz``) atomically."""
        meta = {
            "format": _FORMAT,
            "k": self.k,
            "n_docs": self.n_docs,
            "dim": self.dim,
            "tol": self.tol,
            "key": self.key,
        }
        arrays = {
            "query_ids": np.asarray(self.run.query_ids),
            "doc_ids": self.run.doc_ids,
            "scores": self.run.scores,
            "closed": self.closed,
            "kth": self.kth,
            "floor": self.floor,
            "cand_ids": self.cand_ids,
            "cand_scores": self.cand_scores,
            "scale": self.scale,
            "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
        }
        return atomic_write(path, lambda f: np.savez(f, **arrays))

    @classmethod
    def load(cls, path: str | os.PathLike) -> CollectionTruth:
        """Read a file written by :meth:`save`."""
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(z["meta"].tobytes().decode())
            if meta.get("format") != _FORMAT:
                raise ValueError(f"{path}: expected a {_FORMAT} file, got {meta.get('format')!r}")
            run = Run.from_arrays(z["query_ids"], z["doc_ids"], z["scores"], assume_sorted=True)
            return cls(
                run,
                int(meta["k"]),
                z["closed"],
                z["kth"],
                z["floor"],
                z["cand_ids"],
                z["cand_scores"],
                z["scale"],
                int(meta["n_docs"]),
                int(meta["dim"]),
                float(meta["tol"]),
                str(meta["key"]),
            )
