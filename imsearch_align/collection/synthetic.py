"""Synthetic distractors that look like the encoder's own embeddings.

:class:`MixtureModel` is fitted to a dataset's raw support embeddings: a
k-means of the support rows, then for each cluster its mean, the top ``rank``
principal directions of its members with their variances (a low-rank
covariance) and an isotropic residual variance carrying the rest of the
cluster's spread (so the total within-cluster variance is kept). Draws from
it share the real encoder's cone (the common mean direction) and cluster
structure, which a zero-mean mixture of nearly orthogonal centres does not
(there IVF recall is near 1 at any setting). When the support rows are unit
norm, so are the draws.

:class:`SyntheticSource` serves ``n_rows`` draws as a
:class:`~imsearch_align.collection.sources.DistractorSource`. Rows are made
in fixed chunks of :data:`CHUNK_ROWS`, chunk ``j`` from the seed
``(seed, j)``, so row ``i`` is the same whatever block size reads it, and
the same seed gives the same rows. :meth:`SyntheticSource.components` gives
the mixture component each row was drawn from (the same seeded draw, made
again without the rest of the row), and :attr:`MixtureModel.assignments` the
component of each support row the model was fitted to: together they give a
distractor the label of its component
(:mod:`~imsearch_align.collection.label_filter`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imsearch_align.collection.checks import DistractorError
from imsearch_align.collection.sources import DISTRACTOR_ID_BASE, DistractorSource

__all__ = ["CHUNK_ROWS", "MixtureModel", "SyntheticSource"]

#: Rows generated per seeded chunk (the generator's own peak: one chunk).
CHUNK_ROWS = 4096


@dataclass(frozen=True, eq=False)
class MixtureModel:
    """A Gaussian mixture with low-rank-plus-isotropic covariances.

    Attributes:
        weights: ``(K,)`` component probabilities.
        means: ``(K, d)`` component means.
        bases: ``(K, r, d)`` orthonormal principal directions (zero rows
            where a component has fewer than ``r``).
        scales: ``(K, r)`` standard deviations along them.
        residual: ``(K,)`` isotropic standard deviation of the rest.
        normalize: whether draws are scaled to unit norm (the support was).
        encoder: the support's encoder id, if known.
        assignments: ``(n,)`` the component of each support row given to
            :meth:`fit` (``-1``: a row left out of the fitted sample); None
            for a model not fitted here. Not a parameter of the draws (not
            in :attr:`fingerprint`).
    """

    weights: np.ndarray
    means: np.ndarray
    bases: np.ndarray
    scales: np.ndarray
    residual: np.ndarray
    normalize: bool
    encoder: str | None = None
    assignments: np.ndarray | None = field(default=None, repr=False)

    @property
    def dim(self) -> int:
        """Dimension of the draws."""
        return int(self.means.shape[1])

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex, 16 chars) of the parameters: names the model in records."""
        h = hashlib.sha256(b"MixtureModel/1;")
        for a in (self.weights, self.means, self.bases, self.scales, self.residual):
            h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
        h.update(b"n" if self.normalize else b"-")
        return h.hexdigest()[:16]

    @classmethod
    def fit(
        cls,
        support: Any,
        *,
        n_components: int | None = None,
        rank: int = 8,
        seed: int = 0,
        normalize: bool | None = None,
        max_rows: int = 50_000,
        encoder: str | None = None,
    ) -> MixtureModel:
        """Fit to ``(n, d)`` raw support embeddings.

        Args:
            support: the dataset's raw support rows of one modality.
            n_components: k-means clusters; default ``clip(n // 50, 1, 64)``.
            rank: principal directions per component.
            seed: seeds the row sample and k-means.
            normalize: draw unit-norm rows; default: when every support row
                has norm within 1e-3 of 1.
            max_rows: at most this many support rows (a seeded sample) are fitted.
            encoder: the support's encoder id (recorded, compared by
                :func:`~imsearch_align.collection.checks.check_compatible`).
        """
        from sklearn.cluster import KMeans

        X = np.asarray(support, dtype=np.float64)
        if X.ndim != 2 or X.shape[0] < 2 or not np.isfinite(X).all():
            raise DistractorError(
                f"MixtureModel.fit: expected finite (n >= 2, d) support embeddings, got shape "
                f"{X.shape}" + ("" if X.ndim != 2 or np.isfinite(X).all() else " with NaN/inf")
            )
        rng = np.random.default_rng(seed)
        rows = np.arange(X.shape[0])
        if X.shape[0] > max_rows:
            rows = np.sort(rng.choice(X.shape[0], max_rows, replace=False))
            X = X[rows]
        assignments = np.full(len(np.asarray(support)), -1, dtype=np.int32)
        n, d = X.shape
        K = int(np.clip(n // 50, 1, 64)) if n_components is None else int(n_components)
        if not 1 <= K <= n:
            raise DistractorError(f"MixtureModel.fit: n_components must be in [1, {n}], got {K}")
        if normalize is None:
            normalize = bool(np.all(np.abs(np.linalg.norm(X, axis=1) - 1) < 1e-3))
        labels = KMeans(n_clusters=K, n_init=3, random_state=seed).fit_predict(X)
        r = int(max(0, min(rank, d - 1)))
        means = np.zeros((K, d))
        bases = np.zeros((K, r, d))
        scales = np.zeros((K, r))
        residual = np.zeros(K)
        counts = np.bincount(labels, minlength=K).astype(np.float64)
        for j in range(K):
            M = X[labels == j]
            means[j] = M.mean(axis=0)
            C = M - means[j]
            if len(M) < 2:
                continue
            _, s, vt = np.linalg.svd(C, full_matrices=False)
            var = s**2 / len(M)
            m = min(r, len(var))
            bases[j, :m], scales[j, :m] = vt[:m], np.sqrt(var[:m])
            residual[j] = np.sqrt(max(var[m:].sum(), 0.0) / max(d - m, 1))
        # A singleton cluster borrows the mean residual (it has no spread of its own).
        lone = counts < 2
        if lone.any() and (~lone).any():
            residual[lone] = residual[~lone].mean()
        assignments[rows] = labels
        w = counts / counts.sum()
        return cls(w, means, bases, scales, residual, normalize, encoder, assignments)

    def draw_components(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """The component of each of ``n`` draws: the first draw :meth:`sample` makes from ``rng``."""
        return rng.choice(len(self.weights), size=n, p=self.weights)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``(n, d)`` float32 draws from ``rng``."""
        comp = self.draw_components(n, rng)
        r = self.scales.shape[1]
        z = rng.standard_normal((n, r)) * self.scales[comp]
        out = self.means[comp]
        # one product per component: gathering every row's basis, (n, r, d), would
        # hold n r d floats (1.3 GB for 4,096 rows, rank 32, 1,280 dimensions)
        for c in np.unique(comp):
            rows = np.flatnonzero(comp == c)
            out[rows] += z[rows] @ self.bases[c]
        out += rng.standard_normal((n, self.dim)) * self.residual[comp, None]
        if self.normalize:
            out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-300)
        return out.astype(np.float32)


class SyntheticSource(DistractorSource):
    """``n_rows`` seeded draws of a :class:`MixtureModel`, generated chunk by chunk.

    Args:
        model: the fitted mixture.
        n_rows: rows to serve.
        seed: row ``i`` depends only on ``seed`` and ``i``.
        id_base: first id of the reserved range.
        modality: ``"image"`` or ``"text"``, if known.
    """

    def __init__(
        self,
        model: MixtureModel,
        n_rows: int,
        *,
        seed: int = 0,
        id_base: int = DISTRACTOR_ID_BASE,
        modality: str | None = None,
    ) -> None:
        if isinstance(n_rows, bool) or not isinstance(n_rows, int | np.integer) or n_rows < 0:
            raise DistractorError(
                f"SyntheticSource: n_rows must be an integer >= 0, got {n_rows!r}"
            )
        self.model, self._n, self.seed = model, int(n_rows), int(seed)
        self.id_base, self.modality, self.encoder = int(id_base), modality, model.encoder
        self.name = f"synthetic:{model.fingerprint}:seed{self.seed}"
        self._chunk: tuple[int, np.ndarray] | None = None
        self._checked = True  # draws are finite and non-zero by construction

    @property
    def total_rows(self) -> int:
        return self._n

    @property
    def dim(self) -> int:
        return self.model.dim

    def _chunk_rows(self, j: int) -> np.ndarray:
        if self._chunk is None or self._chunk[0] != j:
            n = min(CHUNK_ROWS, self._n - j * CHUNK_ROWS)
            self._chunk = None
            self._chunk = (j, self.model.sample(n, np.random.default_rng([self.seed, j])))
        return self._chunk[1]

    def components(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The mixture component each row ``[start, stop)`` was drawn from (int64).

        Chunk ``j``'s components are the first draw of its seeded generator,
        made again here without drawing the rows (cheap: one draw per row).
        """
        stop = self.n_rows if stop is None else int(stop)
        if not 0 <= start <= stop <= self.n_rows:
            raise ValueError(f"components: need 0 <= start <= stop <= {self.n_rows}")
        parts = []
        for j in range(start // CHUNK_ROWS, -(-stop // CHUNK_ROWS)):
            n = min(CHUNK_ROWS, self._n - j * CHUNK_ROWS)
            comp = self.model.draw_components(n, np.random.default_rng([self.seed, j]))
            lo = max(start - j * CHUNK_ROWS, 0)
            parts.append(comp[lo : min(stop - j * CHUNK_ROWS, n)])
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def _read(self, start: int, stop: int) -> np.ndarray:
        out = np.empty((stop - start, self.dim), dtype=np.float32)
        at = start
        while at < stop:
            j = at // CHUNK_ROWS
            a = at - j * CHUNK_ROWS
            b = min(stop - j * CHUNK_ROWS, CHUNK_ROWS)
            out[at - start : at - start + b - a] = self._chunk_rows(j)[a:b]
            at += b - a
        return out

    def record(self) -> dict[str, Any]:
        """As :meth:`DistractorSource.record`, with the model's fingerprint and the seed."""
        return {
            **super().record(),
            "model": self.model.fingerprint,
            "components": len(self.model.weights),
            "seed": self.seed,
        }
