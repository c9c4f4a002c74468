"""FaissStore: the conformance kit for flat, hnsw and ivf, plus faiss-specific behaviour."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.testing.store_conformance import StoreConformance, clustered_vectors

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
    supports_sparse = True
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self):
        return lambda: FaissStore(index="hnsw", M=16, efConstruction=64, efSearch=64)


class TestFaissIvfConformance(StoreConformance):
    exact = False
    supports_sparse = True
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self):
        return lambda: FaissStore(index="ivf", nlist=32, nprobe=8)


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
    np.testing.assert_array_equal(got.ids, ref.ids)
    np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got.ids, ids[raw_i])  # positions are insertion order


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


def test_ivf_nlist_capped_at_first_insert(caplog):
    x, q, ids = _data(n=40)
    with caplog.at_level(logging.INFO, logger="imsearch_align.adapters.faiss_store"):
        with FaissStore("ivf", nlist=256, nprobe=256) as fs:
            fs.create_collection("c", 16)
            fs.insert("c", x, ids)
            assert fs.faiss_index("c").nlist == 40
            assert fs.search("c", q, 5).ids.shape == (50, 5)
    assert "nlist capped at 40" in caplog.text


def test_ties_resorted_by_id():
    v = np.ones((6, 4), dtype=np.float32)  # six identical vectors
    ids = np.array([60, 10, 50, 20, 40, 30])
    for index in ("flat", "hnsw", "ivf"):
        with FaissStore(index, nlist=2) as fs:
            fs.create_collection("c", 4)
            fs.insert("c", v, ids)
            r = fs.search("c", v[:2], 8)
        assert r.ids.tolist() == [[10, 20, 30, 40, 50, 60, -1, -1]] * 2, index


def test_sparse_densified_with_log(caplog):
    x = sp.random(50, 30, density=0.2, format="csr", dtype=np.float32, random_state=0)
    q = sp.random(5, 30, density=0.3, format="csr", dtype=np.float32, random_state=1)
    with caplog.at_level(logging.INFO, logger="imsearch_align.adapters.faiss_store"):
        with FaissStore("flat") as fs, ExactStore() as ex:
            for s in (fs, ex):
                s.create_collection("s", sparse=True)
                s.insert("s", x, np.arange(50))
            got, ref = fs.search("s", q, 50), ex.search("s", q, 50)
    assert "densifying sparse vectors of 's' to float32 (50 x 30" in caplog.text
    np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-5, atol=1e-6)


def test_sparse_too_large_to_densify_names_size_and_alternatives():
    rows = np.arange(1000)
    x = sp.csr_matrix((np.ones(1000, np.float32), (rows, rows * 97)), shape=(1000, 100_000))
    with FaissStore("flat", max_dense_gb=0.1) as fs:
        fs.create_collection("s", sparse=True)
        with pytest.raises(
            MemoryError,
            match=r"1,000 x 100,000 float32 = 0\.37 GiB, above max_dense_gb=0\.1; use MilvusStore .* or ExactStore",
        ):
            fs.insert("s", x, np.arange(1000))
        assert fs.count("s") == 0


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
        ({"index": "pq"}, ValueError, r"index must be one of \['flat', 'hnsw', 'ivf'\], got 'pq'"),
        ({"M": 1}, ValueError, r"M must be in \[2, inf\], got 1"),
        ({"nprobe": 0}, ValueError, r"nprobe must be in \[1, inf\], got 0"),
        ({"gpu": "yes"}, ValueError, "gpu must be 'auto', True or False, got 'yes'"),
        ({"max_dense_gb": 0}, ValueError, "max_dense_gb must be a positive number, got 0"),
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
