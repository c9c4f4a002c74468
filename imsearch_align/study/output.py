"""A study's tables and figures: ``collection.csv``, ``leaderboard.md``, quality against
queries/s and against size per direction, and the table printed at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from imsearch_align.collection.ood_report import ood_markdown
from imsearch_align.collection.study_figures import (
    control_vs_qps,
    cost_vs_size,
    quality_vs_qps,
    quality_vs_size,
    recall_vs_qps,
)
from imsearch_align.collection.study_report import cells_frame, leaderboard
from imsearch_align.experiment.report import text_table
from imsearch_align.experiment.study_cell import CellError, load_cell
from imsearch_align.framework.atomic import atomic_write
from imsearch_align.study.result import StudyResult

__all__ = ["summary", "write_outputs"]


def _columns(k: int) -> list[str]:
    return ["method", "direction", "store", "index", "search", "size", f"HitRate@{k}",
            f"HitRate@{k} exact", f"ann_recall@{k}", "q/s", "p50 ms", "insert rows/s",
            "status"]  # fmt: skip


def folder_cells(out: Path, ran: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every sweep cell in ``out``: the ones this run wrote and any another study left
    there (two studies sharing a folder both show in its table); files that are not
    cells are passed over (the report names them)."""
    found: list[dict[str, Any]] = []
    for path in sorted(Path(out).glob("*.json")):
        try:
            cell = load_cell(path)
        except CellError:
            continue
        if cell.kind == "collection_scale":
            found.append(dict(cell.record))
    return found or ran


def write_outputs(result: StudyResult) -> dict[str, Path]:
    """The CSV, the leaderboard and the figures of the folder's sweep cells, when this run
    has any (none: nothing)."""
    out, ks = result.out, result.spec.ks()
    if not result.cells:
        return {}
    cells = folder_cells(out, result.cells)
    df = cells_frame(cells, ks, result.spec.deploy_delta)
    paths = {"csv": out / "collection.csv", "leaderboard": out / "leaderboard.md"}
    atomic_write(paths["csv"], df.to_csv(index=False))
    ood = ood_markdown(cells, max(ks))  # --control: what cross-modal queries cost
    atomic_write(paths["leaderboard"], leaderboard(df, ks) + ("\n" + ood if ood else ""))
    if ood:
        paths["ood"] = out / "ood.md"
        atomic_write(paths["ood"], ood)
    delta = result.spec.deploy_delta
    for d in result.spec.directions:
        metric = f"{d}/HitRate@{max(ks)}"
        mine = [c for c in cells if c.get("direction") == d]
        drawn = {
            f"quality_vs_qps_{d}": quality_vs_qps(
                mine, metric, out / f"quality_vs_qps_{d}.png",
                title=f"{d}: quality vs speed", delta=delta,
            ),
            f"recall_vs_qps_{d}": recall_vs_qps(
                mine, f"{d}/ann_recall@{max(ks)}", out / f"recall_vs_qps_{d}.png",
                title=f"{d}: ANN recall vs speed",
            ),
            f"quality_vs_size_{d}": quality_vs_size(
                mine, metric, out / f"quality_vs_size_{d}.png", title=f"{d}: quality vs size"
            ),
            f"control_vs_qps_{d}": control_vs_qps(
                mine, f"{d}/ann_recall@{max(ks)}", out / f"control_vs_qps_{d}.png",
                title=f"{d}: cross-modal vs in-distribution control queries",
            ),
            f"cost_vs_size_{d}": cost_vs_size(
                mine, out / f"cost_vs_size_{d}.png", title=f"{d}: memory and build vs size"
            ),
        }  # fmt: skip
        paths.update({name: Path(png) for name, png in drawn.items() if png is not None})
    return paths


def summary(result: StudyResult) -> str:
    """The table of the sweep cells and the lines that say how the study ended."""
    lines: list[str] = []
    k = max(result.spec.ks())
    if result.cells:
        df = cells_frame(result.cells, result.spec.ks())
        cols = _columns(k)
        rows = [[_cell_text(v) for v in r] for r in df[cols].itertuples(index=False)]
        lines += ["", text_table(cols, rows), ""]
    bad = sum(1 for c in result.cells if (c.get("status") or {}).get("state") != "ok")
    total = result.seconds.get("total", 0.0)
    lines.append(f"{len(result.cells) - bad}/{len(result.cells)} cells ok in {total:.0f} s; "
                 f"results in {result.out}/")  # fmt: skip
    for name, path in result.outputs.items():
        if name.startswith(("quality_", "recall_", "cost_", "control_")):
            lines.append(f"figure:      {path}")
    if "ood" in result.outputs:
        lines.append(f"ood cost:    {result.outputs['ood']}")
    if "leaderboard" in result.outputs:
        lines.append(f"leaderboard: {result.outputs['leaderboard']} (CSV: {result.outputs['csv']})")
    for kind, found in (("filtered", result.filtered), ("concurrency", result.concurrency)):
        if found:
            bad = sum(1 for c in found if (c.get("status") or {}).get("state") != "ok")
            lines.append(f"{kind + ':':<12} {len(found) - bad}/{len(found)} cells ok (kind "
                         f"{kind!r}), measured in {result.seconds.get(kind, 0.0):.0f} s")  # fmt: skip
    for store, error in result.unreachable.items():
        lines.append(f"{store + ':':<12} unreachable ({error}); its remaining cells were not "
                     "run: start it and run the same study with --skip-existing")  # fmt: skip
    for c in result.failed:
        idx = c.get("index") or {}
        clients = f" at {c['concurrency']} clients" if c.get("concurrency") else ""
        lines.append(f"failed:      {c.get('kind')} {c.get('method')} {c.get('store')} "
                     f"{idx.get('type', '')} {idx.get('search_params') or ''}{clients}: "
                     f"{(c.get('status') or {}).get('error')}")  # fmt: skip
    if result.interrupted:
        lines.append(f"interrupted after {len(result.all_cells)} cells; run again with "
                     "--skip-existing")  # fmt: skip
    return "\n".join(lines)


def _cell_text(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)[:60]
