"""``imsearch-align study``: the collection study (:func:`imsearch_align.study.run_study`).

Every :class:`~imsearch_align.study.StudySpec` field is a flag
(:mod:`imsearch_align.study.flags`); ``--config study.yaml`` reads a study
file and the flags given win. A bad field is one ``error:`` line, exit 2,
before any data is loaded; data that cannot be loaded exits 1; then 0 when
every cell is ok, 1 when a cell failed or a store was unreachable, 130 on
Ctrl-C and 143 on SIGTERM (the finished cells' tables written first; the
same command with ``--skip-existing`` goes on).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from imsearch_align.cli.config_flags import read_config
from imsearch_align.cli.run import Terminated, sigterm_as_ctrl_c
from imsearch_align.study import StudyDataError, StudySpec, run_study, summary
from imsearch_align.study.flags import add_spec_flags, spec_mapping

__all__ = ["add_study_command", "cmd_study"]

_DESCRIPTION = """For each method, direction, support size and collection size (the test split plus
that many distractors), every index setting of every store is built and its search
settings swept: quality exact and approximate, ANN recall, queries/s, latency, build
cost and memory; filtered search and concurrent clients on each build's deployable
setting. One JSON per cell, a CSV, a leaderboard and figures in --out.

Every flag is a field of the study spec (imsearch_align.study.StudySpec); --config
reads a YAML or JSON study file and the flags given win. A bad value: one error line,
exit 2, before any data is loaded. Exit 0 every cell ok; 1 a cell failed, a store was
unreachable or the data could not be loaded; 130 interrupted, 143 terminated (the
finished cells are kept: the same command with --skip-existing goes on)."""

_EPILOG = """examples:
  imsearch-align study --shapes 120 --quick                    # offline, a couple of minutes
  imsearch-align study --config benchmarks/studies/default.yaml --shapes-root DIR
  imsearch-align study --embeddings DIR --stores faiss milvus --uri http://127.0.0.1:19530
  imsearch-align study --embeddings DIR --filters 0.5 0.1 0.01 --concurrency 1 2 4 8 16
"""


def add_study_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The ``study`` sub-command."""
    p = sub.add_parser(
        "study",
        parents=parents,
        help="the collection study: methods x stores x index settings x collection sizes",
        description=_DESCRIPTION,
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_spec_flags(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=sigterm_as_ctrl_c(cmd_study))


def cmd_study(args: argparse.Namespace) -> int:
    """Run the study of the flags (and ``--config``); print its table; the exit status."""
    from_file = read_config(args.config) if getattr(args, "config", None) else None
    spec = StudySpec.from_dict(spec_mapping(args, from_file))
    try:
        result = run_study(spec, progress=not args.no_progress)
    except StudyDataError as exc:
        if args.traceback:
            raise
        print(f"error: {exc}\n(run with --traceback for details)", file=sys.stderr)
        return 1
    print(summary(result))
    if isinstance(result.stopped_by, Terminated):
        print("terminated (SIGTERM): the finished cells are kept; run the same command with "
              "--skip-existing to go on", file=sys.stderr)  # fmt: skip
        return 143
    if result.interrupted:
        print("interrupted: the finished cells are kept; run the same command with "
              "--skip-existing to go on", file=sys.stderr)  # fmt: skip
    return result.exit_code
