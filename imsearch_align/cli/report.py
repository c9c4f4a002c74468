"""``build`` and ``plot``: readers of result files.

``build`` merges result JSONs into a CSV and a Markdown leaderboard;
``plot`` draws learning curves and recall-vs-QPS figures. Unreadable files
are warned about and skipped; no result at all exits 1. ``build`` never
writes over a file it cannot prove is its own output
(:mod:`.build_outputs`), and counts a result found twice once.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from imsearch_align.cli.build_outputs import check_outputs, unique_results
from imsearch_align.cli.common import UsageError, note, positive_int, warn

__all__ = ["add_report_commands", "cmd_build", "cmd_plot"]


def add_report_commands(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The ``build`` and ``plot`` sub-commands."""
    b = sub.add_parser(
        "build", parents=parents, help="merge result JSONs into a CSV and a Markdown leaderboard"
    )
    b.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="result files or directories (searched recursively)",
    )
    b.add_argument(
        "--output",
        default="benchmark.csv",
        metavar="CSV",
        help="CSV path (default benchmark.csv; never an input, a result or a file build did not write)",
    )
    b.add_argument(
        "--markdown",
        default="leaderboard.md",
        metavar="MD",
        help="Markdown leaderboard path (default leaderboard.md; 'none' to skip)",
    )
    b.add_argument(
        "--sort-by", metavar="METRIC", help="rank by this metric (default t2i/HitRate@1)"
    )
    b.add_argument(
        "--columns", nargs="+", metavar="COL", help="leaderboard columns (default: chosen)"
    )
    b.add_argument("--max-rows", type=positive_int, metavar="N", help="leaderboard rows at most")
    b.set_defaults(func=cmd_build)
    pl = sub.add_parser(
        "plot", parents=parents, help="learning curves and recall-vs-QPS figures (PNG)"
    )
    pl.add_argument("paths", nargs="+", metavar="PATH", help="result files or directories")
    pl.add_argument(
        "--output-dir", default="plots", metavar="DIR", help="where PNGs go (default plots)"
    )
    pl.add_argument(
        "--metric",
        nargs="+",
        default=None,
        metavar="METRIC",
        help="learning-curve metrics (default t2i/HitRate@1 and i2t/HitRate@1, or the task's)",
    )
    pl.add_argument(
        "--qps-metric",
        metavar="METRIC",
        help="recall-vs-QPS y metric (default ANN fidelity, else HitRate@10)",
    )
    pl.add_argument(
        "--direction",
        default="t2i",
        help="whose queries/s the recall-vs-QPS plot uses (t2i, i2t...)",
    )
    pl.set_defaults(func=cmd_plot)  # fmt: skip


def cmd_build(args: argparse.Namespace) -> int:
    """``build``: merge result JSONs into a CSV and a Markdown leaderboard."""
    from imsearch_align.leaderboard import (
        LeaderboardWarning,
        find_result_files,
        load_results,
        load_study_cells,
        to_markdown,
    )

    try:
        files = find_result_files(args.paths)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    markdown = Path(args.markdown) if args.markdown and args.markdown.lower() != "none" else None
    check_outputs(Path(args.output), markdown, files)
    files, copies = unique_results(files)
    if copies:
        same = "; ".join(f"{str(c)!r} = {str(first)!r}" for c, first in copies)
        note(f"{len(copies)} file(s) hold the same result as another and are counted once: {same}")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeaderboardWarning)
        df = load_results(files)
    for w in caught:
        if issubclass(w.category, LeaderboardWarning):
            warn(str(w.message))
    cells = load_study_cells(args.paths)
    if cells:
        _cells_leaderboard(cells, Path(args.output), markdown)
    if df.empty:
        if cells:
            return 0
        print(
            f"error: no result JSONs found in {' '.join(args.paths)} ({len(files)} JSON files read)",
            file=sys.stderr,
        )
        return 1
    try:
        md = to_markdown(df, sort_by=args.sort_by, columns=args.columns, max_rows=args.max_rows)
    except ValueError as exc:
        raise UsageError(f"--sort-by/--columns: {exc}") from None
    out = Path(args.output)
    _write_text(out, df.to_csv(index=False), "--output")
    print(md, end="")
    print(f"{len(df)} results from {len(files)} files -> {out} ({df.shape[1]} columns)", end="")
    if markdown is not None:
        _write_text(markdown, md, "--markdown")
        print(f", {args.markdown}", end="")
    print()
    bad = int((df["status"] != "ok").sum()) if "status" in df.columns else 0
    if bad:
        warn(f"{bad} of {len(df)} results are not ok (see the status column)")
    return 0


def _cells_leaderboard(cells: Sequence[Any], output: Path, markdown: Path | None) -> None:
    """The study cells' CSV and leaderboard beside ``build``'s outputs (``*_cells.csv``,
    ``*_cells.md``): the same table the study writes, from the one reader of cells."""
    from imsearch_align.collection.study_report import cells_frame, leaderboard

    sweep = [dict(c.record) for c in cells if c.kind == "collection_scale"]
    if not sweep:
        return
    ks = sorted({int(k.rsplit("@", 1)[1]) for c in cells for k in c.metrics
                 if "/HitRate@" in k} or {10})  # fmt: skip
    df = cells_frame(sweep, ks)
    md = leaderboard(df, ks)
    csv = output.with_name(f"{output.stem}_cells.csv")
    _write_text(csv, df.to_csv(index=False), "--output")
    print(md, end="")
    print(f"{len(sweep)} study cells ({len(cells)} of every kind) -> {csv}", end="")
    if markdown is not None:
        md_path = markdown.with_name(f"{markdown.stem}_cells.md")
        _write_text(md_path, md, "--markdown")
        print(f", {md_path}", end="")
    print()


def _write_text(path: Path, text: str, arg: str) -> None:
    from imsearch_align.framework.atomic import atomic_write

    try:
        atomic_write(path, text)
    except OSError as exc:
        raise UsageError(f"{arg} {str(path)!r} cannot be written: {exc.strerror or exc}") from None


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@" else "-" for c in s)


def _default_plot_metrics(results: Sequence[Any]) -> list[str]:
    from imsearch_align.framework.task_measures import plot_metrics

    keys = {k for r in results for k in r.metrics}
    wanted = ("t2i/HitRate@1", "i2t/HitRate@1", *plot_metrics())  # the task table's headlines
    return [m for m in wanted if m in keys]


def cmd_plot(args: argparse.Namespace) -> int:
    """``plot``: learning curves per dataset and metric, recall vs QPS per dataset."""
    from imsearch_align.leaderboard import LeaderboardWarning, load_result_objects
    from imsearch_align.plots import learning_curve, recall_vs_qps

    out = Path(args.output_dir)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--output-dir {str(out)!r} is a file; expected a folder for the PNGs "
                         "(it is created if missing)")  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeaderboardWarning)
        try:
            results = [r for r in load_result_objects(args.paths) if r.task is not None]
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
    for w in caught:
        warn(str(w.message))
    if not results:
        print(f"error: no results with measurements in {' '.join(args.paths)}", file=sys.stderr)
        return 1
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--output-dir {str(out)!r} cannot be made: {exc.strerror or exc}"
        ) from None
    by_ds: dict[str, list[Any]] = {}
    for r in results:
        by_ds.setdefault(r.config.dataset, []).append(r)
    written = []
    for ds, rs in sorted(by_ds.items()):
        for m in args.metric or _default_plot_metrics(rs):
            try:
                written.append(
                    learning_curve(rs, m, out / f"learning_curve_{_slug(ds)}_{_slug(m)}.png")
                )
            except ValueError as exc:
                if args.metric:
                    raise UsageError(f"--metric: {exc}") from None
        try:
            written.append(recall_vs_qps(rs, out / f"recall_vs_qps_{_slug(ds)}_{args.direction}.png",
                                         metric=args.qps_metric, direction=args.direction))  # fmt: skip
        except ValueError as exc:
            if args.qps_metric:
                raise UsageError(f"--qps-metric: {exc}") from None
            warn(f"no recall-vs-QPS plot for {ds}: {exc}")
    for p in written:
        print(p)
    return 0 if written else 1
