"""MilvusStore against real Milvus: Lite file, Lite server, Milvus 2.3.5 standalone.

Oracle: ExactStore (brute-force inner product, tie rule score desc / id asc)
on the same vectors. Collections are small (a few hundred rows) and built
once per module and deployment, because Milvus Lite inserts and Milvus 2.3.5
collection creation (~3 s) dominate the run time.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.base import (
    BaseStore,
    CollectionExistsError,
    CollectionNotFoundError,
    unique_collection_name,
)
from imsearch_align.adapters.exact import ExactStore
from imsearch_align.adapters.milvus import MAX_TOPK, MilvusStore, MilvusStoreError
from imsearch_align.adapters.milvus.config import redact_uri
from imsearch_align.adapters.milvus.rows import byte_batches
from imsearch_align.framework.registry import STORES
from imsearch_align.testing.store_conformance import StoreConformance

TOKEN = "s3cr3t-token-DO-NOT-LEAK"
DEPLOYMENTS = ["lite_file", "lite_server", "milvus235"]
N, DIM, NQ = 400, 24, 40


# --------------------------------------------------------------------------
# data and oracle


def _dense_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, DIM)).astype(np.float32)
    # Exact duplicates under different ids: equal scores, ordered by id.
    X[[11, 200, 350]] = X[5]
    ids = rng.permutation(10 * N)[:N].astype(np.int64)
    Q = np.vstack([X[5:6], rng.standard_normal((NQ - 1, DIM)).astype(np.float32)])
    cat = (np.arange(N) % 4).astype(np.int64)
    return X, ids, Q, cat


def _sparse_data(seed: int = 1) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix]:
    rng = np.random.default_rng(seed)
    n, d, nnz = 300, 200, 12
    rows = np.repeat(np.arange(n), nnz)
    cols = np.concatenate([rng.choice(d, nnz, replace=False) for _ in range(n)])
    vals = rng.random(n * nnz).astype(np.float32) + 0.05
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, d), dtype=np.float32)
    # Dense enough queries that every query overlaps many more than k docs.
    qn = 20
    qrows = np.repeat(np.arange(qn), 60)
    qcols = np.concatenate([rng.choice(d, 60, replace=False) for _ in range(qn)])
    Q = sp.csr_matrix(
        (rng.random(qn * 60).astype(np.float32) + 0.05, (qrows, qcols)), shape=(qn, d)
    )
    return X, np.arange(1000, 1000 + n, dtype=np.int64), Q


def _exact(X: Any, ids: np.ndarray, Q: Any, k: int, sparse: bool = False) -> Any:
    with ExactStore() as ex:
        ex.create_collection("o", None if sparse else X.shape[1], sparse=sparse)
        ex.insert("o", X, ids)
        return ex.search("o", Q, k)


def _assert_same_topk(got: Any, want: Any, *, atol: float = 1e-4) -> None:
    """Tie-tolerant: scores equal row by row; ids equal where scores are not tied."""
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=atol)
    for r in range(got.ids.shape[0]):
        for c in range(got.ids.shape[1]):
            if got.ids[r, c] != want.ids[r, c]:
                tied = np.isclose(want.scores[r], want.scores[r, c], atol=atol)
                assert got.ids[r, c] in set(want.ids[r, tied].tolist()) or tied.sum() > 1, (
                    r,
                    c,
                )


# --------------------------------------------------------------------------
# fixtures: one store per deployment


@dataclass
class Env:
    store: MilvusStore
    kind: str
    supports_sparse: bool
    uri: str


@pytest.fixture(scope="module", params=DEPLOYMENTS)
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    kind = request.param
    if kind == "lite_file":
        uri = str(tmp_path_factory.mktemp("lite-file") / "x.db")
        sparse_ok = True
    elif kind == "lite_server":
        uri = request.getfixturevalue("milvus_lite_server").uri
        sparse_ok = True
    else:
        uri = request.getfixturevalue("milvus_standalone").uri
        sparse_ok = False
    store = MilvusStore(uri=uri, token=TOKEN if kind != "lite_file" else None)
    yield Env(store, kind, sparse_ok, uri)
    # Only this store's collections: the server is shared with other modules.
    for name in store.list_collections():
        if store.owner_of(name) == store.owner:
            store.drop_collection(name)
    store.close()


@pytest.fixture(scope="module")
def dense(env: Env) -> tuple[Env, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    X, ids, Q, cat = _dense_data()
    env.store.create_collection("dense", DIM)
    env.store.insert("dense", X, ids, fields={"cat": cat})
    return env, X, ids, Q, cat


integration = pytest.mark.integration


# --------------------------------------------------------------------------
# search correctness


def test_registered_as_milvus() -> None:
    assert STORES.get("milvus") is MilvusStore


def test_shares_base_store_checks_before_any_server_call() -> None:
    """One name rule, one k check, one error set: nothing listens on port 1."""
    from imsearch_align.adapters.exact import ExactStore

    assert issubclass(MilvusStore, BaseStore)
    store = MilvusStore(uri="http://127.0.0.1:1", retry_budget_s=0)
    for bad in ("1abc", "a-b", "x" * 256):
        with pytest.raises(ValueError) as got:
            store.create_collection(bad, 4)
        with pytest.raises(ValueError) as want:
            ExactStore().create_collection(bad, 4)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError, match=r"k must be in \[1, 16384\], got 0"):
        store.search("c", np.ones((1, 4), np.float32), 0)
    with pytest.raises(ValueError, match="metric must be one of"):
        store.create_collection("c", 4, metric="l2")
    with pytest.raises(ValueError, match=r"dim must be in \[1, 32768\]"):
        store.create_collection("c", 40_000)
    store.close()


def test_declares_its_capabilities() -> None:
    from imsearch_align.framework.interfaces import (
        CollectionCatalog,
        StoreProvenance,
        ThreadSafety,
    )

    store = MilvusStore(uri="http://127.0.0.1:1")
    # VectorStoreAdapter's supports_sparse asks the server: checked by the kit.
    for proto in (CollectionCatalog, StoreProvenance, ThreadSafety):
        assert isinstance(store, proto), proto
    assert store.thread_safe is True and "pymilvus" in store.provenance_packages
    store.close()


@integration
def test_dense_flat_equals_exact_store(dense: Any) -> None:
    env, X, ids, Q, _ = dense
    got = env.store.search("dense", Q, 10)
    want = _exact(X, ids, Q, 10)
    assert got.ids.dtype == np.int64 and got.scores.dtype == np.float32
    _assert_same_topk(got, want)


@integration
def test_ties_broken_by_ascending_id(dense: Any) -> None:
    env, _, ids, Q, _ = dense
    got = env.store.search("dense", Q[:1], 4)
    dup_ids = np.sort(ids[[5, 11, 200, 350]])
    # Q[0] is X[5]; its four copies tie at the top score.
    np.testing.assert_array_equal(got.ids[0], dup_ids)
    assert np.ptp(got.scores[0]) == 0.0


@integration
def test_flat_chooses_docs_tied_at_the_kth_score_by_id(env: Env) -> None:
    """Integer vectors tie exactly, in groups larger than k + 8: the server alone
    keeps its own choice among the docs tied at the cut-off; the store asks
    again, wider, and chooses them by ascending id, as ExactStore does (k 1, 5
    and 17 on one collection)."""
    rng = np.random.default_rng(3)
    v = rng.integers(-1, 2, (300, 6)).astype(np.float32)  # few distinct scores: big groups
    ids = np.arange(3000, 0, -10).astype(np.int64)
    q = rng.integers(-1, 2, (40, 6)).astype(np.float32)
    name = "ties_k"
    env.store.create_collection(name, 6)
    try:
        env.store.insert(name, v[:100], ids[:100])
        env.store.insert(name, v[100:], ids[100:])
        got = {k: env.store.search(name, q, k) for k in (1, 5, 17)}
    finally:
        env.store.drop_collection(name)
    s = (q @ v.T).astype(np.float32)  # the oracle: score descending, then id ascending
    for k, res in got.items():
        order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
        np.testing.assert_array_equal(res.ids, ids[order], err_msg=f"k={k}")
        np.testing.assert_allclose(res.scores, np.take_along_axis(s, order, axis=1), rtol=1e-6)


@integration
def test_filter_passes_through(dense: Any) -> None:
    env, X, ids, Q, cat = dense
    got = env.store.search("dense", Q, 5, filter="cat == 1")
    keep = cat == 1
    want = _exact(X[keep], ids[keep], Q, 5)
    _assert_same_topk(got, want)
    assert set(got.ids.ravel().tolist()) <= set(ids[keep].tolist())


@integration
def test_k_larger_than_collection_pads(dense: Any) -> None:
    env, _, ids, Q, _ = dense
    got = env.store.search("dense", Q[:2], N + 25)
    assert got.ids.shape == (2, N + 25)
    assert (got.ids[:, :N] >= 0).all() and (got.ids[:, N:] == -1).all()
    assert np.isneginf(got.scores[:, N:]).all()
    assert set(got.ids[0, :N].tolist()) == set(ids.tolist())
    assert env.store.count("dense") == N


@integration
def test_split_requests_give_the_same_result(dense: Any) -> None:
    env, X, ids, Q, _ = dense
    # A 1 KB budget forces one query per search request and ~10 rows per insert.
    small = MilvusStore(uri=env.uri, request_bytes=1024, token=TOKEN, owner=env.store.owner)
    try:
        np.testing.assert_array_equal(
            small.search("dense", Q[:5], 7).ids, env.store.search("dense", Q[:5], 7).ids
        )
        small.create_collection("split_insert", DIM)
        small.insert("split_insert", X[:120], ids[:120])
        assert small.count("split_insert") == 120
        _assert_same_topk(small.search("split_insert", Q, 3), _exact(X[:120], ids[:120], Q, 3))
    finally:
        if small.has_collection("split_insert"):
            small.drop_collection("split_insert")
        small.close()


@integration
def test_sparse_rows_hold_only_nonzero_inner_products(env: Env) -> None:
    """The package rule: documents sharing no term (or scoring exactly 0) are no hits."""
    if not env.supports_sparse:
        pytest.skip("Milvus 2.3 has no sparse vectors (SPARSE_FLOAT_VECTOR arrived in 2.4)")
    d = 50
    rng = np.random.default_rng(7)
    rows, cols, vals = [], [], []
    for i in range(40):  # each doc: 3 terms among 40..49, weights > 0
        for c in rng.choice(np.arange(40, d), 3, replace=False):
            rows.append(i)
            cols.append(int(c))
            vals.append(float(rng.random() + 0.1))
    # Docs 40-43 share term 0..3 with the queries; doc 44 holds term 0 with an
    # explicit zero weight (and another term), so its inner product is 0.
    for i, c in zip(range(40, 44), range(4)):
        rows += [i, i]
        cols += [c, 45]
        vals += [0.5 + 0.1 * c, 0.3]
    rows += [44, 44]
    cols += [0, 46]
    vals += [0.0, 0.7]
    X = sp.csr_matrix((vals, (rows, cols)), shape=(45, d), dtype=np.float32)
    ids = np.arange(45, dtype=np.int64) * 3 + 1
    Q = sp.csr_matrix(np.eye(4, d, dtype=np.float32) + np.eye(4, d, 1, dtype=np.float32))
    name = unique_collection_name("sparse_rule")
    env.store.create_collection(name, sparse=True)
    try:
        env.store.insert(name, X, ids)
        k = 10
        got = env.store.search(name, Q, k)
        true = (Q @ X.T).toarray()
        for r in range(Q.shape[0]):
            nz = np.flatnonzero(true[r])
            order = sorted(nz, key=lambda j: (-true[r, j], ids[j]))[:k]
            assert got.ids[r].tolist() == [int(ids[j]) for j in order] + [-1] * (k - len(order))
            np.testing.assert_allclose(got.scores[r, : len(order)], true[r, order], rtol=1e-6)
            assert np.isneginf(got.scores[r, len(order) :]).all()
    finally:
        env.store.drop_collection(name)


@integration
def test_dense_collection_without_dim_is_made_by_the_first_insert(env: Env) -> None:
    X, ids, Q, _ = _dense_data(9)
    name = unique_collection_name("nodim")
    env.store.create_collection(name)
    try:
        assert env.store.has_collection(name) and name in env.store.list_collections()
        assert env.store.count(name) == 0
        assert (env.store.search(name, Q[:2], 3).ids == -1).all()
        env.store.insert(name, X, ids)
        _assert_same_topk(env.store.search(name, Q, 5), _exact(X, ids, Q, 5))
        with pytest.raises(ValueError, match=f"dimension {DIM}"):
            env.store.insert(name, np.ones((1, DIM + 1), np.float32), [10**9])
        other = MilvusStore(uri=env.uri, token=TOKEN)  # the server has it now
        try:
            assert other.count(name) == N
        finally:
            other.close()
    finally:
        env.store.drop_collection(name)


@integration
def test_rows_removed_behind_the_store_fail_loudly(env: Env) -> None:
    """A FLAT search that returns fewer than min(k, count) hits is an error, not a result."""
    if env.kind == "lite_file":
        pytest.skip("needs a second client of the same server")
    from pymilvus import MilvusClient

    X, ids, Q, _ = _dense_data(11)
    name = unique_collection_name("shrunk")
    env.store.create_collection(name, DIM)
    raw = MilvusClient(uri=env.uri, dedicated=True)
    try:
        env.store.insert(name, X, ids)
        assert (env.store.search(name, Q[:2], N).ids >= 0).all()
        raw.delete(name, ids=ids[:5].tolist())  # another client, bypassing ownership
        # The deleting client waits until its delete is visible (as a writer
        # does); the store's Bounded searches see it from then on.
        raw.query(name, filter="", output_fields=["count(*)"], consistency_level="Strong")
        with pytest.raises(MilvusStoreError, match=rf"lost rows .*counted {N}.*holds {N - 5}"):
            env.store.search(name, Q[:2], N)
    finally:
        raw.close()
        env.store.drop_collection(name)


@integration
def test_rows_added_by_another_client_are_searched(env: Env) -> None:
    """The store's own count is not a bound on what a FLAT search asks for:
    rows another client added since (same owner) and made searchable come
    back, min(k, held)."""
    if env.kind == "lite_file":
        pytest.skip("needs a second client of the same server")
    X, ids, Q, _ = _dense_data(12)
    name = unique_collection_name("grown")
    env.store.create_collection(name, DIM)
    other = MilvusStore(uri=env.uri, token=TOKEN, owner=env.store.owner)
    try:
        env.store.insert(name, X[:5], ids[:5])
        assert (env.store.search(name, Q[:2], 3).ids >= 0).all()  # the store counted 5
        other.insert(name, X[5:40], ids[5:40])
        other.make_searchable(name)  # the writer's wait; Bounded readers see the rows after it
        got = env.store.search(name, Q[:2], 10)
        _assert_same_topk(got, _exact(X[:40], ids[:40], Q[:2], 10))
    finally:
        other.close()
        env.store.drop_collection(name)


@integration
def test_provenance_names_versions_not_paths(env: Env, tmp_path: Any) -> None:
    import json
    from importlib import metadata

    prov = env.store.provenance()
    assert prov["packages"]["pymilvus"] == metadata.version("pymilvus")
    want = {
        "lite_file": "milvus-lite (in-process)",
        "lite_server": "milvus-lite server",
        "milvus235": "milvus server (standalone or cluster)",
    }[env.kind]
    assert prov["deployment"] == want
    assert ("2.3.5" in prov["server_version"]) == (env.kind == "milvus235")
    text = json.dumps(prov)
    assert TOKEN not in text and "/" not in text.replace("http://", "")


@integration
def test_sparse_equals_exact_store(env: Env) -> None:
    if not env.supports_sparse:
        pytest.skip("Milvus 2.3 has no sparse vectors (SPARSE_FLOAT_VECTOR arrived in 2.4)")
    X, ids, Q = _sparse_data()
    env.store.create_collection("sparse", sparse=True)
    env.store.insert("sparse", X, ids)
    got = env.store.search("sparse", Q, 10)
    _assert_same_topk(got, _exact(X, ids, Q, 10, sparse=True))


def test_duplicate_sparse_entries_are_summed_as_everywhere(env: Env) -> None:
    """A CSR row holding a column twice means the sum (scipy, ExactStore, the
    truth check); a {column: value} row kept only the last value."""
    if not env.supports_sparse:
        pytest.skip("Milvus 2.3 has no sparse vectors (SPARSE_FLOAT_VECTOR arrived in 2.4)")
    # doc 5: column 0 twice (1 + 2) and column 1 = 3 -> query [1, 1, 0] scores 6
    X = sp.csr_matrix(
        (np.array([1.0, 2.0, 3.0, 3.0], np.float32), np.array([0, 0, 1, 1]), np.array([0, 3, 4])),
        shape=(2, 3),
    )
    Q = sp.csr_matrix(
        (np.array([1.0, 1.0, 1.0], np.float32), np.array([1, 1, 0]), np.array([0, 3])),
        shape=(1, 3),
    )  # column 1 twice: 2, column 0: 1
    env.store.create_collection("dups", sparse=True)
    env.store.insert("dups", X, np.array([5, 6]))
    got = env.store.search("dups", Q, 2)
    assert got.ids.tolist() == [[5, 6]]
    np.testing.assert_allclose(got.scores, [[1 * 3 + 2 * 3, 2 * 3]], rtol=1e-6)
    _assert_same_topk(got, _exact(X, np.array([5, 6]), Q, 2, sparse=True))


@integration
def test_hnsw_recall_on_clustered_data(env: Env) -> None:
    rng = np.random.default_rng(3)
    centers = rng.standard_normal((20, 32)).astype(np.float32)
    X = (centers[rng.integers(0, 20, 1500)] + 0.3 * rng.standard_normal((1500, 32))).astype(
        np.float32
    )
    Q = X[rng.choice(1500, 100, replace=False)] + 0.05 * rng.standard_normal((100, 32)).astype(
        np.float32
    )
    ids = np.arange(1500, dtype=np.int64)
    store = MilvusStore(
        uri=env.uri,
        index="HNSW",
        index_params={"M": 16, "efConstruction": 100},
        search_params={"ef": 64},
        token=TOKEN,
    )
    try:
        store.create_collection("hnsw", 32)
        store.insert("hnsw", X, ids)
        got = store.search("hnsw", Q, 10)
        want = _exact(X, ids, Q, 10)
        recall = np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got.ids, want.ids)])
        assert recall >= 0.95, recall
    finally:
        store.drop_collection("hnsw")
        store.close()


@integration
def test_persistent_across_close_and_reopen(dense: Any) -> None:
    env, _, _, Q, _ = dense
    before = env.store.search("dense", Q[:3], 5)
    other = MilvusStore(uri=env.uri, token=TOKEN)
    try:
        assert other.count("dense") == N
        np.testing.assert_array_equal(other.search("dense", Q[:3], 5).ids, before.ids)
    finally:
        other.close()


@integration
def test_lite_file_survives_release_and_reopen(tmp_path: Any) -> None:
    X, ids, Q, _ = _dense_data(5)
    uri = str(tmp_path / "p.db")
    with MilvusStore(uri=uri) as s:
        s.create_collection("keep", DIM)
        s.insert("keep", X, ids)
        before = s.search("keep", Q, 5)
    # The in-process server was released (lock freed): a fresh one reads the files.
    assert os.path.isdir(uri)
    with MilvusStore(uri=uri) as s:
        assert s.count("keep") == N
        np.testing.assert_array_equal(s.search("keep", Q, 5).ids, before.ids)
    # An existing directory is a Lite uri too.
    with MilvusStore(uri=uri + "/") as s:
        assert s.is_lite and s.count("keep") == N


# --------------------------------------------------------------------------
# consistency: Bounded by default, every row searchable after one wait (issue 29)

LEVELS = ["Strong", "Bounded", "Session", "Eventually"]


def _gaussian(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaussian rows (no ties), shuffled ids, queries."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, DIM)).astype(np.float32)
    ids = rng.choice(10**6, size=n, replace=False).astype(np.int64)
    return X, ids, rng.standard_normal((NQ, DIM)).astype(np.float32)


@integration
@pytest.mark.parametrize("level", [None, "Eventually"])
def test_search_right_after_insert_sees_every_row(env: Env, level: str | None) -> None:
    """Insert, then search at once: every row is in the answer (k = n) and the
    top-k equals brute force, at the default level (Bounded) and the weakest
    (Eventually: a stronger level sees at least what it sees; every level's
    readiness wait is the same code); rows inserted after a search are waited
    for again."""
    kw = {} if level is None else {"consistency_level": level}
    store = MilvusStore(uri=env.uri, token=TOKEN, **kw)
    X, ids, Q = _gaussian(N, 21)
    name = unique_collection_name(f"fresh_{(level or 'default').lower()}")
    store.create_collection(name, DIM)
    try:
        store.insert(name, X[:250], ids[:250])
        store.insert(name, X[250:300], ids[250:300])
        every = store.search(name, Q[:3], 300)
        assert (every.ids >= 0).all(), "a row inserted before the search is missing"
        for row in every.ids:
            assert sorted(row.tolist()) == sorted(ids[:300].tolist())
        got = store.search(name, Q, 10)
        want = _exact(X[:300], ids[:300], Q, 10)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-5)
        ready = store.make_searchable(name)
        assert ready["rows"] == 300 and store.count(name) == 300
        store.insert(name, X[300:], ids[300:])  # after a search: waited for again
        got = store.search(name, Q, 10)
        np.testing.assert_array_equal(got.ids, _exact(X, ids, Q, 10).ids)
        assert store.make_searchable(name)["rows"] == N == store.count(name)
    finally:
        store.drop_collection(name)
        store.close()


@integration
def test_default_level_is_bounded_and_recorded(env: Env) -> None:
    """The level every search used reaches the result: ``provenance.store``."""
    from imsearch_align.experiment.provenance import capture

    store = MilvusStore(uri=env.uri, token=TOKEN)
    strong = MilvusStore(uri=env.uri, token=TOKEN, consistency_level="Strong")
    try:
        assert store.consistency_level == "Bounded"
        assert "consistency_level='Bounded'" in repr(store)
        assert store.provenance()["consistency_level"] == "Bounded"
        assert capture(store).to_dict()["store"]["consistency_level"] == "Bounded"
        assert capture(strong).to_dict()["store"]["consistency_level"] == "Strong"
    finally:
        store.close()
        strong.close()


@integration
def test_readiness_waits_for_the_index_and_times_out_clearly(env: Env) -> None:
    """An HNSW collection: the wait covers the index and the load; a wait
    given no time names the step it did not reach (Milvus 2.3.5 hands the
    indexed segments to the query node seconds after the flush)."""
    X, ids, Q = _gaussian(N, 22)
    name = unique_collection_name("ready_hnsw")
    kw: dict[str, Any] = {"index": "HNSW", "index_params": {"M": 8, "efConstruction": 64}}
    if env.kind == "milvus235":
        hasty = MilvusStore(uri=env.uri, token=TOKEN, ready_timeout_s=0, **kw)
        hasty.create_collection(name, DIM)
        try:
            hasty.insert(name, X, ids)
            with pytest.raises(MilvusStoreError) as err:
                hasty.search(name, Q, 5)
            msg = str(err.value)
            assert f"collection {name!r} at {env.uri} is not searchable after 0 s" in msg
            assert "(ready_timeout_s)" in msg and "not reached; the server reports" in msg
            assert TOKEN not in msg
        finally:
            hasty.drop_collection(name)
            hasty.close()
    store = MilvusStore(uri=env.uri, token=TOKEN, search_params={"ef": 64}, **kw)
    store.create_collection(name, DIM)
    try:
        store.insert(name, X, ids)
        ready = store.make_searchable(name)
        assert ready["rows"] == N and min(ready.values()) >= 0
        if env.kind == "milvus235":  # served with the index, not an interim one
            loaded = store._conn.call("segments", name, "list_loaded_segments", name)
            assert loaded and all(seg.index_name or seg.num_rows < 1024 for seg in loaded)
        got = store.search(name, Q, 10)
        assert (got.ids >= 0).all()
        want = _exact(X, ids, Q, 10)
        recall = np.mean([len(set(g) & set(w)) / 10 for g, w in zip(got.ids, want.ids)])
        assert recall >= 0.9, recall
    finally:
        store.drop_collection(name)
        store.close()


@pytest.mark.parametrize("bad", ["Sometimes", "strong", "Customized", "", None, 2])
def test_unknown_consistency_level_is_refused_naming_the_levels(bad: Any) -> None:
    with pytest.raises(ValueError) as err:
        MilvusStore(uri="http://127.0.0.1:1", consistency_level=bad)
    assert str(err.value) == (
        "consistency_level must be one of ['Strong', 'Bounded', 'Session', 'Eventually'], "
        f"got {bad!r}"
    )


@pytest.mark.parametrize(
    ("content", "found"),
    [
        (b'{"my": "notes"}', "a text file of 15 bytes"),
        (b"", "an empty file"),
        (b"SQLite format 3\x00" + bytes(84), "an SQLite database file of 100 bytes"),
        (bytes(range(8)), "a binary file of 8 bytes"),
    ],
)
def test_lite_path_that_is_an_ordinary_file_is_named_as_such(
    tmp_path: Any, content: bytes, found: str
) -> None:
    """Issue 28: not blamed on "another process"; the file is left as it was."""
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    want = (
        f"uri: {str(path)!r} is {found}, not a Milvus Lite database; expected a Milvus Lite "
        "database (Milvus Lite 3 keeps one as a directory, made on first use) or a new path"
    )
    with pytest.raises(ValueError) as err:
        MilvusStore(uri=str(path))
    assert str(err.value) == want and "another process" not in want
    # A file that appears after the store was made is caught when it opens.
    later = tmp_path / "later.db"
    store = MilvusStore(uri=str(later))
    later.write_bytes(content)
    with pytest.raises(ValueError) as err:
        store.list_collections()
    assert str(err.value) == want.replace(str(path), str(later))
    store.close()
    assert path.read_bytes() == content and later.read_bytes() == content


def test_lite_path_that_is_a_file_exits_2_before_encoding(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    """A ConfigError (exit status 2), raised when the store opens, before any encoding."""
    import imsearch_align.embedding as embedding
    from imsearch_align.cli import main
    from imsearch_align.framework.errors import ConfigError

    path = tmp_path / "notes.db"
    path.write_bytes(b"notes")
    with pytest.raises(ConfigError):
        MilvusStore(uri=str(path))

    def encode(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("encoding reached before the store was opened")

    monkeypatch.setattr(embedding, "embed", encode)
    args = ["eval", "--dataset", "shapes", "--method", "csa", "--store", "milvus"]
    args += ["--store-param", f"uri={path}", "--cache-dir", "none", "--no-progress"]
    code = main([*args, "--output-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"uri: {str(path)!r} is a text file of 5 bytes, not a Milvus Lite database" in err


# --------------------------------------------------------------------------
# bad input and faults


@integration
def test_dense_into_sparse_and_reverse(env: Env) -> None:
    if not env.supports_sparse:
        pytest.skip("Milvus 2.3 has no sparse vectors (SPARSE_FLOAT_VECTOR arrived in 2.4)")
    env.store.create_collection("sp_kind", sparse=True)
    env.store.create_collection("de_kind", 8)
    try:
        with pytest.raises(TypeError, match="sparse collection 'sp_kind'"):
            env.store.insert("sp_kind", np.ones((2, 8), np.float32), [1, 2])
        with pytest.raises(TypeError, match="dense collection 'de_kind'"):
            env.store.insert("de_kind", sp.random(2, 8, density=0.5, format="csr"), [1, 2])
        with pytest.raises(TypeError, match="queries must be a scipy sparse"):
            env.store.search("sp_kind", np.ones((1, 8), np.float32), 3)
        with pytest.raises(TypeError, match="queries must be a dense"):
            env.store.search("de_kind", sp.eye(1, 8, format="csr"), 3)
        with pytest.raises(ValueError, match="all-zero sparse rows"):
            env.store.insert("sp_kind", sp.csr_matrix((2, 8), dtype=np.float32), [1, 2])
    finally:
        env.store.drop_collection("sp_kind")
        env.store.drop_collection("de_kind")


@integration
def test_dense_into_dense_dimension_mismatch(dense: Any) -> None:
    env = dense[0]
    with pytest.raises(ValueError, match=f"dimension {DIM}"):
        env.store.insert("dense", np.ones((1, DIM + 1), np.float32), [10**9])
    with pytest.raises(ValueError, match=f"dimension {DIM}"):
        env.store.search("dense", np.ones((1, DIM - 1), np.float32), 3)


@integration
def test_duplicate_ids_rejected(dense: Any) -> None:
    env, X, ids, _, _ = dense
    with pytest.raises(ValueError, match="already stored"):
        env.store.insert("dense", X[:2], ids[:2])
    with pytest.raises(ValueError, match="unique"):
        env.store.insert("dense", X[:2], [10**9, 10**9])
    assert env.store.count("dense") == N


@integration
def test_unknown_and_existing_collection(dense: Any) -> None:
    env = dense[0]
    with pytest.raises(CollectionNotFoundError, match="'nope' does not exist"):
        env.store.search("nope", np.ones((1, DIM), np.float32), 3)
    with pytest.raises(CollectionExistsError, match="already exists"):
        env.store.create_collection("dense", DIM)


@integration
@pytest.mark.parametrize("bad", ["1abc", "a-b", "has space", "", "x" * 256])
def test_collection_name_milvus_rejects(env: Env, bad: str) -> None:
    with pytest.raises(ValueError, match="Milvus's rule"):
        env.store.create_collection(bad, 4)
    assert not env.store.has_collection(bad)


@integration
def test_longest_name_with_a_run_suffix_is_accepted(env: Env) -> None:
    name = unique_collection_name("x" * 300, "run_0123abcd")
    assert len(name) == 255 and name.endswith("_run_0123abcd")
    env.store.create_collection(name, 4)
    try:
        env.store.insert(name, np.eye(4, dtype=np.float32), np.arange(4))
        assert env.store.search(name, np.eye(4, dtype=np.float32), 1).ids[:, 0].tolist() == [
            0,
            1,
            2,
            3,
        ]
    finally:
        env.store.drop_collection(name)


@integration
def test_server_refusal_is_a_clear_error(env: Env) -> None:
    if env.kind != "milvus235":
        pytest.skip("Milvus Lite accepts names a real Milvus rejects; the server check is on 2.3.5")
    # Bypass the local check to see the server's own refusal surface clearly.
    with pytest.raises(MilvusStoreError, match=r"refused create_collection.*1abc") as info:
        env.store._call("create_collection", "1abc", "create_collection", "1abc", dimension=4)
    assert env.uri in str(info.value) and TOKEN not in str(info.value)


@integration
def test_k_above_server_limit(dense: Any) -> None:
    env, _, _, Q, _ = dense
    with pytest.raises(ValueError, match=rf"k must be in \[1, {MAX_TOPK}\], got {MAX_TOPK + 1}"):
        env.store.search("dense", Q[:1], MAX_TOPK + 1)
    assert env.store.search("dense", Q[:1], MAX_TOPK).ids.shape == (1, MAX_TOPK)
    if env.kind == "milvus235":
        # Told the limit is higher, the server itself refuses, clearly.
        lax = MilvusStore(uri=env.uri, max_k=MAX_TOPK + 100, token=TOKEN)
        try:
            with pytest.raises(MilvusStoreError, match="topk"):
                lax.search("dense", Q[:1], MAX_TOPK + 1)
        finally:
            lax.close()


@integration
def test_token_never_shown(env: Env, caplog: pytest.LogCaptureFixture, monkeypatch: Any) -> None:
    monkeypatch.setenv("MILVUS_TOKEN", TOKEN)
    store = MilvusStore(uri=env.uri)  # token from MILVUS_TOKEN
    caplog.set_level(logging.DEBUG)
    try:
        assert TOKEN not in repr(store) and "***" in repr(store)
        assert store.has_collection("dense_absent_") is False
        with pytest.raises(CollectionNotFoundError) as e1:
            store.search("dense_absent_", np.ones((1, 4), np.float32), 2)
        assert TOKEN not in str(e1.value)
    finally:
        store.close()
    assert TOKEN not in caplog.text


def test_uri_credentials_are_redacted() -> None:
    assert redact_uri("http://root:Milvus@host:19530") == "http://host:19530"
    assert redact_uri("http://127.0.0.1:19530") == "http://127.0.0.1:19530"
    assert redact_uri("/tmp/x.db") == "/tmp/x.db"
    s = MilvusStore(uri="http://root:pw@127.0.0.1:1")
    assert "pw" not in repr(s)


# --------------------------------------------------------------------------
# parameters (no server)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"index": "DISKANN"}, "index must be one of"),
        ({"index": "HNSW", "index_params": {"nlist": 8}}, "unknown key"),
        ({"index": "HNSW", "search_params": {"ef": 0}}, r"search_params\['ef'\] must be in"),
        ({"consistency_level": "Sometimes"}, "consistency_level must be one of"),
        ({"ready_timeout_s": -1}, "ready_timeout_s must be a number >= 0"),
        ({"request_bytes": 65 * 2**20}, "request_bytes must be in"),
        ({"retry_budget_s": -1}, "retry_budget_s must be a number >= 0"),
        ({"backoff_s": "1"}, "backoff_s must be a number >= 0"),
        ({"owner": "has space"}, "owner must be 1-128 letters"),
        ({"owner": ""}, "owner must be 1-128 letters"),
    ],
)
def test_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MilvusStore(uri="http://127.0.0.1:1", **kwargs)


def test_byte_batches_cover_rows_under_budget() -> None:
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 100, 500)
    sizes[17] = 1000  # one row over budget travels alone
    batches = byte_batches(sizes, 300, max_rows=7)
    assert batches[0][0] == 0 and batches[-1][1] == 500
    assert all(a[1] == b[0] for a, b in itertools.pairwise(batches))
    for lo, hi in batches:
        assert hi - lo <= 7
        assert sizes[lo:hi].sum() <= 300 or hi - lo == 1
        # Greedy: the next row would not have fitted.
        if hi < 500 and hi - lo < 7:
            assert sizes[lo : hi + 1].sum() > 300


@integration
def test_sparse_refused_up_front_on_milvus_23(env: Env) -> None:
    if env.kind != "milvus235":
        pytest.skip("only Milvus 2.3 lacks sparse vectors")
    assert env.store.supports_sparse is False
    with pytest.raises(TypeError, match=r"has no sparse vectors.*>= 2\.4"):
        env.store.create_collection("no_sparse", sparse=True)
    assert not env.store.has_collection("no_sparse")


# --------------------------------------------------------------------------
# the conformance kit, on every deployment

_NO_SPARSE_23 = "Milvus 2.3 has no sparse vectors (SPARSE_FLOAT_VECTOR arrived in 2.4)"


@integration
class TestMilvusLiteFileConformance(StoreConformance):
    exact = True
    supports_sparse = True
    persistent = True

    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Any:
        return lambda: MilvusStore(uri=str(tmp_path / "conf.db"), owner="conformance")


@integration
class TestMilvusLiteFileHnswConformance(StoreConformance):
    exact = False
    supports_sparse = True
    persistent = True
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self, tmp_path: Any) -> Any:
        return lambda: MilvusStore(
            uri=str(tmp_path / "hnsw.db"),
            index="HNSW",
            index_params={"M": 16, "efConstruction": 64},
            search_params={"ef": 64},
            owner="conformance",
        )


@integration
class TestMilvusLiteServerConformance(StoreConformance):
    exact = True
    supports_sparse = True
    persistent = True

    @pytest.fixture
    def make_store(self, milvus_lite_server: Any) -> Any:
        return lambda: MilvusStore(uri=milvus_lite_server.uri, token=TOKEN, owner="conformance")


@integration
class TestMilvus235Conformance(StoreConformance):
    exact = True
    supports_sparse = False
    persistent = True

    @pytest.fixture
    def make_store(self, milvus_standalone: Any) -> Any:
        return lambda: MilvusStore(uri=milvus_standalone.uri, token=TOKEN, owner="conformance")

    def test_exact_topk_sparse(self) -> None:
        pytest.skip(_NO_SPARSE_23)

    def test_recall_sparse(self) -> None:
        pytest.skip(_NO_SPARSE_23)
