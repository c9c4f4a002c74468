"""FaissStore: the conformance kit for flat, hnsw and ivf, plus faiss-specific behaviour.

Index types, their parameters and search-time sweeps: ``test_faiss_index.py``."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.testing.store_conformance import (
    StoreConformance,
    assert_exact_topk,
    clustered_vectors,
    sparse_clustered,
)

faiss = pytest.importorskip("faiss")

from imsearch_align.adapters.faiss_store import FaissStore  # noqa: E402


class TestFaissFlatConformance(StoreConformance):
    exact = True
    supports_sparse = True

    @pytest.fixture
    def make_store(self):
        return lambda: FaissStore(index="flat")


class TestFaissHnswConformance(StoreConformance):
    exact = False
    supports_sparse = False  # ANN index types refuse sparse collections
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self):
        return lambda: FaissStore(index="hnsw", M=16, efConstruction=64, efSearch=64)


class TestFaissIvfConformance(StoreConformance):
    exact = False
    supports_sparse = False
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self):
        # nlist 5: the kit's smallest searched collection has 5 rows (IVF trains nlist centroids)
        return lambda: FaissStore(index="ivf", nlist=5, nprobe=2)


def _data(n=2000, d=16, nq=50, seed=0):
    x, q = clustered_vectors(n, d, n_clusters=20, n_queries=nq, seed=seed)
    ids = np.random.default_rng(seed).choice(2**62, size=n, replace=False).astype(np.int64)
    return x, q, ids


def test_flat_equals_exact_store_and_raw_faiss():
    x, q, ids = _data()
    with FaissStore("flat") as fs, ExactStore() as ex:
        for s in (fs, ex):
            s.create_collection("c", 16)
            s.insert("c", x, ids)
        got, ref = fs.search("c", q, 10), ex.search("c", q, 10)
        _, raw_i = fs.faiss_index("c").search(q, 10)
    # faiss's BLAS and numpy's round differently: both are checked against the
    # float64 brute force, tie-tolerantly, and their scores against each other.
    for res in (got, ref):
        assert_exact_topk(res, q, x, ids, 10, rtol=1e-5)
    np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.sort(got.ids, 1), np.sort(ids[raw_i], 1))  # insertion order


def test_search_params_are_read_at_search_time():
    x, q, ids = _data(n=3000, d=32, nq=100, seed=1)
    with FaissStore("ivf", nlist=64, nprobe=1) as fs, ExactStore() as ex:
        for s in (fs, ex):
            s.create_collection("c", 32)
            s.insert("c", x, ids)
        ref = ex.search("c", q, 10)
        low = fs.search("c", q, 10)
        fs.nprobe = 64  # every list: IVF-Flat becomes exact
        full = fs.search("c", q, 10)
    from imsearch_align.framework.fidelity import ann_recall

    assert ann_recall(full, ref, 10)[1] == 1.0
    assert ann_recall(low, ref, 10)[1] < 1.0


def test_ivf_collection_too_small_to_train_is_refused_naming_both_numbers():
    x, q, ids = _data(n=40)
    with FaissStore("ivf", nlist=256, nprobe=256) as fs:
        fs.create_collection("c", 16)
        fs.insert("c", x, ids)  # rows wait for training: no work yet
        with pytest.raises(ValueError, match=r"'c' has 40 rows, too few .* at least 256"):
            fs.search("c", q, 5)
        fs.insert("c", *_data(n=300, seed=4)[::2])  # more rows: the same collection trains
        assert fs.search("c", q, 5).ids.shape == (50, 5)
        assert fs.faiss_index("c").nlist == 256 and fs.build_count("c") == 1


def test_ties_resorted_by_id():
    v = np.ones((6, 4), dtype=np.float32)  # six identical vectors
    ids = np.array([60, 10, 50, 20, 40, 30])
    for index, kw in (("flat", {}), ("hnsw", {}), ("ivf", {"nlist": 2})):
        with FaissStore(index, **kw) as fs:
            fs.create_collection("c", 4)
            fs.insert("c", v, ids)
            r = fs.search("c", v[:2], 8)
        assert r.ids.tolist() == [[10, 20, 30, 40, 50, 60, -1, -1]] * 2, index


@pytest.mark.parametrize("k", [1, 3, 10, 40, 300])
def test_flat_chooses_docs_tied_at_the_kth_score_by_id_like_exact_store(k):
    """Integer vectors tie exactly; faiss alone would keep its own choice at the cut-off.
    Ids are inserted in descending order (faiss prefers low positions), so
    without the tie closure the highest ids come back (the check fails)."""
    rng = np.random.default_rng(3)
    v = rng.integers(-1, 2, (300, 6)).astype(np.float32)  # few distinct scores: big groups
    ids = np.arange(3000, 0, -10)
    q = rng.integers(-1, 2, (40, 6)).astype(np.float32)
    with FaissStore("flat") as fs, ExactStore() as ex:
        for s in (fs, ex):
            s.create_collection("c", 6)
            s.insert("c", v[:100], ids[:100])
            s.insert("c", v[100:], ids[100:])
        got, want = fs.search("c", q, k), ex.search("c", q, k)
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-6)
    # the oracle: score descending, then id ascending, over every document
    s = (q @ v.T).astype(np.float32)
    order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    np.testing.assert_array_equal(got.ids, ids[order])


def test_sparse_collections_use_the_exact_kernel_and_equal_exact_store():
    x, q = sparse_clustered(600, 80, nnz=10, n_queries=40, seed=7)
    ids = np.random.default_rng(7).permutation(600).astype(np.int64) * 3 + 1
    with FaissStore("flat") as fs, ExactStore() as ex:
        for s in (fs, ex):
            s.create_collection("s", sparse=True)
            s.insert("s", x[:250], ids[:250])
            s.insert("s", x[250:], ids[250:])
        for k in (1, 10, 700):
            got, ref = fs.search("s", q, k), ex.search("s", q, k)
            np.testing.assert_array_equal(got.ids, ref.ids)  # one kernel: identical
            np.testing.assert_array_equal(got.scores, ref.scores)
        assert_exact_topk(got := fs.search("s", q, 10), q, x, ids, 10)
        assert got.ids.shape == (40, 10)
        assert fs.search_params("s") == {} and fs.build_count("s") == 0
        with pytest.raises(TypeError, match="collection 's' is sparse and has no faiss index"):
            fs.faiss_index("s")


@pytest.mark.parametrize("index", ["hnsw", "ivf_flat", "ivf_sq8", "ivf_pq"])
def test_ann_index_types_refuse_sparse_collections_naming_flat(index):
    with FaissStore(index) as fs:
        assert fs.supports_sparse is False
        with pytest.raises(
            TypeError, match=rf"FaissStore\(index='{index}'\) has no sparse .*'flat'"
        ):
            fs.create_collection("s", sparse=True)


def test_sparse_no_hit_rule_and_budget_error():
    x = sp.csr_matrix(np.array([[1, 0, 0], [0, 2, 0]], np.float32))
    with FaissStore("flat") as fs:
        fs.create_collection("s", 3, sparse=True)
        fs.insert("s", x, np.array([5, 3]))
        r = fs.search("s", sp.csr_matrix(np.array([[0, 0, 1], [1, 1, 0]], np.float32)), 3)
        assert r.ids.tolist() == [[-1, -1, -1], [3, 5, -1]]
    big = sp.csr_matrix(np.eye(200_000, 5, dtype=np.float32))
    with FaissStore("flat", max_memory_mb=1) as fs:
        fs.create_collection("s", sparse=True)
        fs.insert("s", big, np.arange(200_000))
        with pytest.raises(MemoryError, match=r"max_memory_mb=1 is too small for one query row"):
            fs.search("s", big[:2], 3)


def test_gpu_auto_picks_cpu_here_and_forced_gpu_fails():
    if faiss.get_num_gpus() > 0:
        pytest.skip("this machine has a GPU")
    assert FaissStore("flat", gpu="auto").uses_gpu is False
    assert FaissStore("flat", gpu=False).uses_gpu is False
    with pytest.raises(RuntimeError, match="gpu=True but faiss reports 0 GPUs"):
        FaissStore("flat", gpu=True)


def test_threads_argument_sets_faiss_threads():
    before = faiss.omp_get_max_threads()
    try:
        FaissStore("flat", threads=1)
        assert faiss.omp_get_max_threads() == 1
    finally:
        faiss.omp_set_num_threads(before)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        (
            {"index": "pq"},
            ValueError,
            r"index must be one of \['flat', 'hnsw', 'ivf_flat', 'ivf_sq8', 'ivf_pq'\] "
            r"\('ivf' = 'ivf_flat'\), got 'pq'",
        ),
        ({"index": "hnsw", "M": 1}, ValueError, r"M must be in \[2, inf\], got 1"),
        ({"index": "ivf", "nprobe": 0}, ValueError, r"nprobe must be in \[1, inf\], got 0"),
        ({"gpu": "yes"}, ValueError, "gpu must be 'auto', True or False, got 'yes'"),
        ({"max_memory_mb": 0}, ValueError, r"max_memory_mb must be in \[1, inf\], got 0"),
        ({"threads": 0}, ValueError, r"threads must be in \[1, inf\], got 0"),
    ],
)
def test_constructor_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        FaissStore(**kwargs)


def test_module_imports_without_faiss(monkeypatch):
    """The registry imports every store module: faiss is needed only to build a store."""
    import builtins
    import importlib
    import sys

    real_import = builtins.__import__

    def no_faiss(name, *args, **kwargs):
        if name == "faiss" or name.startswith("faiss."):
            raise ImportError("No module named 'faiss'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_faiss)
    monkeypatch.delitem(sys.modules, "faiss", raising=False)
    saved = sys.modules.pop("imsearch_align.adapters.faiss_store")
    try:
        from imsearch_align.framework import registry

        monkeypatch.setattr(registry.STORES, "_entries", dict(registry.STORES._entries))
        registry.STORES._entries.pop("faiss", None)
        mod = importlib.import_module("imsearch_align.adapters.faiss_store")
        with pytest.raises(ImportError, match=r"pip install 'imsearch-align\[faiss\]'"):
            mod.FaissStore()
    finally:
        sys.modules["imsearch_align.adapters.faiss_store"] = saved


def test_declares_exact_only_for_flat_and_provenance():
    from imsearch_align.framework.interfaces import ExactSearch

    assert FaissStore("flat").exact is True and isinstance(FaissStore("flat"), ExactSearch)
    assert FaissStore("hnsw").exact is False and FaissStore("ivf").exact is False
    pk = FaissStore("flat").provenance()["packages"]
    assert any(name.startswith("faiss") for name in pk) and "numba" in pk
