"""Split names, reading a caller's choice of splits, and the seeded ratio split.

``"train"`` is the *support* set an alignment method is fitted on; ``"test"``
is what search is evaluated on; ``"val"`` is held out. Nothing here imports
another module of ``imsearch_align.datasets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from imsearch_align.framework.validation import check_int

__all__ = ["SPLITS", "SUPPORT_SPLIT", "TEST_SPLIT", "as_splits", "seeded_split"]

#: Split names a dataset may use.
SPLITS = ("train", "val", "test")
#: The split an alignment method is fitted on (its N paired examples come from here).
SUPPORT_SPLIT = "train"
#: The split search quality is measured on.
TEST_SPLIT = "test"


def seeded_split(
    n: int, *, test_fraction: float, seed: int, val_fraction: float = 0.0
) -> np.ndarray:
    """Assign ``n`` items to ``train``/``val``/``test`` by a seeded permutation.

    The counts are ``round(n * test_fraction)`` test and
    ``round(n * val_fraction)`` val items, the rest train; the same ``seed``
    always gives the same assignment. Returns an object array of split names.
    """
    n = check_int(n, "n", low=0)
    for name, frac in (("test_fraction", test_fraction), ("val_fraction", val_fraction)):
        if not isinstance(frac, float | int) or not 0.0 <= float(frac) <= 1.0:
            raise ValueError(f"{name} must be a number in [0, 1], got {frac!r}")
    if float(test_fraction) + float(val_fraction) > 1.0:
        raise ValueError(
            "test_fraction + val_fraction must be <= 1, got "
            f"{test_fraction} + {val_fraction} = {float(test_fraction) + float(val_fraction)}"
        )
    seed = check_int(seed, "seed", low=0)
    n_test = round(n * float(test_fraction))
    n_val = round(n * float(val_fraction))
    order = np.random.default_rng(seed).permutation(n)
    out = np.full(n, "train", dtype=object)
    out[order[:n_test]] = "test"
    out[order[n_test : n_test + n_val]] = "val"
    return out


def as_splits(splits: Any, name: str = "splits") -> tuple[str, ...] | None:
    """``splits`` as a tuple of split names: a list, or a comma string (``"train,test"``).

    None stays None (all splits). ``restval`` counts as ``train``, ``validation``
    and ``dev`` as ``val``. Unknown names raise with the valid ones.
    """
    if splits is None:
        return None
    if isinstance(splits, str):
        items = [s.strip() for s in splits.split(",") if s.strip()]
    elif isinstance(splits, Sequence) and all(isinstance(s, str) for s in splits):
        items = [s.strip() for s in splits]
    else:
        raise TypeError(
            f"{name} must be a list of split names or a comma-separated string like "
            f"'train,test', got {splits!r}"
        )
    alias = {"restval": "train", "validation": "val", "dev": "val"}
    items = [alias.get(s, s) for s in items]
    bad = [s for s in items if s not in SPLITS]
    if bad or not items:
        raise ValueError(f"{name} must name splits among {list(SPLITS)}, got {splits!r}")
    return tuple(dict.fromkeys(items))
