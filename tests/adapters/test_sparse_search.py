"""sparse_topk: exact against dense brute force (tie-aware), no-hit rule, pruning, budget, errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("numba")

from imsearch_align.adapters.sparse_search import (
    SparseCollection,
    SparseDocs,
    SparseSearchStats,
    sparse_topk,
    working_bytes_per_worker,
)

EPS32 = float(np.finfo(np.float32).eps)


def oracle(q: sp.csr_matrix, d: sp.csr_matrix) -> np.ndarray:
    """Float64 inner products of the float32 values (each product exact)."""
    return (q.astype(np.float64) @ d.astype(np.float64).T).toarray()


def assert_matches_brute_force(ids, scores, q, d, k) -> None:
    """Tie-aware check of a sparse top-k against the float64 oracle.

    Per row: the hits are docs with a non-zero true score, ``min(k, #non-zero)``
    of them, then ``-1`` / ``-inf``; each reported score equals the true one
    to float32 precision (scaled by the row's sum of |products|); the set is
    the true top k except inside a group of scores equal to that precision;
    rows are ordered by score descending, equal scores by id ascending.
    """
    true = oracle(q, d)
    absprod = (abs(q).astype(np.float64) @ abs(d).astype(np.float64).T).toarray()
    tol = 4 * EPS32 * np.maximum(absprod.max(axis=1), 1e-300)  # per row
    for r in range(true.shape[0]):
        nz = np.flatnonzero(true[r] != 0)
        m = min(k, nz.size)
        got_i, got_s = ids[r], scores[r]
        assert (got_i[:m] >= 0).all(), f"row {r}: expected {m} hits, got {(got_i >= 0).sum()}"
        assert (got_i[m:] == -1).all() and np.isneginf(got_s[m:]).all(), f"row {r}: padding"
        hit = got_i[:m]
        assert len(set(hit.tolist())) == m, f"row {r}: an id is returned twice"
        assert (true[r, hit] != 0).all(), f"row {r}: a doc with a zero inner product is returned"
        np.testing.assert_allclose(got_s[:m], true[r, hit], rtol=0, atol=tol[r])
        if m:
            kth = np.sort(true[r, nz])[::-1][m - 1]
            assert (true[r, hit] >= kth - 2 * tol[r]).all(), f"row {r}: a doc below the k-th"
            left = np.setdiff1d(nz, hit)
            assert (true[r, left] <= kth + 2 * tol[r]).all(), f"row {r}: a better doc left out"
        s, i = got_s[:m], got_i[:m]
        assert (s[:-1] >= s[1:]).all(), f"row {r}: scores not descending"
        tie = s[:-1] == s[1:]
        assert (i[:-1][tie] < i[1:][tie]).all(), f"row {r}: equal scores not by ascending id"


def definition(q: sp.csr_matrix, d: sp.csr_matrix, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact rule on data whose products and sums are exact: sort non-zero scores, then ids."""
    true = oracle(q, d)
    out_i = np.full((true.shape[0], k), -1, np.int64)
    out_s = np.full((true.shape[0], k), -np.inf, np.float32)
    for r in range(true.shape[0]):
        nz = np.flatnonzero(true[r] != 0)
        order = nz[np.lexsort((nz, -true[r, nz]))][:k]
        out_i[r, : len(order)] = order
        out_s[r, : len(order)] = true[r, order]
    return out_i, out_s


def random_csr(n, dim, density, rng, *, signed=False, integer=False) -> sp.csr_matrix:
    m = sp.random(n, dim, density=density, format="csr", random_state=rng, dtype=np.float64)
    if integer:  # small integers: every product and sum is exact, ties are everywhere
        m.data = rng.integers(1, 4, m.nnz).astype(np.float64)
    if signed:
        m.data *= rng.choice([-1.0, 1.0], m.nnz)
    return m.astype(np.float32)


def asif_like(n, dim, nnz, rng, *, exponent=8.0, centres=None):
    """Rows like ASIF's: the top-nnz of clustered cosines, ** exponent, L2-normalised."""
    if centres is None:
        centres = rng.standard_normal((20, dim))
    x = centres[rng.integers(0, len(centres), n)] + 0.8 * rng.standard_normal((n, dim))
    keep = np.argpartition(-x, nnz - 1, axis=1)[:, :nnz]
    vals = np.maximum(np.take_along_axis(x, keep, 1), 0) ** exponent
    out = np.zeros((n, dim))
    np.put_along_axis(out, keep, vals, axis=1)
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-300)
    return sp.csr_matrix(out.astype(np.float32))


@pytest.mark.parametrize("signed", [False, True])
@pytest.mark.parametrize("density", [0.02, 0.2, 0.9])
def test_equals_brute_force_on_random_csr(signed, density):
    rng = np.random.default_rng(int(density * 100) + signed)
    d = random_csr(300, 120, density, rng, signed=signed)
    q = random_csr(40, 120, density, rng, signed=signed)
    for k in (1, 7, 50, 400):
        ids, scores = sparse_topk(q, d, k, threads=2)
        assert ids.shape == scores.shape == (40, k)
        assert ids.dtype == np.int64 and scores.dtype == np.float32
        assert_matches_brute_force(ids, scores, q, d, k)


@pytest.mark.parametrize("signed", [False, True])
def test_exact_definition_with_ties_on_integer_data(signed):
    rng = np.random.default_rng(11)
    d = random_csr(500, 30, 0.15, rng, signed=signed, integer=True)
    d = sp.vstack([d, d[:100]], format="csr")  # duplicated rows: exact ties
    q = random_csr(60, 30, 0.2, rng, signed=signed, integer=True)
    for k in (1, 5, 40, 700):
        ids, scores = sparse_topk(q, d, k, threads=3)
        want_i, want_s = definition(q, d, k)
        np.testing.assert_array_equal(ids, want_i)
        np.testing.assert_array_equal(scores, want_s)


def test_asif_like_rows_are_pruned_and_exact():
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((20, 600))
    d = asif_like(800, 600, 60, rng, centres=centres)
    q = asif_like(80, 600, 60, rng, centres=centres)
    st = SparseSearchStats()
    ids, scores = sparse_topk(q, d, 10, stats=st, threads=2)
    assert_matches_brute_force(ids, scores, q, d, 10)
    qc = np.bincount(q.indices, minlength=600).astype(np.float64)
    full = float(qc @ np.bincount(d.indices, minlength=600))  # a plain sparse product's work
    assert st.scattered < 0.5 * full, f"pruning visited {st.scattered} of {full:.0f} postings"
    assert st.full_rows == 0 and st.rescored < 80 * 100


def test_flat_rows_cannot_be_pruned_and_stay_exact():
    # every weight equal: the bound never drops below the k-th score before the last term
    rng = np.random.default_rng(4)
    d = asif_like(400, 300, 40, rng, exponent=0.0)
    q = asif_like(30, 300, 40, rng, exponent=0.0)
    ids, scores = sparse_topk(q, d, 10, threads=2)
    assert_matches_brute_force(ids, scores, q, d, 10)


def test_queries_sharing_no_term_and_k_above_the_matches():
    d = sp.csr_matrix(
        np.array([[1, 0, 0, 0, 0], [2, 1, 0, 0, 0], [0, 3, 0, 0, 0], [0, 0, 1, 0, 0]], np.float32)
    )
    q = sp.csr_matrix(
        np.array(
            [
                [0, 0, 0, 5, 0],  # a column no doc has
                [0, 0, 0, 0, 0],  # an empty row
                [1, 0, 0, 0, 0],  # two docs match
                [0, 1, 1, 0, 0],  # three docs match, 2 tie at 1.0 (ids 1 and 3)
            ],
            np.float32,
        )
    )
    ids, scores = sparse_topk(q, d, 4)
    assert ids.tolist() == [[-1] * 4, [-1] * 4, [1, 0, -1, -1], [2, 1, 3, -1]]
    assert scores[2, :2].tolist() == [2.0, 1.0] and scores[3, :3].tolist() == [3.0, 1.0, 1.0]
    assert np.isneginf(scores[ids < 0]).all()


def test_exact_cancellation_is_not_a_hit_and_negative_scores_are():
    # doc 0 shares two terms with the query but its inner product is exactly 0
    d = sp.csr_matrix(np.array([[1, -1, 0], [0, 0, -2], [1, 1, 0]], np.float32))
    q = sp.csr_matrix(np.array([[1, 1, 1]], np.float32))
    ids, scores = sparse_topk(q, d, 3)
    assert ids.tolist() == [[2, 1, -1]] and scores[0, :2].tolist() == [2.0, -2.0]


def test_empty_query_matrix_and_empty_docs():
    d = sp.csr_matrix(np.eye(3, dtype=np.float32))
    ids, scores = sparse_topk(sp.csr_matrix((0, 3), dtype=np.float32), d, 2)
    assert ids.shape == (0, 2) and scores.shape == (0, 2)
    ids, _ = sparse_topk(sp.csr_matrix(np.eye(3, dtype=np.float32)), sp.csr_matrix((0, 3)), 2)
    assert (ids == -1).all()


def test_smallest_budget_one_worker_and_many_workers_agree():
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((10, 200))
    docs = SparseDocs(asif_like(500, 200, 30, rng, centres=centres))
    q = asif_like(300, 200, 30, rng, centres=centres)
    need_mb = working_bytes_per_worker(500, 200) / 2**20
    st = SparseSearchStats()
    small = sparse_topk(q, docs, 10, max_memory_mb=need_mb, threads=4, stats=st)
    assert st.workers == 1  # the budget holds one worker only
    for threads in (1, 2, 5):
        other = sparse_topk(q, docs, 10, threads=threads)
        np.testing.assert_array_equal(other[0], small[0])
        np.testing.assert_array_equal(other[1], small[1])  # same arithmetic per row


def test_budget_too_small_for_one_row_names_the_need():
    d = sp.csr_matrix(np.eye(1000, dtype=np.float32))
    need = working_bytes_per_worker(1000, 1000) / 2**20
    with pytest.raises(
        MemoryError,
        match=rf"max_memory_mb=0.001 is too small for one query row against 1,000 docs of "
        rf"dimension 1,000: one search worker needs {need:.2f} MiB.*max_memory_mb >= {need:.2f}",
    ):
        sparse_topk(d[:3], d, 5, max_memory_mb=0.001)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"k": 0}, ValueError, r"k must be in \[1, inf\], got 0"),
        ({"max_memory_mb": 0}, ValueError, "max_memory_mb must be a positive number, got 0"),
        ({"threads": 0}, ValueError, r"threads must be in \[1, inf\], got 0"),
    ],
)
def test_bad_arguments(kwargs, error, message):
    d = sp.csr_matrix(np.eye(3, dtype=np.float32))
    args = {"k": 2, **kwargs}
    with pytest.raises(error, match=message):
        sparse_topk(d, d, args.pop("k"), **args)


def test_dimension_and_type_errors():
    d = sp.csr_matrix(np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError, match=r"queries must have dimension 3 \(the docs'\), got 4"):
        sparse_topk(sp.csr_matrix(np.eye(4, dtype=np.float32)), d, 1)
    with pytest.raises(TypeError, match="queries must be a scipy sparse matrix, got ndarray"):
        sparse_topk(np.eye(3, dtype=np.float32), d, 1)


def test_collection_maps_positions_to_ids_and_breaks_ties_by_id():
    rows = sp.csr_matrix(np.ones((6, 2), np.float32))  # six equal docs
    coll = SparseCollection()
    coll.add(rows[:4], np.array([60, 10, 50, 20]))
    coll.add(rows[4:], np.array([40, 30]))
    ids, _ = coll.search(rows[:1], 8, max_memory_mb=64, threads=None)
    assert ids.tolist() == [[10, 20, 30, 40, 50, 60, -1, -1]]
    coll.add(sp.csr_matrix(np.array([[5, 0]], np.float32)), np.array([99]))  # after a search
    ids, _ = coll.search(rows[:1], 2, max_memory_mb=64, threads=2)
    assert ids.tolist() == [[99, 10]]
    assert coll.nbytes > 0


def test_docs_prepared_once_hold_rows_and_postings():
    rng = np.random.default_rng(6)
    m = random_csr(200, 50, 0.1, rng)
    docs = SparseDocs(m)
    assert docs.n_docs == 200 and docs.dim == 50
    # rows + heavy/light postings + norms: about twice the CSR's 8 bytes per non-zero
    assert 16 * m.nnz <= docs.nbytes <= 16 * m.nnz + 2 * 8 * 51 + 2 * 8 * 201 + 8 * 201 + 64


@pytest.mark.parametrize("fraction", [0.125, 0.5, 1.0])
def test_split_postings_follows_its_definition(fraction):
    """Each doc's heavy part is its ceil(f * nnz) largest magnitudes, equal
    magnitudes taken in column order; every entry lands in exactly one part,
    postings list docs ascending, and the norms are the parts' float64 norms."""
    from imsearch_align.adapters._sparse_kernels import split_postings

    rng = np.random.default_rng(11)
    m = random_csr(120, 40, 0.3, rng, signed=True, integer=True)  # many equal magnitudes
    m.indices = m.indices.astype(np.int32)
    m.indptr = m.indptr.astype(np.int64)
    hp, hi, hd, lp, li, ld, hn, ln = split_postings(m.indptr, m.indices, m.data, 40, fraction)
    heavy = np.zeros(m.nnz, bool)
    for r in range(m.shape[0]):
        p0, p1 = m.indptr[r], m.indptr[r + 1]
        nh = min(p1 - p0, int(np.ceil(fraction * (p1 - p0))))
        # by magnitude descending, equal magnitudes by column ascending
        order = np.lexsort((m.indices[p0:p1], -np.abs(m.data[p0:p1])))
        heavy[p0 + order[:nh]] = True
    rows = np.repeat(np.arange(m.shape[0]), np.diff(m.indptr))
    for part, (ptr, idx, val) in {True: (hp, hi, hd), False: (lp, li, ld)}.items():
        sel = heavy == part
        expect = sp.csr_matrix(
            (m.data[sel], (m.indices[sel], rows[sel])), shape=(40, m.shape[0])
        )  # the part's transpose: columns -> docs
        got = sp.csr_matrix((val, idx, ptr), shape=(40, m.shape[0]))
        assert (np.diff(got.indptr) == np.diff(expect.indptr)).all()
        for j in range(40):
            s = slice(got.indptr[j], got.indptr[j + 1])
            assert (np.diff(got.indices[s]) > 0).all(), "postings not by ascending doc"
        assert (got != expect).nnz == 0
        norms = np.sqrt(
            np.bincount(rows[sel], m.data[sel].astype(np.float64) ** 2, minlength=m.shape[0])
        )
        np.testing.assert_allclose(hn if part else ln, norms, rtol=1e-15)
