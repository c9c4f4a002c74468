"""A single query's prepared request (``OneQuery``): the same answer as the full path, for less.

The unit tests give :class:`OneQuery` a fake connection whose answer is
chosen, to check the tie rule, short rows and what it refuses to take. The
integration test searches one HNSW collection on a ``milvus-lite server``:
every single query equals its row of one batched search, the checks still
refuse bad input, and a changed search value or a new insert is seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from imsearch_align.adapters.base import CollectionInfo, finalize_rows, unique_collection_name
from imsearch_align.adapters.milvus import MilvusStore
from imsearch_align.adapters.milvus import search as one_query_module
from imsearch_align.adapters.milvus.schema import CollectionMeta
from imsearch_align.adapters.milvus.search import OneQuery

DIM = 8


def _prepared(
    ids: list[int],
    scores: list[float],
    k: int = 4,
    fail: Exception | None = None,
    judged: list | None = None,
) -> tuple[OneQuery, list]:
    """A OneQuery whose client answers ``ids``/``scores`` (raising ``fail`` once first);
    the requests it got, and what the store's retries (``run``) were handed."""
    sent: list = []
    judged = [] if judged is None else judged

    def search(name: str, **kw: Any) -> list:
        nonlocal fail
        sent.append((name, kw))
        if fail is not None:
            fail, exc = None, fail
            raise exc
        return [hits]

    def run(op: str, collection: str, fn: Any) -> Any:
        try:
            return fn(client, False)
        except Exception as exc:  # judged transient here: sent again
            judged.append((op, collection, exc))
            return fn(client, True)

    client = SimpleNamespace(search=search)
    hits = SimpleNamespace(ids=ids, distances=scores)
    info = CollectionInfo(
        name="c", dim=DIM, sparse=False, state=CollectionMeta(None, writes=1, ready_at=1)
    )
    prepared = OneQuery(run, client, info, k, search_params={"ef": 2}, consistency_level="Bounded",
                        timeout=None)  # fmt: skip
    return prepared, sent


def _row() -> np.ndarray:
    return np.linspace(-1, 1, DIM, dtype=np.float32)[None, :]


def test_a_full_descending_row_is_returned_as_sent_and_the_request_is_the_stores() -> None:
    prepared, sent = _prepared([7, 3, 9, 1], [0.9, 0.8, 0.7, 0.1])
    got = prepared.answer(_row(), 4)
    assert got is not None
    assert got.ids.tolist() == [[7, 3, 9, 1]] and got.ids.dtype == np.int64
    assert got.scores.dtype == np.float32
    np.testing.assert_allclose(got.scores, [[0.9, 0.8, 0.7, 0.1]], rtol=1e-6)
    (name, kw), = sent  # fmt: skip
    assert name == "c" and kw["limit"] == 4 and kw["consistency_level"] == "Bounded"
    assert kw["search_params"] == {"metric_type": "IP", "params": {"ef": 4}}  # ef raised to k
    np.testing.assert_allclose(kw["data"], _row(), rtol=1e-6)


@pytest.mark.parametrize(
    ("ids", "scores"),
    [
        ([9, 3, 7, 1], [0.9, 0.8, 0.8, 0.1]),  # tied: 3 and 7 by id, but 9 first
        ([9, 7, 3, 1], [0.8, 0.8, 0.8, 0.8]),  # all tied
        ([5, 2], [0.5, 0.4]),  # short: padded
        ([], []),  # nothing
    ],
)
def test_ties_and_short_rows_are_finished_as_finalize_rows_does(
    ids: list[int], scores: list[float]
) -> None:
    prepared, _ = _prepared(ids, scores)
    got = prepared.answer(_row(), 4)
    want = finalize_rows(
        np.array([ids], dtype=np.int64).reshape(1, -1),
        np.array([scores], dtype=np.float32).reshape(1, -1),
        4,
    )
    assert got is not None
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-6)  # -inf where padded


@pytest.mark.parametrize(
    ("queries", "k"),
    [
        (_row().astype(np.float64), 4),  # another dtype: the full path converts it
        (_row().tolist(), 4),  # not an ndarray
        (np.vstack([_row(), _row()]), 4),  # two rows
        (_row()[:, :-1], 4),  # another dimension
        (np.where(np.arange(DIM) == 3, np.nan, _row()).astype(np.float32), 4),  # NaN
        (np.where(np.arange(DIM) == 3, np.inf, _row()).astype(np.float32), 4),  # inf
        (_row(), 5),  # another k
        (_row(), np.int64(4)),  # k not a Python int
        (_row(), True),  # a bool is no k
    ],
)
def test_anything_but_the_prepared_shape_goes_the_full_way(queries: Any, k: Any) -> None:
    prepared, sent = _prepared([7, 3, 9, 1], [0.9, 0.8, 0.7, 0.1])
    assert prepared.answer(queries, k) is None
    assert not sent


def test_an_insert_since_the_collection_was_searchable_goes_the_full_way() -> None:
    prepared, sent = _prepared([7, 3, 9, 1], [0.9, 0.8, 0.7, 0.1])
    prepared._state.writes += 1
    assert prepared.answer(_row(), 4) is None and not sent


def test_a_failed_request_is_judged_by_the_stores_retries_and_sent_again() -> None:
    refused, judged = ConnectionError("connection reset"), []
    prepared, sent = _prepared([7, 3, 9, 1], [0.9, 0.8, 0.7, 0.1], fail=refused, judged=judged)
    got = prepared.answer(_row(), 4)
    assert got is not None and got.ids.tolist() == [[7, 3, 9, 1]]
    assert len(sent) == 2 and sent[0] == sent[1]
    # the exception the direct request raised is the one the retries judged, named "search"
    assert judged == [("search", "c", refused)]


def test_the_largest_float32_values_are_finite() -> None:
    """The finiteness test sums the row in doubles: float32's extremes cannot overflow it."""
    prepared, sent = _prepared([7, 3, 9, 1], [0.9, 0.8, 0.7, 0.1])
    big = np.full((1, DIM), np.finfo(np.float32).max, dtype=np.float32)
    assert prepared.answer(big, 4) is not None and len(sent) == 1


# --------------------------------------------------------------------------
# on a milvus-lite server


@pytest.fixture(scope="module")
def hnsw(milvus_lite_server: Any) -> Iterator[tuple[MilvusStore, str, np.ndarray]]:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2000, DIM)).astype(np.float32)
    X[[40, 900, 1500]] = X[7]  # exact duplicates: a tie the rule orders by id
    store = MilvusStore(uri=milvus_lite_server.uri, index="HNSW",
                        index_params={"M": 16, "efConstruction": 200}, search_params={"ef": 256})  # fmt: skip
    name = unique_collection_name("one_query")
    store.create_collection(name, DIM)
    store.insert(name, X, np.arange(len(X), dtype=np.int64))
    store.make_searchable(name)
    try:
        yield store, name, X
    finally:
        store.drop_collection(name)
        store.close()


@pytest.mark.integration
def test_single_queries_equal_their_rows_of_one_batch_and_skip_the_full_checks(
    hnsw: tuple[MilvusStore, str, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, name, X = hnsw
    rng = np.random.default_rng(4)
    Q = np.vstack([X[7:8], rng.standard_normal((29, DIM)).astype(np.float32)])
    batch = store.search(name, Q, 10)
    first = store.search(name, Q[:1], 10)  # the full path prepares the request
    assert first.ids[0, :4].tolist() == [7, 40, 900, 1500]  # the tie, by id
    calls, finished = [], []
    monkeypatch.setattr(store, "_prepare_search", lambda *a: calls.append(a))
    general = one_query_module.finalize_rows
    monkeypatch.setattr(
        one_query_module, "finalize_rows", lambda *a: finished.append(a) or general(*a)
    )
    singles = [store.search(name, Q[i : i + 1], 10) for i in range(len(Q))]
    assert not calls, "a single query in the prepared shape went through the full checks"
    # the server's rows come as lists: only the tied row needs the general finishing
    assert len(finished) == 1 and sorted(finished[0][0][0, :4].tolist()) == [7, 40, 900, 1500]
    np.testing.assert_array_equal(np.vstack([s.ids for s in singles]), batch.ids)
    np.testing.assert_allclose(np.vstack([s.scores for s in singles]), batch.scores, atol=1e-5)
    np.testing.assert_array_equal(singles[0].ids, first.ids)


@pytest.mark.integration
def test_bad_single_queries_are_still_refused_and_other_shapes_still_answered(
    hnsw: tuple[MilvusStore, str, np.ndarray],
) -> None:
    store, name, X = hnsw
    q = X[7:8].copy()
    want = store.search(name, q, 10)
    bad = q.copy()
    bad[0, 2] = np.nan
    with pytest.raises(ValueError, match="finite"):
        store.search(name, bad, 10)
    with pytest.raises(ValueError, match=f"dimension {DIM}"):
        store.search(name, q[:, :-1], 10)
    with pytest.raises(ValueError, match="k"):
        store.search(name, q, 0)
    for other in (q.astype(np.float64), q.tolist()):
        np.testing.assert_array_equal(store.search(name, other, 10).ids, want.ids)
    np.testing.assert_array_equal(store.search(name, q, np.int64(5)).ids, want.ids[:, :5])


@pytest.mark.integration
def test_a_new_search_value_and_a_new_row_are_seen_by_the_next_single_query(
    hnsw: tuple[MilvusStore, str, np.ndarray],
) -> None:
    store, name, X = hnsw
    q = X[11:12].copy()
    store.search(name, q, 10)
    store.set_search_params(name, ef=64)
    store.search(name, q, 10)
    prepared = store._get(name).state.one_query
    assert prepared._kwargs["search_params"]["params"] == {"ef": 64}
    store.insert(name, 10 * q, np.array([5000], dtype=np.int64))  # the query's best match now
    assert store.search(name, q, 10).ids[0, 0] == 5000
    store.set_search_params(name, ef=256)
