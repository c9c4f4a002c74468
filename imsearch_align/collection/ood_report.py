"""What cross-modal queries cost each index (``--control``, issue 38): one row per build.

From a build's sweep cells, each holding the cross-modal queries' ANN recall@k and the
control queries' (``control``): the smallest swept effort (nprobe, ef) at which each
reaches recall 0.9, the effort the cross-modal queries need to reach the recall the
controls reach at each setting, as a ratio to the controls' own
(:func:`~imsearch_align.collection.ood.ood_cost`: its median over the sweep, and how
many settings are beyond it), the recall gap at nprobe 16 / ef 64, and the index-free
predictors of the collection (:func:`~imsearch_align.collection.control.predict`);
then, per store, index type and size, how well each predictor ranks the methods'
costs (:func:`~imsearch_align.collection.ood.rank_agreement`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imsearch_align.collection.ood import effort_key, ood_cost, rank_agreement
from imsearch_align.experiment.deploy import build_key

__all__ = ["RECALL_TARGET", "ood_markdown", "ood_rows"]

#: The recall@k each query set's needed effort is read at.
RECALL_TARGET = 0.9
#: The settings a gap is reported at, per effort parameter.
GAP_AT = {"nprobe": 16, "ef": 64, "efSearch": 64, "ef_search": 64, "hnsw_ef": 64}


def _first_reaching(efforts: list[int], recalls: list[float]) -> str:
    hit = [e for e, r in zip(efforts, recalls, strict=True) if r >= RECALL_TARGET]
    return str(min(hit)) if hit else f"> {max(efforts)}"


def _row(cells: list[dict[str, Any]], k: int) -> dict[str, Any] | None:
    """One build's row (None: fewer than two swept efforts, or no controls)."""
    points = {}
    for c in cells:
        eff = effort_key((c.get("index") or {}).get("search_params") or {})
        d = c.get("direction", "t2i")
        cross = (c.get("metrics") or {}).get(f"{d}/ann_recall@{k}")
        ctl = ((c.get("control") or {}).get("ann_recall") or {}).get("mean")
        if eff is not None and cross is not None and ctl is not None:
            points[eff[1]] = (eff[0], float(cross), float(ctl))
    if len(points) < 2:
        return None
    efforts = sorted(points)
    name = points[efforts[0]][0]
    cross = [points[e][1] for e in efforts]
    ctl = [points[e][2] for e in efforts]
    cost = ood_cost(efforts, cross, ctl)
    at = GAP_AT.get(name)
    head = cells[0]
    pred = (head.get("control") or {}).get("predictor") or {}
    return {
        "method": head["method"],
        "direction": head.get("direction", "t2i"),
        "store": head["store"],
        "index": head["index"]["type"],
        "size": (head.get("collection") or {}).get("size"),
        "effort": name,
        f"cross-modal effort for {RECALL_TARGET}": _first_reaching(efforts, cross),
        f"control effort for {RECALL_TARGET}": _first_reaching(efforts, ctl),
        "gap at": None if at is None or str(at) not in cost["gap_at"] else at,
        "gap": None if at is None else cost["gap_at"].get(str(at)),
        "median effort ratio": cost["median_ratio"],
        "settings beyond sweep": cost["n_beyond"],
        "nn similarity ratio": pred.get("nn_similarity_ratio"),
        "IVF list share ratio": pred.get("ivf_list_share_ratio"),
        "cost": cost,
    }


def ood_rows(cells: Sequence[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """One row per build of ok sweep cells with controls (see the module docstring)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        if c.get("control") and (c.get("status") or {}).get("state") == "ok":
            groups.setdefault(build_key(c), []).append(c)
    rows = [r for g in groups.values() if (r := _row(g, k)) is not None]
    return sorted(rows, key=lambda r: (r["direction"], r["store"], r["index"], r["size"] or 0,
                                       r["method"]))  # fmt: skip


def _fmt(v: Any, signed: bool = False) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:+.3f}" if signed else f"{v:.3f}"
    return str(v)


def ood_markdown(cells: Sequence[dict[str, Any]], k: int) -> str | None:
    """The rows as Markdown with the predictors' rank agreement (None: no controls)."""
    rows = ood_rows(cells, k)
    if not rows:
        return None
    lines = [
        "# What cross-modal queries cost the index",
        "",
        f"ANN recall@{k} of the cross-modal queries against in-distribution control queries "
        "on the same builds (--control). 'median effort ratio': the search effort the "
        "cross-modal queries need to reach the recall the controls reach, over the effort "
        "the controls need, median over the sweep (1 = no cost; settings past the sweep "
        "are left out of it and counted). gap: control recall minus cross-modal recall at "
        "that setting. The two predictors are measured without an index on a sample of "
        "the collection (1 = the queries sit as close to the documents as the controls).",
        "",
    ]
    keys = [c for c in rows[0] if c != "cost"]
    lines += ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c), c == "gap") for c in keys) + " |")
    lines += ["", "## Do the predictors rank the methods' costs?", ""]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["direction"], r["store"], r["index"], r["size"]), []).append(r)
    for (d, store, index, size), rs in groups.items():
        costs = {r["method"]: r["median effort ratio"] for r in rs}
        for pred in ("nn similarity ratio", "IVF list share ratio"):
            agree = rank_agreement({r["method"]: r[pred] for r in rs if r[pred] is not None},
                                   costs)  # fmt: skip
            rho = agree["spearman"]
            lines.append(
                f"- {d} {store} {index} at {size:,}: {pred}: Spearman "
                f"{'-' if rho is None else f'{rho:+.2f}'} over {agree['n']} methods "
                "(a predictor that falls as the cost rises agrees at -1)"
            )
    return "\n".join(lines) + "\n"
