"""Filtered search across the stores: the Filter type, attributes checked once for every
store at insert, each store's filtered answer against brute force over the kept rows
(with deliberate ties), the refusals named, and attributes surviving a reopen."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.attributes import filtering_stores
from imsearch_align.adapters.base import BaseStore, finalize_rows
from imsearch_align.adapters.exact import ExactStore
from imsearch_align.framework.interfaces import Filter, FilteredSearch
from imsearch_align.testing.store_checks import assert_exact_topk
from imsearch_align.testing.store_data import dense_ties, sparse_clustered


def _stores(tmp_path):
    """Every in-tree store whose client is installed, in an exact configuration."""
    import importlib.util

    out = {"exact": ExactStore}
    if importlib.util.find_spec("faiss"):
        from imsearch_align.adapters.faiss_store import FaissStore

        out["faiss"] = lambda: FaissStore("flat")
    if importlib.util.find_spec("qdrant_client"):
        from imsearch_align.adapters.qdrant_store import QdrantStore

        out["qdrant"] = QdrantStore
    if importlib.util.find_spec("lancedb"):
        from imsearch_align.adapters.lancedb_store import LanceDBStore

        out["lancedb"] = lambda: LanceDBStore(tmp_path / "lance")
    return out


def _brute(q, x, ids, keep, k):
    """Brute force over the kept rows: float32 scores, ties to the lower id, padded."""
    s = q @ x[keep].T
    kid = np.broadcast_to(ids[keep], s.shape)
    return finalize_rows(kid, s, k)


def test_filter_normalises_and_refuses():
    f = Filter("category", [5, 1, 5, np.int64(3)])
    assert f.values == (1, 3, 5) and f.expression is None
    assert Filter("c", 7).values == (7,)
    with pytest.raises(ValueError, match="at least one value"):
        Filter("category", [])
    with pytest.raises(TypeError, match=r"integers, got 1\.5"):
        Filter("category", [1, 1.5])
    with pytest.raises(TypeError, match="integers, got True"):
        Filter("category", [True])
    with pytest.raises(ValueError, match="attribute name"):
        Filter("1st", [1])
    with pytest.raises(ValueError, match="non-empty string"):
        Filter("c", [1], expression=" ")


def test_every_store_filters_as_brute_force_over_kept_rows(tmp_path):
    x, ids, q = dense_ties(11)  # 60 exact duplicates under other ids: ties at every rank
    cat = np.random.default_rng(1).integers(0, 5, len(ids))
    for label, make in _stores(tmp_path).items():
        store = make()
        try:
            assert isinstance(store, FilteredSearch), label
            store.create_collection("c", x.shape[1])
            for lo in range(0, len(ids), 130):  # several inserts
                sl = slice(lo, lo + 130)
                store.insert("c", x[sl], ids[sl], attributes={"category": cat[sl]})
            for values in ((0,), (1, 3)):
                keep = np.isin(cat, values)
                for k in (1, 10, int(keep.sum()) + 3):
                    got = store.search_filtered("c", q, k, Filter("category", values))
                    # the true top-k of the kept rows (float64), ties to the lower id
                    assert_exact_topk(got, q, x[keep], ids[keep], k)
                    with ExactStore() as ref_store:  # the oracle over the kept rows alone
                        ref_store.create_collection("r", x.shape[1])
                        ref_store.insert("r", x[keep], ids[keep])
                        ref = ref_store.search("r", q, k)
                    same = np.mean(got.ids == ref.ids)
                    assert same > 0.99, f"{label} k={k}: {same:.3f} of ids as ExactStore's"
                    np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-5, atol=1e-5)
        finally:
            store.close()


def test_sparse_filtered_search_of_exact_and_faiss_flat():
    faiss_store = pytest.importorskip("imsearch_align.adapters.faiss_store")
    x, q = sparse_clustered(200, 48, nnz=5, n_queries=15, seed=3)
    ids = np.arange(200, dtype=np.int64) * 7 + 1
    cat = np.arange(200) % 4
    keep = np.isin(cat, (1, 2))
    for store in (ExactStore(), faiss_store.FaissStore("flat")):
        with store:
            store.create_collection("s", 48, sparse=True)
            store.insert("s", x, ids, attributes={"category": cat})
            got = store.search_filtered("s", q, 10, Filter("category", (1, 2)))
        with ExactStore() as ref_store:
            ref_store.create_collection("s", 48, sparse=True)
            ref_store.insert("s", sp.csr_matrix(x[keep]), ids[keep])
            ref = ref_store.search("s", q, 10)
        np.testing.assert_array_equal(got.ids, ref.ids)
        np.testing.assert_allclose(got.scores, ref.scores, rtol=1e-6, atol=1e-7)


class _Plain(BaseStore):
    """A store that does not filter."""

    def _insert(self, info, vectors, ids):
        info.state = vectors

    def _search(self, info, queries, k):  # pragma: no cover - not searched here
        raise AssertionError


def test_attributes_are_checked_once_for_every_store():
    x = np.eye(4, dtype=np.float32)
    with _Plain() as plain:
        plain.create_collection("c", 4)
        with pytest.raises(ValueError, match=r"_Plain does not search under a filter.*exact"):
            plain.insert("c", x, np.arange(4), attributes={"category": np.arange(4)})
        plain.insert("c", x, np.arange(4))  # without attributes: as before
    assert {"exact", "faiss", "lancedb", "qdrant"} <= set(filtering_stores())
    with ExactStore() as s:
        s.create_collection("c", 4)
        bad = [
            ([1, 2, 3, 4], TypeError, "mapping of names"),
            ({"9x": np.arange(4)}, ValueError, "letter or underscore"),
            ({"c": np.arange(3)}, ValueError, r"shape \(4,\), got \(3,\)"),
            ({"c": np.ones(4)}, TypeError, "integers, got dtype float64"),
            ({"c": np.array([2**63] * 4, dtype=np.uint64)}, ValueError, "must fit int64"),
        ]
        for attrs, exc, msg in bad:
            with pytest.raises(exc, match=msg):
                s.insert("c", x, np.arange(4), attributes=attrs)
        assert s.count("c") == 0
        s.insert("c", x[:2], np.arange(2))
        with pytest.raises(ValueError, match="already holds rows inserted without attributes"):
            s.insert("c", x[2:], np.arange(2, 4), attributes={"c": np.arange(2)})
        s.create_collection("d", 4)
        s.insert("d", x[:2], np.arange(2), attributes={"b": np.arange(2), "a": np.zeros(2, int)})
        with pytest.raises(ValueError, match=r"declared 'a', 'b'.*got 'a'"):
            s.insert("d", x[2:], np.arange(2, 4), attributes={"a": np.arange(2)})
        with pytest.raises(ValueError, match=r"filter.field 'z' is not an attribute.*'a', 'b'"):
            s.search_filtered("d", x, 2, Filter("z", [1]))
        with pytest.raises(ValueError, match=r"does not parse filter expressions.*'a in \[1\]'"):
            s.search_filtered("d", x, 2, Filter("a", [1], expression="a in [1]"))
        with pytest.raises(TypeError, match="must be an imsearch_align"):
            s.search_filtered("d", x, 2, {"a": [1]})
        with pytest.raises(ValueError, match=r"its attributes: \(none\)"):
            s.search_filtered("c", x, 2, Filter("c", [1]))


def test_lancedb_keeps_attributes_across_a_reopen(tmp_path):
    pytest.importorskip("lancedb")
    from imsearch_align.adapters.lancedb_store import LanceDBStore

    x, ids, q = dense_ties(2)
    cat = np.arange(len(ids)) % 3
    with LanceDBStore(tmp_path / "db") as s:
        s.create_collection("c", x.shape[1])
        s.insert("c", x, ids, attributes={"category": cat})
        before = s.search_filtered("c", q, 5, Filter("category", [2]))
    with LanceDBStore(tmp_path / "db") as s:
        after = s.search_filtered("c", q, 5, Filter("category", [2]))
        np.testing.assert_array_equal(before.ids, after.ids)
        with pytest.raises(ValueError, match="same names"):
            s.insert("c", x[:1], [10**13], attributes={"other": [1]})


def test_qdrant_keeps_attributes_across_a_reopen(tmp_path):
    pytest.importorskip("qdrant_client")
    from imsearch_align.adapters.qdrant_store import QdrantStore

    rng = np.random.default_rng(0)
    x = rng.standard_normal((30, 6)).astype(np.float32)
    ids = np.arange(30, dtype=np.int64) + 100
    cat = np.arange(30) % 3
    q = rng.standard_normal((4, 6)).astype(np.float32)
    with QdrantStore(path=tmp_path / "qd") as s:
        s.create_collection("c", 6)
        s.insert("c", x, ids, attributes={"category": cat})
        before = s.search_filtered("c", q, 4, Filter("category", [1]))
    with QdrantStore(path=tmp_path / "qd") as s:
        after = s.search_filtered("c", q, 4, Filter("category", [1]))
    np.testing.assert_array_equal(before.ids, after.ids)
    np.testing.assert_array_equal(after.ids, _brute(q, x, ids, cat == 1, 4).ids)
