"""Near-tie rows rescored in float64, tie groups closed, the tie report of a ranking.

Two stores that compute the same inner products round them differently in
the last bits, so documents within a few ulps of each other rank in a
store-dependent order. The experiment therefore reports each measure's
**expected value over the orders of tied documents** (McSherry and Najork,
ECIR 2008; :mod:`imsearch_align.framework.ties`), beside the value under the
id-ascending tie rule, the number of queries whose value depends on tie
order, and the lowest and highest mean reachable by breaking ties against or
for the relevant documents.

Which documents tie. A store's float32 score is the true inner product of
the indexed vectors give or take its rounding, bounded by the **error
bound** ``e`` (:func:`~imsearch_align.framework.ties.default_tolerance` of
the dimension). Where two neighbours' store scores are within ``e``, the
store cannot order them for sure: those rows get **float64 scores
recomputed from the vectors** and are re-sorted (:class:`Rescorer`).
Documents tie when their scores are within ``tie_tolerance`` relative;
by default (``None``) that is :data:`EXACT_TIE_TOL`, so only documents
with equal true scores (up to float64 summation order: duplicates) tie,
and every ranking is the true one. A method whose scores crowd closer than
``e`` (local CKA's differ by about 1e-7 around 0.2) is then scored by its
true ranking, not as one large tie group. Where scores cannot be recomputed
(a classification task's best-prompt search returns class ids, not rows of
the vectors), the default is ``e`` itself. An explicit ``tie_tolerance``
groups the recomputed scores with that tolerance.

The store is asked for one result more than the largest cut-off. An exact
store is then searched deeper for the rows whose run may hide a document
that outranks the k-th: those whose last returned score is within ``e`` of
the k-th (:func:`open_windows`). Beyond that, no unreturned document can
reach rank ``k``: its store score is below every returned one, so its true
score is at most ``e`` above the run's last (each store score is off by at
most ``e / 2``). Rows still open at the bounded depth searched are scored on
the documents returned, in true order, and counted (``groups``: "closed ...
except N rows"). With an explicit ``tie_tolerance`` (or no recomputed
scores) a row stays open while the chain of links within ``max(e,
tie_tolerance)`` at rank ``k`` reaches the end of the run, so that every
group crossing a cut-off is whole. An approximate store cannot return a
whole group, so a tie group at the end of its run is scored over the
members it returned and counted as ``truncated``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework._heap import release_freed_memory
from imsearch_align.framework.interfaces import ExactSearch
from imsearch_align.framework.metrics import Run
from imsearch_align.framework.validation import is_sparse

__all__ = [
    "EXACT_TIE_TOL",
    "Rescorer",
    "close_groups",
    "error_bound",
    "is_exact",
    "open_windows",
    "tie_summary",
    "tolerance_for",
]

#: Default tie tolerance where scores are recomputed in float64 from the
#: vectors (relative, as ``tie_tolerance``): far above the float64 rounding
#: of an inner product (about ``d * 1.1e-16``), far below any gap between
#: two distinct float32 vectors' scores that a store could resolve.
EXACT_TIE_TOL = 1e-12


def is_exact(store: Any) -> bool:
    """Whether the store declares its search exact (:class:`ExactSearch`)."""
    return isinstance(store, ExactSearch) and bool(store.exact)


def _dim(queries: Any) -> int:
    """The queries' dimension (a sparse query's is its largest number of non-zeros)."""
    if is_sparse(queries):
        nnz = np.diff(queries.indptr)
        return max(int(nnz.max()) if len(nnz) else 1, 1)
    return max(int(queries.shape[1]), 1)


def error_bound(queries: Any) -> float:
    """Bound on the difference of two stores' float32 scores (relative), for the queries' dimension."""
    from imsearch_align.framework.ties import default_tolerance

    return default_tolerance(_dim(queries))


def tolerance_for(tie_tolerance: float | None, queries: Any, *, rescored: bool = True) -> float:
    """The tie tolerance: ``tie_tolerance`` when given, else :data:`EXACT_TIE_TOL`
    where scores are recomputed from the vectors (``rescored``), else the
    :func:`error_bound` of the queries' dimension (see the module docstring)."""
    if tie_tolerance is not None:
        return float(tie_tolerance)
    return EXACT_TIE_TOL if rescored else error_bound(queries)


class Rescorer:
    """Replaces a store's scores by float64 ones recomputed from the vectors,
    in the rows whose tie groups the store's scores cannot decide
    (:func:`~imsearch_align.framework.ties.ambiguous_rows`, with the rounding
    difference between two stores bounded by
    :func:`~imsearch_align.framework.ties.default_tolerance` of the dimension),
    and re-sorts those rows. Rows without such a gap keep the store's scores:
    there they form the groups the float64 scores would.
    """

    def __init__(self, docs: Any, doc_ids: Any, queries: Any, query_ids: Any, tol: float) -> None:
        self._args = (docs, doc_ids, queries)
        self._query_rows = pd.Index(np.asarray(query_ids))
        self._truth: Any = None
        self.tol = float(tol)
        self.error = error_bound(queries)
        #: Rows rescored so far (over every call).
        self.n_rescored = 0

    def __call__(self, run: Run) -> Run:
        from imsearch_align.framework.fidelity import TrueScores
        from imsearch_align.framework.ties import ambiguous_rows

        rows = ambiguous_rows(run, self.tol, self.error)
        if not len(rows):
            return run
        if self._truth is None:
            self._truth = TrueScores(*self._args)
        qrows = self._query_rows.get_indexer(np.asarray(run.query_ids)[rows])
        true = self._truth(qrows, run.doc_ids[rows])
        scores = run.scores.astype(np.float64)
        scores[rows] = np.where(np.isnan(true), scores[rows], true)  # unknown ids: the store's
        self.n_rescored += len(rows)
        return Run.from_arrays(run.query_ids, run.doc_ids, scores, copy=False)


#: How much deeper than the cut-off an exact store is searched to close tie groups.
EXTEND_FACTOR = 8
#: Open rows searched deeper first, to learn whether it closes their groups.
PROBE_ROWS = 256
#: Share of the probe's groups that must close for the other open rows to be searched.
MIN_CLOSING_SHARE = 0.5
#: Cells (rows x depth) of one block of the deeper search.
DEEPER_BLOCK_CELLS = 1 << 17


def close_groups(
    store: Any,
    collection: str,
    run: Run,
    queries: Any,
    query_ids: np.ndarray,
    k: int,
    tol: float,
    count: int,
    rescore: Any = None,
    *,
    window: bool = False,
    group_tol: float = EXACT_TIE_TOL,
) -> tuple[Run, int, int, float]:
    """Search an exact store deeper for the rows whose chain of links within
    ``tol`` at rank ``k`` is still open, ``EXTEND_FACTOR * (k + 1)`` deep
    (bounded, so a space full of near-ties cannot blow the run up to every
    document of every query). The experiment passes ``max(error bound,
    tie tolerance)`` as ``tol`` (module docstring).

    A probe of ``PROBE_ROWS`` open rows goes first; without ``window`` the
    other open rows are searched only if most of the probe's groups closed. In a space whose
    scores differ below float32 resolution (local CKA's can), deeper searches
    close nothing and would cost a full search each: then no row is extended
    and every open row is scored as truncated (its run ends inside the group),
    so all of them are treated alike. ``rescore`` (a :class:`Rescorer`)
    recomputes the deeper rows' near-tie scores before their groups are
    judged. With ``window=True`` a row is open while its last score is
    within ``tol`` of its k-th (:func:`open_windows`), not while a chain of
    links reaches the end: the test for a run ordered by true scores, whose
    ties are equal scores only (module docstring). The extended run is only
    as wide as the deepest group at rank ``k`` needs (its closing score
    included), not the depth searched; with ``window`` those are the groups
    within ``group_tol`` (the tie tolerance) of the rows re-sorted by their
    float64 scores: the window decides how deep to search, the groups what
    is kept.
    Returns the extended run, the rows searched again, the rows still open
    (scored as truncated) and the time taken. A row that holds every
    document gets a no-hit column, which closes its last group.
    """
    from imsearch_align.framework.ties import open_tie_groups

    t0 = time.perf_counter()

    def is_open(r: Run) -> np.ndarray:
        return open_windows(r, k, tol) if window else open_tie_groups(r, k, tol=tol)

    rows = np.flatnonzero(is_open(run))
    depth = min(count, EXTEND_FACTOR * (k + 1))
    if not len(rows) or depth <= run.k:
        # no deeper search: open unless the rows already hold every document
        return _closed_if_whole(run, count), 0, len(rows) if run.k < count else 0, 0.0
    pos = pd.Index(np.asarray(query_ids)).get_indexer(np.asarray(run.query_ids)[rows])

    def deeper(sel: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Open rows ``sel`` (positions in ``rows``) widened to ``depth`` columns
        and searched again: their ids, scores and the groups still open."""
        ids = np.full((len(sel), depth), -1, dtype=np.int64)
        sc = np.full((len(sel), depth), -np.inf)
        ids[:, : run.k], sc[:, : run.k] = run.doc_ids[rows[sel]], run.scores[rows[sel]]
        res = store.search(collection, queries[pos[sel]], depth)
        ids[:, : res.k], sc[:, : res.k] = res.ids, res.scores
        sub = Run.from_arrays(run.query_ids[rows[sel]], ids, sc, assume_sorted=True)
        if rescore is not None:
            sub = rescore(sub)
            ids, sc = sub.doc_ids, sub.scores
        return ids, sc, int(is_open(sub).sum()) if depth < count else 0

    local = np.arange(len(rows))
    probe = np.unique(np.linspace(0, len(rows) - 1, min(PROBE_ROWS, len(rows))).astype(int))
    probe_ids, probe_sc, still_open = deeper(probe)
    rest = np.setdiff1d(local, probe)
    if not window and still_open > (1 - MIN_CLOSING_SHARE) * len(probe):
        # Deeper searches do not close these groups: none is extended (and no
        # (open rows x depth) arrays are built: 67 MiB for 47,675 open rows).
        # With ``window`` every open row is extended all the same: the deeper
        # documents in true order are nearer the true top k than the first
        # k + 1 of the store's float32 order, even where the window stays open.
        return _closed_if_whole(run, count), len(probe), len(rows), time.perf_counter() - t0

    # Only the open rows are widened, as far as their groups at rank ``k`` need,
    # in row blocks: a block's search result, rescoring and re-sort are freed
    # before the next (all at once: ~700 MiB for local CKA's 47,648 rows).
    def trimmed(sel: np.ndarray, ids: np.ndarray, sc: np.ndarray) -> tuple:
        gtol = group_tol if window else tol
        w = _needed_width(ids, sc, run.query_ids[rows[sel]], k, gtol, run.k)
        return sel, ids[:, :w].copy(), sc[:, :w].copy()

    blocks = [trimmed(probe, probe_ids, probe_sc)]
    del probe_ids, probe_sc
    step = max(1, DEEPER_BLOCK_CELLS // depth)
    for b0 in range(0, len(rest), step):
        blk = rest[b0 : b0 + step]
        blk_ids, blk_sc, n_open = deeper(blk)
        blocks.append(trimmed(blk, blk_ids, blk_sc))
        still_open += n_open
        del blk_ids, blk_sc
    extended = _closed_if_whole(_with_blocks(run, rows, blocks), count)
    return extended, len(rows), still_open, time.perf_counter() - t0


def _with_blocks(run: Run, rows: np.ndarray, blocks: list) -> Run:
    """``run`` with rows ``rows[sel]`` replaced by each block's ``(sel, ids,
    scores)``, as wide as the widest block (a narrower row ends in no-hit
    columns). Empties ``blocks`` as it goes."""
    width = max(b[1].shape[1] for b in blocks)
    ids = np.full((run.doc_ids.shape[0], width), -1, dtype=np.int64)
    scores = np.full(ids.shape, -np.inf)
    ids[:, : run.k], scores[:, : run.k] = run.doc_ids, run.scores
    while blocks:
        blk, blk_ids, blk_sc = blocks.pop()
        ids[rows[blk], : blk_ids.shape[1]] = blk_ids
        scores[rows[blk], : blk_ids.shape[1]] = blk_sc
    release_freed_memory()  # the blocks' searches, rescoring and sorts
    return Run.from_arrays(run.query_ids, ids, scores, assume_sorted=True, copy=False)


def open_windows(run: Run, k: int, tol: float) -> np.ndarray:
    """``(nq,)`` bool: full rows whose last score is within ``tol`` (relative,
    as a tie link) of their k-th, or that hold fewer than ``k + 1`` columns.

    In a run ordered by true scores, a document the store did not return has
    a true score at most the error bound above the run's last one (its store
    score is below every returned store score, each off by at most half the
    bound). So with ``tol`` the error bound, a closed row's top ``k`` is
    complete.
    """
    from imsearch_align.framework.ties import _is_link

    n, K = run.doc_ids.shape
    full = ~run.empty[:, -1] if K else np.zeros(n, dtype=bool)
    if K <= k:
        return full
    return full & _is_link(run.scores[:, k - 1], run.scores[:, -1], tol)


def _needed_width(
    ids: np.ndarray, scores: np.ndarray, qids: Any, k: int, tol: float, base: int
) -> int:
    """Columns that show every extended row's tie group (links within ``tol``)
    at rank ``k`` and the score after it (the closing one), or all of them
    where a group is still open."""
    from imsearch_align.framework.ties import tie_groups

    labels = tie_groups(Run.from_arrays(qids, ids, scores, assume_sorted=True), tol=tol)
    at_k = labels[:, k - 1 : k]
    last = ids.shape[1] - 1 - np.argmax((labels == at_k)[:, ::-1], axis=1)
    last = np.where(at_k[:, 0] >= 0, last, 0)  # rank k empty: nothing to show
    return int(min(ids.shape[1], max(base, int(last.max()) + 2)))


def _closed_if_whole(run: Run, count: int) -> Run:
    """A row as deep as the collection holds every document: a no-hit column closes it."""
    if run.k < count:
        return run
    ids = np.pad(run.doc_ids, ((0, 0), (0, 1)), constant_values=-1)
    scores = np.pad(run.scores, ((0, 0), (0, 1)), constant_values=-np.inf)
    return Run.from_arrays(run.query_ids, ids, scores, assume_sorted=True)


def tie_summary(
    ta: Any,
    *,
    exact: bool,
    n_extended: int,
    n_open: int,
    extend_s: float,
    n_rescored: int | None = None,
    error: float | None = None,
) -> dict[str, Any]:
    """The JSON-ready tie report of one ranking (see the module docstring).
    ``n_rescored``: rows whose scores were recomputed in float64 (None: the
    store's scores were used as they are). ``error``: the error bound the
    rows were searched deeper with (None: the tolerance)."""
    lo, hi, dep, trunc = ta.low_mean(), ta.high_mean(), ta.n_tie_dependent, ta.n_truncated
    if not exact:
        groups = "truncated at k (approximate store)"
    elif n_open:
        groups = (
            f"closed by the exact store except {n_open} rows (near-ties run past the depth "
            "searched: scored on the documents returned, in true order)"
        )
    else:
        groups = "closed"
    return {
        "tolerance": float(ta.tol),
        "error_bound": float(ta.tol if error is None else error),
        "groups": groups,
        "rows_searched_deeper": int(n_extended),
        "search_deeper_s": float(extend_s),
        "rows_rescored": None if n_rescored is None else int(n_rescored),
        "measures": {
            m: {"low": lo[m], "high": hi[m], "n_tie_dependent": dep[m], "n_truncated": trunc[m]}
            for m in ta.measures
        },
    }
