"""Local CKA (Maniparambil et al., CVPR 2024), factorised into an inner product.

A base set holds n support pairs ``(X_b, Y_b)``. To score a query image x
against a candidate text y, each is appended to its own base set, ``X' = [x;
X_b]``, ``Y' = [y; Y_b]`` (``m = n + 1`` rows), and CKA is computed with
``H = I - 11'/m``::

    HSIC(K, L) = sum((H K H) * (H L H)) = tr(K H L H)
    CKA(x, y)  = HSIC(K', L') / sqrt(HSIC(K', K') HSIC(L', L'))

with linear Grams ``K' = X'X'^T`` or RBF Grams ``exp(-||a - b||^2 / (2 sigma^2))``.

Both kernels factorise exactly into ``<f(x), g(y)>``, so the space can be
indexed with metric IP (derivations in :class:`LocalCKA`). Unlike upstream,
the RBF width is fixed once per side from the base set (upstream re-estimates
it on every (n+1)-point set, which makes the score depend on the query in a
way that cannot be indexed).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
from scipy.optimize import linear_sum_assignment

from imsearch_align.framework.registry import METHODS
from imsearch_align.framework.validation import check_int, check_matrix
from imsearch_align.methods.base import AlignmentBase, support_moments

__all__ = ["LocalCKA", "hungarian_match"]

# Items per block of the direct (O(m^2) per item) similarity: about 64 MiB of Grams.
_DIRECT_BLOCK_BYTES = 64 * 1024**2
#: A linear CKA fitted on more base pairs than this drops the base set after
#: fitting (its transforms need only the moments; at Flickr30k's N = 29,000
#: the base is 127 MiB), and ``similarity`` (the literal definition, ``m^2``
#: per item) is then unavailable.
_KEEP_BASE_MAX = 4096


def hungarian_match(score_matrix: Any) -> np.ndarray:
    """One-to-one assignment maximising the total score (Hungarian algorithm).

    Args:
        score_matrix: ``(n_queries, n_candidates)`` scores, higher is better.

    Returns:
        ``(n_queries,)`` int64: the candidate column assigned to each query,
        ``-1`` for queries left unassigned (when there are more queries than
        candidates).
    """
    S = check_matrix(score_matrix, "score_matrix", dtype=np.float64)
    rows, cols = linear_sum_assignment(S, maximize=True)
    out = np.full(S.shape[0], -1, dtype=np.int64)
    out[rows] = cols
    return out


def _sq_dists(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Squared Euclidean distances ``(len(A), len(B))``, clipped at 0."""
    d = (A * A).sum(1)[:, None] + (B * B).sum(1)[None, :] - 2.0 * (A @ B.T)
    return np.maximum(d, 0.0)


def _median_sigma(B: np.ndarray, name: str) -> float:
    """``sqrt(median of the nonzero squared pairwise distances)`` of the base set."""
    d = _sq_dists(B, B)
    iu = np.triu_indices(len(B), 1)
    nz = d[iu][d[iu] > 0]
    if nz.size == 0:
        raise ValueError(f"{name}: all base points are identical, the RBF width is undefined")
    return float(np.sqrt(np.median(nz)))


@METHODS.register("cka")
class LocalCKA(AlignmentBase):
    r"""Local CKA over a base set of support pairs, linear or RBF.

    Similarity: ``CKA([x; X_b], [y; Y_b])`` by the definition in the module
    docstring (``similarity`` builds the ``(n+1)^2`` Grams literally).

    **Linear kernel** (``d_y + 2`` dims). With base means ``mu``, centred base
    ``Xc, Yc``, ``u = x - mu_x``, ``v = y - mu_y``, ``a = n/(n+1)``: centring
    ``[x; X_b]`` on its own mean gives rows ``a u`` and ``Xc_i - u/(n+1)``, so
    ``X'c^T Y'c = C + a u v^T`` with ``C = Xc^T Yc``, and HSIC of linear Grams is
    ``||X'c^T Y'c||_F^2``::

        HSIC(K', L') = ||C||^2 + 2a u^T C v + a^2 ||u||^2 ||v||^2
        HSIC(K', K') = ||S_x + a u u^T||^2,  S_x = Xc^T Xc    (the base scatter, d_x x d_x)
        HSIC(L', L') = ||S_y + a v v^T||^2,  S_y = Yc^T Yc    (d_y x d_y)
        f(x) = [||C||^2, 2a C^T u, a^2 ||u||^2] / ||S_x + a u u^T||_F
        g(y) = [1, v, ||v||^2] / ||S_y + a v v^T||_F,   CKA = <f(x), g(y)>

    with ``||S + a u u^T||^2 = ||S||^2 + 2a u^T S u + a^2 ||u||^4``. CKA is
    invariant to scaling either side, so each side is pre-scaled to
    ``||S||_F = 1``: it keeps the float32 vectors well scaled.

    **RBF kernel** (``n + 1`` dims), ``sigma`` per side fixed at fit as
    ``sqrt(median nonzero squared distance)`` of the base set. Let ``k_x =
    k(x, X_b)``, ``s_x = 1'k_x``, ``r = K_b 1``, ``T_K = 1'K_b 1`` (and ``l_y,
    s_y, q = L_b 1, T_L`` for text). Since ``k(x, x) = 1`` and
    ``tr(K H L H) = sum(K*L) - (2/m)(K1)'(L1) + (1'K1)(1'L1)/m^2``::

        HSIC(K', L') = alpha(x)' l_y + beta(x)
        alpha(x) = 2(1 - 1/m) k_x - (2/m) r + (2/m)((1 + 2 s_x + T_K)/m - 1 - s_x) 1
        beta(x)  = 1 + <K_b, L_b> - (2/m)(1 + s_x + k_x'q + r'q) + (1 + 2 s_x + T_K)(1 + T_L)/m^2
        f(x) = [alpha(x), beta(x)] / sqrt(HSIC(K', K')),  g(y) = [l_y, 1] / sqrt(HSIC(L', L'))

    (the reference study's third coordinate ``s_y = 1'l_y`` is linear in
    ``l_y`` and is folded into ``alpha``). ``HSIC(K', K')`` is the same
    expansion with ``L = K``.

    Args:
        kernel: ``"linear"`` or ``"rbf"``.
        base_size: support pairs in the base set, in ``[2, N]``; ``None``
            uses all of them.
        seed: seed of the random base subset (used when ``base_size < N``).

    Attributes:
        base_index_: indices of the base pairs in the support set.
        base_image_, base_text_: the base set (``None`` for a linear kernel
            with more than 4,096 base pairs: its state is the moments, and
            :meth:`similarity` then raises).
        sigma_image_, sigma_text_: RBF widths (``rbf`` only).
    """

    #: The inner product of the two factorised sides is the CKA score itself
    #: (rows are not unit-norm: their norms carry the HSIC normalisation).
    cosine_output: ClassVar[bool] = False

    def __init__(self, kernel: str = "linear", *, base_size: int | None = None, seed: int = 0):
        self.kernel = kernel
        self.base_size = base_size
        self.seed = seed

    # ------------------------------------------------------------------ fit
    def _validate_params(self, X: np.ndarray, Y: np.ndarray) -> None:
        if self.kernel not in ("linear", "rbf"):
            raise ValueError(f"kernel must be 'linear' or 'rbf', got {self.kernel!r}")
        n = X.shape[0]
        if n < 2:
            raise ValueError(f"LocalCKA needs at least 2 support pairs, got {n}")
        if self.base_size is not None:
            b = check_int(self.base_size, "base_size")
            if not 2 <= b <= n:
                raise ValueError(
                    f"base_size must be None or in [2, {n}] (the number of support pairs), got {b}"
                )
        check_int(self.seed, "seed")

    def _fit_float64(self) -> bool:
        return self.kernel != "linear"  # linear CKA is fitted from float64 moments, blockwise

    def _fit(self, X: np.ndarray, Y: np.ndarray) -> None:
        n = X.shape[0]
        if self.base_size is None or int(self.base_size) == n:
            idx = np.arange(n)
        else:
            rng = np.random.default_rng(int(self.seed))
            idx = np.sort(rng.choice(n, size=int(self.base_size), replace=False))
        self.base_index_ = idx
        whole = len(idx) == n  # the whole support set is the base: keep it, do not copy it
        self.base_image_ = X if whole else X[idx]
        self.base_text_ = Y if whole else Y[idx]
        if self.kernel == "linear":
            self._fit_linear()
            self._text_dim = int(Y.shape[1])
            if len(idx) > _KEEP_BASE_MAX:
                self.base_image_ = self.base_text_ = None  # the moments are the state
        else:
            self._fit_rbf()

    def _fit_linear(self) -> None:
        mom = support_moments(self.base_image_, self.base_text_)
        scales = []
        for K, name in ((mom.Kxx, "image_emb"), (mom.Kyy, "text_emb")):
            s = np.linalg.norm(K)
            if s == 0:
                raise ValueError(f"{name}: the base set is constant; linear CKA is undefined")
            scales.append(np.sqrt(s))  # ||S(V/c)|| = ||S(V)||/c^2 = 1
        cx, cy = scales
        self._mu_x, self._mu_y, self._cx, self._cy = mom.mean_x, mom.mean_y, cx, cy
        self._C = mom.Kxy / (cx * cy)
        self._Sx = mom.Kxx / (cx * cx)
        self._Sy = mom.Kyy / (cy * cy)
        self._a = mom.n / (mom.n + 1.0)

    def _fit_rbf(self) -> None:
        self.sigma_image_ = _median_sigma(self.base_image_, "image_emb")
        self.sigma_text_ = _median_sigma(self.base_text_, "text_emb")
        Kb = self._rbf(self.base_image_, self.base_image_, self.sigma_image_)
        Lb = self._rbf(self.base_text_, self.base_text_, self.sigma_text_)
        self._Kb, self._Lb = Kb, Lb
        self._r, self._q = Kb.sum(1), Lb.sum(1)
        self._TK, self._TL = float(self._r.sum()), float(self._q.sum())
        self._KL = float((Kb * Lb).sum())

    @staticmethod
    def _rbf(A: np.ndarray, B: np.ndarray, sigma: float) -> np.ndarray:
        return np.exp(-_sq_dists(A, B) / (2.0 * sigma * sigma))

    def _output_dim(self) -> int:
        if self.kernel == "linear":
            return self._text_dim + 2
        return int(len(self.base_index_) + 1)

    # ------------------------------------------------------------ transform
    def _transform_images(self, X: np.ndarray) -> np.ndarray:
        if self.kernel == "linear":
            a = self._a
            U = (X - self._mu_x) / self._cx
            uu = (U * U).sum(1)
            D2 = 1.0 + 2.0 * a * ((U @ self._Sx) * U).sum(1) + a * a * uu * uu
            F = np.empty((len(X), self._C.shape[1] + 2))
            F[:, 0] = (self._C * self._C).sum()
            F[:, 1:-1] = 2.0 * a * (U @ self._C)
            F[:, -1] = a * a * uu
            return (F / np.sqrt(D2)[:, None]).astype(np.float32)
        m = len(self.base_index_) + 1.0
        k = self._rbf(X, self.base_image_, self.sigma_image_)
        s = k.sum(1)
        tot = 1.0 + 2.0 * s + self._TK
        alpha = 2.0 * (1.0 - 1.0 / m) * k - (2.0 / m) * self._r[None, :]
        alpha += ((2.0 / m) * (tot / m - 1.0 - s))[:, None]
        beta = (
            1.0
            + self._KL
            - (2.0 / m) * (1.0 + s + k @ self._q + self._r @ self._q)
            + tot * (1.0 + self._TL) / m**2
        )
        D = np.sqrt(self._self_hsic_rbf(k, self._Kb, self._r, self._TK))
        return (np.column_stack([alpha, beta]) / D[:, None]).astype(np.float32)

    def _transform_texts(self, Y: np.ndarray) -> np.ndarray:
        if self.kernel == "linear":
            a = self._a
            V = (Y - self._mu_y) / self._cy
            vv = (V * V).sum(1)
            E2 = 1.0 + 2.0 * a * ((V @ self._Sy) * V).sum(1) + a * a * vv * vv
            G = np.column_stack([np.ones(len(Y)), V, vv])
            return (G / np.sqrt(E2)[:, None]).astype(np.float32)
        ly = self._rbf(Y, self.base_text_, self.sigma_text_)
        E = np.sqrt(self._self_hsic_rbf(ly, self._Lb, self._q, self._TL))
        G = np.column_stack([ly, np.ones(len(Y))])
        return (G / E[:, None]).astype(np.float32)

    def _self_hsic_rbf(self, k: np.ndarray, Kb: np.ndarray, r: np.ndarray, T: float) -> np.ndarray:
        """``HSIC(K', K')`` of ``[item; base]`` for each row of ``k = k(item, base)``."""
        m = len(self.base_index_) + 1.0
        s = k.sum(1)
        kr = k + r[None, :]
        return (
            1.0
            + 2.0 * (k * k).sum(1)
            + (Kb * Kb).sum()
            - (2.0 / m) * ((1.0 + s) ** 2 + (kr * kr).sum(1))
            + (1.0 + 2.0 * s + T) ** 2 / m**2
        )

    # ----------------------------------------------------------- definition
    def _centred_grams(self, V: np.ndarray, base: np.ndarray, sigma: float | None) -> np.ndarray:
        """``H K' H`` flattened, one row per item: ``(len(V), m*m)``, literally."""
        m = len(base) + 1
        H = np.eye(m) - 1.0 / m
        out = np.empty((len(V), m * m))
        for i, v in enumerate(V):
            P = np.vstack([v[None, :], base])
            K = P @ P.T if sigma is None else self._rbf(P, P, sigma)
            out[i] = (H @ K @ H).ravel()
        return out

    def _similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        if self.base_image_ is None:
            raise ValueError(
                f"similarity builds the (m+1)^2 Grams of the definition over the base set, "
                f"which a linear LocalCKA with more than {_KEEP_BASE_MAX:,} base pairs does "
                f"not keep (this one has {len(self.base_index_):,}); expected base_size <= "
                f"{_KEEP_BASE_MAX:,} to compare against the definition"
            )
        sx = None if self.kernel == "linear" else self.sigma_image_
        sy = None if self.kernel == "linear" else self.sigma_text_
        m = len(self.base_index_) + 1
        step = max(1, _DIRECT_BLOCK_BYTES // (8 * m * m))
        out = np.empty((len(X), len(Y)))
        for j0 in range(0, len(Y), step):
            Lc = self._centred_grams(Y[j0 : j0 + step], self.base_text_, sy)
            ln = np.linalg.norm(Lc, axis=1)
            for i0 in range(0, len(X), step):
                Kc = self._centred_grams(X[i0 : i0 + step], self.base_image_, sx)
                kn = np.linalg.norm(Kc, axis=1)
                out[i0 : i0 + step, j0 : j0 + step] = (Kc @ Lc.T) / np.outer(kn, ln)
        return out

    def match(self, score_matrix: Any) -> np.ndarray:
        """Hungarian one-to-one matching over a candidate set (see :func:`hungarian_match`)."""
        return hungarian_match(score_matrix)
