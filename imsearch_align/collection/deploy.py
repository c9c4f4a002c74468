"""Which search setting of one build to deploy, by two rules the report shows side by side.

* **ANN recall** (:func:`deploy_index`, the rule the filtered and concurrency
  cells are measured on): the fastest setting whose ANN recall@k reaches
  :data:`DEPLOY_RECALL`; when none does, the highest recall.
* **Task quality** (:func:`~imsearch_align.collection.intervals.deploy_by_quality`):
  the fastest setting whose task measure (default HitRate@k at the largest
  cut-off) is not below exact search by more than ``delta`` at 95 % on the
  paired difference. It is what a user deploys for: at 1M, FAISS nprobe 16
  kept 75 % of the true top-10 but 87 % of exact HitRate@10 (csa).

:func:`deploy_marks` applies both to a folder's sweep cells, build by build.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from imsearch_align.collection.intervals import deploy_by_quality

__all__ = ["DEFAULT_DELTA", "DEPLOY_RECALL", "build_key", "deploy_index", "deploy_marks"]

#: The ANN recall@k a deployable setting reaches (:func:`deploy_index`).
DEPLOY_RECALL = 0.9
#: How far below exact the task measure of a deployable setting may be (``--deploy-delta``).
DEFAULT_DELTA = 0.01


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
