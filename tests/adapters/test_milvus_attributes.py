"""Milvus attributes typed (INT64 fields, a scalar index each) or dynamic (the JSON field, on
request): the schema and indexes read back from the server, the same filtered answers from
both and from an oracle outside the store (numpy over the kept ids), the readiness wait
beside a scalar index, the create cut short finishing the scalar index too, and the study's
path declaring the attributes before its first insert.

Deployments: a ``milvus-lite server`` (INVERTED: Lite builds no other scalar index) and a
Milvus 2.3.5 standalone (STL_SORT). One pair of collections per deployment (IVF_FLAT,
searched with ``nprobe = nlist``: exhaustive, so exact, yet the approximate-index path of the
readiness wait), shared by the module's tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from imsearch_align.adapters.base import unique_collection_name
from imsearch_align.adapters.milvus import MilvusStore
from imsearch_align.adapters.milvus.ready import UNINDEXED_ROWS, _handed_off
from imsearch_align.framework.interfaces import Filter

N, DIM, NQ, K, NLIST, CATS = 3000, 16, 20, 10, 16, 10
STORAGES = ("typed", "dynamic")
integration = pytest.mark.integration


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(37)
    X = rng.standard_normal((N, DIM)).astype(np.float32)
    ids = rng.choice(10**9, size=N, replace=False).astype(np.int64)
    Q = rng.standard_normal((NQ, DIM)).astype(np.float32)
    category = rng.permutation(np.arange(N) % CATS).astype(np.int64)
    return X, ids, Q, category


X, IDS, Q, CATEGORY = _data()


def _oracle(keep: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact filtered top-k by numpy: float64 inner products over the kept rows only, score
    descending then id ascending, padded with -1."""
    x, ids = X[keep].astype(np.float64), IDS[keep]
    s = Q.astype(np.float64) @ x.T
    out_ids = np.full((NQ, k), -1, dtype=np.int64)
    out_s = np.full((NQ, k), -np.inf)
    for r in range(NQ):
        order = np.lexsort((ids, -s[r]))[:k]
        out_ids[r, : len(order)], out_s[r, : len(order)] = ids[order], s[r, order]
    return out_ids, out_s


def _assert_oracle(got: Any, keep: np.ndarray, k: int) -> None:
    want_ids, want_s = _oracle(keep, k)
    np.testing.assert_allclose(got.scores, want_s, rtol=1e-5, atol=1e-5)
    differ = got.ids != want_ids
    # ids may differ only between documents tied in float32 (none expected on this data)
    assert not differ.any() or np.allclose(got.scores[differ], want_s[differ], atol=1e-5)
    assert np.isin(got.ids[got.ids >= 0], IDS[keep]).all()


# --------------------------------------------------------------------------------- no server


def test_attribute_storage_refuses_an_unknown_value_naming_the_argument(tmp_path) -> None:
    for bad in ("json", "TYPED", None, 1):
        with pytest.raises(ValueError) as err:
            MilvusStore(uri=str(tmp_path / "x.db"), attribute_storage=bad)
        msg = str(err.value)
        assert "attribute_storage" in msg and "'typed', 'dynamic'" in msg and repr(bad) in msg
    assert MilvusStore.typed_attributes is True


def _seg(i: int, index_name: str | None, rows: int = 5000, state: str = "Sealed") -> Any:
    s = SimpleNamespace(segment_id=i, state=state, num_rows=rows)
    if index_name is not None:
        s.index_name = index_name
    return s


def test_beside_a_scalar_index_a_segment_counts_once_listed_with_the_vector_index() -> None:
    """Milvus 2.3.5 names one of a segment's loaded indexes, changing between listings: a
    segment listed under the scalar index's name says nothing about its vector index."""
    flushed = [_seg(1, None, state="Flushed"), _seg(2, None, state="Flushed")]
    listings = iter(
        [[_seg(1, "vector"), _seg(2, "category")]] * 16  # 2 never shown with the vector index
        + [[_seg(1, "category"), _seg(2, "category")], [_seg(1, "category"), _seg(2, "vector")]]
    )

    def call(op: str, name: str, method: str, *args: Any, **kw: Any) -> Any:
        return flushed if method == "list_persistent_segments" else next(listings)

    served: set[int] = set()
    assert _handed_off(call, "c", "vector", served) == (
        False,
        "1 of 2 flushed segments not yet served with their index",
    )
    assert served == {1}
    # the next poll: 1 is remembered though listed under 'category'; 2 shows its vector index
    # on the second listing taken at once
    assert _handed_off(call, "c", "vector", served)[0] and served == {1, 2}
    # without a scalar index (no name given) the old rule: any index name counts
    only = [_seg(1, "category"), _seg(2, "", rows=UNINDEXED_ROWS - 1)]
    assert _handed_off(lambda *a, **k: flushed if a[2] == "list_persistent_segments" else only,
                       "c")[0]  # fmt: skip


class _Recorder:
    """A store that records how it was created (``typed`` says whether it declares
    attributes)."""

    def __init__(self, typed: bool) -> None:
        if typed:
            self.typed_attributes = True
        self.created: dict[str, Any] = {}
        self.inserted: list[dict] = []

    def create_collection(self, name: str, dim: int, **kw: Any) -> None:
        self.created = {"name": name, "dim": dim, **kw}

    def insert(self, name: str, block: Any, ids: Any, **kw: Any) -> None:
        self.inserted.append(kw)


def test_insert_collection_declares_attributes_only_to_a_store_that_types_them() -> None:
    from imsearch_align.collection.filters import AttributeTable, assign_categories
    from imsearch_align.collection.measure import insert_collection

    ids = np.arange(40, dtype=np.int64)
    table = AttributeTable(assign_categories(ids, ids[:3], n_categories=4))
    inserts = table.inserts()
    assert inserts.declare == {"category": "int64"}
    blocks = [(ids[:20], X[:20]), (ids[20:], X[20:40])]
    typed, plain = _Recorder(True), _Recorder(False)
    for store in (typed, plain):
        insert_collection(store, "c", blocks, DIM, attributes=inserts)
        np.testing.assert_array_equal(store.inserted[1]["attributes"]["category"],
                                      table.attributes(ids[20:])["category"])  # fmt: skip
    assert typed.created == {"name": "c", "dim": DIM, "attributes": {"category": "int64"}}
    assert plain.created == {"name": "c", "dim": DIM}
    # an explicit declaration wins; a plain callable declares nothing
    insert_collection(typed, "d", blocks, DIM, attributes=table.attributes, declare={"x": "int"})
    assert typed.created["attributes"] == {"x": "int"}
    insert_collection(typed, "e", blocks, DIM, attributes=table.attributes)
    assert "attributes" not in typed.created


# --------------------------------------------------------------------------------- servers


@dataclass
class Env:
    kind: str
    uri: str
    scalar_index: str
    stores: dict[str, MilvusStore]
    names: dict[str, str]
    #: ``(vector index name, done)`` of every hand-off poll of the typed collection's wait.
    polls: list[tuple[str | None, bool]]


def _build(store: MilvusStore, name: str) -> None:
    store.create_collection(name, DIM, attributes={"category": "int64"})
    for lo in range(0, N, 1000):  # several inserts, one flushed segment
        sl = slice(lo, lo + 1000)
        store.insert(name, X[sl], IDS[sl], attributes={"category": CATEGORY[sl]})
    store.make_searchable(name)


@pytest.fixture(scope="module", params=["lite_server", "milvus235"])
def env(request: pytest.FixtureRequest) -> Iterator[Env]:
    """Two collections of the same rows on one server, attributes typed and dynamic, built
    side by side (a Milvus 2.3.5 create and wait take seconds each), the typed one's
    hand-off polls recorded."""
    from imsearch_align.adapters.milvus import ready

    if request.param == "lite_server":
        uri, scalar = request.getfixturevalue("milvus_lite_server").uri, "INVERTED"
    else:
        uri, scalar = request.getfixturevalue("milvus_standalone").uri, "STL_SORT"
    stores = {
        storage: MilvusStore(uri=uri, index="IVF_FLAT", index_params={"nlist": NLIST},
                             search_params={"nprobe": NLIST}, attribute_storage=storage,
                             ready_timeout_s=120)
        for storage in STORAGES
    }  # fmt: skip
    names = {storage: unique_collection_name(f"attr_{storage}") for storage in STORAGES}
    polls: list[tuple[str | None, bool]] = []
    real = ready._handed_off

    def traced(call: Any, cname: str, vector_index: Any = None, served: Any = None) -> Any:
        out = real(call, cname, vector_index, served)
        if cname == names["typed"]:
            polls.append((vector_index, out[0]))
        return out

    try:
        with pytest.MonkeyPatch.context() as mp, ThreadPoolExecutor(2) as pool:
            mp.setattr(ready, "_handed_off", traced)
            for f in [pool.submit(_build, stores[s], names[s]) for s in STORAGES]:
                f.result()
        yield Env(request.param, uri, scalar, stores, names, polls)
    finally:
        for storage, store in stores.items():
            if names[storage] in store.list_collections():
                store.drop_collection(names[storage])
            store.close()


def _described(env: Env, storage: str) -> tuple[dict[str, str], dict[str, str]]:
    """``{field: type}`` of the collection's schema and ``{field: index type}`` of its
    indexes, read back from the server."""
    store, name = env.stores[storage], env.names[storage]
    desc = store._call("describe_collection", name, "describe_collection", name)
    fields = {f["name"]: getattr(f["type"], "name", str(f["type"])) for f in desc["fields"]}
    indexes = {}
    for index_name in store._call("list_indexes", name, "list_indexes", name):
        d = store._call("describe_index", name, "describe_index", name, index_name)
        indexes[d["field_name"]] = d["index_type"]
    return fields, indexes


@integration
def test_declared_attributes_are_int64_fields_with_a_scalar_index(env: Env) -> None:
    fields, indexes = _described(env, "typed")
    assert fields["category"] == "INT64"
    assert indexes == {"vector": "IVF_FLAT", "category": env.scalar_index}
    prov = env.stores["typed"].provenance()
    assert (prov["attribute_storage"], prov["scalar_index"]) == ("typed", env.scalar_index)
    # on request: the dynamic JSON field, no scalar index; the names still on the collection
    fields, indexes = _described(env, "dynamic")
    assert "category" not in fields and indexes == {"vector": "IVF_FLAT"}
    prov = env.stores["dynamic"].provenance()
    assert (prov["attribute_storage"], prov["scalar_index"]) == ("dynamic", None)
    other = MilvusStore(uri=env.uri)
    try:
        for storage in STORAGES:
            assert other._get(env.names[storage]).attribute_names == ("category",)
    finally:
        other.close()


@integration
@pytest.mark.parametrize("values", [(3,), (1, 4, 7)], ids=["10pct", "30pct"])
def test_typed_and_dynamic_answer_alike_and_as_numpy_over_the_kept_ids(
    env: Env, values: tuple[int, ...]
) -> None:
    keep = np.isin(CATEGORY, values)
    got = {
        storage: env.stores[storage].search_filtered(env.names[storage], Q, K,
                                                     Filter("category", values))
        for storage in STORAGES
    }  # fmt: skip
    np.testing.assert_array_equal(got["typed"].ids, got["dynamic"].ids)
    np.testing.assert_allclose(got["typed"].scores, got["dynamic"].scores, rtol=1e-6)
    _assert_oracle(got["typed"], keep, K)
    # fewer kept rows than k: padded the same way
    one = Filter("category", [5], expression=f"category in [5] and id < {int(np.sort(IDS)[40])}")
    small = np.isin(CATEGORY, [5]) & (IDS < np.sort(IDS)[40])
    for storage in STORAGES:
        res = env.stores[storage].search_filtered(env.names[storage], Q, K, one)
        _assert_oracle(res, small, K)


@integration
def test_the_wait_beside_a_scalar_index_counts_the_vector_index(env: Env) -> None:
    """On Milvus 2.3.5 the wait after the inserts read the listing under the vector index's
    name (a segment listed under the scalar index's name alone does not count), and when
    it ended every flushed segment had its vector index: listed under its name."""
    store, name = env.stores["typed"], env.names["typed"]
    if env.kind != "milvus235":
        assert not env.polls  # Milvus Lite lists no segments: nothing to hand off
        return
    assert env.polls and {v for v, _ in env.polls} == {"vector"} and env.polls[-1][1]
    seen: set[int] = set()
    for _ in range(200):  # the name listed changes between listings
        flushed = {
            s.segment_id
            for s in store._call("segments", name, "list_persistent_segments", name)
            if "flushed" in str(s.state).lower()
        }
        loaded = store._call("segments", name, "list_loaded_segments", name)
        seen |= {s.segment_id for s in loaded if s.index_name == "vector"}
        if flushed <= seen:
            break
    assert flushed and flushed <= seen


def _lost_answer() -> Exception:
    from pymilvus.exceptions import MilvusException

    return MilvusException(code=2, message="Fail connecting to server on 127.0.0.1: unavailable")


@integration
@pytest.mark.parametrize("cut", ["before_indexes", "between_indexes"])
def test_a_create_cut_short_finishes_the_scalar_index_too(
    milvus_lite_server: Any, monkeypatch: pytest.MonkeyPatch, cut: str
) -> None:
    """The collection stored (and, ``between_indexes``, its vector index), the rest never
    ran, the answer lost: the retry creates the missing indexes, the scalar one included,
    then loads."""
    store = MilvusStore(uri=milvus_lite_server.uri, index="HNSW", retry_budget_s=20)
    name = unique_collection_name("attr_cut")
    client = store._conn.connect()
    real, calls = client.create_collection, []

    def once(collection_name: str, **kw: Any) -> None:
        calls.append(collection_name)
        if len(calls) > 1:
            return real(collection_name, **kw)
        client._get_connection().create_collection(
            collection_name, kw["schema"], consistency_level=kw["consistency_level"],
            properties=kw["properties"],
        )  # fmt: skip
        if cut == "between_indexes":
            vector = [p for p in kw["index_params"] if p.field_name == "vector"]
            client.create_index(collection_name, type(kw["index_params"])(vector))
        raise _lost_answer()

    monkeypatch.setattr(client, "create_collection", once)
    try:
        store.create_collection(name, DIM, attributes={"category": "int64"})
        assert calls == [name]
        kinds = {
            client.describe_index(name, n)["field_name"]: client.describe_index(name, n)[
                "index_type"
            ]
            for n in client.list_indexes(name)
        }
        assert kinds == {"vector": "HNSW", "category": "INVERTED"}
        store.insert(name, X[:500], IDS[:500], attributes={"category": CATEGORY[:500]})
        res = store.search_filtered(name, Q, K, Filter("category", [2]))
        assert np.isin(res.ids[res.ids >= 0], IDS[:500][CATEGORY[:500] == 2]).all()
    finally:
        store.drop_collection(name)
        store.close()


@integration
def test_the_study_path_declares_the_filter_plans_attributes(milvus_lite_server: Any) -> None:
    """``insert_collection`` with a ``FilterPlan``'s inserts, as the study's build runs it:
    the collection is created with ``category`` an INT64 field and its scalar index, and a
    filtered search answers as numpy over the ids the plan's filter keeps."""
    from imsearch_align.collection.aligned import CollectionBlocks
    from imsearch_align.collection.filtered_study import FilterPlan
    from imsearch_align.collection.filters import selectivity_filter
    from imsearch_align.collection.measure import insert_collection
    from imsearch_align.collection.sources import ArraySource
    from imsearch_align.framework.metrics import Qrels

    docs, dis = X[:200], X[200:]
    coll = CollectionBlocks(IDS[:200], docs, ArraySource(dis, ids=IDS[200:]), block_rows=700)
    prep = SimpleNamespace(qrels=Qrels.from_pairs(np.arange(20), IDS[:20]))
    plan = FilterPlan((0.1,), n_categories=CATS)
    store = MilvusStore(uri=milvus_lite_server.uri)
    name = unique_collection_name("attr_study")
    try:
        inserts = plan.inserts(store, prep, coll)
        assert inserts.declare == {"category": "int64"}
        stats = insert_collection(store, name, coll, coll.dim, uri=milvus_lite_server.uri,
                                  in_process=False, attributes=inserts)  # fmt: skip
        assert stats.rows == N
        desc = store._call("describe_collection", name, "describe_collection", name)
        types = {f["name"]: getattr(f["type"], "name", "") for f in desc["fields"]}
        assert types["category"] == "INT64"
        fields = {
            store._call("describe_index", name, "describe_index", name, n)["field_name"]
            for n in store._call("list_indexes", name, "list_indexes", name)
        }
        assert fields == {"vector", "category"}
        table, f = plan.table(prep, coll), selectivity_filter(0.1, CATS)
        keep = np.isin(IDS, table.kept_ids(f))
        assert keep.sum() == N // CATS and np.isin(IDS[:20], IDS[keep]).all()  # relevant kept
        _assert_oracle(store.search_filtered(name, Q, K, f), keep, K)
    finally:
        if name in store.list_collections():
            store.drop_collection(name)
        store.close()
