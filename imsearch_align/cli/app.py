"""The ``imsearch-align`` parser and ``main``: sub-commands, plug-ins, exit status.

Each command group adds its sub-commands (:mod:`.run`: eval and sweep,
:mod:`.report`: build and plot, :mod:`.embed`, :mod:`.listing`: list,
:mod:`.doctor`); :func:`main` parses, loads ``--plugin`` modules, runs the
command and turns errors into the exit status (see the package docstring).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import Any

from imsearch_align.cli.common import UsageError
from imsearch_align.cli.config_flags import GIVEN, given_flags
from imsearch_align.cli.doctor import add_doctor_command
from imsearch_align.cli.embed import add_embed_command
from imsearch_align.cli.listing import add_list_command
from imsearch_align.cli.report import add_report_commands
from imsearch_align.cli.run import Terminated, add_run_commands
from imsearch_align.cli.study import add_study_command
from imsearch_align.report_html.cli import add_report_command

__all__ = ["build_parser", "main", "verbosity"]


class _Parser(argparse.ArgumentParser):
    """No prefix abbreviations: flags given on the command line are detected
    by name (they override --config), so --meth must not mean --method."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("allow_abbrev", False)
        super().__init__(*a, **kw)


def _common_parent(*, top: bool) -> argparse.ArgumentParser:
    """``--plugin``, ``-v`` and ``--traceback``, accepted before and after the
    command; the sub-command's copies have no default, so they never erase what
    was given before the command (its ``-v`` count is added to the one before)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        default=None if top else argparse.SUPPRESS,
        help="import MODULE first: it registers stores, methods, encoders, datasets or tasks "
        "(repeatable; also IMSEARCH_ALIGN_PLUGINS=mod1,mod2)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        dest="verbose" if top else "verbose_after",
        default=0 if top else argparse.SUPPRESS,
        help="log more (-vv: debug)",
    )
    p.add_argument(
        "--traceback",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="show the full traceback of a failure",
    )
    return p


def build_parser() -> argparse.ArgumentParser:
    """The ``imsearch-align`` argument parser."""
    plugin = _common_parent(top=False)
    p = argparse.ArgumentParser(
        prog="imsearch-align",
        allow_abbrev=False,
        parents=[_common_parent(top=True)],
        description="How well do aligned image-text embedding spaces search in real vector stores, and how fast?",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    add_run_commands(sub, [plugin])
    add_study_command(sub, [plugin])
    add_report_commands(sub, [plugin])
    add_report_command(sub, [plugin])
    add_embed_command(sub, [plugin])
    add_list_command(sub, [plugin])
    add_doctor_command(sub, [plugin])
    return p


#: Commands that run work with the registries' names: a plug-in module of
#: IMSEARCH_ALIGN_PLUGINS that fails to import stops them, as a --plugin one does
#: (``list`` and ``doctor`` report it instead).
_STRICT_ENV_PLUGINS = ("eval", "sweep", "study", "embed")


def _load_plugins(modules: Sequence[str] | None, command: str) -> None:
    from imsearch_align.framework.plugins import (
        ENV_VAR,
        PluginError,
        load_plugins,
        plugin_modules_from_env,
    )

    env = plugin_modules_from_env()
    if env and command in _STRICT_ENV_PLUGINS:
        try:
            load_plugins(env, source=ENV_VAR, strict=True)
        except PluginError as exc:
            raise UsageError(f"{ENV_VAR}: {exc}") from None
    if not modules:
        return
    try:
        load_plugins(list(modules), strict=True)
    except PluginError as exc:
        raise UsageError(f"--plugin: {exc}") from None


def verbosity(args: argparse.Namespace) -> int:
    """How many ``-v`` were given, before and after the command."""
    return int(args.verbose) + int(getattr(args, "verbose_after", 0))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (see the package docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    setattr(args, GIVEN, given_flags(argv))
    v = verbosity(args)
    level = logging.WARNING if v == 0 else logging.INFO if v == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    from imsearch_align.experiment import ConfigError
    from imsearch_align.experiment.tasks import TaskUnsupportedError
    from imsearch_align.framework.registry import PluginError, UnknownNameError

    try:
        _load_plugins(args.plugin, args.command)
        return int(args.func(args))
    except (UnknownNameError, PluginError, UsageError, ConfigError, TaskUnsupportedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Terminated:
        print("terminated (SIGTERM): finished search batches are checkpointed; run the same "
              "command to resume", file=sys.stderr)  # fmt: skip
        return 143
    except KeyboardInterrupt:
        print("interrupted: finished search batches are checkpointed; run the same command to resume",
              file=sys.stderr)  # fmt: skip
        return 130
    except Exception as exc:
        if args.traceback:
            raise
        print(
            f"error: {type(exc).__name__}: {exc}\n(run with --traceback for details)",
            file=sys.stderr,
        )
        return 1
