"""FaissStore's GPU rules, on a CPU: a stand-in for faiss-gpu that misbehaves as faiss-gpu
1.15.1 was seen to on an H200 (it ignores a filter's selector; two threads inside one index
abort the process), so the rules of :mod:`imsearch_align.adapters.faiss_device` are tested
in CI, where no GPU is."""

from __future__ import annotations

import threading
import time
import types

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from imsearch_align.adapters import faiss_store  # noqa: E402
from imsearch_align.adapters.exact import ExactStore  # noqa: E402
from imsearch_align.adapters.faiss_device import GPU_MAX_K, GPU_MAX_K_SQ8, FaissDevice  # noqa: E402
from imsearch_align.adapters.faiss_store import FaissStore  # noqa: E402
from imsearch_align.collection.cone import cone_vectors  # noqa: E402
from imsearch_align.framework.interfaces import Filter  # noqa: E402


class _GpuIndex:
    """A CPU index dressed as a faiss GPU index: drops a selector, refuses overlapping calls."""

    def __init__(self, inner):
        self.inner = inner
        self._busy = threading.Lock()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _one_at_a_time(self):
        if not self._busy.acquire(blocking=False):
            raise AssertionError("two threads inside one GPU index (faiss-gpu aborts here)")
        time.sleep(0.002)  # widen the window an unlocked caller would hit

    def search(self, x, k, params=None):
        self._one_at_a_time()
        try:
            if params is not None and params.sel is not None:  # faiss-gpu ignores it
                params = (
                    faiss.SearchParametersIVF(nprobe=params.nprobe)
                    if hasattr(params, "nprobe")
                    else None
                )
            return self.inner.search(x, k, params=params)
        finally:
            self._busy.release()

    def add(self, x):
        self._one_at_a_time()
        try:
            self.inner.add(x)
        finally:
            self._busy.release()


def _fake_gpu_faiss(copies: list):
    def to_gpu(res, device, idx):
        return _GpuIndex(idx)

    def to_cpu(idx):
        copies.append(idx)
        return faiss.clone_index(idx.inner)

    ns = types.SimpleNamespace(**{n: getattr(faiss, n) for n in dir(faiss) if n[:2] != "__"})
    ns.get_num_gpus = lambda: 1
    ns.StandardGpuResources = object
    ns.index_cpu_to_gpu, ns.index_gpu_to_cpu = to_gpu, to_cpu
    return ns


@pytest.fixture
def gpu_store(monkeypatch):
    copies: list = []
    monkeypatch.setattr(faiss_store, "_import_faiss", lambda: _fake_gpu_faiss(copies))
    return copies


def _data(n=3000, d=32):
    x = cone_vectors(n, d, seed=3)
    q = cone_vectors(40, d, seed=4)
    ids = np.arange(n, dtype=np.int64) * 5 + 1
    cat = (np.arange(n) % 7).astype(np.int64)
    return x, q, ids, cat


@pytest.mark.parametrize("index", ["flat", "ivf_flat"])
def test_filtered_search_on_gpu_keeps_only_kept_rows(gpu_store, index):
    x, q, ids, cat = _data()
    f = Filter("cat", (2, 5))
    params = {"nlist": 16, "nprobe": 16} if index == "ivf_flat" else {}
    with FaissStore(index, **params) as s, ExactStore() as ref:
        assert s.uses_gpu
        for st in (s, ref):
            st.create_collection("c", x.shape[1])
            st.insert("c", x, ids, attributes={"cat": cat})
        got = s.search_filtered("c", q, 10, f)
        want = ref.search_filtered("c", q, 10, f)
        kept = ids[np.isin(cat, f.values)]
        assert np.isin(got.ids, kept).all()  # the stand-in's own answer would not be
        np.testing.assert_array_equal(got.ids, want.ids)  # nprobe = nlist: exact
        assert len(gpu_store) == 1  # one CPU copy, reused
        s.search_filtered("c", q, 10, f)
        assert len(gpu_store) == 1
        s.insert("c", x[:5] * 0.5, ids[:5] + 1, attributes={"cat": cat[:5]})  # rows added
        got = s.search_filtered("c", q, 10, f)
        assert len(gpu_store) == 2 and np.isin(got.ids, np.r_[kept, ids[:5] + 1]).all()
        ref.insert("c", x[:5] * 0.5, ids[:5] + 1, attributes={"cat": cat[:5]})
        np.testing.assert_array_equal(s.search("c", q, 10).ids, ref.search("c", q, 10).ids)


def test_gpu_searches_from_threads_are_serialised(gpu_store):
    x, q, ids, _ = _data()
    with FaissStore("flat") as s:
        s.create_collection("c", x.shape[1])
        s.insert("c", x, ids)
        errors: list = []

        def work():
            try:
                for _ in range(5):
                    s.search("c", q[:4], 10)
            except AssertionError as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []


def test_gpu_limits_are_refused_before_faiss(gpu_store):
    x, q, ids, _ = _data()
    with FaissStore("ivf_flat", nlist=16) as s:
        s.create_collection("c", x.shape[1])
        s.insert("c", x, ids)
        with pytest.raises(ValueError, match=f"k must be at most {GPU_MAX_K} on a faiss GPU"):
            s.search("c", q, GPU_MAX_K + 1)
    with FaissStore("ivf_sq8", nlist=16) as s:  # larger k aborted faiss-gpu's SQ8 scan
        s.create_collection("c", x.shape[1])
        s.insert("c", x, ids)
        assert s.search("c", q, GPU_MAX_K_SQ8).ids.shape == (len(q), GPU_MAX_K_SQ8)
        with pytest.raises(ValueError, match=f"at most {GPU_MAX_K_SQ8} on a faiss GPU ivf_sq8"):
            s.search("c", q, GPU_MAX_K_SQ8 + 1)
    with pytest.raises(ValueError, match="nbits must be 8 for ivf_pq on a faiss GPU index"):
        FaissStore("ivf_pq", nlist=16, m=8, nbits=4)


def test_device_rules_on_cpu_and_gpu():
    cpu = FaissDevice(faiss, False, "flat")
    assert not cpu.on_gpu and cpu.place("idx") == "idx"
    cpu.check_search(10**6, 10**6, 5)  # no GPU limits on a CPU
    hnsw = FaissDevice(_fake_gpu_faiss([]), True, "hnsw")
    assert hnsw.uses_gpu and not hnsw.on_gpu  # faiss has no GPU HNSW
    gpu = FaissDevice(_fake_gpu_faiss([]), "auto", "ivf_flat")
    with pytest.raises(ValueError, match=f"nprobe must be at most {GPU_MAX_K}"):
        gpu.check_search(10, GPU_MAX_K + 1, 100)

    def refuse(res, device, idx):
        raise RuntimeError("Error in verifyPQSettings_\nError: 'requiredSmemSize <= max' failed")

    bad = _fake_gpu_faiss([])
    bad.index_cpu_to_gpu = refuse
    with pytest.raises(
        ValueError,
        match=r"faiss cannot put this IndexFlatIP on the GPU .*requiredSmemSize.*use gpu=False",
    ):
        FaissDevice(bad, True, "flat").place(faiss.IndexFlatIP(4))
