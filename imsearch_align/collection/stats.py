"""How a set of embeddings looks: the numbers that tell real-looking distractors
from easy ones, reported beside the real split's.

:func:`describe` draws a seeded sample of rows (from an array, a
:class:`~imsearch_align.collection.sources.DistractorSource` or a
:class:`~imsearch_align.collection.aligned.CollectionBlocks`, streamed in
blocks) and measures on the sample's unit-normalised rows:

* ``mean_cosine``: the mean pairwise cosine (off the diagonal): the cone a
  real encoder puts every embedding in (about 0.55 for MiniLM, 0.64 for
  EfficientNet on the shapes set; 0 for a zero-mean mixture);
* ``spectrum``: the share of the squared singular values held by each of the
  top ``top`` directions (the first is the cone, the next ones the cluster
  structure);
* ``nn_cosine``: quantiles of each sampled row's nearest-neighbour cosine
  within the sample (sizes differ between sets, so the sample size, not the
  set size, fixes the scale).

:func:`side_by_side` puts several of them in one Markdown table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = ["SpaceStats", "describe", "sample_rows", "side_by_side"]

#: Quantiles of the nearest-neighbour cosine that :func:`describe` reports.
QUANTILES = (0.01, 0.1, 0.5, 0.9, 0.99)


@dataclass(frozen=True)
class SpaceStats:
    """Statistics of a sample of embeddings (see the module docstring).

    Attributes:
        n: rows in the set.
        dim: their dimension.
        sample: rows sampled.
        mean_norm: mean L2 norm of the sampled rows (before normalising).
        mean_cosine: mean pairwise cosine of the sample.
        spectrum: share of the squared singular values per top direction.
        nn_cosine: quantile -> nearest-neighbour cosine.
    """

    n: int
    dim: int
    sample: int
    mean_norm: float
    mean_cosine: float
    spectrum: tuple[float, ...]
    nn_cosine: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        d = asdict(self)
        d["spectrum"] = list(self.spectrum)
        return d


def sample_rows(data: Any, sample: int, seed: int) -> tuple[np.ndarray, int]:
    """``(rows, n)``: a seeded sample of ``data``'s rows (in row order) and its size."""
    rng = np.random.default_rng(seed)
    if hasattr(data, "blocks") or hasattr(data, "n_rows"):
        n = int(data.n_rows)
        pick = np.sort(rng.choice(n, min(sample, n), replace=False))
        blocks = data.blocks() if hasattr(data, "blocks") else iter(data)
        out, at = [], 0
        for _, block in blocks:
            lo, hi = np.searchsorted(pick, [at, at + len(block)])
            if hi > lo:
                out.append(np.asarray(block)[pick[lo:hi] - at])
            at += len(block)
            if hi == len(pick):
                break
        dim = int(data.dim)
        return (np.concatenate(out) if out else np.zeros((0, dim), np.float32)), n
    X = np.asarray(data)
    if X.ndim != 2:
        raise ValueError(f"describe: expected (n, d) rows, got shape {X.shape}")
    n = X.shape[0]
    pick = np.sort(rng.choice(n, min(sample, n), replace=False))
    return X[pick], n


def describe(data: Any, *, sample: int = 2000, seed: int = 0, top: int = 10) -> SpaceStats:
    """Statistics of ``data``'s rows on a seeded sample of ``sample`` rows.

    Args:
        data: an ``(n, d)`` array, a ``DistractorSource`` or ``CollectionBlocks``.
        sample: rows sampled (all when fewer).
        seed: seeds the sample.
        top: singular directions reported in ``spectrum``.
    """
    rows, n = sample_rows(data, int(sample), seed)
    X = rows.astype(np.float64)
    m, d = X.shape
    norms = np.linalg.norm(X, axis=1)
    U = X / np.where(norms > 0, norms, 1.0)[:, None]
    G = U @ U.T
    if m > 1:
        mean_cos = float((G.sum() - np.trace(G)) / (m * (m - 1)))
        np.fill_diagonal(G, -np.inf)
        nn = G.max(axis=1)
        nn_q = {str(q): float(np.quantile(nn, q)) for q in QUANTILES}
    else:
        mean_cos, nn_q = float("nan"), {str(q): float("nan") for q in QUANTILES}
    sv2 = np.linalg.svd(U, compute_uv=False) ** 2 if m else np.zeros(0)
    spectrum = tuple(float(v) for v in (sv2[:top] / sv2.sum() if sv2.sum() else sv2[:top]))
    return SpaceStats(n, d, m, float(norms.mean()) if m else float("nan"), mean_cos, spectrum, nn_q)


def side_by_side(stats: Mapping[str, SpaceStats]) -> str:
    """A Markdown table, one column per named set (e.g. ``{"test images": ...,
    "distractors": ...}``), one row per statistic."""
    names = list(stats)
    lines = ["| statistic | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]

    def row(label: str, vals: list[str]) -> None:
        lines.append(f"| {label} | " + " | ".join(vals) + " |")

    row("rows", [str(stats[s].n) for s in names])
    row("sampled", [str(stats[s].sample) for s in names])
    row("mean norm", [f"{stats[s].mean_norm:.4f}" for s in names])
    row("mean pairwise cosine", [f"{stats[s].mean_cosine:.4f}" for s in names])
    for i in range(max(len(stats[s].spectrum) for s in names) if names else 0):
        row(f"spectrum share {i + 1}", [_at(stats[s].spectrum, i) for s in names])
    for q in QUANTILES:
        row(f"NN cosine q{q}", [f"{stats[s].nn_cosine[str(q)]:.4f}" for s in names])
    return "\n".join(lines)


def _at(vals: tuple[float, ...], i: int) -> str:
    return f"{vals[i]:.4f}" if i < len(vals) else "-"
