"""Tie groups formed from float64 scores of the vectors where a store's float32
scores cannot decide them (:class:`imsearch_align.experiment.tie_aware.Rescorer`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.experiment.tie_aware import Rescorer
from imsearch_align.framework.fidelity import TrueScores
from imsearch_align.framework.metrics import Run
from imsearch_align.framework.ties import default_tolerance, tie_groups


def _space(rng, n=60, nq=40, d=24):
    """Documents in groups of 4 whose score gaps sit near the default tolerance."""
    c = rng.standard_normal((n // 4, d))
    docs = np.repeat(c, 4, axis=0) + 1e-5 * rng.standard_normal((n, d))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    q = docs[rng.integers(0, n, nq)] + 0.2 * rng.standard_normal((nq, d))
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return docs.astype(np.float32), q.astype(np.float32)


def _store_run(docs, ids, q, qids, k, wobble):
    """What a store with rounding error ``wobble(ids)`` returns: its top ``k``."""
    s = q @ docs.T
    s = (s + wobble(ids)[None, :]).astype(np.float32)
    top = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    return Run.from_arrays(qids, ids[top], np.take_along_axis(s, top, axis=1))


def test_true_scores_are_float64_inner_products_of_the_ids():
    rng = np.random.default_rng(0)
    docs, q = _space(rng)
    ids = np.arange(100, 100 + len(docs))
    pick = rng.integers(0, len(docs), (len(q), 5))
    asked = ids[pick]
    asked[0, 4] = -1
    asked[1, 3] = 7  # never indexed
    got = TrueScores(docs, ids, q)(np.arange(len(q)), asked)
    want = np.einsum("qd,qkd->qk", q.astype(np.float64), docs[pick].astype(np.float64))
    want[0, 4] = want[1, 3] = np.nan
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    sparse = TrueScores(sp.csr_matrix(docs), ids, sp.csr_matrix(q))(np.arange(len(q)), asked)
    np.testing.assert_allclose(sparse, want, rtol=1e-13, atol=1e-15)
    with pytest.raises(ValueError, match="query_rows"):
        TrueScores(docs, ids, q)(np.array([len(q)]), asked[:1])


def test_stores_rounding_differently_give_the_groups_of_the_float64_scores():
    """Two stores whose scores differ by up to 0.45 tol each (gaps by up to 0.9
    tol) group differently on their own scores; rescored, both give the groups
    of the float64 scores of the same documents, in the same order."""
    rng = np.random.default_rng(1)
    docs, q = _space(rng)
    d = docs.shape[1]
    tol = default_tolerance(d)
    ids = np.arange(len(docs)) * 3 + 5
    qids = np.arange(len(q)) + 1000
    stores = [
        lambda x: np.zeros(len(x)),
        lambda x: 0.9 * tol * (((x * 2654435761) % 1000) / 1000.0 - 0.5),
    ]
    runs = [_store_run(docs, ids, q, qids, 10, w) for w in stores]
    own = [tie_groups(r, tol=tol) for r in runs]
    assert any(len(np.unique(a[:6])) != len(np.unique(b[:6])) for a, b in zip(*own)), (
        "the stores must group differently on their own scores"
    )
    exact = q.astype(np.float64) @ docs.astype(np.float64).T
    for r in runs:
        rescorer = Rescorer(docs, ids, q, qids, tol)
        out = rescorer(r)
        assert rescorer.n_rescored > 0
        pos = (out.doc_ids - 5) // 3
        truth = Run.from_arrays(qids, out.doc_ids, np.take_along_axis(exact, pos, axis=1))
        g_out, g_truth = tie_groups(out, tol=tol), tie_groups(truth, tol=tol)
        # Same groups over the first 6 ranks (members as sets; beyond, the stores
        # returned different tails).
        for i in range(len(q)):
            for c in range(6):
                a = set(out.doc_ids[i][g_out[i] == g_out[i, c]])
                b = set(truth.doc_ids[i][g_truth[i] == g_truth[i, c]])
                assert a == b, (i, c)


def test_rows_the_store_scores_decide_are_left_alone():
    rng = np.random.default_rng(2)
    docs = rng.standard_normal((50, 16)).astype(np.float32)
    q = rng.standard_normal((20, 16)).astype(np.float32)
    ids = np.arange(50)
    run = _store_run(docs, ids, q, np.arange(20), 8, lambda x: np.zeros(len(x)))
    rescorer = Rescorer(docs, ids, q, np.arange(20), default_tolerance(16))
    assert rescorer(run) is run and rescorer.n_rescored == 0
