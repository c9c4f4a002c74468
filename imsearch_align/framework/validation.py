"""Input checks shared by methods, stores and datasets.

Every check raises an exception whose message names the argument, what was
expected and what came, e.g. ``"k must be an integer in [1, 16384], got 0"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_float", "check_ids", "check_int", "check_matrix", "is_sparse"]


def is_sparse(x: Any) -> bool:
    """True for any scipy.sparse matrix or array."""
    try:
        import scipy.sparse as sp
    except ImportError:  # pragma: no cover - scipy is a core dependency
        return False
    return sp.issparse(x)


def array_buffer(a: Any) -> memoryview | bytes:
    """The bytes of a numeric array for hashing, without the copy ``tobytes()``
    makes (a C-contiguous array is read in place; ``b""`` when it is empty).
    Hashes equal those of ``np.ascontiguousarray(a).tobytes()``."""
    b = np.ascontiguousarray(a)
    return memoryview(b).cast("B") if b.size else b""


def _all_finite(m: np.ndarray) -> bool:
    """Whether every entry of a float array is finite, without an ``m``-sized
    temporary: a NaN or an infinity makes the float64 sum NaN or infinite, and
    finite float32 values cannot overflow it (float64 reaches 1e308). A float64
    array whose finite values overflow the sum is checked entry by entry; a small one
    (a few queries) at once, skipping the error-state switch that costs more than it."""
    if m.size <= 4096:
        return bool(np.isfinite(m).all())
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(m.sum(dtype=np.float64)):
            return True
    return bool(np.isfinite(m).all())


def check_matrix(
    x: Any,
    name: str,
    *,
    dim: int | None = None,
    allow_sparse: bool = False,
    dtype: Any = np.float32,
    min_rows: int = 0,
) -> Any:
    """Validate a 2-D finite matrix and return it as ``dtype`` (CSR if sparse).

    Args:
        x: array-like ``(n, d)`` or a scipy sparse matrix.
        name: the argument's name, used in error messages.
        dim: required number of columns, if any.
        allow_sparse: accept scipy sparse input (returned as CSR).
        dtype: output dtype.
        min_rows: minimum number of rows.
    """
    if is_sparse(x):
        if not allow_sparse:
            raise TypeError(f"{name} must be a dense array, got a scipy sparse {type(x).__name__}")
        import scipy.sparse as sp

        m = sp.csr_matrix(x, dtype=dtype)
        if m.data.dtype.kind == "f" and not _all_finite(m.data):
            row = int(
                np.searchsorted(m.indptr, np.flatnonzero(~np.isfinite(m.data))[0], "right") - 1
            )
            raise ValueError(f"{name} must be finite, got NaN or inf in row {row}")
    else:
        try:
            m = np.asarray(x)
        except Exception as exc:  # ragged lists and the like
            raise TypeError(f"{name} must be a 2-D numeric array, got {type(x).__name__}") from exc
        if m.ndim != 2:
            raise ValueError(f"{name} must be 2-D (n, d), got {m.ndim}-D with shape {m.shape}")
        if m.dtype.kind not in "fiub":
            raise TypeError(f"{name} must be numeric, got dtype {m.dtype}")
        m = np.ascontiguousarray(m, dtype=dtype)
        if m.dtype.kind == "f" and not _all_finite(m):
            row = int(np.flatnonzero(~np.isfinite(m).all(axis=1))[0])
            raise ValueError(f"{name} must be finite, got NaN or inf in row {row}")
    if m.shape[0] < min_rows:
        raise ValueError(f"{name} must have at least {min_rows} rows, got {m.shape[0]}")
    if dim is not None and m.shape[1] != dim:
        raise ValueError(f"{name} must have dimension {dim}, got {m.shape[1]}")
    return m


def check_int(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """Validate an integer in ``[low, high]`` (bounds optional)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    v = int(value)
    if (low is not None and v < low) or (high is not None and v > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {v}")
    return v


def check_float(
    value: Any, name: str, *, low: float | None = None, high: float | None = None
) -> float:
    """Validate a finite real number in ``[low, high]`` (bounds optional)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    v = float(value)
    if not np.isfinite(v) or (low is not None and v < low) or (high is not None and v > high):
        lo = "-inf" if low is None else low
        hi = "inf" if high is None else high
        raise ValueError(f"{name} must be a finite number in [{lo}, {hi}], got {value!r}")
    return v


def check_ids(ids: Any, name: str, *, n: int) -> np.ndarray:
    """Validate ``n`` unique non-negative int64 ids."""
    arr = np.asarray(ids)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {arr.shape}")
    if len(arr) != n:
        raise ValueError(f"{name} has {len(arr)} entries, vectors have {n} rows")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0 (-1 means 'no hit'), got {int(arr.min())}")
    uniq, counts = np.unique(arr, return_counts=True)
    if (counts > 1).any():
        dups = uniq[counts > 1]
        raise ValueError(
            f"{name} must be unique, got duplicate id(s) {dups[:5].tolist()}"
            + (f" and {len(dups) - 5} more" if len(dups) > 5 else "")
        )
    return arr
