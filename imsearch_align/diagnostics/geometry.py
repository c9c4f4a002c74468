"""Geometry of one image-text embedding space: gap, separability, uniformity, entropy.

Every function works on **L2-normalised** rows (the unit sphere S^(d-1)).
Policy for unnormalised input: rows are normalised and a
:class:`NormalizationWarning` is issued (once per call and argument) when any
row norm differs from 1 by more than ``1e-3``; a row of norm 0 cannot be
normalised and raises ``ValueError``. Aligned spaces (CSA, local CKA) are
inner-product spaces whose vectors are not unit length, so refusing would make
the diagnostics unusable on them; the warning class lets a runner silence it
deliberately (``warnings.simplefilter("ignore", NormalizationWarning)``).

Computation dtype follows the input: float64 input is computed in float64,
anything else in float32 (the Gram matrix products); sums of exponentials,
logs and the k-NN distances are always accumulated in float64.

Definitions (n pairs ``x_i`` image, ``y_i`` text, dimension d):

* modality gap (Liang et al., 2022): ``||mean(x) - mean(y)||_2``.
* separability: **our definition** (the paper has no SVM): a linear
  soft-margin SVM (hinge loss, C = 1) separating images (0) from texts (1),
  trained and tested on a split by pair index, so a pair never straddles
  train and test; held-out accuracy, precision and recall (text positive).
* uniformity (Wang & Isola, 2020): ``log mean_{i<j} exp(-t ||u_i - u_j||^2)``;
  alignment: ``mean_i ||x_i - y_i||^alpha``.
* spherical k-NN entropy (Kozachenko-Leonenko on the sphere; Li, Mnatsakanov
  & Andrew, Entropy 13:650, 2011): ``psi(N) - psi(k) + mean_i log A_d(theta_i)``
  in nats, ``theta_i`` the geodesic angle to the k-th neighbour.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import betaln, digamma

from imsearch_align.framework.validation import check_int, check_matrix, is_sparse

__all__ = [
    "EntropyResult",
    "GapResult",
    "NormalizationWarning",
    "SeparabilityResult",
    "alignment",
    "diagnose",
    "linear_separability",
    "log_cap_area",
    "log_sphere_area",
    "modality_gap",
    "modality_separability",
    "spherical_knn_entropy",
    "uniformity",
    "unit_rows",
]

#: Row norms further than this from 1 trigger the normalisation warning.
NORM_TOL = 1e-3
#: Bytes one Gram chunk may take; bounds memory of the pairwise scans.
_CHUNK_BYTES = 1 << 28
#: Column block width of the blocked top-k (see ``_topk_rows``).
_BLOCK = 64
#: Extra k-NN candidates re-ranked by exact float64 distances, so a neighbour
#: that float32 dot products misorder by rounding is still found.
_EXTRA_CANDIDATES = 3


class NormalizationWarning(UserWarning):
    """Input rows were not unit length and have been L2-normalised."""


# --------------------------------------------------------------------------- input


def unit_rows(x: Any, name: str, *, allow_sparse: bool = False, min_rows: int = 1) -> Any:
    """Validate ``x`` and return its rows L2-normalised (the package's policy).

    Dense input comes back as float64 if it was float64, else float32; sparse
    input (only with ``allow_sparse``) as float64 CSR. Warns with
    :class:`NormalizationWarning` when some row norm differs from 1 by more
    than ``1e-3``; raises ``ValueError`` for a zero row.
    """
    dtype = np.float64 if getattr(x, "dtype", None) == np.float64 or is_sparse(x) else np.float32
    m = check_matrix(x, name, allow_sparse=allow_sparse, dtype=dtype, min_rows=min_rows)
    if is_sparse(m):
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
    else:
        norms = np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float64))
    zero = np.flatnonzero(norms == 0)
    if zero.size:
        raise ValueError(f"{name} row {int(zero[0])} has norm 0 and cannot be L2-normalised")
    dev = np.abs(norms - 1.0)
    if dev.max(initial=0.0) > NORM_TOL:
        worst = int(np.argmax(dev))
        warnings.warn(
            f"{name} rows are not L2-normalised (row {worst} has norm {norms[worst]:.6g}); "
            "normalising them",
            NormalizationWarning,
            stacklevel=3,
        )
    if is_sparse(m):
        import scipy.sparse as sp

        return sp.csr_matrix(sp.diags(1.0 / norms) @ m)
    return (m / norms[:, None].astype(m.dtype)).astype(dtype, copy=False)


def _pair(x: Any, y: Any, *, allow_sparse: bool = False) -> tuple[Any, Any]:
    xu = unit_rows(x, "image_emb", allow_sparse=allow_sparse)
    yu = unit_rows(y, "text_emb", allow_sparse=allow_sparse)
    if xu.shape != yu.shape:
        raise ValueError(
            f"image_emb and text_emb must be paired row by row with the same shape, "
            f"got {xu.shape} and {yu.shape}"
        )
    return xu, yu


def _chunk_rows(n_cols: int, chunk_size: int | None) -> int:
    if chunk_size is not None:
        return check_int(chunk_size, "chunk_size", low=1)
    return max(1, _CHUNK_BYTES // (8 * max(n_cols, 1)))


# --------------------------------------------------------------------------- gap


@dataclass(frozen=True)
class GapResult:
    """Modality gap of one space (Liang et al., 2022).

    Attributes:
        gap: ``||mean(x) - mean(y)||_2`` over normalised rows.
        cos_centroids: cosine between the two centroids (nan if one is 0).
        image_centroid_norm: ``||mean(x)||`` (1 = all images identical, cone concentration).
        text_centroid_norm: ``||mean(y)||``.
    """

    gap: float
    cos_centroids: float
    image_centroid_norm: float
    text_centroid_norm: float


def modality_gap(image_emb: Any, text_emb: Any) -> GapResult:
    """Centroid distance between the two modalities on the unit sphere.

    Accepts dense arrays or scipy sparse matrices (rows normalised first).
    """
    x, y = _pair(image_emb, text_emb, allow_sparse=True)
    mx = np.asarray(x.mean(axis=0), dtype=np.float64).ravel()
    my = np.asarray(y.mean(axis=0), dtype=np.float64).ravel()
    nx, ny = float(np.linalg.norm(mx)), float(np.linalg.norm(my))
    cos = float(mx @ my / (nx * ny)) if nx > 0 and ny > 0 else float("nan")
    return GapResult(float(np.linalg.norm(mx - my)), cos, nx, ny)


def alignment(image_emb: Any, text_emb: Any, *, alpha: float = 2.0) -> float:
    """Wang & Isola's ``L_align = mean_i ||x_i - y_i||_2^alpha`` (in [0, 2^alpha]).

    The difference is taken directly, not as ``2 - 2 cos``, to keep precision
    for well-aligned pairs. Accepts dense or sparse rows.
    """
    if not alpha > 0:
        raise ValueError(f"alpha must be > 0, got {alpha!r}")
    x, y = _pair(image_emb, text_emb, allow_sparse=True)
    if is_sparse(x) or is_sparse(y):
        import scipy.sparse as sp

        diff = sp.csr_matrix(x) - sp.csr_matrix(y)
        sq = np.asarray(diff.multiply(diff).sum(axis=1), dtype=np.float64).ravel()
    else:
        diff = x.astype(np.float64) - y.astype(np.float64)
        sq = np.einsum("ij,ij->i", diff, diff)
    return float(np.mean(sq ** (alpha / 2.0)))


# --------------------------------------------------------------------------- separability


@dataclass(frozen=True)
class SeparabilityResult:
    """Held-out quality of a linear SVM separating two classes.

    Attributes:
        accuracy: held-out accuracy (0.5 = chance for balanced modalities).
        precision: precision of class 1 (text) on the test split.
        recall: recall of class 1 (text) on the test split.
        n_train: training rows used.
        n_test: test rows used.
    """

    accuracy: float
    precision: float
    recall: float
    n_train: int
    n_test: int


def linear_separability(
    features: Any,
    labels: Any,
    *,
    groups: Any = None,
    seed: int,
    test_size: float = 0.5,
    C: float = 1.0,
) -> SeparabilityResult:
    """Fit a linear soft-margin SVM (hinge loss) and report held-out quality.

    Uses scikit-learn's ``LinearSVC(loss="hinge", dual=True)``; note that
    liblinear also regularises the intercept, a negligible difference from
    libsvm's ``SVC(kernel="linear")`` that scales to tens of thousands of rows.

    Args:
        features: ``(n, d)`` dense or sparse matrix.
        labels: ``n`` binary labels in {0, 1}; both classes must be present.
        groups: optional ``n`` group ids; the split is by group (a group never
            straddles train and test).
        seed: seed of the split and the solver.
        test_size: fraction of groups (or rows) held out, in (0, 1).
        C: SVM regularisation (soft margin).
    """
    from sklearn.metrics import accuracy_score, precision_score, recall_score
    from sklearn.svm import LinearSVC

    X = check_matrix(features, "features", allow_sparse=True, dtype=np.float64)
    y = np.asarray(labels)
    if y.shape != (X.shape[0],):
        raise ValueError(f"labels must have shape ({X.shape[0]},), got {y.shape}")
    classes = np.unique(y)
    if len(classes) < 2:
        raise ValueError(f"labels must contain two classes, got a single class {classes.tolist()}")
    if not set(classes.tolist()) <= {0, 1}:
        raise ValueError(f"labels must be 0 or 1, got classes {classes.tolist()}")
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size!r}")
    if not C > 0:
        raise ValueError(f"C must be > 0, got {C!r}")
    g = np.arange(len(y)) if groups is None else np.asarray(groups)
    if g.shape != y.shape:
        raise ValueError(f"groups must have shape {y.shape}, got {g.shape}")
    uniq = np.unique(g)
    if len(uniq) < 2:
        raise ValueError(f"need at least 2 groups to split train/test, got {len(uniq)}")
    rng = np.random.default_rng(seed)
    n_test = min(max(1, round(test_size * len(uniq))), len(uniq) - 1)
    test_groups = rng.permutation(uniq)[:n_test]
    test = np.isin(g, test_groups)
    ytr = y[~test]
    if len(np.unique(ytr)) < 2:
        raise ValueError("the training split holds a single class; use more groups or another seed")
    clf = LinearSVC(C=C, loss="hinge", dual=True, max_iter=20000, random_state=seed)
    with warnings.catch_warnings():
        # Non-separable data stop at max_iter; the held-out scores still say
        # how separable the classes are, which is what is measured.
        warnings.simplefilter("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*converge.*")
        clf.fit(X[~test], ytr)
    pred = clf.predict(X[test])
    yte = y[test]
    return SeparabilityResult(
        accuracy=float(accuracy_score(yte, pred)),
        precision=float(precision_score(yte, pred, zero_division=0)),
        recall=float(recall_score(yte, pred, zero_division=0)),
        n_train=int((~test).sum()),
        n_test=int(test.sum()),
    )


def modality_separability(
    image_emb: Any,
    text_emb: Any,
    *,
    seed: int,
    max_pairs: int | None = 10_000,
    test_size: float = 0.5,
    C: float = 1.0,
) -> SeparabilityResult:
    """How linearly separable images (0) are from texts (1): our definition.

    Pairs are split by pair index (``test_size`` of them held out, seeded), so
    an image and its caption are always on the same side. With more than
    ``max_pairs`` pairs, a seeded subsample of ``max_pairs`` pairs is used
    (liblinear's cost grows super-linearly on overlapping classes; 10,000
    pairs estimate an accuracy to about +-0.007 at 95%). ``None`` uses all.
    Identical modalities give exactly 0.5 (each test point appears with both
    labels).
    """
    x, y = _pair(image_emb, text_emb, allow_sparse=True)
    n = x.shape[0]
    idx = np.arange(n)
    if max_pairs is not None:
        check_int(max_pairs, "max_pairs", low=2)
        if n > max_pairs:
            idx = np.sort(np.random.default_rng(seed).choice(n, max_pairs, replace=False))
    if is_sparse(x):
        import scipy.sparse as sp

        feats = sp.vstack([x[idx], y[idx]]).tocsr()
    else:
        feats = np.vstack([x[idx], y[idx]])
    m = len(idx)
    labels = np.r_[np.zeros(m, np.int64), np.ones(m, np.int64)]
    groups = np.r_[idx, idx]
    return linear_separability(feats, labels, groups=groups, seed=seed, test_size=test_size, C=C)


# --------------------------------------------------------------------------- pairwise scans


def _lse_update_inplace(acc: tuple[float, float], G: np.ndarray, t: float) -> tuple[float, float]:
    """Fold ``logsumexp(-t ||u_i - u_j||^2)`` over the entries of ``G`` into ``acc``.

    ``G`` holds inner products of unit vectors (``-inf`` marks excluded
    entries) and is overwritten: on the sphere ``-t ||u_i - u_j||^2 = 2t (g - 1)``,
    so with ``g_max`` the largest entry the block contributes
    ``2t (g_max - 1) + log sum exp(2t (g - g_max))``. In-place passes avoid a
    fresh ``chunk x n`` temporary per operation (allocation dominated the time).
    ``acc`` is ``(max, sum exp(. - max))``, a streaming logsumexp in float64.
    """
    if G.size == 0:
        return acc
    gmax = float(G.max())
    if gmax == -np.inf:
        return acc
    G -= G.dtype.type(gmax)
    G *= G.dtype.type(2.0 * t)
    np.exp(G, out=G)
    s = float(G.sum(axis=1, dtype=np.float64).sum())
    m = 2.0 * t * (gmax - 1.0)
    am, asum = acc
    if m > am:
        return m, asum * math.exp(am - m) + s
    return am, asum + s * math.exp(m - am)


def _lse_value(acc: tuple[float, float]) -> float:
    m, s = acc
    return m + math.log(s) if s > 0 else -np.inf


class _Gram:
    """Row chunks of ``rows @ cols.T`` into one reused buffer (dense or sparse)."""

    def __init__(self, cols: Any, rows_per: int, dtype: Any) -> None:
        self.cols = cols
        self.colsT = None if is_sparse(cols) else cols.T
        self.buf = np.empty((rows_per, cols.shape[0]), dtype)

    def __call__(self, rows: Any) -> np.ndarray:
        out = self.buf[: rows.shape[0]]
        if is_sparse(rows) or self.colsT is None:
            out[...] = (rows @ self.cols.T).toarray()
        else:
            np.matmul(rows, self.colsT, out=out)
        return out


def _topk_rows(G: np.ndarray, m: int) -> np.ndarray:
    """Column indices of the ``m`` largest entries of each row (unordered).

    Blocked selection: the ``m`` largest entries of a row lie in the ``m``
    blocks (of ``_BLOCK`` columns) with the largest block maxima, so a cheap
    max-reduction narrows ``argpartition`` from n columns to ``m * _BLOCK``
    (``argpartition`` over full rows cost 20x more here).
    ``G``'s width must be a multiple of ``_BLOCK``.
    """
    r, w = G.shape
    nb = w // _BLOCK
    blocks = G.reshape(r, nb, _BLOCK)
    if nb > m:
        bmax = blocks.max(axis=2)
        top_b = np.argpartition(bmax, nb - m, axis=1)[:, nb - m :]
    else:
        top_b = np.broadcast_to(np.arange(nb), (r, nb))
    rows = np.arange(r)[:, None]
    cand = blocks[rows, top_b].reshape(r, -1)
    cols = (top_b[:, :, None] * _BLOCK + np.arange(_BLOCK)).reshape(r, -1)
    sel = np.argpartition(cand, cand.shape[1] - m, axis=1)[:, -m:]
    return np.take_along_axis(cols, sel, axis=1)


def _gram_dtype(u: Any) -> Any:
    return np.float64 if is_sparse(u) else u.dtype


def _self_scan(
    u: Any, *, t: float | None, n_neighbors: int | None, chunk_size: int | None, progress: bool
) -> tuple[float | None, np.ndarray | None]:
    """One pass over the Gram matrix of ``u`` in row chunks.

    Returns the logsumexp over ``i < j`` of ``-t ||u_i - u_j||^2`` (if ``t``)
    and the ``n_neighbors`` nearest-by-dot candidates of each row, self
    excluded (if ``n_neighbors``). Memory: one ``(chunk, n)`` block.
    """
    n = u.shape[0]
    pad = (-n) % _BLOCK if n_neighbors else 0
    if is_sparse(u):
        import scipy.sparse as sp

        cols = sp.vstack([u, sp.csr_matrix((pad, u.shape[1]))]).tocsr() if pad else u
    else:
        cols = np.vstack([u, np.zeros((pad, u.shape[1]), u.dtype)]) if pad else u
    rows_per = _chunk_rows(n + pad, chunk_size)
    gram = _Gram(cols, min(rows_per, n), _gram_dtype(u))
    acc = (-np.inf, 0.0)
    cand = np.empty((n, n_neighbors), np.int64) if n_neighbors else None
    starts = range(0, n, rows_per)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="pairwise scan", unit="chunk", leave=False)
    for a in starts:
        b = min(a + rows_per, n)
        G = gram(u[a:b])
        if n_neighbors:
            G[np.arange(b - a), np.arange(a, b)] = -np.inf
            if pad:
                G[:, n:] = -np.inf
            cand[a:b] = _topk_rows(G, n_neighbors)
        if t is not None:
            # Keep j > i only: columns a..n, minus the lower triangle (and the
            # diagonal) of the leading square block.
            up = G[:, a:n]
            tri = np.arange(b - a)
            up[:, : b - a][tri[:, None] >= tri[None, :]] = -np.inf
            acc = _lse_update_inplace(acc, up, t)
    return (_lse_value(acc) if t is not None else None), cand


def _cross_lse(x: Any, y: Any, t: float, chunk_size: int | None) -> float:
    """logsumexp over all (i, j) of ``-t ||x_i - y_j||^2``, chunked."""
    rows_per = _chunk_rows(y.shape[0], chunk_size)
    gram = _Gram(y, min(rows_per, x.shape[0]), _gram_dtype(y))
    acc = (-np.inf, 0.0)
    for a in range(0, x.shape[0], rows_per):
        acc = _lse_update_inplace(acc, gram(x[a : a + rows_per]), t)
    return _lse_value(acc)


def _log_n_pairs(n: int) -> float:
    return math.log(n) + math.log(n - 1) - math.log(2.0)


def _check_t(t: float) -> float:
    if not (isinstance(t, int | float | np.floating) and math.isfinite(t) and t > 0):
        raise ValueError(f"t must be a finite number > 0, got {t!r}")
    return float(t)


def uniformity(u: Any, *, t: float = 2.0, chunk_size: int | None = None) -> float:
    """Wang & Isola's ``L_uniform = log mean_{i<j} exp(-t ||u_i - u_j||^2)``.

    Computed as ``logsumexp - log(n(n-1)/2)`` over row chunks of the Gram
    matrix, so no ``n x n`` matrix is held (memory ``chunk x n``). Dense or
    sparse rows; at least 2. For the uniform distribution on S^(d-1) the
    population value is ``-2t + log[Gamma(d/2) t^(1-d/2) I_(d/2-1)(2t)]``
    (-3.9844 at d = 512, t = 2).
    """
    t = _check_t(t)
    uu = unit_rows(u, "u", allow_sparse=True, min_rows=2)
    lse, _ = _self_scan(uu, t=t, n_neighbors=None, chunk_size=chunk_size, progress=False)
    return float(lse - _log_n_pairs(uu.shape[0]))


# --------------------------------------------------------------------------- cap area


def log_sphere_area(d: int) -> float:
    """``log |S^(d-1)|``, the log surface area of the unit sphere in R^d: ``log(2 pi^(d/2) / Gamma(d/2))``."""
    d = check_int(d, "d", low=1)
    return math.log(2.0) + 0.5 * d * math.log(math.pi) - math.lgamma(0.5 * d)


_TINY = 1e-300


def _log_betacf(a: float, b: float, x: np.ndarray) -> np.ndarray:
    """log of the Numerical Recipes ``betacf`` continued fraction (modified Lentz), vectorised."""
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c = np.ones_like(x)
    d = 1.0 - qab * x / qap
    d = np.where(np.abs(d) < _TINY, _TINY, d)
    d = 1.0 / d
    h = d.copy()
    active = np.ones(x.shape, bool)
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        h = np.where(active, h * d * c, h)
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = np.where(np.abs(d) < _TINY, _TINY, d)
        c = 1.0 + aa / c
        c = np.where(np.abs(c) < _TINY, _TINY, c)
        d = 1.0 / d
        delta = d * c
        h = np.where(active, h * delta, h)
        active &= np.abs(delta - 1.0) > 1e-16
        if not active.any():
            return np.log(h)
    raise RuntimeError(f"betacf did not converge for a={a}, b={b}")  # pragma: no cover


def _log_betainc(a: float, b: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``log I_x(a, b)`` with ``y = 1 - x`` passed separately (no cancellation).

    Direct series where the continued fraction converges fast
    (``x < (a+1)/(a+b+2)``), else ``log1p(-I_y(b, a))``.
    """
    out = np.empty_like(x)
    lbeta = betaln(a, b)
    with np.errstate(divide="ignore"):
        direct = x < (a + 1.0) / (a + b + 2.0)
        zero = x <= 0.0
        one = y <= 0.0
        sel = direct & ~zero & ~one
        if sel.any():
            xs, ys = x[sel], y[sel]
            out[sel] = a * np.log(xs) + b * np.log(ys) - lbeta - math.log(a) + _log_betacf(a, b, xs)
        sel = ~direct & ~zero & ~one
        if sel.any():
            xs, ys = x[sel], y[sel]
            log_comp = b * np.log(ys) + a * np.log(xs) - lbeta - math.log(b) + _log_betacf(b, a, ys)
            out[sel] = np.log1p(-np.exp(log_comp))
        out[zero] = -np.inf
        out[one & ~zero] = 0.0
    return out


def log_cap_area(theta: Any, d: int) -> np.ndarray:
    """log area of the spherical cap of geodesic radius ``theta`` on S^(d-1) in R^d.

    ``A_d(theta) = |S^(d-2)| int_0^theta sin^(d-2) s ds``
    ``= |S^(d-1)| / 2 * I_{sin^2 theta}((d-1)/2, 1/2)`` for ``theta <= pi/2`` and
    ``|S^(d-1)| - A_d(pi - theta)`` above. Everything stays in log space
    (log-gamma plus a continued-fraction log incomplete beta), so it is finite
    where ``log(scipy.special.betainc(...))`` underflows to -inf (d = 512,
    ``theta < 0.24``). ``theta = 0`` gives -inf, ``theta = pi`` ``log |S^(d-1)|``.

    Args:
        theta: angle(s) in ``[0, pi]`` (radians), any shape.
        d: ambient dimension, at least 2.
    """
    d = check_int(d, "d", low=2)
    th = np.asarray(theta, dtype=np.float64)
    if th.size and (not np.all(np.isfinite(th)) or th.min() < 0 or th.max() > math.pi):
        raise ValueError(
            f"theta must be in [0, pi], got values in [{np.nanmin(th)}, {np.nanmax(th)}]"
        )
    flat = th.ravel()
    a, b = 0.5 * (d - 1), 0.5
    log_s = log_sphere_area(d)
    small = flat <= 0.5 * math.pi
    ref = np.where(small, flat, math.pi - flat)
    # sin^2 and cos^2 computed separately: 1 - sin^2 near pi/2 would cancel.
    x, y = np.sin(ref) ** 2, np.cos(ref) ** 2
    log_half = log_s - math.log(2.0) + _log_betainc(a, b, x, y)
    out = np.where(small, log_half, 0.0)
    big = ~small
    if big.any():
        with np.errstate(divide="ignore"):
            out[big] = log_s + np.log1p(-np.exp(log_half[big] - log_s))
    return out.reshape(th.shape)


# --------------------------------------------------------------------------- entropy


@dataclass(frozen=True)
class EntropyResult:
    """Spherical k-NN entropy of one set of unit vectors (nats).

    Attributes:
        entropy: ``psi(N) - psi(k) + mean_i log A_d(theta_i)``.
        log_sphere_area: ``log |S^(d-1)|``, the entropy of the uniform law.
        relative: ``entropy - log_sphere_area`` (<= 0 in expectation: the log
            fraction of the sphere the data occupy). Use it comparatively at
            fixed (N, k, d): concentrated data are biased upward.
        n: points used (after removing exact duplicates).
        k: neighbour order.
        d: dimension.
        n_duplicates: exact duplicate rows removed (a zero distance has no log area).
    """

    entropy: float
    log_sphere_area: float
    relative: float
    n: int
    k: int
    d: int
    n_duplicates: int


def _kth_angles(u: np.ndarray, cand: np.ndarray, k: int) -> tuple[np.ndarray, bool]:
    """Exact float64 geodesic angle from each row to its k-th nearest candidate.

    Also says whether some row has a neighbour at distance exactly 0 (a duplicate).
    """
    u64 = u.astype(np.float64, copy=False)
    out = np.empty(len(u64))
    dup = False
    step = max(1, (1 << 24) // (cand.shape[1] * u64.shape[1]))
    for a in range(0, len(u64), step):
        c = cand[a : a + step]
        diff = u64[a : a + step, None, :] - u64[c]
        chord = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        dup = dup or bool((chord == 0.0).any())
        out[a : a + step] = np.partition(chord, k - 1, axis=1)[:, k - 1]
    # theta = 2 arcsin(chord / 2) is exact where arccos(dot) loses digits.
    return 2.0 * np.arcsin(np.minimum(out / 2.0, 1.0)), dup


def spherical_knn_entropy(
    u: Any, *, k: int = 5, chunk_size: int | None = None, progress: bool = False
) -> EntropyResult:
    """Kozachenko-Leonenko entropy estimate on the sphere S^(d-1) (nats).

    ``H = psi(N) - psi(k) + (1/N) sum_i log A_d(theta_i)`` with ``theta_i`` the
    angle to the k-th nearest neighbour, ``2 arcsin(||u_i - u_j|| / 2)`` in
    float64, and ``A_d`` the cap area (:func:`log_cap_area`). Neighbours are
    found by chunked Gram products (float32 for float32 input), then the best
    ``k + 3`` candidates are re-ranked by exact float64 distances. Exact
    duplicate rows are removed first (reported). Dense input only.

    Raises:
        ValueError: fewer than ``k + 1`` (distinct) points.
    """
    k = check_int(k, "k", low=1)
    uu = unit_rows(u, "u")
    n0 = uu.shape[0]
    if n0 < k + 1:
        raise ValueError(f"u must have at least k + 1 = {k + 1} points for k = {k}, got {n0}")
    n_dup = 0
    angles, dup = _knn_angles(uu, k, chunk_size, progress)
    if dup:
        uu = np.unique(uu, axis=0)
        n_dup = n0 - uu.shape[0]
        if uu.shape[0] < k + 1:
            raise ValueError(
                f"u must have at least k + 1 = {k + 1} distinct points for k = {k}, "
                f"got {uu.shape[0]} after removing {n_dup} duplicates"
            )
        angles, _ = _knn_angles(uu, k, chunk_size, progress)
    n, d = uu.shape
    h = float(digamma(n) - digamma(k) + np.mean(log_cap_area(angles, d)))
    ls = log_sphere_area(d)
    return EntropyResult(h, ls, h - ls, n, k, d, n_dup)


def _knn_angles(
    u: np.ndarray, k: int, chunk_size: int | None, progress: bool
) -> tuple[np.ndarray, bool]:
    m = min(k + _EXTRA_CANDIDATES, u.shape[0] - 1)
    _, cand = _self_scan(u, t=None, n_neighbors=m, chunk_size=chunk_size, progress=progress)
    return _kth_angles(u, cand, k)


# --------------------------------------------------------------------------- all at once


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
    sparse = is_sparse(image_emb) or is_sparse(text_emb)
    sparse_input = sparse
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
    n, d = x.shape
    out: dict[str, Any] = {"n": int(n), "d": int(d), "skipped": {}, "seconds": {}}
    secs = out["seconds"]

    t0 = time.perf_counter()
    g = modality_gap(x, y)
    out.update(
        gap=g.gap,
        gap_cos_centroids=g.cos_centroids,
        image_centroid_norm=g.image_centroid_norm,
        text_centroid_norm=g.text_centroid_norm,
        alignment=alignment(x, y),
    )
    secs["gap_alignment"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    if n >= 2:
        s = modality_separability(x, y, seed=seed, max_pairs=svm_max_pairs)
        out.update(
            separability_accuracy=s.accuracy,
            separability_precision=s.precision,
            separability_recall=s.recall,
            separability_n_train=s.n_train,
        )
    else:
        out["skipped"]["separability"] = f"needs at least 2 pairs, got {n}"
    secs["separability"] = time.perf_counter() - t0

    # One Gram pass per modality serves both uniformity and the k-NN search.
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
            angles, dup = _kth_angles(u, cand, k)
            if dup:  # duplicates: the estimator removes them and rescans
                e = spherical_knn_entropy(u, k=k, chunk_size=chunk_size)
            else:
                h = float(digamma(n) - digamma(k) + np.mean(log_cap_area(angles, d)))
                ls = log_sphere_area(d)
                e = EntropyResult(h, ls, h - ls, n, k, d, 0)
            out[f"entropy_{name}"] = e.entropy
            out[f"entropy_{name}_relative"] = e.relative
            out["log_sphere_area"] = e.log_sphere_area
            out["entropy_duplicates"] = out.get("entropy_duplicates", 0) + e.n_duplicates
            out["entropy_k"] = k
        secs[f"scan_{name}"] = time.perf_counter() - t0
    if len(lse) == 2:
        t0 = time.perf_counter()
        total = np.logaddexp.reduce([lse["image"], lse["text"], _cross_lse(x, y, t, chunk_size)])
        out["uniformity_union"] = float(total - _log_n_pairs(2 * n))
        secs["uniformity_union"] = time.perf_counter() - t0
    return out
