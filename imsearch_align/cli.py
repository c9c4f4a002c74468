"""``imsearch-align``: the command line.

    imsearch-align eval  --dataset shapes --method csa --store faiss --n-support 1000
    imsearch-align sweep --config base.yaml --methods csa asif procrustes --n-support 100 1000 all
    imsearch-align build results/ --output benchmark.csv --markdown leaderboard.md
    imsearch-align plot  results/ --output-dir plots
    imsearch-align embed --dataset shapes --image-encoder efficientnet-lite0 --text-encoder sentence-transformers
    imsearch-align eval  --task matching --dataset shapes --method csa
    imsearch-align list [datasets [NAME]|encoders|methods|stores|tasks|metrics|perturbations]
    imsearch-align doctor [--uri http://localhost:19530]

Conventions follow CLIP_benchmark: ``--output`` is a file-name template
(default ``{dataset}_{method}_{store}_{n}.json``), ``--skip-existing``
resumes a benchmark (a degraded or failed result is run again), ``build``
merges result JSONs into a CSV. ``--plugin MODULE`` (any command, repeatable)
imports a module that registers stores, methods, encoders, datasets or tasks.

Exit status: 0 success; 1 a run failed; 2 a usage error (unknown name, bad
config key or type, bad output template, unwritable output folder) found
before any work; 3 a run finished **degraded** (failed queries: the numbers
are not the full measurement; ``--allow-failures`` makes it 0); 130
interrupted (Ctrl-C: finished batches are checkpointed).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "exit_status", "main"]

log = logging.getLogger("imsearch_align.cli")


class UsageError(Exception):
    """A user error found before any work: printed as ``error: ...``, exit 2."""


# ----------------------------------------------------------------------------- argument types


#: Python spellings of JSON's literals: ``--method-param equal_weights=False``
#: must not be the (truthy) string "False".
_PY_LITERALS = {"True": True, "False": False, "None": None}


def _json_or_str(text: str) -> Any:
    if text.strip() in _PY_LITERALS:
        return _PY_LITERALS[text.strip()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` (VALUE parsed as JSON when it is JSON, else a string);
    ``NAME:KEY=VALUE`` scopes it to one method/store in a sweep."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE (e.g. sim_dim=256 or uri=http://host:19530), got {text!r}"
        )
    return key.strip(), _json_or_str(value)


def _n_support(text: str) -> int | None:
    if text.lower() in ("all", "none"):
        return None
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer or 'all', got {text!r}"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'all', got {n}")
    return n


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def _encoder_name(text: str) -> str | None:
    return None if text.lower() in ("none", "null", "") else text


def _cache_dir(text: str) -> str | None:
    return None if text.lower() in ("none", "null", "") else text


# ----------------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """No prefix abbreviations: flags given on the command line are detected
    by name (they override --config), so --meth must not mean --method."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("allow_abbrev", False)
        super().__init__(*a, **kw)


def _plugin_parent(*, top: bool) -> argparse.ArgumentParser:
    """``--plugin``, accepted before and after the command; the sub-command's copy
    has no default, so it never erases modules given before the command."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    p.add_argument(
        "--plugin",
        action="append",
        metavar="MODULE",
        default=None if top else argparse.SUPPRESS,
        help="import MODULE first: it registers stores, methods, encoders, datasets or tasks "
        "(repeatable; also IMSEARCH_ALIGN_PLUGINS=mod1,mod2)",
    )
    return p


def _add_component_args(g: argparse._ArgumentGroup, *, sweep: bool) -> None:
    scoped = "; NAME:KEY=VALUE for one name of --{}s" if sweep else ""
    g.add_argument("--config", metavar="FILE", help="YAML or JSON file of ExperimentConfig fields")
    g.add_argument("--dataset", help="DATASETS name (imsearch-align list datasets [NAME])")
    g.add_argument(
        "--dataset-param",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="dataset loader argument (repeatable; VALUE parsed as JSON when possible)",
    )
    g.add_argument(
        "--support-dataset",
        metavar="NAME",
        help="fit the alignment on this dataset's pairs (zero-shot protocol)",
    )
    g.add_argument("--support-dataset-param", action="append", type=_key_value, metavar="KEY=VALUE")
    for side in ("image", "text"):
        g.add_argument(
            f"--{side}-encoder",
            type=_encoder_name,
            metavar="NAME",
            help="ENCODERS name; 'none' uses the dataset's own embeddings",
        )
        g.add_argument(
            f"--{side}-encoder-param", action="append", type=_key_value, metavar="KEY=VALUE"
        )
    g.add_argument("--method", help="METHODS name (csa, asif, cka, procrustes, linear, identity)")
    g.add_argument(
        "--method-param",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="method argument (repeatable)" + scoped.format("method"),
    )
    g.add_argument("--store", help="STORES name (faiss, exact, milvus, lancedb, qdrant...)")
    g.add_argument(
        "--store-param",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="store argument, e.g. uri=http://127.0.0.1:19530" + scoped.format("store"),
    )
    g.add_argument("--task", metavar="NAME", help="TASKS name (imsearch-align list tasks)")
    g.add_argument("--task-param", action="append", type=_key_value, metavar="KEY=VALUE",
                   help="task argument, e.g. candidates=100 for matching")  # fmt: skip


def _add_run_args(g: argparse._ArgumentGroup, *, sweep: bool) -> None:
    if sweep:
        g.add_argument(
            "--n-support",
            nargs="+",
            type=_n_support,
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
    else:
        g.add_argument(
            "--n-support", type=_n_support, metavar="N", help="support pairs ('all' = every pair)"
        )
    g.add_argument("--seed", type=int)
    g.add_argument(
        "--k", nargs="+", type=_positive_int, metavar="K", help="cutoffs (default 1 5 10)"
    )
    g.add_argument("--directions", nargs="+", choices=("t2i", "i2t"))
    g.add_argument("--ensemble", choices=("mean", "best"), help="classification prompt ensembling")
    g.add_argument(
        "--perturbations",
        nargs="+",
        metavar="NAME",
        help="query perturbations to also evaluate (imsearch-align list perturbations)",
    )
    g.add_argument(
        "--perturbation-param",
        action="append",
        type=_key_value,
        metavar="NAME:KEY=VALUE",
        help="a perturbation's argument, e.g. typo:rate=0.2 (repeatable)",
    )
    g.add_argument(
        "--ann-fidelity",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also report the store's recall@k against exact search (true inner products)",
    )
    g.add_argument(
        "--diagnostics",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="embedding-space geometry of the raw and aligned spaces",
    )
    g.add_argument(
        "--cache-dir", type=_cache_dir, metavar="DIR", help="embedding cache ('none' disables)"
    )
    g.add_argument("--batch-size", type=_positive_int, metavar="N", help="queries per store call")
    g.add_argument(
        "--encode-batch-size", type=_positive_int, metavar="N", help="items per encoder pass"
    )
    g.add_argument("--workers", type=_positive_int, metavar="N", help="concurrent search threads")
    g.add_argument("--name", help="a free label stored in the result")  # fmt: skip


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


def _add_experiment_args(p: argparse.ArgumentParser, *, sweep: bool) -> None:
    g = p.add_argument_group("experiment (flags override --config)")
    _add_component_args(g, sweep=sweep)
    _add_run_args(g, sweep=sweep)
    _add_output_args(p.add_argument_group("output"))


def _add_report_commands(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
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
        "--output", default="benchmark.csv", metavar="CSV", help="CSV path (default benchmark.csv)"
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
    b.add_argument("--max-rows", type=_positive_int, metavar="N", help="leaderboard rows at most")
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


def _add_tool_commands(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    em = sub.add_parser(
        "embed", parents=parents, help="precompute a dataset's embeddings into the cache"
    )
    em.add_argument("--dataset", required=True)
    em.add_argument("--dataset-param", action="append", type=_key_value, metavar="KEY=VALUE")
    for side in ("image", "text"):
        em.add_argument(f"--{side}-encoder", type=_encoder_name, metavar="NAME")
        em.add_argument(
            f"--{side}-encoder-param", action="append", type=_key_value, metavar="KEY=VALUE"
        )
    em.add_argument(
        "--cache-dir",
        type=_cache_dir,
        default=".cache/embeddings",
        metavar="DIR",
        help="embedding cache (default .cache/embeddings, what eval reads)",
    )
    em.add_argument(
        "--batch-size", type=_positive_int, default=32, metavar="N", help="items per encoder pass"
    )
    em.add_argument("--no-progress", action="store_true")
    em.set_defaults(func=cmd_embed)
    ls = sub.add_parser(
        "list",
        parents=parents,
        help="registered datasets, encoders, methods, stores, tasks, metrics, perturbations",
    )
    ls.add_argument("kind", nargs="?", choices=_LIST_KINDS, help="one kind (default all)")
    ls.add_argument("name", nargs="?", help="with 'datasets': describe one loader's parameters")
    ls.set_defaults(func=cmd_list)
    d = sub.add_parser(
        "doctor", parents=parents, help="versions, BLAS, GEMM speed, GPU, Milvus reachability"
    )
    d.add_argument("--uri", help="a Milvus URI to try (http://host:19530 or a Lite *.db path)")
    d.add_argument("--token", help="Milvus token (never printed)")
    d.add_argument("--no-gemm", action="store_true", help="skip the GEMM probes")
    d.add_argument(
        "--gemm-size", type=_positive_int, default=1024, metavar="N", help="GEMM probe size (N x N)"
    )
    d.set_defaults(func=cmd_doctor)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``imsearch-align`` argument parser."""
    plugin = _plugin_parent(top=False)
    p = argparse.ArgumentParser(
        prog="imsearch-align",
        allow_abbrev=False,
        parents=[_plugin_parent(top=True)],
        description="How well do aligned image-text embedding spaces search in real vector stores, and how fast?",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    p.add_argument("--traceback", action="store_true", help="show the full traceback of a failure")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    e = sub.add_parser("eval", parents=[plugin], help="run one experiment",
                       description="Run one experiment and write its result JSON.")  # fmt: skip
    _add_experiment_args(e, sweep=False)
    e.set_defaults(func=cmd_eval)
    s = sub.add_parser("sweep", parents=[plugin], help="run a grid: N x methods x stores",
                       description="Run the grid --n-support x --methods x --stores.")  # fmt: skip
    _add_experiment_args(s, sweep=True)
    s.set_defaults(func=cmd_sweep)
    _add_report_commands(sub, [plugin])
    _add_tool_commands(sub, [plugin])
    return p


# ----------------------------------------------------------------------------- config


_SCALAR_FLAGS = (
    "dataset", "support_dataset", "image_encoder", "text_encoder", "method", "store", "task",
    "seed", "ensemble", "ann_fidelity", "diagnostics", "batch_size", "encode_batch_size",
    "workers", "name", "cache_dir",
)  # fmt: skip
_PARAM_FLAGS = {
    "dataset_param": "dataset_params",
    "support_dataset_param": "support_dataset_params",
    "image_encoder_param": "image_encoder_params",
    "text_encoder_param": "text_encoder_params",
    "method_param": "method_params",
    "store_param": "store_params",
    "task_param": "task_params",
}
_GIVEN = "_given_flags"


def _read_config_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--config: file {str(p)!r} does not exist")
    try:
        text = p.read_text(encoding="utf-8-sig")
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:
        raise UsageError(f"--config: cannot parse {str(p)!r}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(
            f"--config: {str(p)!r} must hold a mapping of config fields, got {type(data).__name__}"
        )
    return data


def _split_scoped(
    pairs: Sequence[tuple[str, Any]] | None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    plain: dict[str, Any] = {}
    scoped: dict[str, dict[str, Any]] = {}
    for key, value in pairs or ():
        if ":" in key:
            name, _, k = key.partition(":")
            scoped.setdefault(name, {})[k] = value
        else:
            plain[key] = value
    return plain, scoped


def _perturbation_params(args: argparse.Namespace, data: dict[str, Any]) -> None:
    plain, scoped = _split_scoped(getattr(args, "perturbation_param", None))
    if plain:
        raise UsageError(
            f"--perturbation-param: expected NAME:KEY=VALUE, got {next(iter(plain))}=..."
        )
    if scoped:
        base = dict(data.get("perturbation_params") or {})
        for name, kv in scoped.items():
            base[name] = {**base.get(name, {}), **kv}
        data["perturbation_params"] = base


def _config_dict(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """The merged config mapping (file, then flags) and the scoped params of a sweep."""
    data = _read_config_file(args.config) if args.config else {}
    given = getattr(args, _GIVEN, set())
    for flag in _SCALAR_FLAGS:
        # 'none' encoders parse to None, so "given" is what tells them apart.
        if getattr(args, flag, None) is not None or flag in given:
            data[flag] = getattr(args, flag)
    for flag, key in (
        ("k", "k_values"),
        ("directions", "directions"),
        ("perturbations", "perturbations"),
    ):
        if getattr(args, flag, None) is not None:
            data[key] = list(getattr(args, flag))
    _perturbation_params(args, data)
    if not isinstance(args.n_support, list) and "n_support" in given:
        data["n_support"] = args.n_support
    scoped: dict[str, dict[str, dict[str, Any]]] = {}
    for flag, key in _PARAM_FLAGS.items():
        plain, sc = _split_scoped(getattr(args, flag, None))
        if sc and flag not in ("method_param", "store_param"):
            raise UsageError(
                f"--{flag.replace('_', '-')}: NAME:KEY=VALUE scoping is only for methods and stores"
            )
        if sc and args.command != "sweep":
            raise UsageError(
                f"--{flag.replace('_', '-')}: NAME:KEY=VALUE scoping is for sweep; use KEY=VALUE"
            )
        if plain:
            base = data.get(key) or {}
            if not isinstance(base, dict):
                raise UsageError(f"--config: {key} must be a mapping, got {type(base).__name__}")
            data[key] = {**base, **plain}
        scoped[key] = sc
    return data, scoped


def _make_config(data: dict[str, Any]) -> Any:
    from imsearch_align.experiment import ConfigError, ExperimentConfig

    try:
        return ExperimentConfig.from_dict(data)
    except ConfigError as exc:
        raise UsageError(f"config: {exc}") from None


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


# ----------------------------------------------------------------------------- printing


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def exit_status(results: Sequence[Any], allow_failures: bool) -> int:
    """The exit status of runs: 1 if one failed, 3 if one is degraded (0 with
    ``allow_failures``), else 0 (also used by ``benchmarks/flickr.py``)."""
    states = {r.status.state for r in results}
    if "failed" in states:
        return 1
    if "degraded" in states and not allow_failures:
        return 3
    return 0


# ----------------------------------------------------------------------------- commands


def _run_kw(args: argparse.Namespace, out: Path, template: str) -> dict[str, Any]:
    return {
        "output_dir": out,
        "output_template": template,
        "skip_existing": args.skip_existing,
        "progress": not args.no_progress,
    }


def cmd_eval(args: argparse.Namespace) -> int:
    """``eval``: one experiment."""
    from imsearch_align.experiment import ExperimentError, run_experiment

    data, _ = _config_dict(args)
    cfg = _make_config(data)
    out, template = _preflight([cfg], args)
    t = time.perf_counter()
    try:
        result = run_experiment(cfg, **_run_kw(args, out, template))
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


def _short(text: str, width: int = 80) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def cmd_sweep(args: argparse.Namespace) -> int:
    """``sweep``: the grid n_support x methods x stores."""
    from imsearch_align.experiment import grid, sweep

    data, scoped = _config_dict(args)
    cfg = _make_config(data)
    mp = _sweep_params(args.methods, dict(cfg.method_params), scoped["method_params"], "method")
    sp = _sweep_params(args.stores, dict(cfg.store_params), scoped["store_params"], "store")
    axes = {"n_values": args.n_support, "methods": args.methods, "stores": args.stores,
            "method_params": mp, "store_params": sp}  # fmt: skip
    try:
        configs = grid(cfg, **axes)
    except ValueError as exc:
        raise UsageError(f"config: {exc}") from None
    out, template = _preflight(configs, args)
    t = time.perf_counter()
    results = sweep(cfg, **axes, **_run_kw(args, out, template), on_error=args.on_error)
    print()
    print(_sweep_table(results), end="")
    states = [r.status.state for r in results]
    print(
        f"{len(results)} runs ({states.count('failed')} failed, {states.count('degraded')} degraded, "
        f"{sum(r.skipped for r in results)} skipped) in {time.perf_counter() - t:.1f}s; results in {out}/"
    )
    return exit_status(results, args.allow_failures)


def cmd_build(args: argparse.Namespace) -> int:
    """``build``: merge result JSONs into a CSV and a Markdown leaderboard."""
    from imsearch_align.leaderboard import (
        LeaderboardWarning,
        find_result_files,
        load_results,
        to_markdown,
    )

    try:
        files = find_result_files(args.paths)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeaderboardWarning)
        df = load_results(files)
    for w in caught:
        if issubclass(w.category, LeaderboardWarning):
            _warn(str(w.message))
    if df.empty:
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
    if args.markdown and args.markdown.lower() != "none":
        _write_text(Path(args.markdown), md, "--markdown")
        print(f", {args.markdown}", end="")
    print()
    bad = int((df["status"] != "ok").sum()) if "status" in df.columns else 0
    if bad:
        _warn(f"{bad} of {len(df)} results are not ok (see the status column)")
    return 0


def _write_text(path: Path, text: str, arg: str) -> None:
    from imsearch_align.framework.atomic import atomic_write

    try:
        atomic_write(path, text)
    except OSError as exc:
        raise UsageError(f"{arg} {str(path)!r} cannot be written: {exc.strerror or exc}") from None


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@" else "-" for c in s)


def _default_plot_metrics(results: Sequence[Any]) -> list[str]:
    keys = {k for r in results for k in r.metrics}
    wanted = ("t2i/HitRate@1", "i2t/HitRate@1", "classification/acc1", "matching/accuracy",
              "multilabel/mAP", "linear_probe/aligned_acc1", "captioning/bleu4")  # fmt: skip
    return [m for m in wanted if m in keys]


def cmd_plot(args: argparse.Namespace) -> int:
    """``plot``: learning curves per dataset and metric, recall vs QPS per dataset."""
    from imsearch_align.leaderboard import LeaderboardWarning, load_result_objects
    from imsearch_align.plots import learning_curve, recall_vs_qps

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeaderboardWarning)
        try:
            results = [r for r in load_result_objects(args.paths) if r.task is not None]
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
    for w in caught:
        _warn(str(w.message))
    if not results:
        print(f"error: no results with measurements in {' '.join(args.paths)}", file=sys.stderr)
        return 1
    out = Path(args.output_dir)
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
            _warn(f"no recall-vs-QPS plot for {ds}: {exc}")
    for p in written:
        print(p)
    return 0 if written else 1


def cmd_embed(args: argparse.Namespace) -> int:
    """``embed``: precompute a dataset's embeddings into the cache, split by
    split as ``eval`` reads them."""
    from imsearch_align.datasets.base import SUPPORT_SPLIT, TEST_SPLIT
    from imsearch_align.embedding import embed
    from imsearch_align.experiment import make_encoder
    from imsearch_align.framework.registry import DATASETS, ENCODERS

    loader = DATASETS.get(args.dataset)
    wanted = {"image": args.image_encoder, "text": args.text_encoder}
    for enc in wanted.values():
        if enc is not None:
            ENCODERS.get(enc)
    if not any(wanted.values()):
        raise UsageError("embed needs --image-encoder and/or --text-encoder")
    if args.cache_dir is None:
        raise UsageError("--cache-dir: embed writes the cache, so it cannot be 'none'")
    loaded = loader(**dict(args.dataset_param or ()))
    ds = loaded[0] if isinstance(loaded, tuple) else loaded
    cache = Path(args.cache_dir)
    before = {p for p in cache.rglob("*") if p.is_file()} if cache.exists() else set()
    rows, t0 = [], time.perf_counter()
    for modality, enc in wanted.items():
        if enc is None:
            continue
        provider = make_encoder(
            enc, modality, dict(getattr(args, f"{modality}_encoder_param") or ())
        )
        for split in (SUPPORT_SPLIT, TEST_SPLIT):
            ids = ds.split_ids(split, modality)
            if len(ids) == 0:
                continue
            t = time.perf_counter()
            arr = embed(ds, provider, modality, ids=ids, cache_dir=cache, batch_size=args.batch_size,
                        progress=not args.no_progress)  # fmt: skip
            rows.append([modality, enc, split, f"{arr.shape[0]} x {arr.shape[1]}", str(arr.dtype),
                         f"{time.perf_counter() - t:.2f}s"])  # fmt: skip
    from imsearch_align.experiment.report import text_table

    print(text_table(["modality", "encoder", "split", "shape", "dtype", "time"], rows))
    new = sorted(p for p in cache.rglob("*") if p.is_file() and p not in before)
    print(f"cache: {cache}  ({len(new)} new files, {time.perf_counter() - t0:.1f}s)")
    for p in new:
        print(f"  {p}")
    return 0


# -- list

_LIST_KINDS = ("datasets", "encoders", "methods", "stores", "tasks", "metrics", "perturbations")


def _doc_line(obj: Any) -> str:
    doc = (obj.__doc__ or "").strip().splitlines() if obj is not None else []
    return doc[0].strip() if doc else ""


def _list_metrics() -> None:
    from imsearch_align.experiment.report import text_table
    from imsearch_align.framework.measures import list_rows

    print("metrics (reported per ranking: t2i/…, i2t/…, classification/…; k from --k):")
    print(
        text_table(
            ["name", "trec_eval", "CLIP_benchmark", "meaning"], [list(r) for r in list_rows()]
        )
    )


def _list_registry(kind: str) -> None:
    """One line per name: summary, where it comes from; broken plug-ins named, never fatal."""
    from imsearch_align.framework import registry

    rows = getattr(registry, kind.upper()).listing()
    print(f"{kind}:")
    width = max((len(r.name) for r in rows), default=0)
    for r in rows:
        where = "" if r.origin == registry.BUILTIN else f"  [{r.origin}]"
        text = f"unusable: {r.error}" if r.error else r.summary
        print(f"  {r.name.ljust(width)}  {text}{where}".rstrip())
        if kind == "tasks" and r.obj is not None and r.error is None:
            from imsearch_align.experiment.tasks import Task

            if isinstance(r.obj, type) and issubclass(r.obj, Task):
                print(f"  {''.ljust(width)}    measures: {r.obj.measures}")
                print(f"  {''.ljust(width)}    from: {r.obj.source}")
    if not rows:
        print("  (none registered)")


def _describe_dataset(name: str) -> None:
    from imsearch_align.datasets import describe
    from imsearch_align.experiment.report import text_table
    from imsearch_align.framework.registry import DATASETS

    params = describe(name)
    print(f"dataset {name!r}: {_doc_line(DATASETS.get(name))}")
    rows = [[p.name, p.type, p.default_text(), p.meaning] for p in params]
    print(text_table(["parameter", "type", "default", "meaning"], rows))
    print(f"\nuse: imsearch-align eval --dataset {name} --dataset-param KEY=VALUE ...")


def cmd_list(args: argparse.Namespace) -> int:
    """``list``: what each registry holds (``list datasets NAME``: a loader's parameters)."""
    if args.name is not None:
        if args.kind != "datasets":
            raise UsageError("list: a NAME is only taken after 'datasets' (list datasets coco)")
        _describe_dataset(args.name)
        return 0
    from imsearch_align.framework.registry import plugin_failures

    for i, kind in enumerate([args.kind] if args.kind else list(_LIST_KINDS)):
        if i:
            print()
        if kind == "metrics":
            _list_metrics()
        else:
            _list_registry(kind)
    for mod, err in plugin_failures().items():
        print(f"(plug-in module {mod} could not be loaded: {err})")
    return 0


# -- doctor


def _gflops(fn: Any, n: int, flops: float | None = None, repeats: int = 3) -> float:
    fn()  # warm-up: thread pools, page faults
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return (flops or 2.0 * n**3) / best / 1e9


def gemm_probes(n: int = 1024) -> dict[str, float | str]:
    """Single-precision GEMM speed (GFLOP/s, best of 3) of numpy, torch and
    faiss (IndexFlatIP search of n queries over n vectors in n dimensions, its
    BLAS path); a library that is missing or fails gives its error string."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out: dict[str, float | str] = {"numpy": _gflops(lambda: a @ b, n)}
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch"] = _gflops(lambda: torch.mm(ta, tb), n)
    except Exception as exc:
        out["torch"] = f"{type(exc).__name__}: {exc}"
    try:
        import faiss

        index = faiss.IndexFlatIP(n)
        index.add(b)
        out["faiss"] = _gflops(lambda: index.search(a, 1), n)
    except Exception as exc:
        out["faiss"] = f"{type(exc).__name__}: {exc}"
    return out


def _check_milvus(uri: str, token: str | None) -> tuple[bool, str]:
    try:
        from pymilvus import MilvusClient
    except ImportError:
        return False, "pymilvus is not installed (pip install 'imsearch-align[milvus]')"
    t = time.perf_counter()
    try:
        kw: dict[str, Any] = {"uri": uri, "timeout": 10}
        if token:
            kw["token"] = token
        client = MilvusClient(**kw)
        try:
            version = client.get_server_version()
            n = len(client.list_collections())
        finally:
            client.close()
    except Exception as exc:
        msg = str(exc).replace(token, "***") if token else str(exc)
        return False, f"{type(exc).__name__}: {msg.splitlines()[0] if msg else ''}"
    return True, f"server {version}, {n} collections, {1000 * (time.perf_counter() - t):.0f} ms"


def _print_environment() -> None:
    import platform

    from imsearch_align.experiment.provenance import blas_info, package_versions

    print(f"python      {platform.python_version()}  ({platform.platform()})")
    print(
        f"cpu         {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"
    )
    print("packages:")
    for pkg, ver in package_versions(
        ("pymilvus", "milvus-lite", "lancedb", "qdrant-client")
    ).items():
        print(f"  {pkg:<22}{ver}")
    # Import the BLAS users first, so threadpoolctl sees their libraries.
    for mod in ("numpy", "faiss", "torch"):
        try:
            __import__(mod)
        except Exception:
            pass
    print("BLAS / OpenMP (threadpoolctl):")
    libs = blas_info()
    for d in libs:
        print(
            f"  {d.get('internal_api') or '?':<9} {d.get('version') or ''!s:<14} "
            f"core={d.get('architecture') or '-'!s:<12} threads={d.get('num_threads')}"
        )
    if not libs:
        print("  (threadpoolctl is not installed or sees no library)")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE"):
        if os.environ.get(var):
            print(f"  {var}={os.environ[var]}")


def _print_gemm(n: int) -> None:
    print(f"GEMM float32 {n}x{n} (GFLOP/s, best of 3):")
    probes = gemm_probes(n)
    for lib, v in probes.items():
        print(
            f"  {lib:<7}"
            + (f"{v:8.1f} GFLOP/s" if isinstance(v, float) else f"  unavailable ({v})")
        )
    npv, fv = probes.get("numpy"), probes.get("faiss")
    if isinstance(npv, float) and isinstance(fv, float) and fv < 0.3 * npv:
        _warn(
            f"faiss's BLAS runs at {fv:.1f} GFLOP/s, {npv / fv:.1f}x below numpy's {npv:.1f}: flat search "
            "and IVF training are BLAS-bound, so faiss timings here understate it. faiss-cpu bundles its "
            "own OpenBLAS, which may pick a slow kernel for this CPU (see the BLAS lines above)."
        )


def _print_gpu() -> None:
    print("GPU:")
    try:
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            print(f"  torch.cuda  {', '.join(names)} (CUDA {torch.version.cuda})")
        else:
            print("  torch.cuda  none")
    except ImportError:
        print("  torch       not installed")
    try:
        import faiss

        ng = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        print(f"  faiss       {ng} GPU(s)")
    except ImportError:
        print("  faiss       not installed")


def cmd_doctor(args: argparse.Namespace) -> int:
    """``doctor``: versions, BLAS and threads, GEMM speed, GPU, Milvus reachability.

    Only an unreachable ``--uri`` fails the command; a slow BLAS is a warning.
    """
    _print_environment()
    if not args.no_gemm:
        _print_gemm(args.gemm_size)
    _print_gpu()
    if args.uri:
        ok, msg = _check_milvus(args.uri, args.token)
        print(f"milvus {args.uri}: {'ok' if ok else 'error'}: {msg}")
        return 0 if ok else 1
    return 0


# ----------------------------------------------------------------------------- main


def _given_flags(argv: Sequence[str]) -> set[str]:
    """Destinations of the flags that appear on the command line."""
    out = set()
    for a in argv:
        if a.startswith("--") and len(a) > 2:
            out.add(a[2:].split("=", 1)[0].replace("-", "_").removeprefix("no_"))
    return out


def _load_plugins(modules: Sequence[str] | None) -> None:
    if not modules:
        return
    from imsearch_align.framework.registry import PluginError, load_plugins

    try:
        load_plugins(list(modules), strict=True)
    except PluginError as exc:
        raise UsageError(f"--plugin: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (see the module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return int(exc.code or 0)
    setattr(args, _GIVEN, _given_flags(argv))
    level = (
        logging.WARNING
        if args.verbose == 0
        else logging.INFO
        if args.verbose == 1
        else logging.DEBUG
    )
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s")
    from imsearch_align.experiment import ConfigError
    from imsearch_align.experiment.tasks import TaskUnsupportedError
    from imsearch_align.framework.registry import PluginError, UnknownNameError

    try:
        _load_plugins(args.plugin)
        return int(args.func(args))
    except (UnknownNameError, PluginError, UsageError, ConfigError, TaskUnsupportedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
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


if __name__ == "__main__":
    sys.exit(main())
