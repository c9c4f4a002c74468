"""Matching: a one-to-one assignment of test images to captions (MMA benchmark).

Each test image keeps one caption (its first, or the mean of its captions'
raw embeddings, as the local-CKA code does); the images and captions are
shuffled by the assignment, and the Hungarian algorithm finds the
one-to-one assignment that maximises the summed aligned score
(``linear_sum_assignment(..., maximize=True)``, MMA's ``linear_matching``).
**Matching accuracy** is the fraction of images assigned their own caption,
**expected over the optimal assignments** where scores tie (within the tie
tolerance): each maximum-total assignment equally likely
(:mod:`imsearch_align.diagnostics.assignment`), counted exactly unless
an irregular tied component fills more than ``SPARSE_STATES`` column sets
(then estimated, with hard bounds as its interval). Without ties it is the solver's assignment's value. The details
report ``tied_rows``, ``tie_components``, ``accuracy_exact``,
``accuracy_interval`` and ``accuracy_seeded`` (the one assignment the
solver returned, captions in a seeded random order).
``top1_accuracy`` (each image's best caption, no one-to-one constraint,
expected over the orders of tied captions) is reported beside it.

Up to ``dense_limit`` images the full score matrix is built. Above it, each
image's and each caption's top ``candidates`` from the store form a sparse
bipartite graph, solved exactly by
``scipy.sparse.csgraph.min_weight_full_bipartite_matching`` on float64
scores recomputed from the vectors; if that graph has no perfect matching
the error says to raise ``candidates``. A tie group cut by the candidate
lists is closed by scoring the pairs left out that could tie (bounded by
each list's last store score), up to ``dense_limit ** 2`` pairs; past that
the rows left open are counted (``tie_rows_open``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.diagnostics.assignment import (
    ExpectedAccuracy,
    expected_accuracy,
    expected_accuracy_sparse,
)
from imsearch_align.experiment.result import TaskResult
from imsearch_align.experiment.search import index_and_evaluate
from imsearch_align.experiment.tasks.base import Task, TaskUnsupportedError, require_split
from imsearch_align.framework.metrics import Qrels
from imsearch_align.framework.ranking.tie_aware import tolerance_for
from imsearch_align.framework.registry import TASKS
from imsearch_align.framework.validation import check_int, is_sparse

__all__ = ["Matching", "hungarian_accuracy", "top1_accuracy"]


def hungarian_accuracy(scores: np.ndarray, seed: int = 0) -> tuple[float, np.ndarray]:
    """Accuracy of the max-score one-to-one assignment on a square ``scores``
    whose diagonal holds the true pairs; returns ``(accuracy, assigned column per row)``.

    The columns are solved in a seeded random order: among equally good
    assignments a solver returns the one nearest its input order, which would
    be the true pairing itself (a collapsed space, every score equal, would
    score 1.0 instead of about 1/n)."""
    from scipy.optimize import linear_sum_assignment

    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"scores must be a square matrix, got shape {s.shape}")
    perm = np.random.default_rng(seed).permutation(len(s))  # solved column j is column perm[j]
    rows, cols = linear_sum_assignment(s[:, perm], maximize=True)
    assigned = np.empty(len(s), dtype=np.int64)
    assigned[rows] = perm[cols]
    return float(np.mean(assigned == np.arange(len(s)))), assigned


def _float64(A: Any) -> Any:
    """``A`` (dense or CSR) in float64."""
    return A.astype(np.float64) if is_sparse(A) else np.asarray(A, dtype=np.float64)


def top1_accuracy(scores: np.ndarray, tol: float = 0.0) -> float:
    """Share of rows whose best column is the diagonal one, expected over the
    orders of the columns tied at the row's best score (within ``tol``
    relative, chained as the harness ties): ``1 / group size`` when the true
    column is in the group. ``argmax`` would give every tie to the lowest index."""
    from imsearch_align.framework.ties import _is_link

    s = np.asarray(scores, dtype=np.float64)
    n = s.shape[0]
    srt = -np.sort(-s, axis=1)
    links = _is_link(srt[:, :-1], srt[:, 1:], float(tol))
    size = np.where(links.all(axis=1), s.shape[1], np.argmin(links, axis=1) + 1)
    last = srt[np.arange(n), size - 1]
    own = s[np.arange(n), np.arange(n)]
    return float(np.mean(np.where(own >= last, 1.0 / size, 0.0)))


@TASKS.register("matching")
class Matching(Task):
    """One-to-one image-caption assignment by the Hungarian algorithm (MMA benchmark).

    Args:
        caption: ``"first"`` (each image's lowest-id caption) or ``"mean"``
            (the mean of its captions' raw embeddings, then aligned).
        max_items: match a seeded sample of this many images (MMA uses
            100-500); ``None`` = every test image with a caption.
        dense_limit: above this many images, match over store candidates.
        candidates: top candidates per image and per caption (sparse path).
    """

    name = "matching"
    measures = (
        "matching accuracy (Hungarian one-to-one assignment, expected over tied optimal "
        "assignments), top1_accuracy"
    )
    source = "MMA benchmark linear_matching (Maniparambil et al., CVPR 2024)"

    def __init__(
        self,
        caption: str = "first",
        max_items: int | None = None,
        dense_limit: int = 4000,
        candidates: int = 50,
    ) -> None:
        if caption not in ("first", "mean"):
            raise ValueError(f"task_params caption must be 'first' or 'mean', got {caption!r}")
        self.caption = caption
        self.max_items = (
            None if max_items is None else check_int(max_items, "task_params max_items", low=2)
        )
        self.dense_limit = check_int(dense_limit, "task_params dense_limit", low=2)
        self.candidates = check_int(candidates, "task_params candidates", low=1)

    def params(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("caption", "max_items", "dense_limit", "candidates")}

    def check(self, data: Any, config: Any) -> None:
        require_split(data.dataset, "test", "image", self.name)
        require_split(data.dataset, "test", "text", self.name)

    def _pairs(self, ctx: Any) -> tuple[np.ndarray, np.ndarray]:
        """Image ids and their chosen caption's text id (seeded sample)."""
        txt = ctx.dataset.texts
        txt = txt[txt["split"] == "test"].sort_values("text_id", kind="stable")
        first = txt.drop_duplicates("image_id")
        if self.max_items is not None and self.max_items < len(first):
            pick = np.random.default_rng(ctx.config.seed).choice(
                len(first), self.max_items, replace=False
            )
            first = first.iloc[np.sort(pick)]
        if len(first) < 2:
            raise TaskUnsupportedError("task 'matching' needs at least 2 captioned test images")
        return first["image_id"].to_numpy(np.int64), first["text_id"].to_numpy(np.int64)

    def _caption_vectors(self, ctx: Any, img_ids: np.ndarray, txt_ids: np.ndarray) -> Any:
        all_txt = ctx.ids("text")
        if self.caption == "first":
            return _rows(ctx.aligned("text"), pd.Index(all_txt).get_indexer(txt_ids))
        txt = ctx.dataset.texts.set_index("text_id").loc[all_txt]
        group = pd.Index(img_ids).get_indexer(txt["image_id"].to_numpy())
        raw = ctx.raw("text")
        keep = group >= 0
        sums = np.zeros((len(img_ids), raw.shape[1]))
        np.add.at(sums, group[keep], raw[keep])
        counts = np.bincount(group[keep], minlength=len(img_ids))[:, None]
        return ctx.transform("text", (sums / counts).astype(np.float32))

    def run(self, ctx: Any) -> TaskResult:
        img_ids, txt_ids = self._pairs(ctx)
        A_img = _rows(ctx.aligned("image"), pd.Index(ctx.ids("image")).get_indexer(img_ids))
        A_txt = self._caption_vectors(ctx, img_ids, txt_ids)
        n = len(img_ids)
        rankings: dict[str, Any] = {}
        tol = tolerance_for(ctx.config.tie_tolerance, A_img, rescored=True)
        extra: dict[str, Any] = {}
        if n <= self.dense_limit:
            # float64 products of the float32 vectors: a float32 GEMM rounds a row by its
            # position in the block, and one-ulp differences are not real preferences
            S = _float64(A_img) @ _float64(A_txt).T
            S = np.asarray(S.toarray() if is_sparse(S) else S, dtype=np.float64)
            _, assigned = hungarian_accuracy(S, seed=ctx.config.seed)
            res = expected_accuracy(S, tol, assigned=assigned, seed=ctx.config.seed)
            top1 = top1_accuracy(S, tol)
            path = "dense score matrix"
        else:
            res, top1, rankings, extra = self._sparse(ctx, A_img, A_txt, n, tol)
            path = f"store candidates (top {self.candidates} per image and per caption)"
        details = {"n_items": n, "path": path, **self.params(), **res.details(), **extra}
        metrics = {"accuracy": res.accuracy, "top1_accuracy": top1}
        return TaskResult(self.name, rankings, metrics, details)

    def _sparse(
        self, ctx: Any, A_img: Any, A_txt: Any, n: int, tol: float
    ) -> tuple[ExpectedAccuracy, float, dict[str, Any], dict[str, Any]]:
        import scipy.sparse as sp
        from scipy.sparse.csgraph import min_weight_full_bipartite_matching

        idx = np.arange(n, dtype=np.int64)
        qrels = Qrels.from_pairs(idx, idx)
        k = min(self.candidates, n)
        runs: dict[str, Any] = {}
        rankings = index_and_evaluate(
            ctx, "i2t", A_txt, idx, A_img, idx, qrels, k=k, measures=["HitRate@1"], runs=runs
        )
        rankings.update(
            index_and_evaluate(
                ctx, "t2i", A_img, idx, A_txt, idx, qrels, k=k, measures=["HitRate@1"], runs=runs
            )
        )
        # each image's best caption: its tie-aware HitRate@1 (own caption relevant)
        top1 = float(rankings["i2t"].metrics["HitRate@1"])
        cand = _Candidates(A_img, A_txt, runs["i2t"], runs["t2i"], n)
        r, c, v = cand.edges()
        # Maximise the summed score == minimise sum(C - score) over a full matching (C > max),
        # captions in a seeded random order (see hungarian_accuracy: ties must not
        # fall to the true pairs by input order).
        weights = (v.max() + 1.0) - v
        perm = np.random.default_rng(ctx.config.seed).permutation(n)
        where = np.empty(n, dtype=np.int64)
        where[perm] = np.arange(n)
        G = sp.csr_matrix((weights, (r, where[c])), shape=(n, n))
        try:
            _, matched = min_weight_full_bipartite_matching(G)
        except ValueError:
            raise ValueError(
                f"task 'matching': the top-{self.candidates} candidate graph of {n} images has no "
                "one-to-one assignment; raise task_params candidates or dense_limit"
            ) from None
        assigned = perm[matched]
        budget = max(self.dense_limit, 2) ** 2
        res = expected_accuracy_sparse(
            n,
            r,
            c,
            v,
            assigned,
            tol,
            outside=lambda a, b: cand.outside(a, b, tol, budget),
            seed=ctx.config.seed,
        )
        return res, top1, rankings, {"tie_rows_open": cand.open_rows}


class _Candidates:
    """The sparse path's candidate graph: every image's and every caption's
    returned candidates, scored in float64 from the vectors (as the rankings
    rescore near ties), and the edges outside it that a tie could reach."""

    def __init__(self, A_img: Any, A_txt: Any, i2t: Any, t2i: Any, n: int) -> None:
        from imsearch_align.framework.fidelity import TrueScores
        from imsearch_align.framework.ranking.tie_aware import error_bound

        self.n = n
        self._truth = TrueScores(A_txt, np.arange(n), A_img)  # (image row, caption id)
        self._error = error_bound(A_img)
        self.open_rows = 0
        rows, cols, last = [], [], []
        for run, transpose in ((i2t, False), (t2i, True)):
            q = np.repeat(np.asarray(run.query_ids, dtype=np.int64), run.k)
            d = run.doc_ids.ravel()
            ok = d >= 0
            rows.append(d[ok] if transpose else q[ok])
            cols.append(q[ok] if transpose else d[ok])
            # the lowest returned store score bounds every unreturned one
            # (within the store's rounding); a full list leaves nothing out
            low = np.full(n, -np.inf)
            s = np.where(run.doc_ids >= 0, run.scores, np.inf).min(axis=1)
            full = (run.doc_ids >= 0).sum(axis=1) >= n
            low[np.asarray(run.query_ids, dtype=np.int64)] = np.where(full, -np.inf, s)
            last.append(low)
        key = np.unique(np.concatenate(rows) * n + np.concatenate(cols))  # each edge once
        self._keys = key
        self._last = last

    def _scores(self, r: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Float64 scores of the pairs ``(image r, caption c)``."""
        out = np.empty(len(r))
        for a in range(0, len(r), 1 << 18):
            sl = slice(a, a + (1 << 18))
            out[sl] = self._truth(r[sl], c[sl, None])[:, 0]
        return out

    def edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The candidate graph's edges ``(image, caption, float64 score)``."""
        r, c = self._keys // self.n, self._keys % self.n
        return r, c, self._scores(r, c)

    def outside(
        self, a: np.ndarray, b: np.ndarray, tol: float, budget: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Edges outside the graph whose score may reach ``a[i] + b[j]`` (less
        the tolerance), scored; none, and ``open_rows`` set, when more than
        ``budget`` pairs outside the graph would have to be scored."""
        lr, lc = self._last
        slack = self._error + 2 * max(tol, 1e-15)
        with np.errstate(invalid="ignore"):  # -inf: a full list, nothing left out
            x = np.where(np.isfinite(lr), lr + slack * np.maximum(np.abs(lr), 1.0), -np.inf) - a
            y = np.where(np.isfinite(lc), lc + slack * np.maximum(np.abs(lc), 1.0), -np.inf) - b
        # an outside pair (i, j) may be tight iff b[j] <= x[i] and a[i] <= y[j]
        order = np.argsort(b, kind="stable")
        cnt = np.searchsorted(b[order], x, side="right")
        cnt[~np.isfinite(x)] = 0
        kr, kc = self._keys // self.n, self._keys % self.n
        inner = int(np.sum(b[kc] <= x[kr]))  # candidates among those pairs
        empty = np.zeros(0, np.int64)
        if int(cnt.sum()) - inner > budget:
            self.open_rows = int((cnt > 0).sum())
            return empty, empty, np.zeros(0)
        r = np.repeat(np.arange(self.n), cnt)
        starts = np.repeat(np.cumsum(cnt) - cnt, cnt)
        c = order[np.arange(len(r)) - starts]
        keep = (a[r] <= y[c]) & ~np.isin(r * self.n + c, self._keys)
        r, c = r[keep], c[keep]
        return r, c, self._scores(r, c)


def _rows(m: Any, pos: np.ndarray) -> Any:
    if (pos < 0).any():
        raise ValueError("matching: an id is not in the test split")
    return m[pos]
