"""Why a row of a store's answer is wrong: its first problem described with a likely cause.

Each description names the query, the rank and the id, and tries the usual
faults in turn: a flipped sign, ids shifted by one (in value, in id order or
in insert order), rows shuffled between queries, row positions returned
instead of ids, a distance or cosine reported instead of the inner product,
ids and scores misaligned, an unsorted or short row.
"""

from __future__ import annotations

import numpy as np

from imsearch_align.framework.fidelity.truth import _TINY, _Truth


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
