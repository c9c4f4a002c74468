"""The page's parts as HTML: tables, the leaderboard, the provenance, a figure, a note. All escaped.

The leaderboard is :func:`imsearch_align.leaderboard.to_markdown`'s table
(same rows, order, columns, status and bold best), turned into an HTML
table; the provenance table groups the results and cells by the
environment they were measured in.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape
from typing import Any

from imsearch_align.experiment.provenance import Provenance
from imsearch_align.experiment.result import ExperimentResult
from imsearch_align.leaderboard import results_frame, to_markdown
from imsearch_align.report_html.commands import redact
from imsearch_align.report_html.svg import Figure, legend_items, render, swatch

__all__ = [
    "commands_html",
    "esc",
    "figure_html",
    "leaderboard_html",
    "note_html",
    "provenance_html",
    "table_html",
]

_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_BOLD = re.compile(r"\*\*(.*)\*\*")


def esc(text: Any) -> str:
    """``text`` for HTML: URIs without user information, then escaped."""
    return escape(redact(str(text)), quote=True)


def note_html(text: str) -> str:
    """A one-line note (why a section is not there)."""
    return f'<p class="note">{esc(text)}</p>'


def _md_cells(line: str) -> list[str]:
    inner = line.strip()[1:-1]
    return [c.strip().replace("\\|", "|") for c in _CELL_SPLIT.split(inner)]


def _cell_html(text: str, tag: str, right: bool, status: bool) -> str:
    cls = []
    if right:
        cls.append("num")
    if status and text:
        cls.append(f"st-{text.split(':', 1)[0].strip().lower()}")
    attr = f' class="{" ".join(cls)}"' if cls else ""
    m = _BOLD.fullmatch(text)
    body = f"<strong>{esc(m.group(1))}</strong>" if m and tag == "td" else esc(text)
    return f"<{tag}{attr}>{body}</{tag}>"


def table_html(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[bool],
    status: Sequence[bool],
    cls: str = "board",
) -> str:
    """An HTML table of cell texts (``**x**`` is bold in a body cell): ``right`` marks the
    right-aligned (numeric) columns, ``status`` the status column (coloured by its state)."""
    out = [f'<div class="scroll"><table class="{esc(cls)}">', "<thead><tr>"]
    out += [_cell_html(h, "th", r, False) for h, r in zip(header, right)]
    out.append("</tr></thead><tbody>")
    for cells in rows:
        out.append(
            "<tr>"
            + "".join(_cell_html(c, "td", r, s) for c, r, s in zip(cells, right, status))
            + "</tr>"
        )
    out.append("</tbody></table></div>")
    return "\n".join(out)


def leaderboard_html(results: Sequence[ExperimentResult]) -> str:
    """The leaderboard of ``results`` as an HTML table, with its legend."""
    md = to_markdown(results_frame(results))
    lines = md.splitlines()
    table = [ln for ln in lines if ln.startswith("|")]
    legend = [ln for ln in lines if ln.strip() and not ln.startswith("|")]
    header, align, rows = _md_cells(table[0]), _md_cells(table[1]), table[2:]
    right = [a.endswith(":") and not a.startswith(":") for a in align]
    status = [h.lower() == "status" for h in header]
    out = [table_html(header, [_md_cells(row) for row in rows], right, status)]
    out += [f'<p class="legend-text">{esc(t)}</p>' for t in legend]
    return "\n".join(out)


def commands_html(cmds: Sequence[str], what: str = "the data") -> str:
    """A folding block of the command lines that made ``what`` ("" when there are none);
    open when there are three or fewer."""
    if not cmds:
        return ""
    code = "\n".join(esc(c) for c in cmds)
    return (
        f"<details{'' if len(cmds) > 3 else ' open'}><summary>{len(cmds)} command(s) that "
        f"made {esc(what)}</summary><pre><code>{code}</code></pre></details>"
    )


def _env_row(p: Provenance) -> dict[str, str]:
    v = p.versions
    blas = ", ".join(
        f"{b.get('internal_api')} {b.get('version') or ''} ×{b.get('num_threads')}".replace(
            "  ", " "
        )
        for b in p.blas
    )
    store = p.store or {}
    store_text = ", ".join(f"{k} {val}" for k, val in sorted((store.get("packages") or {}).items()))
    if store.get("server_version"):
        store_text = f"server {store['server_version']}; {store_text}"
    pkgs = ", ".join(f"{k} {val}" for k, val in sorted(v.items()) if k != "imsearch-align")
    return {
        "imsearch-align": v.get("imsearch-align", ""),
        "git commit": (p.git_commit or "")[:12],
        "Python": p.python,
        "machine": " · ".join(
            x for x in (p.platform, p.cpu, f"{p.cpu_count} cores" if p.cpu_count else "") if x
        ),
        "GPU": p.gpu or "none",
        "BLAS": blas,
        "store": store_text,
        "packages": pkgs,
    }


def provenance_html(items: Sequence[tuple[str, Provenance]]) -> str:
    """One row per environment: what measured the results (``(name, provenance)`` pairs)."""
    groups: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for name, p in items:
        groups.setdefault(tuple(_env_row(p).items()), []).append(name)
    cols = list(_env_row(Provenance()))
    out = ['<div class="scroll"><table class="prov"><thead><tr><th>results</th>']
    out += [f"<th>{esc(c)}</th>" for c in cols]
    out.append("</tr></thead><tbody>")
    for row, names in groups.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        out.append(f'<tr><td title="{esc(", ".join(names))}">{len(names)}: {esc(shown)}</td>')
        out += [f"<td>{esc(val)}</td>" for _, val in row]
        out.append("</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def figure_html(fig: Figure, fig_id: str) -> str:
    """A ``<figure>``: the SVG chart, its legend, caption, notes and the commands behind it."""
    items = "".join(
        f"<li>{swatch(c, s, d)}<span>{esc(label)}</span></li>"
        for c, s, d, label in legend_items(fig.chart)
    )
    cmd_block = commands_html(fig.commands)
    notes = "".join(f"<li>{esc(n)}</li>" for n in fig.notes)
    return (
        f'<figure class="chart" id="{esc(fig_id)}">\n{render(fig.chart)}\n'
        f'<ul class="legend">{items}</ul>\n'
        f"<figcaption><b>{esc(fig.chart.title)}.</b> {esc(fig.caption)}"
        f"{f'<ul class=notes>{notes}</ul>' if notes else ''}{cmd_block}</figcaption>\n</figure>"
    )
