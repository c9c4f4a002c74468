"""The page: sections in order, each there when the folder holds its kind of result.

:func:`build_page` turns what :func:`~imsearch_align.report_html.collect.collect`
found into one HTML document with everything inline (styles, charts, a
script that checks every figure has a size); its Content-Security-Policy
forbids loading anything, so the page opens offline and cannot leak.
:func:`write_report` writes it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable
from pathlib import Path

from imsearch_align.experiment.deploy import DEFAULT_DELTA, recorded_delta
from imsearch_align.report_html.collect import Collected, collect
from imsearch_align.report_html.learning import learning_figures
from imsearch_align.report_html.production import concurrency_figures, filter_figures
from imsearch_align.report_html.quality import (
    points_from_cells,
    points_from_results,
    qps_figures,
    size_figures,
)
from imsearch_align.report_html.sections import (
    esc,
    figure_html,
    leaderboard_html,
    note_html,
    provenance_html,
)
from imsearch_align.report_html.study_board import study_board_html
from imsearch_align.report_html.svg import Figure

__all__ = ["build_page", "write_report"]

_CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1d;background:#f6f6f4}
main{max-width:1100px;margin:0 auto;padding:16px 24px 48px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
nav a{margin-right:12px}code,pre{font:12px/1.4 ui-monospace,Menlo,Consolas,monospace}
pre{background:#1f2328;color:#e6e6e6;padding:8px 10px;border-radius:4px;overflow-x:auto;white-space:pre}
.scroll{overflow-x:auto}table{border-collapse:collapse;background:#fff;font-size:12.5px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}th{background:#eee}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.st-ok{color:#0a6b2b}.st-degraded{background:#fff4d6;color:#8a5300;font-weight:600}.st-failed{background:#fde2e2;color:#9b1111;font-weight:600}
figure.chart{background:#fff;border:1px solid #ddd;border-radius:6px;margin:14px 0;padding:10px 12px}
svg.plot{display:block;width:100%;max-width:920px;height:auto;font:11px system-ui,sans-serif}
svg.plot text{fill:#333}svg.plot text.axis{font-size:12.5px}svg.plot text.pt{font-size:9.5px}
ul.legend{list-style:none;padding:0;margin:6px 0;display:flex;flex-wrap:wrap;gap:4px 16px;font-size:12.5px}
ul.legend li{display:flex;align-items:center;gap:5px}figcaption{font-size:13px}
.note{color:#666;font-style:italic}.legend-text{font-size:12px;color:#555}summary{cursor:pointer;color:#333;margin-top:4px}
"""
#: Marks the page once every figure's chart has a non-empty box (``data-ok``).
_CHECK = """
(function(){var figs=document.querySelectorAll('figure.chart');var bad=[];
for(var i=0;i<figs.length;i++){var s=figs[i].querySelector('svg.plot');var r=s?s.getBoundingClientRect():null;
if(!r||r.width<50||r.height<50){bad.push(figs[i].id);}}
var b=document.body;b.setAttribute('data-figures',String(figs.length));
b.setAttribute('data-bad',bad.join(' '));b.setAttribute('data-ok',bad.length?'no':'yes');})();
"""

#: Section id, heading, what the note says when the folder has nothing for it.
_SECTIONS = (
    (
        "leaderboard",
        "Leaderboard",
        "no experiment results (imsearch-align eval or sweep) nor collection-scale cells "
        "in the folder",
    ),
    (
        "quality-vs-qps",
        "Quality vs queries/s, per collection size",
        "no result with a timed search",
    ),
    (
        "quality-vs-size",
        "Quality vs collection size",
        "no setting measured at two collection sizes or more",
    ),
    ("learning-curves", "Learning curves", "no method measured at two support sizes or more"),
    (
        "concurrency",
        "Concurrent clients",
        "no concurrency results (kind 'concurrency') in the folder",
    ),
    ("filtered", "Filtered search", "no filtered-search results (kind 'filtered') in the folder"),
)


def _delta(root: str) -> float:
    """The quality deploy rule's delta: the study's, as its newest manifest records it."""
    found = recorded_delta(root)
    return DEFAULT_DELTA if found is None else found


def _figures(found: Collected) -> dict[str, list[Figure]]:
    delta = _delta(found.root)
    points = points_from_results(found.results) + points_from_cells(
        found.of_kind("collection_scale"), delta
    )
    builders: dict[str, Callable[[], list[Figure]]] = {
        "quality-vs-qps": lambda: qps_figures(points, delta),
        "quality-vs-size": lambda: size_figures(points),
        "learning-curves": lambda: learning_figures(found.results),
        "concurrency": lambda: concurrency_figures(found.of_kind("concurrency")),
        "filtered": lambda: filter_figures(found.of_kind("filtered")),
    }
    return {k: f() for k, f in builders.items()}


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}">\n<h2>{esc(title)}</h2>\n{body}\n</section>'


def _leaderboard(found: Collected, missing: str) -> str:
    """The experiment results' leaderboard, then the collection-scale cells' table."""
    study = study_board_html(found.cells)
    parts = [leaderboard_html(found.results)] if found.results else []
    if study:
        title = "Collection-scale study cells"
        parts.append(f"<h3>{esc(title)}</h3>\n{study}" if parts else study)
    return "\n".join(parts) if parts else note_html(missing)


def _provenance(found: Collected) -> str:
    items = [(r.path or r.key, r.provenance) for r in found.results]
    items += [(c.path, c.provenance) for c in found.cells]
    return provenance_html(items)


def _skipped(found: Collected) -> str:
    if not found.skipped:
        return note_html(f"every one of the {found.n_files} JSON files was read")
    rows = "".join(f"<li><code>{esc(p)}</code>: {esc(why)}</li>" for p, why in found.skipped)
    return f"<ul>{rows}</ul>"


def build_page(found: Collected, *, command: str | None = None) -> str:
    """The HTML page of what a results folder holds (``command``: the line that made it)."""
    command = command or shlex.join(["imsearch-align", "report", found.root])
    figures = _figures(found)
    body, n = [], 0
    for sid, title, missing in _SECTIONS:
        if sid == "leaderboard":
            content = _leaderboard(found, missing)
        elif figures[sid]:
            content = "\n".join(
                figure_html(f, f"fig-{n + i + 1}") for i, f in enumerate(figures[sid])
            )
            n += len(figures[sid])
        else:
            content = note_html(missing)
        body.append(_section(sid, title, content))
    body.append(
        _section(
            "provenance", "Provenance: where and with what it was measured", _provenance(found)
        )
    )
    body.append(_section("skipped", "Files not read", _skipped(found)))
    nav = " ".join(f'<a href="#{sid}">{esc(t)}</a>' for sid, t, _ in _SECTIONS)
    kinds = ", ".join(
        f"{len(found.of_kind(k))} {k}"
        for k in ("collection_scale", "concurrency", "filtered")
        if found.of_kind(k)
    )
    summary = f"{len(found.results)} experiment results" + (
        f", study cells: {kinds}" if kinds else ""
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f'<meta name="generator" content="{GENERATOR}">',
            f"<title>imsearch-align report: {esc(found.root)}</title>",
            f"<style>{_CSS}</style></head>",
            "<body><main>",
            f"<h1>imsearch-align report: {esc(found.root)}</h1>",
            f"<p>{esc(summary)}, {n} figures. Made by <code>{esc(command)}</code>.</p>",
            f'<nav>{nav} <a href="#provenance">Provenance</a></nav>',
            *body,
            f"</main><script>{_CHECK}</script></body></html>",
            "",
        ]
    )


def write_report(
    root: str | os.PathLike, out: str | os.PathLike | None = None, *, command: str | None = None
) -> Path:
    """Write the report of the results under ``root`` to ``out`` (default
    ``root/report.html``) atomically; returns the path. Raises
    :class:`~imsearch_align.report_html.collect.ReportError` for a folder with no result."""
    from imsearch_align.framework.atomic import atomic_write

    found = collect(root)
    path = Path(out) if out is not None else Path(root) / "report.html"
    _check_replaceable(path)
    return atomic_write(path, build_page(found, command=command))


#: The page's generator tag: a file holding it is a report of ours, safe to replace.
GENERATOR = "imsearch-align report"


def _check_replaceable(path: Path) -> None:
    """Refuse to write over a folder or a file that is not a report of ours."""
    from imsearch_align.report_html.collect import ReportError

    if path.is_dir():
        raise ReportError(f"--output {str(path)!r} is a directory; expected an HTML file")
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb") as f:
        head = f.read(4096)
    if f'<meta name="generator" content="{GENERATOR}">'.encode() not in head:
        raise ReportError(
            f"--output {str(path)!r} exists and is not a report written by imsearch-align; "
            "expected a new file or an earlier report (move the file away to replace it)"
        )
