"""How far queries sit from the documents, measured without searching an index (issue 38).

Beside the OOD cost of :func:`~imsearch_align.collection.ood.ood_cost`, cheap
predictors of it, each for the cross-modal queries and for the control
queries (in-distribution queries of the indexed modality) of the same
aligned space:

* :func:`nn_similarity_ratio`: the median over queries of the best inner
  product to any document, over the same median of the controls (1: the
  queries sit as close to the documents as in-distribution queries do;
  below 1: further away);
* :func:`ivf_list_share`: the mean share of each query's exact top-k that
  lies in its ``nprobe`` nearest IVF lists (documents assigned to their
  max-inner-product centroid, as FAISS's and Milvus's IVF indexes assign
  them): the recall@k an exact IVF-Flat search at ``nprobe`` would reach;
  :func:`ivf_centroids` makes centroids when the store does not expose its own.

:func:`~imsearch_align.collection.ood.rank_agreement` says how well one ranks
the methods' measured costs.

All inner products are float64 (:func:`topk_inner`): documents are read in
blocks of rows and each query keeps a running top-k, so 10,000 queries over
1,000,000 documents never hold a score matrix larger than one block
(``query_block x doc_block``). ``sample`` takes a seeded subsample of the
documents (ascending row order) instead of all of them; the output says so.
Ties are broken by ascending document row, as the package's search answers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy import sparse

__all__ = [
    "ivf_centroids",
    "ivf_list_share",
    "nn_similarity_ratio",
    "topk_inner",
]

#: Default block sizes: a ``(1024, 8192)`` float64 score block is 64 MiB.
DOC_BLOCK = 8192
QUERY_BLOCK = 1024


def _matrix(x: Any, name: str, dim: int | None = None) -> Any:
    """``x`` checked as a non-empty 2-D array (of ``dim`` columns); not copied (memmaps stay)."""
    if not hasattr(x, "shape") or len(x.shape) != 2 or x.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array, got {getattr(x, 'shape', x)!r}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"{name} has {x.shape[1]} columns, the queries {dim}")
    return x


def _f64(x: Any, name: str) -> np.ndarray:
    """A block as C-contiguous float64, refusing non-finite values."""
    out = np.ascontiguousarray(x, dtype=np.float64)
    if not np.isfinite(out).all():
        raise ValueError(f"{name} holds a non-finite value")
    return out


def _sample_rows(n_docs: int, sample: int | None, seed: int) -> np.ndarray | None:
    """Ascending seeded rows of a subsample of ``sample`` documents (None: all of them)."""
    if sample is None or sample >= n_docs:
        return None
    if isinstance(sample, bool) or not isinstance(sample, int | np.integer) or sample < 1:
        raise ValueError(f"sample must be a positive number of documents, got {sample!r}")
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_docs, size=int(sample), replace=False))


def _doc_blocks(docs: Any, rows: np.ndarray | None, block: int) -> Iterator[tuple[int, np.ndarray]]:
    """``(first position, float64 rows)`` of the used documents, ``block`` rows at a time."""
    n = docs.shape[0] if rows is None else len(rows)
    for a in range(0, n, block):
        b = min(n, a + block)
        yield a, _f64(docs[a:b] if rows is None else docs[rows[a:b]], "docs")


def _block_top(s: np.ndarray, k: int) -> np.ndarray:
    """Column indices of each row's top ``k`` of ``s``, ascending (ties: lowest columns)."""
    if k >= s.shape[1]:
        return np.broadcast_to(np.arange(s.shape[1]), s.shape).copy()
    if k == 1:
        return s.argmax(axis=1)[:, None]  # first maximum: the lowest column
    top = np.argpartition(-s, k - 1, axis=1)[:, :k]
    kth = np.take_along_axis(s, top, axis=1).min(axis=1)
    tied = np.flatnonzero((s >= kth[:, None]).sum(axis=1) > k)  # a tie across the cut
    for r in tied:
        top[r] = np.argsort(-s[r], kind="stable")[:k]
    return np.sort(top, axis=1)


def _merge(
    run_s: np.ndarray, run_i: np.ndarray, s: np.ndarray, cols: np.ndarray, first: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The running top ``k`` merged with a later block's candidates (higher ids)."""
    cand_s = np.take_along_axis(s, cols, axis=1)
    all_s = np.concatenate([run_s, cand_s], axis=1)
    all_i = np.concatenate([run_i, cols + first], axis=1)
    # Stable on -score: equal scores keep running (lower ids, ascending) before the block's.
    order = np.argsort(-all_s, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(all_s, order, axis=1), np.take_along_axis(all_i, order, axis=1)


def _update(
    run_s: np.ndarray, run_i: np.ndarray, s: np.ndarray, first: int, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The running top ``k`` after a block of scores ``s`` of documents ``first...``.

    Only scores above a row's running k-th can enter (one equal to it has a
    higher id, and loses the tie); once the running top-k is full they are
    few, and are merged with one sort instead of a selection over the block.
    """
    above = s > run_s[:, k - 1 : k]
    n_above = np.count_nonzero(above)
    if n_above > run_s.size:  # the first blocks: select in the block
        return _merge(run_s, run_i, s, _block_top(s, k), first, k)
    if n_above == 0:
        return run_s, run_i
    r, col = np.nonzero(above)
    nq = len(run_s)
    rows = np.concatenate([np.repeat(np.arange(nq), k), r])
    scores = np.concatenate([run_s.ravel(), s[r, col]])
    ids = np.concatenate([run_i.ravel(), col + first])
    order = np.lexsort((ids, -scores, rows))  # by row, score desc, id asc
    starts = np.concatenate([[0], np.cumsum(k + np.bincount(r, minlength=nq))[:-1]])
    take = order[(starts[:, None] + np.arange(k)).ravel()]
    return scores[take].reshape(nq, k), ids[take].reshape(nq, k)


def _check_rows(rows: Any, n_docs: int) -> np.ndarray:
    """``rows`` as a non-empty, strictly ascending int array of rows in ``0..n_docs-1``."""
    r = np.asarray(rows)
    ok = r.ndim == 1 and len(r) > 0 and np.issubdtype(r.dtype, np.integer)
    if not ok or r[0] < 0 or r[-1] >= n_docs or (np.diff(r) <= 0).any():
        raise ValueError(f"rows must be strictly ascending document rows in 0..{n_docs - 1}")
    return r


def topk_inner(
    queries: Any,
    docs: Any,
    k: int,
    *,
    rows: np.ndarray | None = None,
    doc_block: int = DOC_BLOCK,
    query_block: int = QUERY_BLOCK,
) -> tuple[np.ndarray, np.ndarray]:
    """Each query's exact top ``k`` documents by float64 inner product, documents in blocks.

    Args:
        queries: ``(nq, d)`` array.
        docs: ``(n, d)`` array or memmap, read ``doc_block`` rows at a time.
        k: cut-off, at least 1.
        rows: strictly ascending document rows to search (a subsample; None: all).
        doc_block: documents per block.
        query_block: queries per score block.

    Returns:
        ``(ids, scores)``: ``(nq, min(k, n used))`` int64 document rows and
        float64 scores, best first, ties by ascending row.

    Raises:
        ValueError: arrays of the wrong shape, a non-finite value, or ``k < 1``.
    """
    q = _f64(_matrix(queries, "queries"), "queries")
    _matrix(docs, "docs", q.shape[1])
    if isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    if rows is not None:
        rows = _check_rows(rows, docs.shape[0])
    n_used = docs.shape[0] if rows is None else len(rows)
    k = min(int(k), n_used)
    run_s = np.full((len(q), k), -np.inf)
    run_i = np.full((len(q), k), -1, dtype=np.int64)
    for first, d in _doc_blocks(docs, rows, doc_block):
        for a in range(0, len(q), query_block):
            b = slice(a, a + query_block)
            run_s[b], run_i[b] = _update(run_s[b], run_i[b], q[b] @ d.T, first, k)
    ids = run_i if rows is None else np.asarray(rows, dtype=np.int64)[run_i]
    return ids, run_s


def _used(docs: Any, rows: np.ndarray | None, sample: int | None, seed: int) -> dict[str, Any]:
    """What the output says of the documents it used."""
    n = int(docs.shape[0])
    return {
        "n_docs": n,
        "docs_used": n if rows is None else len(rows),
        "sampled": rows is not None,
        "sample": sample,
        "seed": seed,
    }


def nn_similarity_ratio(
    queries: Any, docs: Any, controls: Any, *, sample: int | None = None, seed: int = 0
) -> dict[str, Any]:
    """How close the queries sit to the documents, against control queries.

    Args:
        queries: ``(nq, d)`` cross-modal queries in the aligned space.
        docs: ``(n, d)`` the indexed documents (array or memmap).
        controls: ``(nc, d)`` in-distribution queries of the indexed modality.
        sample: use a seeded subsample of this many documents (None: all).
        seed: seed of the subsample.

    Returns:
        ``{"ratio", "median_query", "median_control", "n_queries",
        "n_controls", "n_docs", "docs_used", "sampled", "sample", "seed"}``:
        ``median_*`` the median over queries of the best inner product to
        any used document, ``ratio`` their quotient (None when the control
        median is not positive: the quotient would not read as closeness).

    Raises:
        ValueError: arrays of the wrong shape or a non-finite value.
    """
    q = _matrix(queries, "queries")
    c = _matrix(controls, "controls", q.shape[1])
    _matrix(docs, "docs", q.shape[1])
    rows = _sample_rows(docs.shape[0], sample, seed)
    _, best = topk_inner(np.concatenate([np.asarray(q), np.asarray(c)]), docs, 1, rows=rows)
    mq = float(np.median(best[: len(q), 0]))
    mc = float(np.median(best[len(q) :, 0]))
    return {
        "ratio": mq / mc if mc > 0 else None,
        "median_query": mq,
        "median_control": mc,
        "n_queries": len(q),
        "n_controls": len(c),
        **_used(docs, rows, sample, seed),
    }


def _assign(docs: Any, rows: np.ndarray | None, cents: np.ndarray) -> np.ndarray:
    """Each used document's list: its max-inner-product centroid (ties: the lowest)."""
    out = np.empty(docs.shape[0] if rows is None else len(rows), dtype=np.int64)
    for first, d in _doc_blocks(docs, rows, DOC_BLOCK):
        out[first : first + len(d)] = (d @ cents.T).argmax(axis=1)
    return out


def _share(q: np.ndarray, docs: Any, rows: Any, lists: np.ndarray, cents: Any, p: int, k: int):
    """Per query, the share of its exact top-k whose list is among its ``p`` nearest."""
    ids, _ = topk_inner(q, docs, k, rows=rows)
    pos = ids if rows is None else np.searchsorted(rows, ids)  # position among used docs
    out = np.empty(len(q))
    for a in range(0, len(q), QUERY_BLOCK):
        probed = _block_top(q[a : a + QUERY_BLOCK] @ cents.T, p)
        got = lists[pos[a : a + QUERY_BLOCK]]
        out[a : a + QUERY_BLOCK] = (got[:, :, None] == probed[:, None, :]).any(axis=2).mean(axis=1)
    return out


def ivf_list_share(
    queries: Any,
    docs: Any,
    centroids: Any,
    nprobe: int,
    k: int = 10,
    *,
    controls: Any,
    sample: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """The share of each query's true top-k that lies in its ``nprobe`` nearest IVF lists.

    Each document belongs to the list of its max-inner-product centroid; a
    query's nearest lists are its ``nprobe`` max-inner-product centroids
    (ties: lowest list). The share is the recall@k an exact-in-list IVF
    search at ``nprobe`` reaches (IVF-Flat), found without building or
    searching one.

    Args:
        queries: ``(nq, d)`` cross-modal queries.
        docs: ``(n, d)`` documents (array or memmap).
        centroids: ``(nlist, d)`` the IVF centroids (the index's own, or :func:`ivf_centroids`).
        nprobe: lists visited, in ``1..nlist``.
        k: cut-off of the true top-k.
        controls: ``(nc, d)`` control queries.
        sample: use a seeded subsample of this many documents (None: all).
        seed: seed of the subsample.

    Returns:
        ``{"queries", "controls", "ratio", "nprobe", "k", "nlist", "n_queries",
        "n_controls", "n_docs", "docs_used", "sampled", "sample", "seed"}``:
        the mean shares, their quotient (None when the control share is 0).

    Raises:
        ValueError: arrays of the wrong shape, a non-finite value, ``nprobe``
            outside ``1..nlist`` or ``k < 1``.
    """
    q = _f64(_matrix(queries, "queries"), "queries")
    c = _f64(_matrix(controls, "controls", q.shape[1]), "controls")
    cents = _f64(_matrix(centroids, "centroids", q.shape[1]), "centroids")
    _matrix(docs, "docs", q.shape[1])
    if isinstance(nprobe, bool) or not 1 <= nprobe <= len(cents):
        raise ValueError(f"nprobe must be in [1, {len(cents)}] (the lists), got {nprobe!r}")
    if isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    rows = _sample_rows(docs.shape[0], sample, seed)
    lists = _assign(docs, rows, cents)
    share = _share(np.concatenate([q, c]), docs, rows, lists, cents, int(nprobe), int(k))
    sq, sc = float(share[: len(q)].mean()), float(share[len(q) :].mean())
    return {
        "queries": sq,
        "controls": sc,
        "ratio": sq / sc if sc > 0 else None,
        "nprobe": int(nprobe),
        "k": int(k),
        "nlist": len(cents),
        "n_queries": len(q),
        "n_controls": len(c),
        **_used(docs, rows, sample, seed),
    }


def ivf_centroids(
    docs: Any, nlist: int, *, iters: int = 10, sample: int | None = None, seed: int = 0
) -> np.ndarray:
    """Spherical k-means centroids, as FAISS trains an inner-product IVF index (float64).

    Lloyd's iterations on the (sub)sampled documents: assign by max inner
    product, each centroid the normalised mean of its documents; an empty
    list takes a random document.

    Args:
        docs: ``(n, d)`` documents (array or memmap).
        nlist: number of lists, at most the documents used.
        iters: Lloyd's iterations.
        sample: train on a seeded subsample of this many documents (None: all,
            held in memory as float64; FAISS trains on at most 256 per list).
        seed: seed of the subsample, the start and the reseeding.

    Returns:
        ``(nlist, d)`` float64 unit centroids.

    Raises:
        ValueError: ``nlist`` outside ``1..documents used``.
    """
    _matrix(docs, "docs")
    rows = _sample_rows(docs.shape[0], sample, seed)
    x = _f64(docs[:] if rows is None else docs[rows], "docs")
    if isinstance(nlist, bool) or not 1 <= nlist <= len(x):
        raise ValueError(f"nlist must be in [1, {len(x)}] (the documents used), got {nlist!r}")
    rng = np.random.default_rng(seed)
    cents = x[rng.choice(len(x), size=int(nlist), replace=False)].copy()
    for _ in range(iters):
        lists = _assign(x, None, cents)
        member = sparse.csr_matrix(
            (np.ones(len(x)), (lists, np.arange(len(x)))), shape=(len(cents), len(x))
        )
        sums = np.asarray(member @ x)
        counts = np.bincount(lists, minlength=len(cents))
        empty = np.flatnonzero(counts == 0)
        sums[empty] = x[rng.choice(len(x), size=len(empty), replace=False)]
        norms = np.linalg.norm(sums, axis=1, keepdims=True)
        cents = sums / np.where(norms > 0, norms, 1.0)
    return cents
