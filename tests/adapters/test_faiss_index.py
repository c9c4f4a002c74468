"""FaissStore index types as a sweep axis: build once, sweep search-time parameters.

Data are clustered inside a cone, as real embeddings are (mean pairwise
cosine about 0.5; the packaged MiniLM and EfficientNet embeddings have 0.55
and 0.64), so IVF recall depends on ``nprobe`` as it does on real data.
Recall@10 is measured against a float64 brute force of the inserted vectors.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

faiss = pytest.importorskip("faiss")

from imsearch_align.adapters import faiss_store  # noqa: E402
from imsearch_align.adapters.exact import ExactStore  # noqa: E402
from imsearch_align.adapters.faiss_index import make_spec, training_sample  # noqa: E402
from imsearch_align.adapters.faiss_store import FaissStore  # noqa: E402
from imsearch_align.framework.interfaces import TunableSearch  # noqa: E402

DIM = 32
#: Per index type: constructor arguments, the search-time sweep, the least recall@10 expected.
CASES = {
    "flat": ({}, None, 1.0),
    "hnsw": ({"M": 16, "efConstruction": 64}, ("efSearch", [10, 20, 40, 80]), 0.9),
    "ivf_flat": ({"nlist": 32}, ("nprobe", [1, 4, 8, 32]), 0.9),
    "ivf_sq8": ({"nlist": 32}, ("nprobe", [1, 4, 8, 32]), 0.9),
    "ivf_pq": ({"nlist": 16, "m": 16, "nbits": 4}, ("nprobe", [1, 2, 4, 16]), 0.4),
}
FAISS_CLASS = {
    "flat": "IndexFlatIP",
    "hnsw": "IndexHNSWFlat",
    "ivf_flat": "IndexIVFFlat",
    "ivf_sq8": "IndexIVFScalarQuantizer",
    "ivf_pq": "IndexIVFPQ",
}
#: The same on a faiss-gpu machine (hnsw stays on the CPU).
GPU_CLASS = {
    "flat": "GpuIndexFlat",
    "hnsw": "IndexHNSWFlat",
    "ivf_flat": "GpuIndexIVFFlat",
    "ivf_sq8": "GpuIndexIVFScalarQuantizer",
    "ivf_pq": "GpuIndexIVFPQ",
}


def _unit(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def cone_data(n: int = 3000, nq: int = 200, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Docs, held-out queries and ids: 24 clusters around one common direction."""
    rng = np.random.default_rng(seed)
    mean = _unit(rng.standard_normal(DIM))
    centres = _unit(rng.standard_normal((24, DIM)))

    def draw(m: int) -> np.ndarray:
        noise = 0.5 * rng.standard_normal((m, DIM)) / np.sqrt(DIM)
        return _unit(0.7 * mean + 0.55 * centres[rng.integers(0, 24, m)] + noise).astype(np.float32)

    ids = rng.choice(2**40, size=n, replace=False).astype(np.int64)
    return draw(n), draw(nq), ids


@pytest.fixture(scope="module")
def data():
    x, q, ids = cone_data()
    truth = np.argsort(-(q.astype(np.float64) @ x.astype(np.float64).T), axis=1)[:, :10]
    return x, q, ids, ids[truth]


@pytest.fixture
def builds(monkeypatch):
    """Every faiss index the store creates, counted independently of ``build_count``."""
    made = []
    real = faiss_store.new_index
    monkeypatch.setattr(faiss_store, "new_index", lambda *a: made.append(a) or real(*a))
    return made


def recall_at_10(got: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(g[:10]) & set(t)) / 10 for g, t in zip(got, truth)]))


def test_data_lie_in_a_cone(data):
    x = data[0][:1000].astype(np.float64)
    cos = x @ x.T
    mean = (cos.sum() - np.trace(cos)) / (len(x) * (len(x) - 1))
    assert 0.3 < mean < 0.6


def _cpu_only(index: str) -> None:
    if index == "ivf_pq" and faiss.get_num_gpus() > 0:
        pytest.skip("nbits=4 is CPU-only (faiss-gpu codes 8 bits; refused: test_faiss_device)")


@pytest.mark.parametrize("index", list(CASES))
def test_each_index_type_builds_once_and_searches(index, data, builds):
    _cpu_only(index)
    x, q, ids, truth = data
    kwargs, _, least = CASES[index]
    with FaissStore(index, **kwargs) as fs:
        fs.create_collection("c", DIM)
        for block in range(0, len(x), 1000):  # inserted in blocks, built once
            fs.insert("c", x[block : block + 1000], ids[block : block + 1000])
        res = fs.search("c", q, 10)
        raw = fs.faiss_index("c")
        assert fs.build_count("c") == 1 and len(builds) == 1
        on_gpu = fs.uses_gpu  # faiss-gpu machines only: CI has no GPU
    name = type(raw).__name__
    assert (GPU_CLASS[index] if on_gpu else FAISS_CLASS[index]) == name and raw.ntotal == len(x)
    assert raw.metric_type == faiss.METRIC_INNER_PRODUCT
    assert res.ids.shape == (len(q), 10) and np.isin(res.ids, ids).all()
    rec = recall_at_10(res.ids, truth)
    assert rec == 1.0 if index == "flat" else rec >= least, rec


@pytest.mark.parametrize("index", [i for i in CASES if CASES[i][1] is not None])
def test_search_time_sweep_reuses_the_built_index(index, data, builds):
    _cpu_only(index)
    x, q, ids, truth = data
    kwargs, (param, values), least = CASES[index]
    with FaissStore(index, **kwargs) as fs:
        assert isinstance(fs, TunableSearch)
        fs.create_collection("c", DIM)
        fs.insert("c", x, ids)
        raw, recalls = fs.faiss_index("c"), []
        for v in values:
            fs.set_search_params("c", **{param: v})
            assert fs.search_params("c") == {param: v}
            recalls.append(recall_at_10(fs.search("c", q, 10).ids, truth))
        assert fs.build_count("c") == 1 and len(builds) == 1 and fs.faiss_index("c") is raw
    assert recalls[-1] >= least and recalls[-1] > recalls[0], recalls
    if index == "ivf_flat":
        # more lists probed = a superset of candidates scored exactly: recall cannot drop
        assert recalls == sorted(recalls) and recalls[-1] == 1.0, recalls


def test_ivf_flat_at_nprobe_nlist_equals_exact_store(data):
    x, q, ids, _ = data
    with FaissStore("ivf_flat", nlist=32, nprobe=32) as fs, ExactStore() as ex:
        for s in (fs, ex):
            s.create_collection("c", DIM)
            s.insert("c", x, ids)
        got, ref = fs.search("c", q, 10), ex.search("c", q, 10)
    np.testing.assert_array_equal(got.ids, ref.ids)
    np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-5, atol=1e-6)


def test_search_params_belong_to_one_collection_and_default_to_the_store(data):
    x, _, ids, _ = data
    with FaissStore("ivf_flat", nlist=32, nprobe=4) as fs:
        for name in ("a", "b"):
            fs.create_collection(name, DIM)
            fs.insert(name, x, ids)
        fs.set_search_params("a", nprobe=32)
        assert fs.search_params("a") == {"nprobe": 32} and fs.search_params("b") == {"nprobe": 4}
        fs.nprobe = 8  # the store's default: every collection without its own setting
        assert fs.search_params("a") == {"nprobe": 32} and fs.search_params("b") == {"nprobe": 8}
        assert fs.faiss_index("a").nprobe == 32  # the raw index matches what search uses
    assert not isinstance(ExactStore(), TunableSearch)


@pytest.mark.parametrize(
    ("index", "params", "message"),
    [
        (
            "hnsw",
            {"nprobe": 8},
            "nprobe is not a search-time parameter of index 'hnsw'; it accepts efSearch",
        ),
        (
            "ivf_pq",
            {"efSearch": 8},
            "efSearch is not a search-time parameter of index 'ivf_pq'; it accepts nprobe",
        ),
        (
            "hnsw",
            {"M": 8},
            "M is a build-time parameter of index 'hnsw', fixed once the index "
            "is built .* search-time parameters: efSearch",
        ),
        ("ivf_flat", {"nlist": 8}, "nlist is a build-time parameter of index 'ivf_flat'"),
        ("flat", {"nprobe": 8}, "nprobe: index 'flat' has no search-time parameters"),
        ("hnsw", {"ef_search": 8}, "ef_search is not a search-time parameter of index 'hnsw'"),
        (
            "ivf_flat",
            {"nprobe": 33},
            r"nprobe must be in \[1, 32\] for index 'ivf_flat' with "
            "nlist=32",
        ),
        ("ivf_flat", {"nprobe": 0}, r"nprobe must be in \[1, inf\], got 0"),
    ],
)
def test_refused_search_settings_are_named_and_change_nothing(index, params, message):
    with FaissStore(index, **({"nlist": 32} if index.startswith("ivf") else {})) as fs:
        fs.create_collection("c", DIM)
        before = fs.search_params("c")
        with pytest.raises(ValueError, match=message):
            fs.set_search_params("c", **params)
        assert fs.search_params("c") == before and fs.build_count("c") == 0


def test_search_setting_of_the_wrong_type_is_refused():
    with FaissStore("ivf_flat", nlist=8) as fs:
        fs.create_collection("c", DIM)
        with pytest.raises(TypeError, match="nprobe must be an integer, got str '8'"):
            fs.set_search_params("c", nprobe="8")
        with pytest.raises(TypeError, match=r"nlist must be an integer, got float 8\.0"):
            FaissStore("ivf_flat", nlist=8.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"index": "hnsw", "nprobe": 8},
            "nprobe is not a parameter of index 'hnsw' (it is one "
            "of 'ivf_flat', 'ivf_sq8', 'ivf_pq'); index 'hnsw' accepts M, efConstruction, efSearch",
        ),
        (
            {"index": "ivf_flat", "M": 16},
            "M is not a parameter of index 'ivf_flat' (it is one of "
            "'hnsw'); index 'ivf_flat' accepts nlist, nprobe",
        ),
        (
            {"index": "ivf_sq8", "m": 8},
            "m is not a parameter of index 'ivf_sq8' (it is one of "
            "'ivf_pq'); index 'ivf_sq8' accepts nlist, nprobe",
        ),
        ({"index": "flat", "efSearch": 8}, "index 'flat' accepts no index parameters"),
        ({"index": "ivf_flat", "nlist": 16, "nprobe": 32}, r"nprobe must be in \[1, 16\]"),
        ({"index": "ivf_pq", "nbits": 17}, r"nbits must be in \[1, 16\], got 17"),
        ({"index": "IVF_FLAT"}, "index must be one of"),
    ],
)
def test_refused_index_settings_are_named_before_any_work(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        FaissStore(**kwargs)


def test_default_search_parameters_and_the_ivf_alias():
    assert FaissStore("ivf").index == "ivf_flat"
    assert make_spec("ivf_flat", {"nlist": 8}).search == {"nprobe": 8}  # min(16, nlist)
    hnsw = FaissStore("hnsw")
    assert (hnsw.M, hnsw.efConstruction, hnsw.efSearch, hnsw.nprobe) == (32, 100, 64, None)
    pq = FaissStore("ivf_pq").index_spec
    assert pq.build == {"nlist": 256, "nbits": 8} and pq.min_rows == 256
    assert pq.train_rows == 256 * 256


def test_pq_subquantizers_must_divide_the_dimension_before_any_work():
    with FaissStore("ivf_pq", nlist=4, m=5) as fs:
        with pytest.raises(
            ValueError,
            match=r"m must divide the dimension 32 .* got m=5; "
            r"divisors of 32: 1, 2, 4, 8, 16, 32",
        ):
            fs.create_collection("c", DIM)
        fs.create_collection("d")  # dimension from the first insert: checked there
        with pytest.raises(ValueError, match="m must divide the dimension 32"):
            fs.insert("d", np.eye(DIM, dtype=np.float32), np.arange(DIM))
        assert fs.count("d") == 0


def test_pq_collection_smaller_than_its_codebook_is_refused(data):
    x, q, ids, _ = data
    with FaissStore("ivf_pq", nlist=4, m=8) as fs:
        fs.create_collection("c", DIM)
        fs.insert("c", x[:200], ids[:200])
        with pytest.raises(
            ValueError,
            match=r"has 200 rows, too few to train index 'ivf_pq' "
            r"\(nlist=4, 2\*\*nbits=256\): it needs at least 256",
        ):
            fs.search("c", q, 10)
        assert fs.build_count("c") == 0


def test_ivf_trains_on_the_insert_that_brings_nlist_rows_and_warns_below_guidance(data, caplog):
    x, q, ids, truth = data
    with caplog.at_level(logging.WARNING, logger="imsearch_align.adapters.faiss_store"):
        with FaissStore("ivf_flat", nlist=32, nprobe=32) as fs:
            fs.create_collection("c", DIM)
            fs.insert("c", x[:20], ids[:20])  # fewer than nlist: kept until more come
            assert fs.build_count("c") == 0
            fs.insert("c", x[20:1000], ids[20:1000])  # trains on these 1000 rows
            assert fs.build_count("c") == 1 and fs.faiss_index("c").ntotal == 1000
            fs.insert("c", x[1000:], ids[1000:])  # added to the trained index
            assert fs.build_count("c") == 1 and fs.faiss_index("c").ntotal == len(x)
            assert recall_at_10(fs.search("c", q, 10).ids, truth) == 1.0  # nprobe = nlist
    assert (
        "training 32 centroids of collection 'c' on 1000 rows (FAISS asks for at least 1248)"
        in caplog.text
    )
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="imsearch_align.adapters.faiss_store"):
        with FaissStore("ivf_flat", nlist=4) as fs:
            fs.create_collection("c", DIM)
            fs.insert("c", x, ids)
    assert "training" not in caplog.text  # 3000 rows >= 39 x 4


def test_training_sample_is_seeded_and_independent_of_the_blocks():
    x = np.arange(5000, dtype=np.float32).reshape(1000, 5)
    whole = training_sample([x], 300)
    split = training_sample([x[:123], x[123:700], x[700:]], 300)
    np.testing.assert_array_equal(whole, split)
    assert len(whole) == 300 and len(np.unique(whole[:, 0])) == 300
    assert np.all(np.diff(whole[:, 0]) > 0)  # insertion order kept
    assert training_sample([x[:10], x[10:20]], 300).shape == (20, 5)  # fewer: all of them


def test_store_params_pass_the_cli_preflight_and_build_the_store():
    from imsearch_align.experiment.components import check_params
    from imsearch_align.experiment.config import ConfigError
    from imsearch_align.framework.registry import STORES

    for params in ({"index": "hnsw", "M": 16, "efSearch": 32}, {"index": "ivf_pq", "m": 8}):
        check_params(STORES.get("faiss"), params, "store 'faiss'")
        STORES.get("faiss")(**params)
    with pytest.raises(ConfigError, match="'ef_search' \\(did you mean 'efSearch'\\?\\)"):
        check_params(STORES.get("faiss"), {"index": "hnsw", "ef_search": 16}, "store 'faiss'")
