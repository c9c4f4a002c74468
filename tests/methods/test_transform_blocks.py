"""TaskContext.transform: block by block over gathered rows, equal to one whole call."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.datasets.vectors import PrecomputedEmbeddings
from imsearch_align.experiment import context as ctx_mod
from imsearch_align.experiment.context import Clock, RowGather, TaskContext
from imsearch_align.methods import ASIF, LocalCKA, Procrustes


def _ctx(method) -> TaskContext:
    ctx = TaskContext.__new__(TaskContext)  # only what transform() reads
    ctx.method, ctx.clock, ctx.space = method, Clock(), None
    return ctx


@pytest.mark.parametrize("make", [Procrustes, LocalCKA, lambda: ASIF(20, progress=False)])
def test_blocks_over_gathered_rows_equal_one_call_on_the_copy(make, correlated_pairs, monkeypatch):
    X, Y = correlated_pairs(700, 12, 9, seed=4)
    X, Y = X.astype(np.float32), Y.astype(np.float32)
    method = make().fit(X[:200], Y[:200])
    monkeypatch.setattr(ctx_mod, "TRANSFORM_BLOCK", 64)  # several blocks and a short last one
    pos = np.random.default_rng(0).permutation(np.arange(200, 700))[:333]
    rows = RowGather.of_array(Y, pos)
    assert rows.shape == (333, 9)
    np.testing.assert_array_equal(rows[5:9], Y[pos[5:9]])
    with pytest.raises(TypeError, match="slice"):
        rows[3]
    provider = PrecomputedEmbeddings(np.arange(1000, 1700), Y, modality="text")
    by_id = RowGather.of_provider(provider, 1000 + pos)
    assert by_id.shape == (333, 9)
    np.testing.assert_array_equal(by_id[5:9], Y[pos[5:9]])
    want = method.transform_texts(Y[pos])
    for view in (rows, by_id):
        ctx = _ctx(method)
        got = ctx.transform("text", view)
        if method.sparse_output:
            np.testing.assert_array_equal(got.toarray(), want.toarray())
        else:  # the same rows through the same code, per block: equal up to BLAS blocking
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert ctx.space == (want.shape[1], bool(method.sparse_output))
        assert "transform_s" in ctx.clock.timings
