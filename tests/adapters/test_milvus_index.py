"""MilvusStore's index types, search-time sweeps and filtered search, on real Milvus.

Deployments: Milvus Lite in-process (a ``.db`` directory), a ``milvus-lite
server``, and a Milvus 2.3.5 standalone where the suite's fixture runs one.
Oracle: ExactStore (brute-force inner product; filtered: over the kept rows).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from imsearch_align.adapters.base import unique_collection_name
from imsearch_align.adapters.exact import ExactStore
from imsearch_align.adapters.milvus import INDEX_TYPES, MilvusStore
from imsearch_align.adapters.milvus.tuning import check_search_update, pq_subquantizers
from imsearch_align.framework.interfaces import Filter, FilteredSearch, TunableSearch

TOKEN = "s3cr3t-token-DO-NOT-LEAK"
N, DIM, NQ, NLIST = 3000, 16, 30, 16
LITE_BUILDS = ["AUTOINDEX", "FLAT", "HNSW", "IVF_FLAT", "IVF_SQ8"]
BUILD = {
    "FLAT": {},
    "IVF_FLAT": {"nlist": NLIST},
    "IVF_SQ8": {"nlist": NLIST},
    "IVF_PQ": {"nlist": NLIST, "m": 4, "nbits": 8},
    "HNSW": {"M": 8, "efConstruction": 64},
}
integration = pytest.mark.integration


def _data() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    X = rng.standard_normal((N, DIM)).astype(np.float32)
    ids = rng.choice(10**6, size=N, replace=False).astype(np.int64)
    Q = rng.standard_normal((NQ, DIM)).astype(np.float32)
    category = rng.permutation(np.arange(N) % 100).astype(np.int64)  # 30 rows per value
    return X, ids, Q, category


X, IDS, Q, CATEGORY = _data()


@pytest.fixture(scope="module")
def oracle() -> Iterator[ExactStore]:
    with ExactStore() as ex:
        ex.create_collection("o", DIM)
        ex.insert("o", X, IDS, attributes={"category": CATEGORY})
        yield ex


def _recall(got: Any, want: Any) -> float:
    k = want.ids.shape[1]
    return float(np.mean([len(set(g) & set(w)) / k for g, w in zip(got.ids, want.ids)]))


@dataclass
class Env:
    kind: str
    uri: str
    lite: bool

    def store(self, **kw: Any) -> MilvusStore:
        return MilvusStore(uri=self.uri, token=None if self.kind == "lite_file" else TOKEN, **kw)


@pytest.fixture(scope="module", params=["lite_file", "lite_server", "milvus235"])
def env(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Env:
    kind = request.param
    if kind == "lite_file":
        return Env(kind, str(tmp_path_factory.mktemp("idx") / "x.db"), True)
    if kind == "lite_server":
        return Env(kind, request.getfixturevalue("milvus_lite_server").uri, True)
    return Env(kind, request.getfixturevalue("milvus_standalone").uri, False)


@pytest.fixture(scope="module")
def built(env: Env) -> Iterator[dict[str, tuple[MilvusStore, str]]]:
    """One collection per index type the deployment builds, filled and searchable (on a
    server, built side by side: each build mostly waits for the server's own timers)."""
    out: dict[str, tuple[MilvusStore, str]] = {}

    def build(index: str, params: dict[str, Any]) -> None:
        store = env.store(index=index, index_params=params)
        name = unique_collection_name(f"idx_{index.lower()}")
        store.create_collection(name, DIM)
        out[index] = (store, name)
        store.insert(name, X, IDS, attributes={"category": CATEGORY})
        store.make_searchable(name)

    todo = [(i, p) for i, p in BUILD.items() if not (env.lite and i == "IVF_PQ")]
    try:
        with ThreadPoolExecutor(1 if env.kind == "lite_file" else len(todo)) as pool:
            for job in [pool.submit(build, i, p) for i, p in todo]:
                job.result()
        yield dict(sorted(out.items(), key=lambda kv: list(BUILD).index(kv[0])))
    finally:
        for store, name in out.values():
            store.drop_collection(name)
            store.close()


def _until_indexed(store: MilvusStore, name: str, oracle: ExactStore, **params: Any) -> float:
    """Recall at ``params`` once the index serves the search: Milvus Lite builds segment
    indexes in the background after a flush and answers by brute force until then."""
    store.set_search_params(name, **params)
    deadline = time.monotonic() + 60
    while True:
        recall = _recall(store.search(name, Q, 10), oracle.search("o", Q, 10))
        if recall < 1.0 or time.monotonic() > deadline:
            return recall
        time.sleep(0.5)


# --------------------------------------------------------------------------
# settings, checked before any work (no server)


def test_declares_tunable_and_filtered_search() -> None:
    store = MilvusStore(uri="http://127.0.0.1:1")
    assert isinstance(store, TunableSearch) and isinstance(store, FilteredSearch)
    assert {"FLAT", "IVF_FLAT", "IVF_SQ8", "IVF_PQ", "HNSW"} <= set(INDEX_TYPES)
    store.close()


def test_ivf_pq_is_refused_for_milvus_lite_naming_what_it_builds(tmp_path: Any) -> None:
    with pytest.raises(ValueError) as err:
        MilvusStore(uri=str(tmp_path / "x.db"), index="IVF_PQ")
    msg = str(err.value)
    assert msg.startswith("index 'IVF_PQ': Milvus Lite")
    assert f"it builds {', '.join(LITE_BUILDS)}" in msg and "Milvus server" in msg
    assert not (tmp_path / "x.db").exists()  # before any work
    # A server takes it (the server's kind is known at create_collection).
    MilvusStore(uri="http://127.0.0.1:1", index="IVF_PQ").close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"index": "DISKANN"}, r"index must be one of \['AUTOINDEX', 'FLAT', 'HNSW', 'IVF_FLAT'"),
        ({"index": "IVF_SQ8", "index_params": {"M": 8}}, r"unknown key\(s\) \['M'\].*\['nlist'\]"),
        ({"index": "IVF_PQ", "index_params": {"nbits": 17}}, r"nbits'\] must be in \[1, 16\]"),
        ({"index": "IVF_FLAT", "index_params": {"nlist": 70_000}}, r"must be in \[1, 65536\]"),
        (
            {"index": "HNSW", "index_params": {"M": 1}},
            r"index_params\['M'\] must be in \[2, 2048\]",
        ),
        ({"index": "HNSW", "search_params": {"nprobe": 4}}, "index 'HNSW' takes no parameter"),
        ({"index": "HNSW", "search_params": {"M": 4}}, "M is a build-time parameter of index"),
        (
            {"index": "IVF_FLAT", "index_params": {"nlist": 8}, "search_params": {"nprobe": 9}},
            r"nprobe = 9 is above the index's nlist = 8",
        ),
    ],
)
def test_bad_index_settings_name_what_is_accepted(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MilvusStore(uri="http://127.0.0.1:1", **kwargs)


def test_defaults_are_filled_and_sent() -> None:
    s = MilvusStore(uri="http://127.0.0.1:1", index="IVF_PQ", index_params={"nlist": 64})
    assert s.index_params == {"nlist": 64, "nbits": 8}
    s.close()
    s = MilvusStore(uri="http://127.0.0.1:1", index="HNSW")
    assert s.index_params == {"M": 16, "efConstruction": 200}
    s.close()
    assert pq_subquantizers(None, 768, "c") == 192 and pq_subquantizers(None, 30, "c") == 6
    with pytest.raises(ValueError, match=r"m = 5 does not divide it"):
        pq_subquantizers(5, 16, "c")
    with pytest.raises(TypeError, match="must be an integer"):
        check_search_update("HNSW", {"ef": "64"}, nlist=None)


# --------------------------------------------------------------------------
# every index type the server builds, and the sweep


@integration
@pytest.mark.parametrize("index", list(BUILD))
def test_each_index_type_builds_and_searches(
    env: Env, built: dict, oracle: ExactStore, index: str
) -> None:
    if env.lite and index == "IVF_PQ":
        pytest.skip("Milvus Lite does not build IVF_PQ (refused: see the next test)")
    store, name = built[index]
    assert store.build_count(name) == 1
    want = oracle.search("o", Q, 10)
    if index.startswith("IVF"):
        store.set_search_params(name, nprobe=NLIST)
    got = store.search(name, Q, 10)
    assert (got.ids >= 0).all()
    floor = {"FLAT": 1.0, "IVF_FLAT": 1.0, "IVF_SQ8": 0.9, "IVF_PQ": 0.3, "HNSW": 0.9}[index]
    assert _recall(got, want) >= floor, (index, _recall(got, want))
    if index in ("FLAT", "IVF_FLAT"):  # exact: IVF_FLAT at nprobe = nlist is FLAT
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-5)


@integration
def test_ivf_pq_refused_by_a_lite_server_before_creating(env: Env) -> None:
    if env.kind != "lite_server":
        pytest.skip("a Milvus Lite server at a URL, known from its version")
    store = env.store(index="IVF_PQ")
    try:
        with pytest.raises(ValueError, match=r"index 'IVF_PQ': Milvus Lite \(a Milvus Lite server"):
            store.create_collection("ivfpq_refused", DIM)
        assert not store.has_collection("ivfpq_refused")
    finally:
        store.close()


@integration
def test_nprobe_sweep_reuses_the_built_index(env: Env, built: dict, oracle: ExactStore) -> None:
    store, name = built["IVF_FLAT"]
    want = oracle.search("o", Q, 10)
    low = _until_indexed(store, name, oracle, nprobe=1)
    recalls = {1: low}
    for nprobe in (2, 4, NLIST):
        store.set_search_params(name, nprobe=nprobe)
        assert store.search_params(name) == {"nprobe": nprobe}
        recalls[nprobe] = _recall(store.search(name, Q, 10), want)
        assert store.build_count(name) == 1
    assert recalls[1] < 1.0, "nprobe=1 searched every list: the parameter did not reach Milvus"
    assert recalls[1] <= recalls[4] <= recalls[NLIST] == 1.0, recalls
    got = store.search(name, Q, 10)
    np.testing.assert_array_equal(got.ids, want.ids)


@integration
def test_ef_sweep_reuses_the_built_index(env: Env, built: dict, oracle: ExactStore) -> None:
    store, name = built["HNSW"]
    want = oracle.search("o", Q, 10)
    for ef in (8, 16, 32, 64):
        store.set_search_params(name, ef=ef)
        assert store.search_params(name) == {"ef": ef}
        got = store.search(name, Q, 10)
        assert (got.ids >= 0).all() and store.build_count(name) == 1
    assert _recall(got, want) >= 0.9
    # ef below k: raised to k for that search (Milvus 2.3 refuses ef < k).
    store.set_search_params(name, ef=8)
    assert (store.search(name, Q[:3], 100).ids >= 0).all()


@integration
def test_refused_search_params_change_nothing(env: Env, built: dict) -> None:
    store, name = built["IVF_FLAT"]
    store.set_search_params(name, nprobe=4)
    for params, match in [
        (
            {"ef": 64},
            r"index 'IVF_FLAT' takes no parameter 'ef'; it takes search-time \['nprobe'\]",
        ),
        ({"nlist": 8}, "nlist is a build-time parameter of index 'IVF_FLAT'"),
        ({"nprobe": NLIST + 1}, f"nprobe = {NLIST + 1} is above the index's nlist = {NLIST}"),
        ({"nprobe": 0}, r"set_search_params\['nprobe'\] must be in \[1, 65536\]"),
    ]:
        with pytest.raises(ValueError, match=match):
            store.set_search_params(name, **params)
        assert store.search_params(name) == {"nprobe": 4}
    flat, fname = built["FLAT"]
    assert flat.search_params(fname) == {}
    with pytest.raises(ValueError, match="index 'FLAT' takes no parameter 'nprobe'"):
        flat.set_search_params(fname, nprobe=1)


# --------------------------------------------------------------------------
# filtered search


def _filtered_truth(oracle: ExactStore, keep: np.ndarray, k: int) -> Any:
    with ExactStore() as ex:
        ex.create_collection("kept", DIM)
        ex.insert("kept", X[keep], IDS[keep])
        return ex.search("kept", Q, k)


@integration
@pytest.mark.parametrize("percent", [50, 10, 1])
def test_filtered_flat_equals_brute_force_over_kept_rows(
    env: Env, built: dict, oracle: ExactStore, percent: int
) -> None:
    store, name = built["FLAT"]
    f = Filter("category", range(percent))
    keep = np.isin(CATEGORY, f.values)
    assert keep.mean() == percent / 100
    got = store.search_filtered(name, Q, 10, f)
    want = _filtered_truth(oracle, keep, 10)
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got.ids, oracle.search_filtered("o", Q, 10, f).ids)


@integration
def test_filtered_pads_when_fewer_than_k_pass(env: Env, built: dict, oracle: ExactStore) -> None:
    store, name = built["FLAT"]
    got = store.search_filtered(name, Q, 50, Filter("category", [42]))  # 30 rows pass
    keep = CATEGORY == 42
    assert ((got.ids >= 0).sum(axis=1) == 30).all()
    assert (got.ids[:, 30:] == -1).all() and np.isneginf(got.scores[:, 30:]).all()
    np.testing.assert_array_equal(got.ids[:, :30], _filtered_truth(oracle, keep, 30).ids)
    assert set(got.ids[0, :30].tolist()) == set(IDS[keep].tolist())


@integration
def test_raw_expression_is_sent_verbatim(env: Env, built: dict, oracle: ExactStore) -> None:
    store, name = built["FLAT"]
    cut = int(np.median(IDS))
    expr = f"category in [1, 2, 3] and id >= {cut}"
    got = store.search_filtered(name, Q, 10, Filter("category", [0], expression=expr))
    keep = np.isin(CATEGORY, [1, 2, 3]) & (IDS >= cut)
    np.testing.assert_array_equal(got.ids, _filtered_truth(oracle, keep, 10).ids)


@integration
def test_bad_expression_holds_the_server_message_and_the_expression(env: Env, built: dict) -> None:
    store, name = built["FLAT"]
    expr = "category in [1,"
    with pytest.raises(ValueError) as err:
        store.search_filtered(name, Q, 10, Filter("category", [1], expression=expr))
    msg = str(err.value)
    assert f"cannot evaluate the expression {expr!r} on collection {name!r}" in msg
    assert "refused search_filtered (checking the filter expression)" in msg and "(code " in msg
    assert TOKEN not in msg
    with pytest.raises(ValueError, match=r"filter.field 'colour' is not an attribute"):
        store.search_filtered(name, Q, 10, Filter("colour", [1]))


@integration
def test_filtered_hnsw_and_ivf_search_kept_rows_only(env: Env, built: dict) -> None:
    for index in ("HNSW", "IVF_FLAT"):
        store, name = built[index]
        got = store.search_filtered(name, Q, 10, Filter("category", range(10)))
        hit = got.ids[got.ids >= 0]
        assert hit.size and np.isin(hit, IDS[CATEGORY < 10]).all(), index


@integration
@pytest.mark.parametrize("how", ["declared", "first_insert", "dynamic"])
def test_attributes_typed_or_dynamic_filter_alike_and_are_found_again(
    env: Env, oracle: ExactStore, how: str
) -> None:
    """Declared at create (INT64 fields), made by the first insert of a ``dim=None``
    collection (INT64 fields), or first given to a collection already on the server
    (its dynamic field): the same answers, and another store finds the names."""
    store = env.store()
    name = unique_collection_name(f"attr_{how}")
    if how == "declared":
        store.create_collection(name, DIM, attributes={"category": "int64"})
    else:
        store.create_collection(name, None if how == "first_insert" else DIM)
    try:
        store.insert(name, X[:1000], IDS[:1000], attributes={"category": CATEGORY[:1000]})
        with pytest.raises(ValueError, match="every insert must carry them, got none"):
            store.insert(name, X[1000:], IDS[1000:])
        store.insert(name, X[1000:], IDS[1000:], attributes={"category": CATEGORY[1000:]})
        f = Filter("category", range(10))
        want = _filtered_truth(oracle, np.isin(CATEGORY, f.values), 10)
        np.testing.assert_array_equal(store.search_filtered(name, Q, 10, f).ids, want.ids)
        other = env.store()
        try:
            np.testing.assert_array_equal(other.search_filtered(name, Q, 10, f).ids, want.ids)
        finally:
            other.close()
    finally:
        store.drop_collection(name)
        store.close()
