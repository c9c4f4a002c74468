"""``eval`` and ``sweep``: run one experiment, or a grid of them, and report.

Both take every config field as a flag (:mod:`.config_flags`, over a
``--config`` file) and check every config before any work: its names and
parameters once (:func:`~imsearch_align.experiment.components.preflight`),
its output name and folder; a problem exits 2. A run that failed exits 1,
one that finished degraded 3 (0 with ``--allow-failures``); a finished run
whose result cannot be written (a full disk) prints its table, then the file
it could not write, and exits 1. SIGTERM is taken as Ctrl-C
(:class:`Terminated`): finished search batches are checkpointed, exit 143.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from imsearch_align.cli.common import UsageError, note, warn
from imsearch_align.cli.config_flags import add_config_flags, config_mapping, value_type

__all__ = [
    "Terminated",
    "add_run_commands",
    "cmd_eval",
    "cmd_sweep",
    "exit_status",
    "sigterm_as_ctrl_c",
]

#: The config field a sweep varies by an axis flag of the same name (a list).
_SWEPT = ("n_support",)


class Terminated(KeyboardInterrupt):
    """SIGTERM during ``eval`` or ``sweep``: raised in the main thread, so the run
    stops as on Ctrl-C (queued batches cancelled, finished ones checkpointed)."""


def sigterm_as_ctrl_c(command: Callable[[argparse.Namespace], int]) -> Callable[..., int]:
    """While ``command`` runs, SIGTERM raises :class:`Terminated` (main thread only)."""

    def _raise(signum: int, frame: Any) -> None:
        raise Terminated

    @functools.wraps(command)
    def run(args: argparse.Namespace) -> int:
        if threading.current_thread() is not threading.main_thread():
            return command(args)
        previous = signal.signal(signal.SIGTERM, _raise)
        try:
            return command(args)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return run


# ----------------------------------------------------------------------------- parser


def _add_sweep_axes(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--n-support",
        nargs="+",
        type=value_type("n_support"),
        metavar="N",
        help="support sizes to sweep ('all' = every support pair)",
    )
    g.add_argument("--methods", nargs="+", metavar="NAME", help="methods to sweep")
    g.add_argument("--stores", nargs="+", metavar="NAME", help="stores to sweep")
    g.add_argument(
        "--on-error",
        choices=("record", "raise"),
        default="record",
        help="record a failed cell and go on (default), or stop at the first",
    )


def _add_output_args(o: argparse._ArgumentGroup) -> None:
    o.add_argument(
        "--output-dir",
        default="results",
        metavar="DIR",
        help="where result files go (default results)",
    )
    o.add_argument(
        "--output",
        default=None,
        metavar="TEMPLATE",
        help="file-name template (default {dataset}_{method}_{store}_{n}.json; fields: dataset "
        "method store n seed task image_encoder text_encoder key name; '/' makes folders)",
    )
    o.add_argument(
        "--skip-existing",
        action="store_true",
        help="keep a clean result of the same config; run degraded, failed or other ones",
    )
    o.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 even when a run is degraded (failed queries)",
    )
    o.add_argument("--no-progress", action="store_true", help="no progress bars")  # fmt: skip


def add_run_commands(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The ``eval`` and ``sweep`` sub-commands."""
    e = sub.add_parser("eval", parents=parents, help="run one experiment",
                       description="Run one experiment and write its result JSON.")  # fmt: skip
    add_config_flags(e.add_argument_group("experiment (flags override --config)"))
    _add_output_args(e.add_argument_group("output"))
    e.set_defaults(func=cmd_eval)
    s = sub.add_parser("sweep", parents=parents, help="run a grid: N x methods x stores",
                       description="Run the grid --n-support x --methods x --stores.")  # fmt: skip
    add_config_flags(
        s.add_argument_group("experiment (flags override --config)"),
        axes=dict.fromkeys(_SWEPT, _add_sweep_axes),
    )
    _add_output_args(s.add_argument_group("output"))
    s.set_defaults(func=cmd_sweep)


# ----------------------------------------------------------------------------- checks


def _make_config(data: dict[str, Any]) -> Any:
    from imsearch_align.experiment import ConfigError, ExperimentConfig

    try:
        return ExperimentConfig.from_dict(data)
    except ConfigError as exc:
        raise UsageError(f"config: {exc}") from None


def _note_defaults(data: dict[str, Any]) -> None:
    """Say which dataset runs when neither the flags nor ``--config`` name one."""
    if "dataset" not in data:
        from imsearch_align.experiment import ExperimentConfig

        default = ExperimentConfig.__dataclass_fields__["dataset"].default
        note(f"no --dataset given (nor in --config): running the default dataset {default!r}")


def _fit_support_defaults(configs: Sequence[Any]) -> list[Any]:
    """A method default counting support pairs that exceeds a cell's ``n_support``
    (ASIF's ``non_zeros=800`` at N=100) is set to N, with a warning, as
    ``benchmarks/flickr.py`` does: the cell runs, and its result records the
    value used. A value given is kept (preflight refuses one above N)."""
    from imsearch_align.experiment.value_checks import support_bound_default

    out, changed = [], {}
    for cfg in configs:
        found = support_bound_default(cfg.method)
        if found is None or cfg.n_support is None or found[0] in cfg.method_params:
            out.append(cfg)
            continue
        param, _, default = found
        if isinstance(default, int) and not isinstance(default, bool) and default > cfg.n_support:
            cfg = cfg.replace(method_params={**cfg.method_params, param: cfg.n_support})
            changed.setdefault((cfg.method, param, default), []).append(cfg.n_support)
        out.append(cfg)
    for (method, param, default), ns in changed.items():
        shown = ", ".join(map(str, sorted(set(ns))))
        warn(f"method {method!r}: its default {param}={default} exceeds --n-support {shown}; "
             f"using {param}=N for N={shown} (pass --method-param {param}=K to choose)")  # fmt: skip
    return out


def _preflight(configs: Sequence[Any], args: argparse.Namespace) -> tuple[Path, str]:
    """Every config's names, parameters and output name checked before any work."""
    from imsearch_align.experiment import DEFAULT_OUTPUT_TEMPLATE, ConfigError, check_writable
    from imsearch_align.experiment.components import preflight
    from imsearch_align.framework.registry import TASKS

    template = args.output or DEFAULT_OUTPUT_TEMPLATE
    out = Path(args.output_dir)
    try:
        for cfg in configs:
            preflight(cfg, TASKS.get(cfg.task))
            name = cfg.output_name(template)
            check_writable((out / name).parent)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    except PermissionError as exc:
        raise UsageError(f"--output-dir: {exc}; choose a writable folder") from None
    return out, template


def exit_status(results: Sequence[Any], allow_failures: bool) -> int:
    """The exit status of runs: 1 if one failed, 3 if one is degraded (0 with
    ``allow_failures``), else 0 (also used by ``benchmarks/flickr.py``)."""
    states = {r.status.state for r in results}
    if "failed" in states:
        return 1
    if "degraded" in states and not allow_failures:
        return 3
    return 0


def _run_kw(args: argparse.Namespace, out: Path, template: str) -> dict[str, Any]:
    return {
        "output_dir": out,
        "output_template": template,
        "skip_existing": args.skip_existing,
        "progress": not args.no_progress,
        "preflighted": True,  # _preflight checked every config
    }


# ----------------------------------------------------------------------------- eval


def _unsaved(exc: Any) -> int:
    """A finished run whose result could not be written: its table, then the file, exit 1."""
    print(exc.result.summary())
    print(f"error: {exc}", file=sys.stderr)
    return 1


@sigterm_as_ctrl_c
def cmd_eval(args: argparse.Namespace) -> int:
    """``eval``: one experiment."""
    from imsearch_align.experiment import ExperimentError, run_experiment
    from imsearch_align.experiment.output import ResultWriteError

    data, _ = config_mapping(args)
    _note_defaults(data)
    (cfg,) = _fit_support_defaults([_make_config(data)])
    out, template = _preflight([cfg], args)
    t = time.perf_counter()
    try:
        result = run_experiment(cfg, **_run_kw(args, out, template))
    except ResultWriteError as exc:
        return _unsaved(exc)
    except ExperimentError as exc:
        print(exc.result.summary())
        print(f"error: {exc}", file=sys.stderr)
        print(f"result: {exc.result.path} (status failed)", file=sys.stderr)
        return 1
    print(result.summary())
    if result.skipped:
        print(f"skipped: {result.path} holds this config's clean result (--skip-existing)")
    else:
        print(
            f"result: {result.path}  ({time.perf_counter() - t:.1f}s, status {result.status.state})"
        )
    code = exit_status([result], args.allow_failures)
    if code == 3:
        print(f"error: the run is degraded ({'; '.join(result.status.reasons)}); the numbers above do not "
              "measure every query. Fix the cause and run again, or pass --allow-failures", file=sys.stderr)  # fmt: skip
    return code


# ----------------------------------------------------------------------------- sweep


def _sweep_params(
    names: Sequence[str] | None,
    base_params: dict[str, Any],
    scoped: dict[str, dict[str, Any]],
    kind: str,
) -> dict[str, dict[str, Any]] | None:
    if not names:
        if scoped:
            raise UsageError(f"--{kind}-param NAME:KEY=VALUE needs --{kind}s naming NAME")
        return None
    unknown = sorted(set(scoped) - set(names))
    if unknown:
        raise UsageError(
            f"--{kind}-param is scoped to {unknown}, which --{kind}s does not list ({list(names)})"
        )
    return {n: {**base_params, **scoped.get(n, {})} for n in names}


def _short(text: str, width: int = 80) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _sweep_table(results: Sequence[Any]) -> str:
    from imsearch_align.experiment.report import headline_columns
    from imsearch_align.leaderboard import DEFAULT_METRICS, results_frame, to_markdown

    df = results_frame(results)
    cand = [*headline_columns(list(df.columns)), *DEFAULT_METRICS, "t2i.queries_per_s", "fit_s"]
    cols = ["method", "store", "n_support_pairs", *(c for c in cand if c in df.columns), "status"]
    if "error" in df.columns and df["error"].notna().any():
        df = df.assign(error=df["error"].map(lambda e: e if not isinstance(e, str) else _short(e)))
        cols.append("error")
    return to_markdown(df, sort=False, columns=cols, bold_best=False)


@sigterm_as_ctrl_c
def cmd_sweep(args: argparse.Namespace) -> int:
    """``sweep``: the grid n_support x methods x stores."""
    from imsearch_align.experiment import grid, sweep
    from imsearch_align.experiment.output import ResultWriteError

    data, scoped = config_mapping(args, swept=_SWEPT)
    _note_defaults(data)
    cfg = _make_config(data)
    mp = _sweep_params(args.methods, dict(cfg.method_params), scoped["method_params"], "method")
    sp = _sweep_params(args.stores, dict(cfg.store_params), scoped["store_params"], "store")
    try:
        configs = grid(cfg, n_values=args.n_support, methods=args.methods, stores=args.stores,
                       method_params=mp, store_params=sp)  # fmt: skip
    except ValueError as exc:
        raise UsageError(f"config: {exc}") from None
    configs = _fit_support_defaults(configs)
    out, template = _preflight(configs, args)
    t = time.perf_counter()
    try:
        results = sweep(configs, **_run_kw(args, out, template), on_error=args.on_error)
    except ResultWriteError as exc:  # --on-error raise (recorded as a failed cell otherwise)
        return _unsaved(exc)
    print()
    print(_sweep_table(results), end="")
    states = [r.status.state for r in results]
    print(
        f"{len(results)} runs ({states.count('failed')} failed, {states.count('degraded')} degraded, "
        f"{sum(r.skipped for r in results)} skipped) in {time.perf_counter() - t:.1f}s; results in {out}/"
    )
    return exit_status(results, args.allow_failures)
