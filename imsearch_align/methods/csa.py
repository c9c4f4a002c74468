"""CSA: Canonical Similarity Analysis (Li, Chinchali, Topcu, ICLR 2025).

Fit (on N support pairs)::

    mu_x, mu_y = means of the support sides; Xc = X - mu_x, Yc = Y - mu_y   (centred once)
    Kxx = Xc'Xc/(N-1) + lam_x I,  Kyy = Yc'Yc/(N-1) + lam_y I,  Kxy = Xc'Yc/(N-1)
    Kxx^-1/2 Kxy Kyy^-1/2 = U diag(rho) V'                         (SVD, float64)
    W_x = Kxx^-1/2 U[:, :r],  W_y = Kyy^-1/2 V[:, :r]                (r = sim_dim)

``lam = eps * trace(K)/d`` is a ridge relative to each side's mean variance,
so ``eps`` does not depend on the embeddings' units. ``rho`` are the
(ridge-)canonical correlations, sorted descending, in ``[0, 1]``.

The default ``eps=None`` adds a ridge only when it is needed: plain CSA
(``eps = 1e-8``, a round-off guard) when the support covariance is
invertible, and ridge CCA with ``eps =`` :data:`AUTO_EPS` ``= 0.1`` when it
is not (fewer support pairs than dimensions, or collinear features). The
value used is ``eps_``. 0.1 was chosen on synthetic pairs with an
anisotropic (decaying) spectrum like real embeddings', where it was within
5% of the best of ``{1e-3 ... 3}`` for N in 100-600 pairs of 384/256-d
vectors (text-to-image R@1 0.49-0.99, chance 0.002); on isotropic noise a
larger ridge does better, so pass ``eps`` explicitly to tune it.

Score (``weighted_corr_sim`` upstream), with ``z = W'(x - mu)``::

    sim(x, y) = sum_{i<=s} rho_i zx_i zy_i / (||zx[:s]|| ||zy[:s]||)

Index form: ``f(x) = sqrt(rho) * zx/||zx||``, ``g(y) = sqrt(rho) * zy/||zy||``,
so ``<f(x), g(y)> = sim(x, y)``. The vectors are not unit-norm: index them with
metric IP, not COSINE.

Deliberate differences from upstream code (see the reference study): the
support is centred once (the MMA benchmark centres twice), and the image side
uses ``Kxx^-1/2 U`` (upstream ``ReNormalizedCCA`` applies ``U' Kxx^-1/2``).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from imsearch_align.framework.optional import require
from imsearch_align.framework.registry import METHODS
from imsearch_align.framework.validation import check_int
from imsearch_align.methods.base import AlignmentBase, Moments, l2_normalize, support_moments

__all__ = ["AUTO_EPS", "CSA", "DEFAULT_SIM_DIM", "MIN_EPS_RANK_DEFICIENT", "PLAIN_EPS"]

#: Components kept when ``sim_dim`` is not given (capped by the data's rank).
#: Canonical correlations below this share of the largest are the null space of the
#: whitened cross-covariance (rounding of zero): directions there are arbitrary.
SPAN_RTOL = 1e-9
DEFAULT_SIM_DIM = 256

#: With fewer support pairs than dimensions, the support covariance is
#: singular and the whitening divides by (near) zero. We then require a ridge
#: at least this large (relative to the mean variance) so the fit is a
#: deliberate, regularised (ridge) CCA rather than numerical noise.
MIN_EPS_RANK_DEFICIENT = 1e-3

#: The ridge of the default (``eps=None``) when the covariance is singular (module docstring).
AUTO_EPS = 0.1

#: The ridge of the default when the covariance is invertible: a round-off guard only.
PLAIN_EPS = 1e-8

# Relative eigenvalue floor below which an unregularised covariance counts as singular.
_SINGULAR_RTOL = 1e-12


class _Singular(ValueError):
    """A support covariance is singular even with the ridge asked for."""


def _inv_sqrt_psd(evals: np.ndarray, evecs: np.ndarray, lam: float, name: str) -> np.ndarray:
    """``(K + lam I)^-1/2`` from the eigendecomposition ``K = V diag(evals) V'``."""
    e = evals + lam
    top = float(e[-1]) if e.size else 0.0
    if _is_singular(e):
        raise _Singular(
            f"{name}: the support covariance is singular (smallest eigenvalue "
            f"{float(e[0]):.3g}, largest {top:.3g}: collinear or constant features); "
            f"pass eps >= {MIN_EPS_RANK_DEFICIENT:g} to regularise, or leave eps unset"
        )
    return (evecs * (1.0 / np.sqrt(e))) @ evecs.T


def _is_singular(evals: np.ndarray) -> bool:
    top = float(evals[-1]) if evals.size else 0.0
    return top <= 0 or float(evals[0]) <= _SINGULAR_RTOL * top


def _fix_signs(Wx: np.ndarray, Wy: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flip column pairs so the largest-|.| entry of each ``ref`` column is positive.

    Canonical directions are defined up to a joint sign; fixing it makes the
    fitted state deterministic (scores do not depend on it).
    """
    idx = np.argmax(np.abs(ref), axis=0)
    signs = np.sign(ref[idx, np.arange(ref.shape[1])])
    signs[signs == 0] = 1.0
    return Wx * signs, Wy * signs


@METHODS.register("csa")
class CSA(AlignmentBase):
    """Canonical Similarity Analysis: CCA, then a correlation-weighted cosine.

    Similarity (see the module docstring for the fit)::

        sim(x, y) = sum_{i<=s} rho_i zx_i zy_i / (||zx[:s]|| ||zy[:s]||),
        z = W'(v - mu), s = sim_dim

    Args:
        sim_dim: number of canonical components kept, both the CCA rank and
            the similarity's dimensions ``s``. Must be in
            ``[1, min(d_image, d_text, N - 1)]``; ``None`` (default) takes
            ``min(256, d_image, d_text, N - 1)``, resolved at fit as ``sim_dim_``.
        eps: ridge added to each side's covariance, relative to its mean
            variance (``lam = eps * trace(K)/d``). None (default): only when
            needed, ``1e-8`` (plain CSA, a round-off guard) when the
            covariance is invertible and :data:`AUTO_EPS` ``= 0.1`` (ridge
            CCA) when it is singular: fewer support pairs than dimensions
            (``N <= max(d_image, d_text)``) or collinear features. An explicit
            value is used as given; below ``1e-3`` it must leave the
            covariance invertible, else :meth:`fit` raises.
        equal_weights: use ``rho = 1`` in the score (an unweighted cosine of
            the canonical variates).
        backend: ``"numpy"`` (whitening + SVD in float64) or ``"cca_zoo"``
            (``cca_zoo.linear.CCA``, for cross-checking; ignores ``eps``).

    Attributes:
        mean_image_, mean_text_: support means.
        weights_image_, weights_text_: ``(d, sim_dim)`` canonical weights,
            ``W' K W = I`` on the support.
        canonical_correlations_: ``(sim_dim,)`` correlations, descending.
        sim_dim_: the number of components actually used.
        eps_: the ridge actually used (``eps``, or what the default chose).
        rho_: the weights used in the score (``canonical_correlations_`` or ones).
    """

    #: Rows are unit-norm canonical scores scaled by sqrt(rho) per dimension:
    #: the inner product is the correlation-weighted cosine, not a cosine of rows.
    cosine_output: ClassVar[bool] = False

    def __init__(
        self,
        sim_dim: int | None = None,
        *,
        eps: float | None = None,
        equal_weights: bool = False,
        backend: str = "numpy",
    ) -> None:
        self.sim_dim = sim_dim
        self.eps = eps
        self.equal_weights = equal_weights
        self.backend = backend

    # ------------------------------------------------------------------ fit
    def _validate_params(self, X: np.ndarray, Y: np.ndarray) -> None:
        n, dx = X.shape
        dy = Y.shape[1]
        if self.backend not in ("numpy", "cca_zoo"):
            raise ValueError(f"backend must be 'numpy' or 'cca_zoo', got {self.backend!r}")
        if self.eps is not None:
            if isinstance(self.eps, bool) or not isinstance(self.eps, int | float | np.floating):
                raise TypeError(f"eps must be a float >= 0 or None, got {type(self.eps).__name__}")
            if not (np.isfinite(self.eps) and self.eps >= 0):
                raise ValueError(f"eps must be a finite float >= 0 or None, got {self.eps!r}")
        d_max = max(dx, dy)
        # Centred support data has rank <= N - 1, so each covariance is
        # singular unless N - 1 >= d.
        self._rank_deficient = n - 1 < d_max
        if self._rank_deficient:
            side = "image_emb" if dx >= dy else "text_emb"
            if self.backend == "cca_zoo" or (
                self.eps is not None and self.eps < MIN_EPS_RANK_DEFICIENT
            ):
                fix = (
                    f"pass eps >= {MIN_EPS_RANK_DEFICIENT:g} to regularise, or leave eps unset "
                    f"(the default adds a ridge of {AUTO_EPS:g} when needed; ridge CCA, numpy "
                    "backend)"
                )
                raise ValueError(
                    f"CCA needs more support pairs than dimensions: got {n} pairs but "
                    f"{side} has dimension {d_max} (the covariance is singular); "
                    f"use more pairs, {fix}, or reduce the input dimension "
                    f"(and use sim_dim <= {max(n - 1, 0)})"
                )
        high = min(dx, dy, n - 1)
        if high < 1:
            raise ValueError(f"CSA needs at least 2 support pairs, got {n}")
        sim_dim = (
            min(DEFAULT_SIM_DIM, high)
            if self.sim_dim is None
            else check_int(self.sim_dim, "sim_dim")
        )
        if not 1 <= sim_dim <= high:
            hint = ""
            if high == n - 1 and n - 1 < min(dx, dy):
                hint = " (fewer support pairs than dimensions: use a smaller sim_dim or more pairs)"
            raise ValueError(
                f"sim_dim must be in [1, {high}] (min(d_image, d_text, N - 1) with "
                f"d_image={dx}, d_text={dy}, N={n}), got {sim_dim}{hint}"
            )
        self.sim_dim_ = sim_dim

    def _fit_float64(self) -> bool:
        return self.backend != "numpy"  # cca_zoo takes whole arrays; numpy works on moments

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        r = self.sim_dim_
        if self.backend == "numpy":
            mom = support_moments(X, Y)
            mu_x, mu_y = mom.mean_x, mom.mean_y
            Wx, Wy, rho = self._fit_numpy(mom, r)
        else:
            mu_x, mu_y = X.mean(axis=0), Y.mean(axis=0)
            Wx, Wy, rho = self._fit_cca_zoo(X, Y, r)
            self.eps_ = 0.0  # cca_zoo's own (unregularised) CCA
        self.mean_image_ = mu_x
        self.mean_text_ = mu_y
        self.weights_image_ = Wx
        self.weights_text_ = Wy
        self.canonical_correlations_ = rho
        self.rho_ = np.ones_like(rho) if self.equal_weights else rho.copy()

    def _fit_numpy(self, mom: Moments, r: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = mom.n
        Kxx, Kyy, Kxy = mom.Kxx / (n - 1), mom.Kyy / (n - 1), mom.Kxy / (n - 1)

        # One eigendecomposition per side serves every ridge: K + lam I shares K's vectors.
        eig = [np.linalg.eigh(K) for K in (Kxx, Kyy)]
        mean_var = [np.trace(K) / K.shape[0] for K in (Kxx, Kyy)]

        def whiten(eps: float) -> tuple[np.ndarray, np.ndarray]:
            Ax, Ay = (
                _inv_sqrt_psd(ev, V, eps * mv, name)
                for (ev, V), mv, name in zip(eig, mean_var, ("image_emb", "text_emb"))
            )
            return Ax, Ay

        if self.eps is not None:
            eps = float(self.eps)
        elif self._rank_deficient or any(_is_singular(ev) for ev, _ in eig):
            eps = AUTO_EPS  # needed: the covariance has no inverse
        else:
            eps = PLAIN_EPS
        Ax, Ay = whiten(eps)
        self.eps_ = eps
        U, s, Vt = np.linalg.svd(Ax @ Kxy @ Ay, full_matrices=False)
        r = self._spanned(s, r)
        U, V = U[:, :r], Vt[:r].T
        U, V = _fix_signs(U, V, U)
        rho = np.clip(s[:r], 0.0, 1.0)
        return Ax @ U, Ay @ V, rho

    def _spanned(self, s: np.ndarray, r: int) -> int:
        """``r``, at most the canonical directions the support set really spans.

        Past the rank of the whitened cross-covariance (repeated images span
        fewer directions than there are pairs) the singular vectors are an
        arbitrary null-space basis that each BLAS kernel chooses differently,
        and they still count in each row's norm. ``sim_dim=None`` stops at that
        rank; a larger explicit ``sim_dim`` is refused naming it.
        """
        spanned = int(np.count_nonzero(s > SPAN_RTOL * s[0])) if len(s) and s[0] > 0 else 0
        self.spanned_dim_ = spanned
        if r <= spanned:
            return r
        if self.sim_dim is not None:
            raise ValueError(
                f"sim_dim={r}: the support set spans {spanned} canonical directions (repeated "
                "items count once); a direction past them is an arbitrary null-space vector "
                f"that differs by BLAS kernel; use sim_dim <= {spanned} or sim_dim=None"
            )
        self.sim_dim_ = max(spanned, 1)
        return self.sim_dim_

    def _fit_cca_zoo(
        self, X: np.ndarray, Y: np.ndarray, r: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        cca_zoo = require("cca_zoo.linear", "cca", "CSA(backend='cca_zoo')", needs="cca-zoo>=4")
        model = cca_zoo.CCA(n_components=r).fit([X, Y])
        Wx = np.asarray(model.weights_[0], dtype=np.float64)
        Wy = np.asarray(model.weights_[1], dtype=np.float64)
        # Only the weights are used: cca_zoo's transform needs equal row counts.
        Zx = (X - X.mean(axis=0)) @ Wx
        Zy = (Y - Y.mean(axis=0)) @ Wy
        sx = np.linalg.norm(Zx, axis=0)
        sy = np.linalg.norm(Zy, axis=0)
        sx[sx == 0] = 1.0
        sy[sy == 0] = 1.0
        corr = np.einsum("ij,ij->j", Zx, Zy) / (sx * sy)
        # Scale to W'KW = I and orient each pair so its correlation is >= 0.
        scale = np.sqrt(X.shape[0] - 1)
        Wx = Wx * (scale / sx)
        Wy = Wy * (scale / sy) * np.where(corr < 0, -1.0, 1.0)
        rho = np.clip(np.abs(corr), 0.0, 1.0)
        order = np.argsort(-rho, kind="stable")
        Wx, Wy, rho = Wx[:, order], Wy[:, order], rho[order]
        Wx, Wy = _fix_signs(Wx, Wy, Wx)
        return Wx, Wy, rho

    def _output_dim(self) -> int:
        return int(self.sim_dim_)

    # ------------------------------------------------------------ transform
    def _index_vectors(self, V: np.ndarray, mu: np.ndarray, W: np.ndarray) -> np.ndarray:
        z = l2_normalize((V - mu) @ W)
        return (z * np.sqrt(self.rho_)).astype(np.float32)

    def _transform_images(self, X: np.ndarray) -> np.ndarray:
        return self._index_vectors(X, self.mean_image_, self.weights_image_)

    def _transform_texts(self, Y: np.ndarray) -> np.ndarray:
        return self._index_vectors(Y, self.mean_text_, self.weights_text_)

    def _similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        zx = (X - self.mean_image_) @ self.weights_image_
        zy = (Y - self.mean_text_) @ self.weights_text_
        nx = np.linalg.norm(zx, axis=1)
        ny = np.linalg.norm(zy, axis=1)
        num = (zx * self.rho_) @ zy.T
        den = np.outer(nx, ny)
        return np.divide(num, den, out=np.zeros_like(num), where=den > 0)

    def canonical_variates(self, X: Any, Y: Any) -> tuple[np.ndarray, np.ndarray]:
        """Un-normalised canonical variates ``(W_x'(X - mu_x), W_y'(Y - mu_y))`` in float64."""
        Xv = self._check_input(X, "X", "image", self._fitted_dim("image"))
        Yv = self._check_input(Y, "Y", "text", self._fitted_dim("text"))
        return (Xv - self.mean_image_) @ self.weights_image_, (
            Yv - self.mean_text_
        ) @ self.weights_text_
