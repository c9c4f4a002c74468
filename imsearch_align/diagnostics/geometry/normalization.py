"""The input policy of every geometry diagnostic: rows L2-normalised, with a warning.

Rows whose norm differs from 1 by more than :data:`NORM_TOL` are normalised and
a :class:`NormalizationWarning` is issued; a zero row raises ``ValueError``.
Dense rows stay float64 when given as float64, float32 otherwise.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_matrix, is_sparse

__all__ = ["NORM_TOL", "NormalizationWarning", "unit_rows"]

#: Row norms further than this from 1 trigger the normalisation warning.
NORM_TOL = 1e-3


class NormalizationWarning(UserWarning):
    """Input rows were not unit length and have been L2-normalised."""


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
