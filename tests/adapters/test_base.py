"""Store plumbing: tie rule and padding, vector and id checks."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.adapters.base import (
    BaseStore,
    CollectionExistsError,
    CollectionInfo,
    CollectionNotFoundError,
    check_collection_name,
    check_k,
    check_new_ids,
    check_vectors,
    empty_result,
    finalize_rows,
    search_closing_ties,
    unique_collection_name,
)


def test_finalize_rows_applies_tie_rule_and_pads():
    ids = np.array([[9, 3, 5, -1], [4, 8, 2, 7]])
    scores = np.array([[1.0, 2.0, 1.0, 0.0], [0.5, 0.5, 0.5, 0.5]], dtype=np.float32)
    r = finalize_rows(ids, scores, 6)
    assert r.ids.tolist() == [[3, 5, 9, -1, -1, -1], [2, 4, 7, 8, -1, -1]]
    assert r.scores[0, :3].tolist() == [2.0, 1.0, 1.0]
    assert np.isneginf(r.scores[0, 3:]).all()  # -1 gets -inf even if the library said 0
    assert r.ids.dtype == np.int64 and r.scores.dtype == np.float32


def test_finalize_rows_cuts_and_matches_python_sort():
    rng = np.random.default_rng(0)
    ids = rng.permutation(1000)[:600].reshape(30, 20)
    scores = rng.integers(0, 4, (30, 20)).astype(np.float32)
    r = finalize_rows(ids, scores, 7)
    for row in range(30):
        want = sorted(zip(-scores[row], ids[row]))[:7]
        assert r.ids[row].tolist() == [int(i) for _, i in want]
    np.testing.assert_array_equal(ids, ids)  # input untouched: a copy was sorted


def test_finalize_rows_does_not_modify_inputs():
    ids = np.array([[2, 1, -1]])
    scores = np.array([[1.0, 1.0, 3.0]], dtype=np.float32)
    finalize_rows(ids, scores, 3)
    assert ids.tolist() == [[2, 1, -1]] and scores.tolist() == [[1.0, 1.0, 3.0]]


def test_empty_result():
    r = empty_result(3, 2)
    assert r.ids.shape == (3, 2) and (r.ids == -1).all() and np.isneginf(r.scores).all()


def test_check_k():
    assert check_k(np.int64(3)) == 3
    with pytest.raises(ValueError, match=r"k must be in \[1, inf\], got 0"):
        check_k(0)
    with pytest.raises(TypeError, match="k must be an integer, got bool"):
        check_k(True)


def test_check_vectors_dense_sparse_and_dimension():
    dense = CollectionInfo("d", 3, sparse=False)
    sparse = CollectionInfo("s", None, sparse=True)
    out = check_vectors(np.ones((2, 3), dtype=np.float64), "vectors", dense)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    out = check_vectors(sp.coo_matrix(np.eye(4)), "vectors", sparse)
    assert sp.isspmatrix_csr(out) and out.dtype == np.float32
    with pytest.raises(TypeError, match="sparse collection 's', got dense ndarray"):
        check_vectors(np.eye(2), "vectors", sparse)
    with pytest.raises(TypeError, match="dense collection 'd', got scipy sparse"):
        check_vectors(sp.csr_matrix(np.eye(3)), "vectors", dense)
    with pytest.raises(
        ValueError, match=r"queries must have dimension 3 \(collection 'd'\), got 2"
    ):
        check_vectors(np.ones((1, 2)), "queries", dense)


def test_check_new_ids():
    existing = np.array([5, 1, 9])
    assert check_new_ids([2, 3], 2, existing, "c").tolist() == [2, 3]
    with pytest.raises(ValueError, match=r"already stored: \[1, 9\]"):
        check_new_ids([9, 2, 1], 3, existing, "c")
    with pytest.raises(ValueError, match="ids has 1 entries, vectors have 2 rows"):
        check_new_ids([7], 2, existing, "c")
    with pytest.raises(ValueError, match=r"ids must be >= 0"):
        check_new_ids([-1], 1, existing, "c")


# --------------------------------------------------------------------------
# one name rule, unique names, provenance, the catalog hooks


@pytest.mark.parametrize("bad", ["1abc", "a-b", "has space", "", "x" * 256, None, 7])
def test_check_collection_name_rejects(bad):
    with pytest.raises(ValueError, match="letters, digits and underscores"):
        check_collection_name(bad)


def test_check_collection_name_accepts_the_milvus_rule():
    for good in ("a", "_x", "A1_b2", "x" * 255):
        assert check_collection_name(good) == good


def test_unique_collection_name():
    assert unique_collection_name("flickr30k/t2i-csa", "r1") == "flickr30k_t2i_csa_r1"
    assert unique_collection_name("30k", "r1") == "c_30k_r1"  # no leading digit
    long = unique_collection_name("y" * 400, "run_42")
    assert len(long) == 255 and long.endswith("_run_42")
    a, b = unique_collection_name("t2i"), unique_collection_name("t2i")
    assert a != b and a.startswith("t2i_") and len(a) == len("t2i_") + 12
    for name in (a, long):
        check_collection_name(name)
    with pytest.raises(ValueError, match="suffix must be"):
        unique_collection_name("t2i", "bad-suffix")


class _DictStore(BaseStore):
    """The smallest in-memory BaseStore: rows in a dict (an independent oracle path)."""

    provenance_packages = ("numpy", "scipy", "no-such-dist-xyz")

    def _insert(self, info, vectors, ids):
        info.state = {**(info.state or {}), **dict(zip(ids.tolist(), vectors))}

    def _search(self, info, queries, k):
        ids = np.array(list(info.state), dtype=np.int64)
        mat = np.stack(list(info.state.values()))
        scores = queries @ mat.T
        return finalize_rows(np.broadcast_to(ids, scores.shape), scores, k)


def test_base_store_template_and_provenance():
    from importlib import metadata

    from imsearch_align.framework.interfaces import StoreProvenance, is_thread_safe

    s = _DictStore()
    assert isinstance(s, StoreProvenance) and is_thread_safe(s)
    prov = s.provenance()
    assert prov == {
        "packages": {"numpy": metadata.version("numpy"), "scipy": metadata.version("scipy")}
    }
    s.create_collection("c")
    assert s.search("c", np.ones((2, 3), np.float32), 2).ids.tolist() == [[-1, -1], [-1, -1]]
    x = np.array([[1, 0, 0], [0, 2, 0], [0, 0, 3]], np.float32)
    s.insert("c", x, [7, 8, 9])
    assert s.count("c") == 3 and s.list_collections() == ["c"]
    r = s.search("c", np.array([[1, 1, 1]], np.float32), 5)
    assert r.ids.tolist() == [[9, 8, 7, -1, -1]]  # returned unchanged: finalised by the hook
    with pytest.raises(ValueError, match=r"already stored: \[8\]"):
        s.insert("c", x[:1], [8])
    with pytest.raises(CollectionExistsError, match="unique_collection_name"):
        s.create_collection("c", 3)
    assert s.has_collection("c") and not s.has_collection("1bad") and not s.has_collection(3)
    with pytest.raises(CollectionNotFoundError, match="existing collections: 'c'"):
        s.search("1bad", x, 1)
    s.drop_collection("c")
    assert not s.has_collection("c")
    s.close()
    with pytest.raises(RuntimeError, match="closed"):
        s.list_collections()


def test_remote_store_hooks_keep_no_ids():
    """A store whose backend holds the ids (keeps_ids = False) answers through its hooks."""

    class Remote(_DictStore):
        keeps_ids = False
        asked: list

        def _stored_among(self, info, ids):
            self.asked.append(ids.tolist())
            return ids[np.isin(ids, list(info.state or {}))]

        def _count(self, info):
            return len(info.state or {})

        def _is_empty(self, info):
            return not info.state

    s = Remote()
    s.asked = []
    s.create_collection("r", 2)
    s.insert("r", np.eye(2, dtype=np.float32), [4, 5])
    assert s._collections["r"].ids.size == 0  # nothing kept in memory
    assert s.count("r") == 2 and s.asked == [[4, 5]]
    with pytest.raises(ValueError, match=r"already stored: \[5\]"):
        s.insert("r", np.eye(2, dtype=np.float32), [5, 6])
    assert s.search("r", np.array([[0, 1]], np.float32), 1).ids.tolist() == [[5]]


def test_search_closing_ties_widens_only_rows_still_tied_and_stops_at_the_cap():
    # row 0: 30 docs tied at the top; row 1: no tie; row 2: tie ends at 12
    scores = np.zeros((3, 50), np.float32)
    scores[0, :30] = 1.0
    scores[0, 30:] = -np.arange(20, dtype=np.float32)
    scores[1] = -np.arange(50, dtype=np.float32)
    scores[2, :12] = 1.0
    scores[2, 12:] = -np.arange(38, dtype=np.float32)
    calls = []

    def search(rows, limit):
        calls.append((rows.tolist(), limit))
        # a backend that returns tied docs in *descending* id order
        order = np.lexsort((-np.arange(50)[None].repeat(len(rows), 0), -scores[rows]), axis=1)
        return order[:, :limit].astype(np.int64), np.take_along_axis(scores[rows], order, 1)[
            :, :limit
        ]

    ids, sc = search_closing_ties(search, 3, 50, 5)
    assert calls == [([0, 1, 2], 13), ([0], 26), ([0], 50)]
    res = finalize_rows(ids, sc, 5)
    assert res.ids.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]]
    calls.clear()
    ids, _ = search_closing_ties(search, 3, 50, 5, max_limit=20)
    assert calls == [([0, 1, 2], 13), ([0], 20)]  # still tied at the cap: the backend's choice
    assert finalize_rows(ids, _, 5).ids[0].tolist() == [10, 11, 12, 13, 14]
