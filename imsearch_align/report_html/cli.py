"""``imsearch-align report DIR``: the command that writes the HTML report.

:func:`add_report_command` adds the sub-command to the CLI's sub-parsers;
:func:`run_report` runs it: exit 0 with the page written, 2 with one line
``error: ...`` for a folder that is missing or holds no result.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

__all__ = ["add_report_command", "run_report"]


def add_report_command(sub: Any, parents: list[argparse.ArgumentParser] | None = None) -> None:
    """The ``report`` sub-command (``parents``: the CLI's shared options, such as ``--plugin``)."""
    p = sub.add_parser(
        "report",
        parents=parents or [],
        help="write one self-contained HTML page from a results folder",
        description="Write one self-contained HTML page (no network needed to view it) from the "
        "results under DIR: the leaderboard with status and provenance, quality against "
        "queries/s per collection size with the Pareto frontier, quality against collection "
        "size, learning curves, concurrency and filtered-search charts.",
    )
    p.add_argument("dir", metavar="DIR", help="results folder (searched recursively)")
    p.add_argument(
        "--output",
        "-o",
        metavar="HTML",
        default=None,
        help="the page to write (default DIR/report.html)",
    )
    p.set_defaults(func=run_report)


def run_report(args: argparse.Namespace) -> int:
    """``report``: collect DIR's results, write the page, print its path."""
    from imsearch_align.report_html.collect import ReportError
    from imsearch_align.report_html.commands import redact
    from imsearch_align.report_html.page import write_report

    words = ["imsearch-align", "report", args.dir]
    if args.output:
        words += ["--output", args.output]
    try:
        path = write_report(args.dir, args.output, command=shlex.join(words))
    except ReportError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"error: --output {args.output or 'DIR/report.html'!r} cannot be written: "
            f"{exc.strerror or exc}",
            file=sys.stderr,
        )
        return 2
    print(path)
    return 0
