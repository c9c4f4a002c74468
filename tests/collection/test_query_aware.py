"""Query-aware IVF (issue 38, item 4): what the support set buys back, measured on
cone-shaped documents with a planted modality gap (queries = document-like points
moved by a fixed vector; support pairs drawn the same way, disjoint from the test
queries), and the promise that no test query ever trains anything."""

from __future__ import annotations

import numpy as np
import pytest

from imsearch_align.collection.cone import cone_vectors
from imsearch_align.collection.query_aware import (
    EXPRESSIBLE,
    QueryAwareError,
    QueryGuard,
    candidates_scanned,
    check_expressible,
    document_only_index,
    ivf_of,
    neighbour_weighted_index,
    neighbour_weights,
    shifted_search,
    support_offset,
)

faiss = pytest.importorskip("faiss")

N_DOCS, N_TEST, N_SUPPORT, DIM, NLIST, K = 10_000, 400, 2000, 32, 64, 10


class Identity:
    """A fitted method that leaves both modalities where they are (a joint space)."""

    def transform_images(self, x):
        return np.asarray(x, dtype=np.float32)

    def transform_texts(self, y):
        return np.asarray(y, dtype=np.float32)


def _recall(ids: np.ndarray, truth: np.ndarray) -> float:
    return float((ids[:, :, None] == truth[:, None, :]).any(axis=2).mean())


def _truth(queries: np.ndarray, docs: np.ndarray) -> np.ndarray:
    scores = queries.astype(np.float64) @ docs.T.astype(np.float64)
    return np.argsort(-scores, axis=1, kind="stable")[:, :K]


@pytest.fixture(scope="module")
def world() -> dict:
    """Documents, held-out document-like points for the test and support pairs, and a
    gap direction orthogonal to the cone's axis."""
    x = cone_vectors(N_DOCS + N_TEST + N_SUPPORT, DIM, seed=1, clusters=50, cone=2.5, spread=2.5)
    docs, p_test, p_sup = x[:N_DOCS], x[N_DOCS : N_DOCS + N_TEST], x[N_DOCS + N_TEST :]
    axis = docs.mean(axis=0) / np.linalg.norm(docs.mean(axis=0))
    d = np.random.default_rng(5).standard_normal(DIM)
    d -= (d @ axis) * axis
    d /= np.linalg.norm(d)
    noise = np.random.default_rng(6).standard_normal((N_SUPPORT + N_TEST, DIM)) * 0.02
    return {"docs": docs, "p_test": p_test, "p_sup": p_sup, "d": d, "noise": noise,
            "doc_index": document_only_index(docs, NLIST)}  # fmt: skip


def _unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def _gap(world: dict, g: float, *, unit: bool = True) -> dict:
    """Queries and support texts moved by ``g`` along the gap direction (renormalised,
    as an encoder's rows are, unless ``unit`` is False); support images the unmoved
    points (the support pairs); the test queries disjoint from them."""
    shift = (g * world["d"]).astype(np.float32)
    f = _unit if unit else (lambda x: x.astype(np.float32))
    ys = f(world["p_sup"] + shift + world["noise"][:N_SUPPORT])
    q = f(world["p_test"] + shift + world["noise"][N_SUPPORT:])
    return {"X": world["p_sup"], "Y": ys, "q": q, "shift": shift,
            "truth": _truth(q, world["docs"])}  # fmt: skip


def _curve(index, q: np.ndarray, truth: np.ndarray, nprobes) -> tuple[list, list]:
    """(documents scanned per query, recall@10) at each nprobe."""
    cand, rec = [], []
    for p in nprobes:
        index.nprobe = p
        cand.append(float(candidates_scanned(index, q, p).mean()))
        rec.append(_recall(index.search(q, K)[1], truth))
    index.nprobe = 1
    return cand, rec


def test_support_offset_recovers_the_planted_shift(world):
    gap = _gap(world, 1.0, unit=False)
    off = support_offset(Identity(), gap["X"], gap["Y"], direction="t2i")
    cos = off @ -gap["shift"] / (np.linalg.norm(off) * np.linalg.norm(gap["shift"]))
    assert cos > 0.95 and np.linalg.norm(off) == pytest.approx(1.0, rel=0.05)
    # image-to-text: documents are the texts, the offset points the other way
    back = support_offset(Identity(), gap["X"], gap["Y"], direction="i2t")
    np.testing.assert_allclose(back, -off, atol=1e-12)
    # renormalised rows (an encoder's): the shift is still what the offset points along
    u = _gap(world, 1.0)
    off_u = support_offset(Identity(), u["X"], u["Y"])
    assert off_u @ -u["shift"] / np.linalg.norm(off_u) > 0.95


def test_shifted_scores_are_true_inner_products_and_exact_at_every_list(world):
    gap = _gap(world, 1.0)
    docs, q, idx = world["docs"], gap["q"], world["doc_index"]
    off = support_offset(Identity(), gap["X"], gap["Y"])
    scores, ids = shifted_search(idx, q, K, NLIST, off)
    assert _recall(ids, gap["truth"]) == 1.0
    true = np.einsum("qd,qkd->qk", q.astype(np.float64), docs[ids].astype(np.float64))
    np.testing.assert_allclose(scores, true, atol=1e-5)
    scores4, ids4 = shifted_search(idx, q, K, 4, off)  # also at a small nprobe
    ok = ids4 >= 0
    true4 = np.einsum("qd,qkd->qk", q.astype(np.float64), docs[np.maximum(ids4, 0)])
    np.testing.assert_allclose(scores4[ok], true4[ok], atol=1e-5)
    assert idx.nprobe == 1  # the index's own setting is left as it was


def test_shifted_list_selection_loses_recall_on_a_gap_across_the_cone(world):
    """Measured, not assumed: with an inner-product quantizer the lists chosen for q + o
    are q's own choice plus a per-list prior o . c (about the list's mean of o . x), which
    knows nothing of q's true neighbours; here those include the gap's own term g . x,
    and the shifted choice loses recall. With no gap the offset is noise and costs nothing.
    (On real methods' spaces it can help: CKA's, benchmarks/results/query_aware.)"""
    idx = world["doc_index"]
    gap = _gap(world, 1.0)
    off = support_offset(Identity(), gap["X"], gap["Y"])
    assert np.linalg.norm(off) > 0.5
    idx.nprobe = 4
    base = _recall(idx.search(gap["q"], K)[1], gap["truth"])
    shifted = _recall(shifted_search(idx, gap["q"], K, 4, off)[1], gap["truth"])
    assert shifted < base - 0.05, (base, shifted)
    none = _gap(world, 0.0)
    off0 = support_offset(Identity(), none["X"], none["Y"])
    assert np.linalg.norm(off0) < 0.01  # the noise's mean only
    base0 = _recall(idx.search(none["q"], K)[1], none["truth"])
    shifted0 = _recall(shifted_search(idx, none["q"], K, 4, off0)[1], none["truth"])
    assert abs(shifted0 - base0) < 0.02, (base0, shifted0)
    idx.nprobe = 1


def test_neighbour_weighted_centroids_buy_back_recall_on_a_planted_gap(world):
    """At equal nprobe and at equal documents scanned (the document-only curve read at
    B's effort, interpolated in log documents): B's lists hold the queries' neighbours.
    With no gap it changes nothing beyond noise."""
    docs, idx = world["docs"], world["doc_index"]
    gap = _gap(world, 1.0)
    nw, info = neighbour_weighted_index(docs, gap["Y"], NLIST, m=10, share=0.2)
    assert info["support_queries"] == N_SUPPORT and info["documents_weighted"] > 0
    base_c, base_r = _curve(idx, gap["q"], gap["truth"], [1, 2, 4, 8, 16, 32])
    nw_c, nw_r = _curve(nw, gap["q"], gap["truth"], [4, 8])
    assert nw_r[0] > base_r[2] + 0.1, (base_r, nw_r)  # nprobe 4
    at_equal = np.interp(np.log(nw_c), np.log(base_c), base_r)
    assert (np.array(nw_r) > at_equal + 0.03).all(), (nw_c, nw_r, at_equal)
    none = _gap(world, 0.0)
    nw0, _ = neighbour_weighted_index(docs, none["Y"], NLIST, m=10, share=0.2)
    r0 = _curve(idx, none["q"], none["truth"], [4])[1][0]
    assert abs(_curve(nw0, none["q"], none["truth"], [4])[1][0] - r0) < 0.03


def test_neighbour_weighted_trains_on_documents_only(world, monkeypatch):
    """What the trainer saw: the documents, row for row, weighted; never a query vector."""
    docs = world["docs"][:4000]
    gap = _gap(world, 1.0)
    seen = []
    real = faiss.Clustering.train

    def spy(self, x, index, weights=None):
        seen.append((np.array(x, copy=True), None if weights is None else np.array(weights)))
        return real(self, x, index, weights)

    monkeypatch.setattr(faiss.Clustering, "train", spy)
    neighbour_weighted_index(docs, gap["Y"], 32, m=5, share=0.5)
    assert len(seen) == 1
    x, w = seen[0]
    np.testing.assert_array_equal(x, docs)
    assert w is not None and w.shape == (len(docs),) and w.min() == 1.0 and w.max() > 1.0
    queries = {r.tobytes() for r in np.ascontiguousarray(gap["Y"], np.float32)}
    assert not any(r.tobytes() in queries for r in x)


def test_neighbour_weights_put_the_asked_share_on_the_neighbours():
    counts = np.array([0, 0, 3, 1, 0, 0, 0, 0])
    w = neighbour_weights(counts, 0.25)
    assert (w[counts == 0] == 1).all()
    extra = (w - 1).sum()
    assert extra / w.sum() == pytest.approx(0.25, rel=1e-6)
    assert (neighbour_weights(np.zeros(4), 0.5) == 1).all()
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\)"):
        neighbour_weights(counts, 1.0)


def test_a_query_aware_index_never_sees_a_test_query(world):
    """Every array that enters an offset or a training passes the guard over the test
    queries (as they are, and as the method maps them); one that holds a test query
    is caught."""
    docs = world["docs"][:4000]
    gap = _gap(world, 1.0)
    method = Identity()
    guard = QueryGuard(gap["q"], method.transform_texts(gap["q"]))
    support_offset(method, gap["X"], gap["Y"], observe=guard)
    document_only_index(docs, 32, observe=guard)
    neighbour_weighted_index(docs, method.transform_texts(gap["Y"]), 32, m=5, observe=guard)
    whats = {w for w, _ in guard.seen}
    assert {"offset: raw support texts", "offset: aligned support texts",
            "centroid training rows", "neighbour search: aligned support queries"} <= whats  # fmt: skip
    assert not any(shape[0] == N_TEST for _, shape in guard.seen)
    leaked = np.concatenate([gap["Y"][:10], gap["q"][3:4]])
    with pytest.raises(AssertionError, match="a test query reached offset: raw support texts"):
        support_offset(method, gap["X"][:11], leaked, observe=guard)
    with pytest.raises(AssertionError, match="a test query reached neighbour search"):
        neighbour_weighted_index(docs, leaked, 32, m=5, observe=guard)


def test_shifted_search_on_ivf_sq8_returns_the_index_own_scores(world):
    """IVF-SQ8 codes residuals: the coarse scores handed over must be the query's own."""
    docs = world["docs"][:4000]
    q = _gap(world, 1.0)["q"][:50]
    quantizer = faiss.IndexFlatIP(DIM)
    sq = faiss.IndexIVFScalarQuantizer(quantizer, DIM, 16, faiss.ScalarQuantizer.QT_8bit,
                                       faiss.METRIC_INNER_PRODUCT)  # fmt: skip
    sq.train(docs)
    sq.add(docs)
    sq.nprobe = 16
    want_s, want_i = sq.search(q, K)
    got_s, got_i = shifted_search(sq, q, K, 16, np.full(DIM, 0.3, np.float32))
    np.testing.assert_array_equal(got_i, want_i)
    np.testing.assert_allclose(got_s, want_s, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("store", "index"),
    [("milvus", "ivf_flat"), ("qdrant", "hnsw"), ("faiss", "hnsw"), ("faiss", "ivf_pq"),
     ("faiss", "flat"), ("lancedb", "ivf_pq")],
)  # fmt: skip
def test_a_store_that_cannot_express_it_is_refused_naming_those_that_can(store, index):
    for variant in ("shifted", "neighbour_weighted"):
        with pytest.raises(QueryAwareError, match=r"the stores and index types that can: "
                           r"faiss: ivf_flat, ivf_sq8") as err:  # fmt: skip
            check_expressible(variant, store=store, index=index)
        assert repr(store) in str(err.value) and repr(index) in str(err.value)
    check_expressible("document_only", store=store, index=index)
    assert EXPRESSIBLE == {"faiss": ("ivf_flat", "ivf_sq8")}


def test_a_faiss_index_that_cannot_express_it_is_refused(world):
    docs = world["docs"][:2000]
    for index in (faiss.IndexHNSWFlat(DIM, 8), faiss.IndexFlatIP(DIM)):
        index.add(docs)
        with pytest.raises(QueryAwareError, match=r"FAISS IndexHNSWFlat|FAISS IndexFlatIP"):
            shifted_search(index, docs[:3], K, 4, np.zeros(DIM))
        with pytest.raises(QueryAwareError, match="IndexIVFFlat, IndexIVFScalarQuantizer"):
            ivf_of(index)
    with pytest.raises(QueryAwareError, match="unknown query-aware variant 'hnsw_links'"):
        check_expressible("hnsw_links")
    with pytest.raises(ValueError, match="offset has 3 dimensions, the queries 32"):
        shifted_search(world["doc_index"], docs[:3], K, 4, np.zeros(3))
