"""The Flickr30k study's output: the result table and the reports.

:func:`format_table` is the table ``benchmarks/flickr.py`` prints (method x
store x N with HitRate@k both ways, nDCG, fit time, throughput and status);
:func:`finish` prints it with the count of cells ok and writes the
leaderboard (CSV + Markdown), the learning curve and, across stores, recall
against queries/s into the output folder.
"""

from __future__ import annotations

import time
from pathlib import Path

from imsearch_align.experiment import ExperimentResult
from imsearch_align.experiment.report import HEADLINE_LEGEND, fmt, text_table


def finish(
    results: list[tuple[str, ExperimentResult]], ks: list[int], out: Path, t0: float
) -> None:
    """The table, the count and the reports of the cells that ran."""
    if not results:
        return
    ok = [(s, r) for s, r in results if r.status.state != "failed"]
    print()
    print(format_table(results, ks))
    bad = [r for _, r in results if not r.status.ok]
    print(
        f"\n{len(results) - len(bad)}/{len(results)} experiments ok in "
        f"{time.perf_counter() - t0:.0f} s; results in {out}/"
    )
    if ok:
        _write_reports(ok, out)


def _write_reports(ok: list[tuple[str, ExperimentResult]], out: Path) -> None:
    """Leaderboard (CSV + Markdown), the learning curve and, across stores, recall vs QPS."""
    from imsearch_align.framework.atomic import atomic_write
    from imsearch_align.leaderboard import results_frame, to_markdown
    from imsearch_align.plots import learning_curve, recall_vs_qps

    df = results_frame([r for _, r in ok])
    atomic_write(out / "benchmark.csv", df.to_csv(index=False))
    atomic_write(out / "leaderboard.md", to_markdown(df))
    # The figures draw only results whose numbers are right (a degraded
    # cell is in the tables, marked, but not a point on a curve).
    clean = [(s, r) for s, r in ok if r.status.ok]
    if len(clean) < len(ok):
        print(f"figures: {len(ok) - len(clean)} degraded experiment(s) left out")
    if not clean:
        print(f"leaderboard:    {out / 'leaderboard.md'} (CSV: {out / 'benchmark.csv'})")
        return
    # Quality does not depend on an exact store: one curve per method, from
    # the first store; throughput against quality compares the stores.
    first = clean[0][0]
    curve = [r for s, r in clean if s == first]
    png = learning_curve(
        curve,
        metric="t2i/HitRate@1",
        out_path=out / "learning_curve_t2i_HitRate@1.png",
        title=f"{curve[0].dataset.name}: text-to-image HitRate@1 vs support pairs ({first})",
    )
    print(f"learning curve: {png}")
    if len({s for s, _ in clean}) > 1:
        qps_png = recall_vs_qps(
            [r for _, r in clean], out_path=out / "recall_vs_qps_t2i.png", metric="t2i/HitRate@10"
        )
        print(f"stores:         {qps_png}")
    print(f"leaderboard:    {out / 'leaderboard.md'} (CSV: {out / 'benchmark.csv'})")


def _short(text: str, width: int = 60) -> str:
    line = (text or "").splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def format_table(results: list[tuple[str, ExperimentResult]], ks: list[int]) -> str:
    """Method x store x N with text->image and image->text HitRate@k (CLIP_benchmark's
    recall@k), nDCG, fit time, search throughput and status; an error is
    shortened to one line in its own column."""
    ks = sorted(ks)
    cols = (
        ["method", "store", "N"]
        + [f"t2i HitRate@{k}" for k in ks]
        + [f"i2t HitRate@{k}" for k in ks]
        + [f"t2i nDCG@{ks[-1]}", "fit s", "t2i q/s", "status"]
    )
    rows = []
    for store, r in results:
        c = r.config
        if r.dataset is not None and r.dataset.n_support_pairs:
            n = str(r.dataset.n_support_pairs)
        else:  # failed before the pairs were drawn: the N asked for
            n = "all" if c.n_support is None else str(c.n_support)
        m = r.metrics
        t2i = r.rankings.get("t2i")
        qps = t2i.timings.queries_per_s if t2i else None
        row = [c.method, store, n]
        row += [_num(m.get(f"t2i/HitRate@{k}")) for k in ks]
        row += [_num(m.get(f"i2t/HitRate@{k}")) for k in ks]
        row += [
            _num(m.get(f"t2i/nDCG@{ks[-1]}")),
            f"{r.timings['fit_s']:.2f}" if "fit_s" in r.timings else "-",
            "-" if qps is None else f"{qps:,.0f}",
            r.status.state
            if r.status.state != "failed"
            else "failed: " + _short(r.status.error or ""),
        ]
        rows.append(row)
    lines = [text_table(cols, rows)]
    first = next((r for _, r in results if r.dataset is not None), None)
    if first:
        d = first.dataset
        lines.append(
            f"\n{d.name}: {d.n_test_images} test images, {d.n_test_texts} test captions "
            f"(chance t2i HitRate@1 = {1 / max(d.n_test_images, 1):.4f})\n{HEADLINE_LEGEND}"
        )
    return "\n".join(lines)


def _num(v: float | None) -> str:
    return fmt(v, 3)
