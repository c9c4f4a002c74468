"""ANN fidelity from the truth: recall@k and score checks recomputed from the stored vectors.

A store is never believed about its own results. As ann-benchmarks does,
only the *ids* a store returns are kept; every returned id's true inner
product with its query is recomputed from the vectors that were indexed
(float64 from the float32 inputs), and the exact top-k is computed here by
brute force. Then, for query ``i``:

* ``n_i`` = the documents that count as hits: every document of a dense
  collection; in a sparse collection the documents whose inner product with
  the query is non-zero (the rule of
  :mod:`imsearch_align.framework.interfaces`); ``m_i = min(k, n_i)`` hits
  are expected;
* ``t_i`` = the true ``m_i``-th best inner product;
* a returned entry in the first ``k`` columns is **found** when its id is a
  stored id, appears for the first time in the row, is a hit (non-zero
  inner product in a sparse collection) and its *true* score is at least
  ``t_i - tol``: a document tied with the k-th neighbour is as good an
  answer as the one brute force happened to keep (ann-benchmarks' rule);
* ``recall_i = min(found_i, m_i) / m_i`` (1.0 when ``m_i = 0``); ``recall@k``
  is the mean over queries.

Score truth: each reported score must equal the true inner product of the
id it comes with, ``|reported - true| <= tol``. The tolerance is relative to
the Cauchy-Schwarz bound ``||q|| * ||x||``, the natural scale of float32
rounding in a dot product: ``tol = rtol * max(||q|| ||x||, |t_i|)``, with
``rtol`` by default ``max(1e-5, 4 * eps32 * sqrt(d))`` (``d`` the dimension,
or the largest query ``nnz`` of a sparse space), so libraries that sum in
another order agree while a flipped sign, a shifted id or a distance
reported as a similarity do not.

Every problem found is counted (:class:`FidelityReport`) and the first few
are described with a likely cause, e.g. ``"query 3: id 17 reported 5.1,
true -5.1: sign flipped?"``.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.validation import check_int, check_matrix, is_sparse

__all__ = ["FidelityReport", "TrueScores", "ann_recall", "default_rtol", "measure_fidelity"]

_EPS32 = float(np.finfo(np.float32).eps)
_TINY = float(np.finfo(np.float32).tiny)
#: Score cells per block of the brute-force pass (bounds its memory to ~64 MiB).
_BLOCK_CELLS = 1 << 21
#: (query, document) cells per block of the sparse candidate pass: its
#: float64 score block and merge buffers stay near 30 MiB.
_SPARSE_BLOCK_CELLS = 1 << 18
#: Problems described in full in a report.
_MAX_PROBLEMS = 5


def default_rtol(dim: int) -> float:
    """The default score tolerance relative to ``||q|| * ||x||`` for dimension ``dim``.

    ``max(1e-5, 4 * eps32 * sqrt(dim))``: float32 dot products computed in
    different orders differ by about ``eps32 * sqrt(d)`` of that scale.
    """
    return max(1e-5, 4.0 * _EPS32 * float(np.sqrt(max(int(dim), 1))))


@dataclass(frozen=True)
class FidelityReport:
    """What a store returned, checked against the true inner products.

    Attributes:
        k: cut-off.
        per_query: ``(nq,)`` float64 recall of each query (see the module docstring).
        recall: mean of ``per_query`` (``recall@k``); NaN for no queries.
        store_seconds: wall time of the store's search (:func:`measure_fidelity`).
        exact_seconds: wall time of the truth computation (:func:`measure_fidelity`).
        recall_min: the worst query's recall.
        rtol: the score tolerance used (relative to ``||q|| * ||x||``).
        score_max_abs_error: largest ``|reported - true|`` over returned
            stored ids (0.0 when there are none).
        score_max_rel_error: the same relative to ``||q|| * ||x||``.
        n_score_mismatch: returned entries whose reported score differs from
            the true inner product by more than the tolerance.
        n_score_mismatch_rows: queries with at least one such entry.
        n_unknown_ids: returned ids (``>= 0``) that were never inserted.
        n_duplicate_ids: entries repeating an id already returned in the row.
        n_zero_ip_hits: sparse only: returned documents whose inner product
            with the query is zero (they must not be returned).
        n_short_rows: queries with fewer hits than ``m_i`` (dense:
            ``min(k, n)``; sparse: non-zero inner products, at most ``k``).
        n_misordered_rows: queries whose hits are not in descending order of
            true score (beyond the tolerance).
        problems: descriptions of the first problems, one per bad query, with
            a likely cause.
    """

    k: int
    per_query: np.ndarray
    recall: float
    store_seconds: float = float("nan")
    exact_seconds: float = float("nan")
    recall_min: float = float("nan")
    rtol: float = float("nan")
    score_max_abs_error: float = 0.0
    score_max_rel_error: float = 0.0
    n_score_mismatch: int = 0
    n_score_mismatch_rows: int = 0
    n_unknown_ids: int = 0
    n_duplicate_ids: int = 0
    n_zero_ip_hits: int = 0
    n_short_rows: int = 0
    n_misordered_rows: int = 0
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def n_queries(self) -> int:
        """Number of queries checked."""
        return int(self.per_query.shape[0])

    @property
    def ok(self) -> bool:
        """True when every returned entry is truthful (recall aside)."""
        return not (
            self.n_score_mismatch
            or self.n_unknown_ids
            or self.n_duplicate_ids
            or self.n_zero_ip_hits
            or self.n_short_rows
            or self.n_misordered_rows
        )

    @property
    def first_problem(self) -> str | None:
        """The first problem's description, or None when the result is truthful."""
        return self.problems[0] if self.problems else None

    def as_metrics(self) -> dict[str, float | int]:
        """JSON-ready values for a result, keyed with the cut-off.

        ``ann_recall@k``, ``ann_recall_min@k``, ``score_max_abs_error@k``,
        ``score_max_rel_error@k``, ``score_mismatch_rows@k``,
        ``invalid_hits@k`` (unknown + duplicate + zero inner product),
        ``short_rows@k``, ``misordered_rows@k``.
        """
        k = self.k
        return {
            f"ann_recall@{k}": float(self.recall),
            f"ann_recall_min@{k}": float(self.recall_min),
            f"score_max_abs_error@{k}": float(self.score_max_abs_error),
            f"score_max_rel_error@{k}": float(self.score_max_rel_error),
            f"score_mismatch_rows@{k}": int(self.n_score_mismatch_rows),
            f"invalid_hits@{k}": int(
                self.n_unknown_ids + self.n_duplicate_ids + self.n_zero_ip_hits
            ),
            f"short_rows@{k}": int(self.n_short_rows),
            f"misordered_rows@{k}": int(self.n_misordered_rows),
        }


# ----------------------------------------------------------------------------- the truth


class _Truth:
    """Stored vectors, their ids, and the queries, in float64-ready form."""

    def __init__(self, docs: Any, doc_ids: Any, queries: Any) -> None:
        self.sparse = is_sparse(docs)
        if is_sparse(queries) != self.sparse:
            raise TypeError(
                "queries must be sparse when docs are sparse and dense when docs are dense, got "
                f"docs {'sparse' if self.sparse else 'dense'} and queries "
                f"{'sparse' if is_sparse(queries) else 'dense'}"
            )
        self.docs = check_matrix(docs, "docs", allow_sparse=True)
        self.queries = check_matrix(queries, "queries", allow_sparse=True)
        if self.queries.shape[1] != self.docs.shape[1]:
            raise ValueError(
                f"queries must have the dimension of docs ({self.docs.shape[1]}), "
                f"got {self.queries.shape[1]}"
            )
        ids = np.asarray(doc_ids)
        if ids.ndim != 1 or ids.shape[0] != self.docs.shape[0]:
            raise ValueError(
                f"doc_ids must be 1-D with one id per row of docs ({self.docs.shape[0]}), "
                f"got shape {ids.shape}"
            )
        if ids.size and ids.dtype.kind not in "iu":
            raise TypeError(f"doc_ids must be integers, got dtype {ids.dtype}")
        self.ids = ids.astype(np.int64, copy=False)
        self._order = np.argsort(self.ids, kind="stable")
        self._sorted = self.ids[self._order]
        if self._sorted.size > 1 and (self._sorted[1:] == self._sorted[:-1]).any():
            dup = self._sorted[1:][self._sorted[1:] == self._sorted[:-1]][:5]
            raise ValueError(f"doc_ids must be unique, got repeated ids {dup.tolist()}")
        if self.sparse:
            nnz = np.diff(self.queries.indptr)
            self.eff_dim = int(nnz.max()) if nnz.size else 1
        else:
            self.eff_dim = int(self.docs.shape[1])

    # Norms in float64 without a float64 copy of the vectors (the documents can
    # be the largest array of the run: ASIF captions, 38M non-zeros); computed
    # on first use (rescoring a few pairs needs none).
    @cached_property
    def xnorm(self) -> np.ndarray:
        return _row_norms(self.docs)

    @cached_property
    def qnorm(self) -> np.ndarray:
        return _row_norms(self.queries)

    @property
    def n(self) -> int:
        return int(self.docs.shape[0])

    @property
    def nq(self) -> int:
        return int(self.queries.shape[0])

    def positions(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id in ``docs``; -1 for ids never inserted (and for -1)."""
        pos = np.full(ids.shape, -1, dtype=np.int64)
        if self.n == 0:
            return pos
        at = np.searchsorted(self._sorted, ids)
        at = np.minimum(at, self.n - 1)
        known = (self._sorted[at] == ids) & (ids >= 0)
        pos[known] = self._order[at[known]]
        return pos

    def pair_scores(self, qrows: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """True inner products of query ``qrows[i]`` with doc row ``pos[i, j]`` (NaN for -1),
        in float64, read in place (:mod:`~imsearch_align.framework._pair_kernels`)."""
        from imsearch_align.framework._pair_kernels import dense_pair_dots, sparse_pair_dots
        from imsearch_align.framework.metrics import _map_row_chunks

        qrows = np.ascontiguousarray(qrows, dtype=np.int64)
        pos = np.ascontiguousarray(pos, dtype=np.int64)
        if pos.size == 0:
            return np.full(pos.shape, np.nan)
        q, x = self.queries, self.docs
        if self.sparse:

            def part(lo: int, hi: int) -> np.ndarray:
                return sparse_pair_dots(
                    q.indptr, q.indices, q.data, x.indptr, x.indices, x.data,
                    qrows[lo:hi], pos[lo:hi], x.shape[1],
                )  # fmt: skip
        else:

            def part(lo: int, hi: int) -> np.ndarray:
                return dense_pair_dots(q, x, qrows[lo:hi], pos[lo:hi])

        # The kernels release the GIL: a request of about 4M multiply-adds (a
        # few ms) or more runs on two threads (one threshold cell per 4).
        chunks = _map_row_chunks(part, len(qrows), pos.size * max(1, self.eff_dim) // 4)
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)

    def doc_against_all_queries(self, row: int) -> np.ndarray:
        """True inner products of doc ``row`` with every query (for diagnoses)."""
        if self.sparse:
            x = self.docs[row].astype(np.float64)
            return np.asarray((self.queries.astype(np.float64) @ x.T).toarray()).ravel()
        return self.queries.astype(np.float64) @ self.docs[row].astype(np.float64)

    def _sparse_candidates(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(cand, counts)``: for each query the rows of its best ``min(4k, n)``
        documents by a float32 product (-1 where it has fewer non-zero products),
        and how many documents have a non-zero inner product with it.

        Queries go in chunks of 256 and documents in row blocks (views of the
        CSR arrays, no copy, no transposed copy of the documents) of about
        ``_SPARSE_BLOCK_CELLS`` (query, document) cells, so the working memory
        stays in the tens of MiB; a chunk's running best ``4k`` are merged
        block by block. A chunk whose rows fill more than 1/8 of the columns
        (ASIF with few anchors: nearly every pair shares a term) is multiplied
        as a dense float32 block, sparse x sparse otherwise. The best ``4k``
        hold the true top-k unless more than ``3k`` documents tie within
        float32 rounding.
        """
        import scipy.sparse as sp

        nq, n, d = self.nq, self.n, self.docs.shape[1]
        c = int(min(4 * k, n))
        cand = np.full((nq, c), -1, dtype=np.int64)
        counts = np.zeros(nq, dtype=np.int64)
        qc = min(nq, 256)
        docs = self.docs
        avg = max(1, docs.nnz // max(1, n))
        step = max(1, min(_SPARSE_BLOCK_CELLS // qc, _SPARSE_BLOCK_CELLS * 4 // avg))
        for q0 in range(0, nq, qc):
            qs = self.queries[q0 : q0 + qc]
            nb = qs.shape[0]
            dense_q = qs.nnz > nb * d / 8 and nb * d <= _BLOCK_CELLS
            qT = (
                np.ascontiguousarray(qs.astype(np.float32).toarray().T)
                if dense_q
                else qs.T.tocsr().astype(np.float32)
            )
            best_s = np.full((nb, c), -np.inf)
            best_i = np.full((nb, c), -1, dtype=np.int64)
            for r0 in range(0, n, step):
                r1 = min(n, r0 + step)
                a, b = int(docs.indptr[r0]), int(docs.indptr[r1])
                block = sp.csr_matrix(
                    (
                        docs.data[a:b],
                        docs.indices[a:b],
                        (docs.indptr[r0 : r1 + 1] - a).astype(docs.indptr.dtype),
                    ),
                    shape=(r1 - r0, d),
                )
                scores = np.full((nb, r1 - r0), -np.inf)
                if dense_q:
                    prod = np.asarray(block @ qT).T  # (nb, r1 - r0) float32
                    nz = prod != 0
                    counts[q0 : q0 + nb] += nz.sum(axis=1)
                    scores[nz] = prod[nz]
                else:
                    coo = (block @ qT).tocoo()
                    keep = coo.data != 0
                    rows, cols = coo.row[keep], coo.col[keep]
                    counts[q0 : q0 + nb] += np.bincount(cols, minlength=nb)
                    scores[cols, rows] = coo.data[keep]
                both_s = np.concatenate([best_s, scores], axis=1)
                both_i = np.concatenate(
                    [best_i, np.broadcast_to(np.arange(r0, r1), (nb, r1 - r0))], axis=1
                )
                sel = np.argpartition(-both_s, c - 1, axis=1)[:, :c]
                best_s = np.take_along_axis(both_s, sel, axis=1)
                best_i = np.take_along_axis(both_i, sel, axis=1)
            cand[q0 : q0 + nb] = np.where(np.isfinite(best_s), best_i, -1)
        return cand, counts

    def kth(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """``(t, m)``: the true ``m_i``-th best score and ``m_i`` for each query (brute force).

        Dense: ``m_i = min(k, n)``, scores from a float32 matrix product
        (its rounding is far inside the tolerance). Sparse: only documents
        with a non-zero inner product count; the candidates of a float32
        product are rescored exactly in float64.
        """
        nq, n = self.nq, self.n
        t = np.full(nq, np.inf)
        m = np.zeros(nq, dtype=np.int64)
        if nq == 0 or n == 0:
            return t, m
        kk = min(k, n)
        if self.sparse:
            cand, counts = self._sparse_candidates(k)
            exact = self.pair_scores(np.arange(nq), cand)
            m = np.minimum(counts, k)
            srt = np.sort(np.where(cand >= 0, exact, -np.inf), axis=1)[:, ::-1]
            val = srt[np.arange(nq), np.maximum(m - 1, 0)]
            return np.where(m > 0, val, np.inf), m
        step = max(1, _BLOCK_CELLS // n)
        for q0 in range(0, nq, step):
            sl = slice(q0, q0 + step)
            dense = self.queries[sl] @ self.docs.T
            srt = -np.partition(-dense, kk - 1, axis=1)[:, :kk]
            srt = np.sort(srt, axis=1)[:, ::-1]
            t[sl] = srt[:, kk - 1].astype(np.float64)
            m[sl] = kk
        return t, m


class TrueScores:
    """Inner products recomputed in float64 from the indexed vectors, for any
    ``(query row, doc id)`` pairs (what a store returned).

    Args:
        docs: the vectors the store indexed, dense ``(n, d)`` or CSR.
        doc_ids: their ids, ``(n,)``, unique integers.
        queries: the query vectors, dense or CSR like ``docs``.
    """

    def __init__(self, docs: Any, doc_ids: Any, queries: Any) -> None:
        self._truth = _Truth(docs, doc_ids, queries)

    def __call__(self, query_rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """``(m, c)`` float64: row ``i`` scores query ``query_rows[i]`` against
        the docs ``ids[i]``; NaN for ``-1`` and for ids never indexed."""
        qrows = np.asarray(query_rows, dtype=np.int64)
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 2 or qrows.shape != (ids.shape[0],):
            raise ValueError(
                f"TrueScores: ids must be (m, c) and query_rows (m,), got {ids.shape} and "
                f"{qrows.shape}"
            )
        if len(qrows) and (qrows.min() < 0 or qrows.max() >= self._truth.nq):
            raise ValueError(
                f"TrueScores: query_rows must lie in [0, {self._truth.nq}), got "
                f"[{qrows.min()}, {qrows.max()}]"
            )
        return self._truth.pair_scores(qrows, self._truth.positions(ids))


def _row_norms(m: Any) -> np.ndarray:
    """Euclidean norm of every row, in float64 (dense or CSR)."""
    if is_sparse(m):
        return _sparse_row_norms(m)
    return np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float64))


def _sparse_row_norms(m: Any) -> np.ndarray:
    """Row L2 norms of a CSR matrix, summed in float64 over row blocks of its data."""
    out = np.zeros(m.shape[0])
    n = m.shape[0]
    r0 = 0
    while r0 < n:
        # about 1M stored values a block (at least one row): 24 MiB of temporaries
        r1 = int(np.searchsorted(m.indptr, m.indptr[r0] + (1 << 20), side="right")) - 1
        r1 = min(n, max(r1, r0 + 1))
        a, b = int(m.indptr[r0]), int(m.indptr[r1])
        d = m.data[a:b].astype(np.float64)
        rows = np.repeat(np.arange(r1 - r0), np.diff(m.indptr[r0 : r1 + 1]))
        out[r0:r1] = np.bincount(rows, weights=d * d, minlength=r1 - r0)
        r0 = r1
    return np.sqrt(out)


def _check_result(res: Any, name: str, nq: int, k: int) -> None:
    if not isinstance(res, SearchResult):
        raise TypeError(f"{name} must be a SearchResult, got {type(res).__name__}")
    if res.nq != nq:
        raise ValueError(f"{name} has {res.nq} rows, queries has {nq}")
    if res.k < k:
        raise ValueError(f"{name} must have at least k={k} columns, got {res.k}")


def _close(a: float, b: float, tol: float) -> bool:
    return bool(np.isfinite(a) and np.isfinite(b) and abs(a - b) <= tol)


def _score_of(truth: _Truth, i: int, doc_id: int, rtol: float) -> tuple[float, float] | None:
    """``(true score, tolerance)`` of stored id ``doc_id`` for query ``i``; None if not stored."""
    p = truth.positions(np.array([doc_id]))[0]
    if p < 0:
        return None
    s = float(truth.pair_scores(np.array([i]), np.array([[p]]))[0, 0])
    return s, rtol * max(float(truth.qnorm[i] * truth.xnorm[p]), _TINY)


def _shifted(truth: _Truth, i: int, rid: int, rep: float, rtol: float) -> str | None:
    """A neighbour of ``rid`` whose true score for query ``i`` is ``rep``, described, or None.

    Neighbours: ``rid - 1`` and ``rid + 1``; the stored ids just below and
    above it; the ids inserted just before and after it.
    """
    cands: list[tuple[int, str]] = [(rid - 1, "ids off by +1?"), (rid + 1, "ids off by -1?")]
    at = int(np.searchsorted(truth._sorted, rid))
    for a in (at - 1, at + 1 if at < truth.n and truth._sorted[at] == rid else at):
        if 0 <= a < truth.n:
            cands.append((int(truth._sorted[a]), "ids shifted by one place in id order?"))
    row = int(truth.positions(np.array([rid]))[0])
    for r in (row - 1, row + 1) if row >= 0 else ():
        if 0 <= r < truth.n:
            cands.append((int(truth.ids[r]), "ids shifted by one row of the insert?"))
    for other, cause in cands:
        if other == rid:
            continue
        got = _score_of(truth, i, other, rtol)
        if got is not None and _close(rep, got[0], got[1]):
            return f"the true score of id {other}: {cause} (the store maps rows to ids wrongly)"
    return None


def _diagnose_score(truth: _Truth, i: int, rid: int, rep: float, tru: float, rtol: float) -> str:
    """Why query ``i``'s entry for stored id ``rid`` reports ``rep`` instead of ``tru``."""
    head = f"query {i}: id {rid} reported {rep:.6g}, true {tru:.6g}"
    row = int(truth.positions(np.array([rid]))[0])
    qn, xn = float(truth.qnorm[i]), float(truth.xnorm[row])
    tol = rtol * max(qn * xn, _TINY)
    if abs(tru) > tol and _close(rep, -tru, tol):
        return f"{head}: sign flipped?"
    shifted = _shifted(truth, i, rid, rep, rtol)
    if shifted is not None:
        return f"{head}, which is {shifted}"
    against = truth.doc_against_all_queries(row)
    near = np.flatnonzero(np.abs(against - rep) <= rtol * np.maximum(truth.qnorm * xn, _TINY))
    near = near[near != i]
    if near.size:
        return (
            f"{head}, which is its true score for query {int(near[0])}: "
            "results in the wrong row (rows shuffled between queries)?"
        )
    if _close(rep, 1.0 - tru, tol):
        return f"{head}: a distance 1 - score reported instead of the inner product?"
    if _close(rep, qn * qn + xn * xn - 2.0 * tru, 4 * tol):
        return f"{head}: a squared L2 distance reported instead of the inner product?"
    if qn * xn > 0 and _close(rep, tru / (qn * xn), tol):
        return f"{head}: cosine similarity reported instead of the inner product?"
    return f"{head}: wrong score (another metric, quantised vectors, or lost precision?)"


def _diagnose_unknown(truth: _Truth, i: int, j: int, rid: int, rep: float, rtol: float) -> str:
    """Why query ``i`` returns ``rid``, an id that was never inserted."""
    head = f"query {i}, rank {j}: id {rid} (reported {rep:.6g}) was never inserted"
    shifted = _shifted(truth, i, rid, rep, rtol)
    if shifted is not None:
        return f"{head}; the reported score is {shifted}"
    if 0 <= rid < truth.n:
        s = float(truth.pair_scores(np.array([i]), np.array([[rid]]))[0, 0])
        if _close(rep, s, rtol * max(float(truth.qnorm[i] * truth.xnorm[rid]), _TINY)):
            return (
                f"{head}; row {rid} of the inserted vectors has that true score: "
                "row positions returned instead of ids?"
            )
    return f"{head}: ids must be the ones given to insert"


def _evaluate(
    store_result: SearchResult, truth: _Truth, k: int, rtol: float | None
) -> FidelityReport:
    nq = truth.nq
    rtol = default_rtol(truth.eff_dim) if rtol is None else float(rtol)
    if not rtol >= 0:
        raise ValueError(f"rtol must be >= 0, got {rtol!r}")
    if nq == 0:
        return FidelityReport(k=k, per_query=np.zeros(0), recall=float("nan"), rtol=rtol)

    ids = store_result.ids[:, :k]
    rep = store_result.scores[:, :k].astype(np.float64)
    qrows = np.arange(nq)
    pos = truth.positions(ids)
    real = ids >= 0
    known = pos >= 0
    true = truth.pair_scores(qrows, pos)
    xn = np.where(known, truth.xnorm[np.maximum(pos, 0)] if truth.n else 0.0, 0.0)
    scale = np.maximum(truth.qnorm[:, None] * xn, _TINY)

    # first occurrence of each id in its row
    order = np.argsort(ids, axis=1, kind="stable")
    srt = np.take_along_axis(ids, order, axis=1)
    rep_sorted = np.zeros_like(srt, dtype=bool)
    rep_sorted[:, 1:] = srt[:, 1:] == srt[:, :-1]
    dup = np.zeros_like(rep_sorted)
    np.put_along_axis(dup, order, rep_sorted, axis=1)
    dup &= real

    unknown = real & ~known
    zero_ip = (known & (true == 0.0)) if truth.sparse else np.zeros_like(known)

    t, m = truth.kth(k)
    tol_t = rtol * np.maximum(np.abs(np.where(np.isfinite(t), t, 0.0))[:, None], scale)
    good = known & ~dup & ~zero_ip
    found = good & (np.where(good, true, -np.inf) >= (t[:, None] - tol_t))
    n_found = np.count_nonzero(found, axis=1)
    per_query = np.where(m > 0, np.minimum(n_found, m) / np.maximum(m, 1), 1.0)

    err = np.where(known, np.abs(rep - np.where(known, true, 0.0)), 0.0)
    err = np.where(np.isfinite(err), err, np.inf)  # a -inf or NaN score on a hit
    tol_s = rtol * scale
    mismatch = known & (err > tol_s)
    rel = np.where(known, err / scale, 0.0)

    hits = np.count_nonzero(real, axis=1)
    short = hits < m
    # true order: a later hit better than an earlier one, beyond the tolerance
    tv = np.where(good, true, np.nan)
    mis = np.zeros(nq, dtype=bool)
    if k > 1:
        a, b = tv[:, :-1], tv[:, 1:]
        tol_pair = rtol * np.maximum(scale[:, :-1], scale[:, 1:])
        with np.errstate(invalid="ignore"):
            mis = np.any(b > a + tol_pair, axis=1)

    problems: list[str] = []
    bad_rows = np.flatnonzero(
        dup.any(axis=1)
        | unknown.any(axis=1)
        | zero_ip.any(axis=1)
        | mismatch.any(axis=1)
        | mis
        | short
    )
    for i in bad_rows[:_MAX_PROBLEMS]:
        problems.append(
            _describe_row(
                truth, int(i), ids[i], rep[i], true[i], dup[i], unknown[i], zero_ip[i],
                mismatch[i], bool(mis[i]), bool(short[i]), int(m[i]), int(hits[i]),
                tol_s[i], rtol, k,
            )
        )  # fmt: skip

    real_err = err[known]
    return FidelityReport(
        k=k,
        per_query=per_query.astype(np.float64),
        recall=float(per_query.mean()),
        recall_min=float(per_query.min()),
        rtol=rtol,
        score_max_abs_error=float(real_err.max()) if real_err.size else 0.0,
        score_max_rel_error=float(rel[known].max()) if real_err.size else 0.0,
        n_score_mismatch=int(mismatch.sum()),
        n_score_mismatch_rows=int(mismatch.any(axis=1).sum()),
        n_unknown_ids=int(unknown.sum()),
        n_duplicate_ids=int(dup.sum()),
        n_zero_ip_hits=int(zero_ip.sum()),
        n_short_rows=int(short.sum()),
        n_misordered_rows=int(mis.sum()),
        problems=tuple(problems),
    )


def _describe_row(
    truth: _Truth,
    i: int,
    ids: np.ndarray,
    rep: np.ndarray,
    true: np.ndarray,
    dup: np.ndarray,
    unknown: np.ndarray,
    zero_ip: np.ndarray,
    mismatch: np.ndarray,
    misordered: bool,
    short: bool,
    m: int,
    hits: int,
    tol: np.ndarray,
    rtol: float,
    k: int,
) -> str:
    """The first problem of query ``i``'s row, with a likely cause.

    Kinds in order of how much they explain (an unknown id, a repeat, a
    wrong score, a zero inner product), each at its first column; then the
    row's order and length.
    """
    for j in np.flatnonzero(unknown)[:1]:
        return _diagnose_unknown(truth, i, int(j), int(ids[j]), float(rep[j]), rtol)
    for j in np.flatnonzero(dup)[:1]:
        rid = int(ids[j])
        first = int(np.flatnonzero(ids == rid)[0])
        return f"query {i}: id {rid} returned twice (ranks {first} and {int(j)})"
    for j in np.flatnonzero(mismatch)[:1]:
        rid, r = int(ids[j]), float(rep[j])
        others = np.flatnonzero(np.abs(true - r) <= tol)
        others = others[(others != j) & np.isfinite(true[others])]
        if others.size and not np.isclose(true[j], r, rtol=0, atol=float(tol[j])):
            o = int(others[0])
            return (
                f"query {i}: id {rid} reported {r:.6g}, true {true[j]:.6g}, which is the true "
                f"score of id {int(ids[o])} at rank {o}: ids and scores misaligned in the row?"
            )
        return _diagnose_score(truth, i, rid, r, float(true[j]), rtol)
    for j in np.flatnonzero(zero_ip)[:1]:
        return (
            f"query {i}, rank {int(j)}: id {int(ids[j])} shares no term with the query (true "
            f"inner product 0, reported {rep[j]:.6g}): a sparse collection returns only "
            "documents with a non-zero inner product, then pads with -1"
        )
    if misordered:
        tv = np.where(np.isnan(true), -np.inf, true)
        j = int(np.flatnonzero(tv[1:] > tv[:-1] + tol[1:])[0])
        return (
            f"query {i}: rank {j} id {int(ids[j])} (true {true[j]:.6g}) is above rank {j + 1} "
            f"id {int(ids[j + 1])} (true {true[j + 1]:.6g}): row not sorted by score?"
        )
    rule = (
        f"documents with a non-zero inner product, at most k={k}"
        if truth.sparse
        else f"min(k, n) = min({k}, {truth.n})"
    )
    return f"query {i}: {hits} hits, expected {m} ({rule}): the store returned too few"


# ----------------------------------------------------------------------------- public API


def ann_recall(
    store_result: SearchResult,
    docs: Any,
    doc_ids: Any = None,
    queries: Any = None,
    k: int | None = None,
    *,
    rtol: float | None = None,
) -> Any:
    """Recall@k and score truth of a store's result, recomputed from the vectors.

    Args:
        store_result: what the store returned for ``queries`` (at least ``k``
            columns).
        docs: the vectors the store indexed, dense ``(n, d)`` or CSR.
        doc_ids: their ids, ``(n,)`` int64, unique.
        queries: the query vectors, ``(nq, d)``, dense or CSR like ``docs``.
        k: cut-off.
        rtol: score tolerance relative to ``||q|| * ||x||``;
            default :func:`default_rtol` of the dimension.

    Returns:
        A :class:`FidelityReport`.

    Deprecated form: ``ann_recall(store_result, exact_result, k, rtol=1e-5)``
    (a :class:`SearchResult` as the second argument) still returns
    ``(per_query, mean)`` but cannot check ids or scores against vectors; it
    emits a ``DeprecationWarning``.
    """
    if isinstance(docs, SearchResult):
        warnings.warn(
            "ann_recall(store_result, exact_result, k) trusts reported scores; pass the "
            "indexed vectors: ann_recall(store_result, docs, doc_ids, queries, k)",
            DeprecationWarning,
            stacklevel=2,
        )
        legacy_k = doc_ids if k is None else k
        return _legacy_ann_recall(store_result, docs, legacy_k, rtol=1e-5 if rtol is None else rtol)
    if doc_ids is None or queries is None or k is None:
        raise TypeError("ann_recall needs store_result, docs, doc_ids, queries and k")
    k = check_int(k, "k", low=1)
    truth = _Truth(docs, doc_ids, queries)
    _check_result(store_result, "store_result", truth.nq, k)
    return _evaluate(store_result, truth, k, rtol)


def measure_fidelity(
    store: Any,
    collection: str,
    docs: Any,
    doc_ids: Any,
    queries: Any,
    k: int,
    *,
    rtol: float | None = None,
) -> FidelityReport:
    """Search ``queries`` in ``store`` and check the result against the truth.

    Args:
        store: any ``VectorStoreAdapter`` holding ``docs`` under ``doc_ids``
            in ``collection``.
        collection: the collection to search.
        docs, doc_ids, queries, k, rtol: see :func:`ann_recall`.

    Returns:
        A :class:`FidelityReport` with ``store_seconds`` (the search) and
        ``exact_seconds`` (the brute-force truth) filled in.
    """
    k = check_int(k, "k", low=1)
    t0 = time.perf_counter()
    got = store.search(collection, queries, k)
    t1 = time.perf_counter()
    rep = ann_recall(got, docs, doc_ids, queries, k, rtol=rtol)
    t2 = time.perf_counter()
    return dataclasses.replace(rep, store_seconds=t1 - t0, exact_seconds=t2 - t1)


def _legacy_ann_recall(
    store_result: SearchResult, exact_result: SearchResult, k: Any, *, rtol: float
) -> tuple[np.ndarray, float]:
    """The deprecated score-based recall, with ties limited to ``[t - tol, t + tol]``.

    A returned id counts when it is in the exact top-k, or when its reported
    score is within ``tol`` of the exact k-th score (a tie). A reported score
    *above* the k-th exact score for an id outside the exact top-k is a lie
    (such a document would be in the exact top-k), so it no longer counts.
    """
    for name, res in (("store_result", store_result), ("exact_result", exact_result)):
        if not isinstance(res, SearchResult):
            raise TypeError(f"{name} must be a SearchResult, got {type(res).__name__}")
    k = check_int(k, "k", low=1)
    if store_result.nq != exact_result.nq:
        raise ValueError(
            f"store_result has {store_result.nq} queries, exact_result has {exact_result.nq}"
        )
    for name, res in (("store_result", store_result), ("exact_result", exact_result)):
        if res.k < k:
            raise ValueError(f"{name} must have at least k={k} columns, got {res.k}")
    if not rtol >= 0:
        raise ValueError(f"rtol must be >= 0, got {rtol!r}")
    nq = store_result.nq
    if nq == 0:
        return np.zeros(0), float("nan")
    e_ids, e_sc = exact_result.ids[:, :k], exact_result.scores[:, :k]
    s_ids, s_sc = store_result.ids[:, :k], store_result.scores[:, :k]
    e_real = e_ids >= 0
    m = e_real.sum(axis=1)
    t = np.where(m > 0, e_sc[np.arange(nq), np.maximum(m - 1, 0)], np.inf).astype(np.float64)
    tol = rtol * np.maximum(1.0, np.abs(np.where(np.isfinite(t), t, 0.0)))
    order = np.argsort(s_ids, axis=1, kind="stable")
    ids_sorted = np.take_along_axis(s_ids, order, axis=1)
    sc_sorted = np.take_along_axis(s_sc, order, axis=1).astype(np.float64)
    first = np.ones_like(ids_sorted, dtype=bool)
    first[:, 1:] = ids_sorted[:, 1:] != ids_sorted[:, :-1]
    valid = first & (ids_sorted >= 0)
    in_exact = np.empty_like(valid)
    step = max(1, (1 << 24) // (k * k))
    for q0 in range(0, nq, step):
        sl = slice(q0, q0 + step)
        hit = ids_sorted[sl, :, None] == np.where(e_real[sl], e_ids[sl], -2)[:, None, :]
        in_exact[sl] = hit.any(axis=2)
    tied = np.abs(sc_sorted - t[:, None]) <= tol[:, None]
    found = np.count_nonzero(valid & (in_exact | tied), axis=1)
    per_query = np.where(m > 0, np.minimum(found, m) / np.maximum(m, 1), 1.0)
    return per_query, float(per_query.mean())
