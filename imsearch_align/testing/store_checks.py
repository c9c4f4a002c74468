"""Result checks of the store conformance kit: order, truth, recall, exact top-k.

Each raises ``AssertionError`` naming the first bad query, rank, id and score
(and the likely cause). Public, and re-exported by
:mod:`imsearch_align.testing.store_conformance`, for adapter-specific tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from imsearch_align.framework.fidelity import FidelityReport, ann_recall
from imsearch_align.framework.interfaces import SearchResult

__all__ = ["assert_exact_topk", "assert_rows_ordered", "check_search", "first_true"]


def first_true(mask: np.ndarray) -> tuple[int, int]:
    """(row, column) of the first True of a 2-D mask, in row-major order."""
    r, c = np.argwhere(mask)[0]
    return int(r), int(c)


def assert_rows_ordered(result: SearchResult, k: int, nq: int) -> None:
    """Shape, dtypes, and each row sorted by (score desc, id asc) with no-hits (-1, -inf) last.

    Checks the *reported* scores only (the order a caller sees); whether
    they are true is :func:`check_search`'s business.
    """
    assert isinstance(result, SearchResult), f"search must return SearchResult, got {type(result)}"
    assert result.ids.shape == (nq, k), f"ids shape {result.ids.shape}, expected {(nq, k)}"
    assert result.ids.dtype == np.int64, f"ids dtype {result.ids.dtype}, expected int64"
    assert result.scores.dtype == np.float32, (
        f"scores dtype {result.scores.dtype}, expected float32"
    )
    ids, sc = result.ids, result.scores
    miss = ids < 0
    if (ids[miss] != -1).any():
        i, j = first_true(miss & (ids != -1))
        raise AssertionError(
            f"query {i}, rank {j}: id {ids[i, j]}: a negative id other than -1 was returned"
        )
    if not np.isneginf(sc[miss]).all():
        i, j = first_true(miss & ~np.isneginf(sc))
        raise AssertionError(
            f"query {i}, rank {j}: a no-hit (-1) must have score -inf, got {sc[i, j]}"
        )
    if not np.isfinite(sc[~miss]).all():
        i, j = first_true(~miss & ~np.isfinite(sc))
        raise AssertionError(
            f"query {i}, rank {j}: id {ids[i, j]} has score {sc[i, j]}; a hit needs a finite score"
        )
    hole = miss[:, :-1] & ~miss[:, 1:]
    if hole.any():
        i, j = first_true(hole)
        raise AssertionError(
            f"query {i}, rank {j + 1}: id {ids[i, j + 1]} follows a no-hit (-1): "
            "a hit follows a no-hit; pad rows at the end"
        )
    a_s, b_s = sc[:, :-1], sc[:, 1:]
    real = ~miss[:, 1:]
    up = real & (b_s > a_s)
    if up.any():
        i, j = first_true(up)
        raise AssertionError(
            f"query {i}: rank {j} id {ids[i, j]} score {a_s[i, j]:.6g} is below rank {j + 1} "
            f"id {ids[i, j + 1]} score {b_s[i, j]:.6g}: scores are not sorted descending "
            "(rows not sorted?)"
        )
    tie = real & (a_s == b_s) & (ids[:, 1:] <= ids[:, :-1])
    if tie.any():
        i, j = first_true(tie)
        raise AssertionError(
            f"query {i}: ranks {j} and {j + 1} have equal scores {a_s[i, j]:.6g} but ids "
            f"{ids[i, j]} then {ids[i, j + 1]}: equal scores are not ordered by ascending id "
            "(finish rows with finalize_rows)"
        )


def check_search(
    result: SearchResult,
    queries: Any,
    vectors: Any,
    ids: Any,
    k: int,
    *,
    exact: bool,
    rtol: float | None = None,
    min_recall: float | None = None,
) -> FidelityReport:
    """Check a search result against the truth; raise ``AssertionError`` naming the first fault.

    Structure and reported order (:func:`assert_rows_ordered`), then every
    returned id and score against the true inner products
    (:func:`~imsearch_align.framework.fidelity.ann_recall`): inserted ids,
    no repeats, true scores, the row length of the sparse/dense rule, true
    order. Then recall@k: 1.0 when ``exact``, else at least ``min_recall``
    (no recall requirement when ``min_recall`` is None).

    Returns:
        The :class:`~imsearch_align.framework.fidelity.FidelityReport`.
    """
    nq = int(queries.shape[0])
    assert_rows_ordered(result, k, nq)
    rep = ann_recall(result, vectors, ids, queries, k, rtol=rtol)
    if not rep.ok:
        counts = ", ".join(
            f"{v} {label}"
            for v, label in (
                (rep.n_score_mismatch, "scores that are not the true inner product"),
                (rep.n_unknown_ids, "ids never inserted"),
                (rep.n_duplicate_ids, "repeated ids"),
                (rep.n_zero_ip_hits, "documents sharing no term with the query"),
                (rep.n_short_rows, "rows with too few hits"),
                (rep.n_misordered_rows, "rows out of true order"),
            )
            if v
        )
        more = "".join(f"\n  {p}" for p in rep.problems[1:])
        raise AssertionError(f"{rep.first_problem}\n({counts}, k={k}){more}")
    need = 1.0 if exact else min_recall
    if need is not None and rep.recall < need - 1e-12:
        worst = int(np.argmin(rep.per_query))
        kind = "an exact index must find the true top-k" if exact else "ann_min_recall"
        raise AssertionError(
            f"recall@{k} = {rep.recall:.4f} from true scores, expected >= {need} ({kind}); "
            f"query {worst} has recall {rep.per_query[worst]:.3f}: "
            f"returned ids {result.ids[worst, :k].tolist()}"
        )
    return rep


def assert_exact_topk(
    result: SearchResult,
    queries: Any,
    vectors: Any,
    ids: np.ndarray,
    k: int,
    *,
    rtol: float | None = None,
) -> None:
    """The result is the true top-k, tie-tolerantly: :func:`check_search` with ``exact=True``."""
    check_search(result, queries, vectors, ids, k, exact=True, rtol=rtol)
