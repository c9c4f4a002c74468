"""LanceDBStore: the conformance kit (flat exact, IVF_FLAT approximate) plus its own checks.

Oracle: the kit's brute-force float64 inner products and ExactStore.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from imsearch_align.testing.store_conformance import StoreConformance, clustered_vectors

pytest.importorskip("lancedb")

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.adapters.lancedb_store import LanceDBStore
from imsearch_align.framework.registry import STORES


class TestLanceDBFlatConformance(StoreConformance):
    exact = True
    supports_sparse = False
    persistent = True
    # LanceDB reports 1 - <q, x> in float32; the score is 1 - distance.
    rtol = 1e-5

    @pytest.fixture
    def make_store(self, tmp_path: Path):
        return lambda: LanceDBStore(tmp_path / "lance")


class TestLanceDBIvfConformance(StoreConformance):
    exact = False
    supports_sparse = False
    persistent = True
    ann_min_recall = 0.95

    @pytest.fixture
    def make_store(self, tmp_path: Path):
        return lambda: LanceDBStore(tmp_path / "lance_ivf", index="ivf_flat", nlist=16, nprobe=8)


def test_registered_as_lancedb_with_declarations() -> None:
    assert STORES.get("lancedb") is LanceDBStore
    assert LanceDBStore.thread_safe is True
    assert LanceDBStore.provenance_packages == ("lancedb", "pyarrow")


def test_provenance_records_the_client_versions(tmp_path: Path) -> None:
    from importlib.metadata import version

    with LanceDBStore(tmp_path / "db") as s:
        if not hasattr(s, "provenance"):
            pytest.skip("BaseStore.provenance() is not in this tree yet")
        prov = s.provenance()
    assert prov["packages"] == {"lancedb": version("lancedb"), "pyarrow": version("pyarrow")}


def test_bad_parameters(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="index must be one of"):
        LanceDBStore(tmp_path, index="hnsw")
    with pytest.raises(ValueError, match="nprobe must be in"):
        LanceDBStore(tmp_path, nprobe=0)


def test_matches_exact_store_across_query_batches(tmp_path: Path) -> None:
    x, q = clustered_vectors(500, 16, n_queries=37, seed=9)
    ids = np.arange(500, dtype=np.int64) * 5
    with LanceDBStore(tmp_path / "db", query_batch=10) as s, ExactStore() as ex:
        for store in (s, ex):
            store.create_collection("c", 16)
            store.insert("c", x, ids)
        got, want = s.search("c", q, 7), ex.search("c", q, 7)
    np.testing.assert_array_equal(got.ids, want.ids)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-6)


def test_reopened_store_knows_collections_and_ids(tmp_path: Path) -> None:
    x, _ = clustered_vectors(20, 4, seed=1)
    with LanceDBStore(tmp_path / "db") as s:
        s.create_collection("keep", 4)
        s.insert("keep", x, np.arange(20))
    with LanceDBStore(tmp_path / "db") as s:
        assert s.list_collections() == ["keep"] and s.count("keep") == 20
        with pytest.raises(ValueError, match="already stored"):
            s.insert("keep", x[:1], [3])


@pytest.mark.parametrize("k", [1, 3, 10, 40])
def test_flat_chooses_docs_tied_at_the_kth_score_by_id(tmp_path: Path, k: int) -> None:
    """Integer vectors tie exactly; LanceDB alone keeps any k of a tied group
    (the truth check cannot see it: every returned score is right). The flat
    store widens until the group is whole and keeps the lowest ids."""
    rng = np.random.default_rng(3)
    v = rng.integers(-1, 2, (300, 6)).astype(np.float32)  # few distinct scores: big groups
    ids = rng.permutation(np.arange(3000, 0, -10))
    q = rng.integers(-1, 2, (25, 6)).astype(np.float32)
    with LanceDBStore(tmp_path / "db", query_batch=10) as s:
        s.create_collection("c", 6)
        s.insert("c", v, ids)
        got = s.search("c", q, k)
    sc = (q @ v.T).astype(np.float32)
    order = np.lexsort((np.broadcast_to(ids, sc.shape), -sc), axis=1)[:, :k]
    np.testing.assert_array_equal(got.ids, ids[order])
    np.testing.assert_allclose(got.scores, np.take_along_axis(sc, order, 1), atol=1e-6)
