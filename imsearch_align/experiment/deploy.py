"""Which search setting of one build to deploy, by two rules the report shows side by side.

* **ANN recall** (:func:`deploy_index`, the rule the filtered and concurrency
  cells are measured on): the fastest setting whose ANN recall@k reaches
  :data:`DEPLOY_RECALL`; when none does, the highest recall.
* **Task quality** (:func:`deploy_by_quality`, on the intervals of
  :mod:`~imsearch_align.collection.intervals`):
  the fastest setting whose task measure (default HitRate@k at the largest
  cut-off) is not below exact search by more than ``delta`` at 95 % on the
  paired difference. It is what a user deploys for: at 1M, FAISS nprobe 16
  kept 75 % of the true top-10 but 87 % of exact HitRate@10 (csa).

:func:`deploy_marks` applies both to a folder's sweep cells, build by build. The
rules read written cells only (plain mappings), so every reader of a study folder (the
study's table, its figures, the HTML report) applies them alike.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_DELTA",
    "DEPLOY_RECALL",
    "as_good_as_exact",
    "build_key",
    "check_delta",
    "deploy_by_quality",
    "deploy_index",
    "deploy_marks",
    "recorded_delta",
]

#: The ANN recall@k a deployable setting reaches (:func:`deploy_index`).
DEPLOY_RECALL = 0.9
#: How far below exact the task measure of a deployable setting may be (``--deploy-delta``).
DEFAULT_DELTA = 0.01


def check_delta(delta: Any) -> float:
    """``delta`` (the ``--deploy-delta`` margin) as a float in [0, 1]; ValueError for
    anything else (a bool, NaN, a string...), naming ``--deploy-delta``."""
    if (
        isinstance(delta, bool)
        or not isinstance(delta, int | float | np.integer | np.floating)
        or not 0 <= float(delta) <= 1
    ):  # NaN fails the comparison
        raise ValueError(f"--deploy-delta: expected a number in [0, 1], got {delta!r}")
    return float(delta)


def as_good_as_exact(difference_low: float, delta: float) -> bool:
    """The non-inferiority rule: ``difference_low >= -delta``.

    ``difference_low`` is the lower end of the two-sided ``level`` interval of
    approximate − exact (at 95 %, a one-sided 97.5 % bound): True when the
    approximate index is, at that confidence, not worse than exact by more
    than ``delta``. A NaN bound is False.
    """
    return float(difference_low) >= -check_delta(delta)  # NaN compares False


def _difference_low(cell: Mapping[str, Any], measure: str) -> float:
    """The cell's ``intervals[measure]["difference"]["low"]``, NaN when absent or null."""
    entry = (cell.get("intervals") or {}).get(measure)
    difference = entry.get("difference") if isinstance(entry, Mapping) else None
    low = difference.get("low") if isinstance(difference, Mapping) else None
    return float("nan") if low is None else float(low)


def deploy_by_quality(
    cells: Sequence[Mapping[str, Any] | None], measure: str, delta: float
) -> int | None:
    """Position of the fastest cell of one build that is as good as exact.

    Args:
        cells: one build's study cells (None entries allowed).
        measure: the interval key, e.g. ``"t2i/HitRate@10"``.
        delta: the non-inferiority margin, in [0, 1] (:func:`check_delta`).

    Returns:
        Among the cells whose ``status.state`` is ``"ok"`` and whose
        ``intervals[measure]["difference"]["low"]`` passes
        :func:`as_good_as_exact`, the position of the one with the most
        ``queries_per_s`` (missing or NaN counts as 0; ties: the earlier);
        None when no cell passes. Cells without the entry are skipped.
    """
    delta = check_delta(delta)
    passing: list[tuple[float, int]] = []
    for i, cell in enumerate(cells):
        ok = cell is not None and (cell.get("status") or {}).get("state") == "ok"
        if ok and as_good_as_exact(_difference_low(cell, measure), delta):
            qps = float(cell.get("queries_per_s") or 0.0)
            passing.append((qps if math.isfinite(qps) else 0.0, -i))
    return -max(passing)[1] if passing else None


def deploy_index(cells: Sequence[dict[str, Any] | None]) -> int | None:
    """Position of the cell to deploy among one build's cells (None when none is ok).

    The fastest (batched queries/s) whose ANN recall@k is at least
    :data:`DEPLOY_RECALL`; when none reaches it, the highest recall (ties:
    the faster).
    """
    ok = [
        (i, float((c.get("ann_recall") or {}).get("mean", float("nan"))), c.get("queries_per_s"))
        for i, c in enumerate(cells)
        if c is not None and (c.get("status") or {}).get("state") == "ok"
    ]
    ok = [(i, r, float(q or 0.0)) for i, r, q in ok if r == r]
    if not ok:
        return None
    good = [t for t in ok if t[1] >= DEPLOY_RECALL]
    if good:
        return max(good, key=lambda t: (t[2], -t[0]))[0]
    return max(ok, key=lambda t: (t[1], t[2], -t[0]))[0]


def build_key(cell: dict[str, Any]) -> str:
    """What the cells of one build share (everything but the search-time setting)."""
    idx, coll = cell.get("index") or {}, cell.get("collection") or {}
    return json.dumps(
        [cell.get(f) for f in ("dataset", "method", "direction", "store", "n_support")]
        + [idx.get("type"), idx.get("params"), coll.get("size"), coll.get("distractors")],
        sort_keys=True,
        default=str,
    )


def deploy_marks(cells: Sequence[dict[str, Any]], measure: str, delta: float) -> list[str]:
    """Per cell: ``"recall"``, ``"quality"``, ``"both"`` or ``""``: which rule deploys it
    among the cells of its build. ``measure`` is the task measure without its direction
    (``"HitRate@10"``); each cell is read at its own direction."""
    groups: dict[str, list[int]] = {}
    for i, c in enumerate(cells):
        groups.setdefault(build_key(c), []).append(i)
    marks = [""] * len(cells)
    for members in groups.values():
        mine = [cells[i] for i in members]
        d = mine[0].get("direction", "t2i")
        by_recall = deploy_index(mine)
        by_quality = deploy_by_quality(mine, f"{d}/{measure}", delta)
        for j, i in enumerate(members):
            rules = [r for r, at in (("recall", by_recall), ("quality", by_quality)) if at == j]
            marks[i] = "both" if len(rules) == 2 else (rules[0] if rules else "")
    return marks


def recorded_delta(folder: str | Path) -> float | None:
    """The ``--deploy-delta`` of the study folder's newest run manifest (None: no readable
    manifest records one), so a reader of the folder applies the study's own rule."""
    from imsearch_align.experiment.study_cell import MANIFEST_DIR

    for p in sorted(Path(folder, MANIFEST_DIR).glob("manifest-*.json"), reverse=True):
        try:
            value = json.loads(p.read_text(encoding="utf-8"))["spec"]["deploy_delta"]
            return check_delta(value)
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None
