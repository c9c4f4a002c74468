"""``diagnose``: the whole geometry set of one paired space, assembled into a flat dict.

It calls each room in turn (gap and alignment, separability, one Gram scan per
modality for uniformity and the k-NN entropy, the union's uniformity) and
records what it skipped and how long each took.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from imsearch_align.diagnostics.geometry.entropy import _EXTRA_CANDIDATES, _entropy_of_candidates
from imsearch_align.diagnostics.geometry.gap import alignment, modality_gap
from imsearch_align.diagnostics.geometry.normalization import _pair
from imsearch_align.diagnostics.geometry.scan import _cross_lse, _self_scan
from imsearch_align.diagnostics.geometry.separability import modality_separability
from imsearch_align.diagnostics.geometry.uniform import _check_t, _log_n_pairs
from imsearch_align.framework.validation import check_int, is_sparse

__all__ = ["diagnose"]


def diagnose(
    image_emb: Any,
    text_emb: Any,
    *,
    seed: int,
    k: int = 5,
    t: float = 2.0,
    svm_max_pairs: int | None = 10_000,
    max_dense_elements: int = 1 << 26,
    chunk_size: int | None = None,
    progress: bool = False,
) -> dict[str, Any]:
    """The geometry set for one paired space (raw or aligned), as a flat dict.

    Keys (floats unless said): ``n``, ``d`` (ints); ``gap``,
    ``gap_cos_centroids``, ``image_centroid_norm``, ``text_centroid_norm``;
    ``separability_accuracy``, ``separability_precision``,
    ``separability_recall``, ``separability_n_train`` (int);
    ``alignment`` (alpha = 2); ``uniformity_image``, ``uniformity_text``,
    ``uniformity_union`` (t); ``entropy_image``, ``entropy_text``,
    ``entropy_image_relative``, ``entropy_text_relative``,
    ``log_sphere_area``, ``entropy_k`` (int), ``entropy_duplicates`` (int);
    ``skipped`` (dict name -> reason); ``seconds`` (dict name -> wall time).

    Sparse input (ASIF's relative representations) is densified when
    ``n * d <= max_dense_elements`` per modality. Larger sparse spaces get the
    gap, alignment, separability (sparse SVM) and uniformity (sparse Gram
    chunks). The k-NN entropy of a sparse space is skipped with a reason,
    whatever its size: those vectors are non-negative and k-sparse in R^M,
    far from the locally uniform sphere the estimator and its
    ``log |S^(M-1)|`` reference assume.
    """
    t = _check_t(t)
    k = check_int(k, "k", low=1)
    sparse_input = is_sparse(image_emb) or is_sparse(text_emb)
    x, y = _paired_space(image_emb, text_emb, max_dense_elements)
    n, d = x.shape
    out: dict[str, Any] = {"n": int(n), "d": int(d), "skipped": {}, "seconds": {}}
    _gap_and_alignment(out, x, y)
    _separability(out, x, y, seed=seed, max_pairs=svm_max_pairs)
    lse = _scans(
        out, x, y, k=k, t=t, sparse_input=sparse_input, chunk_size=chunk_size, progress=progress
    )
    if len(lse) == 2:
        t0 = time.perf_counter()
        total = np.logaddexp.reduce([lse["image"], lse["text"], _cross_lse(x, y, t, chunk_size)])
        out["uniformity_union"] = float(total - _log_n_pairs(2 * n))
        out["seconds"]["uniformity_union"] = time.perf_counter() - t0
    return out


def _paired_space(image_emb: Any, text_emb: Any, max_dense_elements: int) -> tuple[Any, Any]:
    """Both modalities' rows L2-normalised: a sparse space of at most
    ``max_dense_elements`` cells per modality densified, a larger one as CSR."""
    sparse = is_sparse(image_emb) or is_sparse(text_emb)
    if sparse:
        shape = image_emb.shape
        if shape[0] * shape[1] <= max_dense_elements:
            image_emb = image_emb.toarray() if is_sparse(image_emb) else image_emb
            text_emb = text_emb.toarray() if is_sparse(text_emb) else text_emb
            sparse = False
    x, y = _pair(image_emb, text_emb, allow_sparse=True)
    if sparse:
        import scipy.sparse as sp

        x, y = sp.csr_matrix(x), sp.csr_matrix(y)
    return x, y


def _gap_and_alignment(out: dict[str, Any], x: Any, y: Any) -> None:
    """Record the modality gap, its centroids and the alignment (alpha = 2) in ``out``."""
    t0 = time.perf_counter()
    g = modality_gap(x, y)
    out.update(
        gap=g.gap,
        gap_cos_centroids=g.cos_centroids,
        image_centroid_norm=g.image_centroid_norm,
        text_centroid_norm=g.text_centroid_norm,
        alignment=alignment(x, y),
    )
    out["seconds"]["gap_alignment"] = time.perf_counter() - t0


def _separability(out: dict[str, Any], x: Any, y: Any, *, seed: int, max_pairs: int | None) -> None:
    """Record the SVM separability of the modalities in ``out`` (skipped below 2 pairs)."""
    n = x.shape[0]
    t0 = time.perf_counter()
    if n >= 2:
        s = modality_separability(x, y, seed=seed, max_pairs=max_pairs)
        out.update(
            separability_accuracy=s.accuracy,
            separability_precision=s.precision,
            separability_recall=s.recall,
            separability_n_train=s.n_train,
        )
    else:
        out["skipped"]["separability"] = f"needs at least 2 pairs, got {n}"
    out["seconds"]["separability"] = time.perf_counter() - t0


def _scans(
    out: dict[str, Any],
    x: Any,
    y: Any,
    *,
    k: int,
    t: float,
    sparse_input: bool,
    chunk_size: int | None,
    progress: bool,
) -> dict[str, float]:
    """Record each modality's uniformity and, for a dense space, its k-NN entropy.

    One Gram pass per modality serves both. Returns each scanned modality's
    logsumexp over its pairs (the union's uniformity reuses them).
    """
    n = x.shape[0]
    want_knn = not sparse_input and n >= k + 1
    if not want_knn:
        out["skipped"]["entropy"] = (
            "sparse space: k-sparse non-negative vectors are not locally uniform on "
            "S^(d-1), so the spherical k-NN entropy is not meaningful"
            if sparse_input
            else f"needs at least k + 1 = {k + 1} points, got {n}"
        )
    m = min(k + _EXTRA_CANDIDATES, n - 1)
    lse: dict[str, float] = {}
    for name, u in (("image", x), ("text", y)):
        t0 = time.perf_counter()
        if n < 2:
            out["skipped"]["uniformity"] = f"needs at least 2 points, got {n}"
            break
        lse[name], cand = _self_scan(
            u, t=t, n_neighbors=m if want_knn else None, chunk_size=chunk_size, progress=progress
        )
        out[f"uniformity_{name}"] = lse[name] - _log_n_pairs(n)
        if want_knn:
            e = _entropy_of_candidates(u, cand, k, chunk_size)
            out[f"entropy_{name}"] = e.entropy
            out[f"entropy_{name}_relative"] = e.relative
            out["log_sphere_area"] = e.log_sphere_area
            out["entropy_duplicates"] = out.get("entropy_duplicates", 0) + e.n_duplicates
            out["entropy_k"] = k
        out["seconds"][f"scan_{name}"] = time.perf_counter() - t0
    return lse
