"""SearchResult: what its constructor converts and refuses, and ``of_rows`` for built rows."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.framework.interfaces import SearchResult


def test_the_constructor_converts_to_int64_and_float32() -> None:
    r = SearchResult([[3, 1]], [[0.5, 0.25]])
    assert r.ids.dtype == np.int64 and r.scores.dtype == np.float32
    assert (r.nq, r.k) == (1, 2) and r.extra_scores == {}


def test_of_rows_keeps_the_arrays_it_was_given() -> None:
    ids = np.array([[3, 1]], dtype=np.int64)
    scores = np.array([[0.5, 0.25]], dtype=np.float32)
    r = SearchResult.of_rows(ids, scores)
    assert r.ids is ids and r.scores is scores and r.extra_scores == {}
    with pytest.raises(AttributeError):
        r.ids = ids  # frozen, as the constructor's


def test_of_rows_converts_other_dtypes_as_the_constructor_does() -> None:
    r = SearchResult.of_rows(np.array([[3, 1]], dtype=np.int32), np.array([[0.5, 0.25]]))
    assert r.ids.dtype == np.int64 and r.scores.dtype == np.float32
    np.testing.assert_array_equal(r.ids, [[3, 1]])


@pytest.mark.parametrize(
    ("ids", "scores"),
    [
        (np.zeros((1, 3), np.int64), np.zeros((1, 2), np.float32)),
        (np.zeros(3, np.int64), np.zeros(3, np.float32)),
    ],
)
def test_of_rows_refuses_what_the_constructor_refuses(ids: np.ndarray, scores: np.ndarray) -> None:
    with pytest.raises(ValueError, match="must both be 2-D"):
        SearchResult.of_rows(ids, scores)
