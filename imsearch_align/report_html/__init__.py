"""A report people open: one self-contained HTML page from a results folder.

``imsearch-align report DIR`` (:mod:`.cli`) writes ``DIR/report.html``: the
leaderboard with status and provenance, quality against queries/s per
collection size with the Pareto frontier and the exact ceiling, quality
against collection size, learning curves, and the concurrency and filter
charts; each figure names the commands that made its data. A section whose
kind of result the folder lacks is a one-line note. Everything is inline
(no script, style or font is fetched), text is escaped and URIs lose their
``user:password@``.

    from imsearch_align.report_html import write_report
    write_report("results/")            # -> results/report.html

Study cells (collection scale, concurrency, filtered search) are read
through :mod:`imsearch_align.experiment.study_cell`, their one reader, besides
experiment results. Rooms: :mod:`.collect` finds both in a folder; :mod:`.commands` writes the command
line of a recorded config; :mod:`.svg` draws charts; :mod:`.quality`,
:mod:`.learning` and :mod:`.production` make the figures; :mod:`.sections`
renders the tables and figures as HTML; :mod:`.study_board` tables the
collection-scale cells for the leaderboard; :mod:`.page` assembles the page.
"""

from __future__ import annotations

from imsearch_align.experiment.study_cell import CELL_KINDS, CellError, StudyCell, read_cell
from imsearch_align.report_html.collect import Collected, ReportError, collect
from imsearch_align.report_html.page import build_page, write_report
from imsearch_align.report_html.quality import pareto_frontier

__all__ = [
    "CELL_KINDS",
    "CellError",
    "Collected",
    "ReportError",
    "StudyCell",
    "build_page",
    "collect",
    "pareto_frontier",
    "read_cell",
    "write_report",
]
