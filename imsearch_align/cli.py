"""``imsearch-align``: the command line.

    imsearch-align eval  --dataset shapes --method csa --store faiss --n-support 1000
    imsearch-align sweep --config base.yaml --methods csa asif procrustes --n-support 100 1000 all
    imsearch-align build results/ --output benchmark.csv --markdown leaderboard.md
    imsearch-align plot  results/ --output-dir plots
    imsearch-align embed --dataset shapes --image-encoder efficientnet-lite0 --text-encoder sentence-transformers
    imsearch-align list [datasets|encoders|methods|stores|metrics|perturbations]
    imsearch-align doctor [--uri http://localhost:19530]

Conventions follow CLIP_benchmark: ``--output`` is a file-name template
(default ``{dataset}_{method}_{store}_{n}.json``), ``--skip-existing``
resumes a benchmark, ``build`` merges result JSONs into a CSV. Exit status:
0 success, 1 a run failed, 2 a usage error (unknown name, bad config key,
unwritable output folder, bad argument).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main"]

log = logging.getLogger("imsearch_align.cli")


class UsageError(Exception):
    """A user error found before any work: printed as ``error: ...``, exit 2."""


# ----------------------------------------------------------------------------- argument types


def _json_or_str(text: str) -> Any:
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


def _add_experiment_args(p: argparse.ArgumentParser, *, sweep: bool) -> None:
    g = p.add_argument_group("experiment (flags override --config)")
    g.add_argument("--config", metavar="FILE", help="YAML or JSON file of ExperimentConfig fields")
    g.add_argument("--dataset", help="DATASETS name (imsearch-align list datasets)")
    g.add_argument(
        "--dataset-param",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="dataset loader argument (repeatable; VALUE parsed as JSON when possible)",
    )
    g.add_argument(
        "--image-encoder",
        type=_encoder_name,
        metavar="NAME",
        help="ENCODERS name; 'none' uses the dataset's own embeddings",
    )
    g.add_argument("--image-encoder-param", action="append", type=_key_value, metavar="KEY=VALUE")
    g.add_argument(
        "--text-encoder",
        type=_encoder_name,
        metavar="NAME",
        help="ENCODERS name; 'none' uses the dataset's own embeddings",
    )
    g.add_argument("--text-encoder-param", action="append", type=_key_value, metavar="KEY=VALUE")
    g.add_argument("--method", help="METHODS name (csa, asif, cka, procrustes, linear, identity)")
    g.add_argument(
        "--method-param",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="method argument (repeatable)"
        + ("; NAME:KEY=VALUE for one method of --methods" if sweep else ""),
    )
    g.add_argument("--store", help="STORES name (faiss, exact, milvus...)")
    g.add_argument(
        "--store-param",
        action="append",
        type=_key_value,
        metavar="KEY=VALUE",
        help="store argument, e.g. uri=http://localhost:19530 or index=hnsw"
        + ("; NAME:KEY=VALUE for one store of --stores" if sweep else ""),
    )
    g.add_argument("--task", choices=("retrieval", "classification"))
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
        help="also report the store's recall@k against exact search",
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
    g.add_argument("--name", help="a free label stored in the result")
    o = p.add_argument_group("output")
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
        "method store n seed task image_encoder text_encoder key name)",
    )
    o.add_argument(
        "--skip-existing", action="store_true", help="skip a run whose output file exists"
    )
    o.add_argument("--no-progress", action="store_true", help="no progress bars")


def build_parser() -> argparse.ArgumentParser:
    """The ``imsearch-align`` argument parser."""
    p = argparse.ArgumentParser(
        prog="imsearch-align",
        allow_abbrev=False,
        description="How well do aligned image-text embedding spaces search in real vector stores, and how fast?",
    )
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv: debug)")
    p.add_argument("--traceback", action="store_true", help="show the full traceback of a failure")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    e = sub.add_parser(
        "eval",
        help="run one experiment",
        description="Run one experiment and write its result JSON.",
    )
    _add_experiment_args(e, sweep=False)
    e.set_defaults(func=cmd_eval)

    s = sub.add_parser(
        "sweep",
        help="run a grid: N x methods x stores",
        description="Run the grid --n-support x --methods x --stores.",
    )
    _add_experiment_args(s, sweep=True)
    s.set_defaults(func=cmd_sweep)

    b = sub.add_parser("build", help="merge result JSONs into a CSV and a Markdown leaderboard")
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
        "--sort-by", metavar="METRIC", help="rank by this metric (default t2i/R@1, else the first)"
    )
    b.add_argument(
        "--columns", nargs="+", metavar="COL", help="leaderboard columns (default: chosen)"
    )
    b.add_argument("--max-rows", type=_positive_int, metavar="N", help="leaderboard rows at most")
    b.set_defaults(func=cmd_build)

    pl = sub.add_parser("plot", help="learning curves and recall-vs-QPS figures (PNG)")
    pl.add_argument("paths", nargs="+", metavar="PATH", help="result files or directories")
    pl.add_argument(
        "--output-dir", default="plots", metavar="DIR", help="where PNGs go (default plots)"
    )
    pl.add_argument(
        "--metric",
        nargs="+",
        default=None,
        metavar="METRIC",
        help="learning-curve metrics (default t2i/R@1 and i2t/R@1, or classification/acc1)",
    )
    pl.add_argument(
        "--qps-metric",
        metavar="METRIC",
        help="recall-vs-QPS y metric (default ANN fidelity, else R@10)",
    )
    pl.add_argument(
        "--direction",
        default="t2i",
        choices=("t2i", "i2t", "classification"),
        help="whose queries/s the recall-vs-QPS plot uses",
    )
    pl.set_defaults(func=cmd_plot)

    em = sub.add_parser("embed", help="precompute a dataset's embeddings into the cache")
    em.add_argument("--dataset", required=True)
    em.add_argument("--dataset-param", action="append", type=_key_value, metavar="KEY=VALUE")
    em.add_argument("--image-encoder", type=_encoder_name, metavar="NAME")
    em.add_argument("--image-encoder-param", action="append", type=_key_value, metavar="KEY=VALUE")
    em.add_argument("--text-encoder", type=_encoder_name, metavar="NAME")
    em.add_argument("--text-encoder-param", action="append", type=_key_value, metavar="KEY=VALUE")
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
        "list", help="registered datasets, encoders, methods, stores, metrics, perturbations"
    )
    ls.add_argument("kind", nargs="?", choices=_LIST_KINDS, help="one kind (default all)")
    ls.set_defaults(func=cmd_list)

    d = sub.add_parser("doctor", help="versions, BLAS, GEMM speed, GPU, Milvus reachability")
    d.add_argument("--uri", help="a Milvus URI to try (http://host:19530 or a Lite *.db path)")
    d.add_argument("--token", help="Milvus token (never printed)")
    d.add_argument("--no-gemm", action="store_true", help="skip the GEMM probes")
    d.add_argument(
        "--gemm-size", type=_positive_int, default=1024, metavar="N", help="GEMM probe size (N x N)"
    )
    d.set_defaults(func=cmd_doctor)
    return p


# ----------------------------------------------------------------------------- config


_SCALAR_FLAGS = {
    "dataset": "dataset",
    "image_encoder": "image_encoder",
    "text_encoder": "text_encoder",
    "method": "method",
    "store": "store",
    "task": "task",
    "seed": "seed",
    "ensemble": "ensemble",
    "ann_fidelity": "ann_fidelity",
    "diagnostics": "diagnostics",
    "batch_size": "batch_size",
    "encode_batch_size": "encode_batch_size",
    "workers": "workers",
    "name": "name",
}
_PARAM_FLAGS = {
    "dataset_param": "dataset_params",
    "image_encoder_param": "image_encoder_params",
    "text_encoder_param": "text_encoder_params",
    "method_param": "method_params",
    "store_param": "store_params",
}
_GIVEN = "_given_flags"


def _read_config_file(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"--config: file {str(p)!r} does not exist")
    try:
        text = p.read_text()
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


def _config_dict(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """The merged config mapping (file, then flags) and the scoped params."""
    data = _read_config_file(args.config) if args.config else {}
    given = getattr(args, _GIVEN, set())
    for flag, key in _SCALAR_FLAGS.items():
        # 'none' encoders parse to None, so "given" is what tells them apart.
        if getattr(args, flag, None) is not None or flag in given:
            data[key] = getattr(args, flag)
    if getattr(args, "cache_dir", None) is not None or "cache_dir" in given:
        data["cache_dir"] = args.cache_dir
    if args.k is not None:
        data["k_values"] = list(args.k)
    if args.directions is not None:
        data["directions"] = list(args.directions)
    if getattr(args, "perturbations", None) is not None:
        data["perturbations"] = list(args.perturbations)
    pplain, pscoped = _split_scoped(getattr(args, "perturbation_param", None))
    if pplain:
        raise UsageError(
            f"--perturbation-param: expected NAME:KEY=VALUE, got {next(iter(pplain))}=..."
        )
    if pscoped:
        base = dict(data.get("perturbation_params") or {})
        for name, kv in pscoped.items():
            base[name] = {**base.get(name, {}), **kv}
        data["perturbation_params"] = base
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


def _make_config(data: dict[str, Any]):
    from imsearch_align.experiment import ExperimentConfig

    try:
        return ExperimentConfig.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"config: {exc}") from None


def _check_names(cfg: Any, methods: Sequence[str] = (), stores: Sequence[str] = ()) -> None:
    """Resolve every registry name before any work (UnknownNameError -> exit 2)."""
    from imsearch_align.framework.registry import DATASETS, ENCODERS, METHODS, STORES

    DATASETS.get(cfg.dataset)
    for enc in (cfg.image_encoder, cfg.text_encoder):
        if enc is not None:
            ENCODERS.get(enc)
    for m in {cfg.method, *methods}:
        METHODS.get(m)
    for s in {cfg.store, *stores}:
        STORES.get(s)


def _check_output(args: argparse.Namespace, cfg: Any) -> tuple[Path, str]:
    from imsearch_align.experiment import DEFAULT_OUTPUT_TEMPLATE

    template = args.output or DEFAULT_OUTPUT_TEMPLATE
    try:
        cfg.output_name(template)
    except ValueError as exc:
        raise UsageError(f"--output: {exc}") from None
    from imsearch_align.experiment import check_writable

    out = Path(args.output_dir)
    try:
        check_writable(out)
    except PermissionError as exc:
        raise UsageError(f"--output-dir: {exc}; choose a writable folder") from None
    return out, template


def _warn_stale(path: Path, cfg: Any) -> None:
    """--skip-existing would return a file written by a different config."""
    try:
        stored = json.loads(path.read_text()).get("key")
    except Exception:
        return
    if stored is not None and stored != cfg.key():
        _warn(
            f"{str(path)!r} exists but holds config {stored}, not {cfg.key()}; --skip-existing keeps it. "
            "Add {key} to --output to keep runs with different parameters apart."
        )


# ----------------------------------------------------------------------------- printing


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return "nan" if v != v else f"{v:.{digits}f}"
    return str(v)


_NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?[a-z%]*$|^-$|^nan$", re.IGNORECASE)


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table; numeric columns are right-aligned."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    right = [
        bool(rows) and all(_NUMBER.match(r[i] or "-") for r in rows) for i in range(len(headers))
    ]

    def fmt(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(cells, widths, right)
        ).rstrip()

    return "\n".join([fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)])


def _summary(result: dict[str, Any]) -> str:
    cfg = result.get("config", {})
    ds = result.get("dataset", {})
    n = "all" if cfg.get("n_support") is None else cfg.get("n_support")
    head = (
        f"{cfg.get('dataset')} · {cfg.get('method')} · {cfg.get('store')} · N={n}"
        f"  (support pairs {ds.get('n_support_pairs', '?')} of {ds.get('n_support_available', '?')}; "
        f"test {ds.get('n_test_images', '?')} images, {ds.get('n_test_texts', '?')} texts)"
    )
    lines = [head]
    metrics = result.get("metrics", {})
    timings = result.get("timings", {})
    ks = cfg.get("k_values") or [1, 5, 10]
    tasks = [t for t in ("t2i", "i2t") if t in result.get("tasks", {})]
    # Perturbed query sets (t2i[typo], i2t[blur], ...) follow their direction.
    tasks += sorted(t for t in result.get("tasks", {}) if "[" in t)
    if tasks:
        cols = [f"R@{k}" for k in ks] + [f"nDCG@{max(ks)}", f"RR@{max(ks)}"]
        fid = [m.split("/", 1)[1] for m in metrics if m.startswith(f"{tasks[0]}/ann_recall@")]
        headers = ["direction", *cols, *fid, "QPS"]
        rows = []
        for t in tasks:
            qps = timings.get(f"{t}_queries_per_s")
            rows.append(
                [
                    t,
                    *(_fmt(metrics.get(f"{t}/{c}")) for c in cols + fid),
                    "-" if qps is None else f"{qps:,.0f}",
                ]
            )
        lines += ["", _table(headers, rows)]
        cb = result.get("clip_benchmark") or {}
        if cb:
            parts = []
            for side in ("image_retrieval", "text_retrieval"):
                vals = [
                    _fmt(cb.get(f"{side}_recall@{k}"), 3) for k in ks if f"{side}_recall@{k}" in cb
                ]
                if vals:
                    parts.append(f"{side}_recall@{{{','.join(map(str, ks))}}} = {' / '.join(vals)}")
            lines.append("CLIP_benchmark (recall@k = HitRate@k): " + "; ".join(parts))
    if "classification" in result.get("tasks", {}):
        cm = {k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("classification/")}
        keys = [k for k in ("acc1", "acc5", "mean_per_class_recall") if k in cm]
        lines += ["", _table(["task", *keys], [["classification", *(_fmt(cm[k]) for k in keys)]])]
    tparts = [
        f"{k[:-2]} {timings[k]:.2f}s"
        for k in ("load_s", "embed_s", "fit_s", "transform_s")
        if k in timings
    ]
    if tparts:
        lines.append("time: " + "  ".join(tparts))
    failed = {t: d.get("n_failed") for t, d in result.get("tasks", {}).items() if d.get("n_failed")}
    if failed:
        lines.append("FAILED queries: " + ", ".join(f"{t} {n}" for t, n in failed.items()))
    return "\n".join(lines)


# ----------------------------------------------------------------------------- commands


def cmd_eval(args: argparse.Namespace) -> int:
    """``eval``: one experiment."""
    from imsearch_align.experiment import run_experiment

    data, _ = _config_dict(args)
    cfg = _make_config(data)
    _check_names(cfg)
    out_dir, template = _check_output(args, cfg)
    path = out_dir / cfg.output_name(template)
    if args.skip_existing and path.exists():
        _warn_stale(path, cfg)
    t = time.perf_counter()
    result = run_experiment(
        cfg,
        output_dir=out_dir,
        output_template=template,
        skip_existing=args.skip_existing,
        progress=not args.no_progress,
    )
    print(_summary(result))
    if result.get("skipped"):
        print(f"skipped: {path} exists (--skip-existing)")
    else:
        print(f"result: {result.get('path', path)}  ({time.perf_counter() - t:.1f}s)")
    return 0


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


def cmd_sweep(args: argparse.Namespace) -> int:
    """``sweep``: the grid n_support x methods x stores."""
    from imsearch_align.experiment import sweep
    from imsearch_align.leaderboard import _ordered_frame, flatten_result, to_markdown

    data, scoped = _config_dict(args)
    cfg = _make_config(data)
    _check_names(cfg, args.methods or (), args.stores or ())
    method_params = _sweep_params(
        args.methods, dict(cfg.method_params), scoped["method_params"], "method"
    )
    store_params = _sweep_params(
        args.stores, dict(cfg.store_params), scoped["store_params"], "store"
    )
    out_dir, template = _check_output(args, cfg)
    if args.skip_existing:
        for m in args.methods or [cfg.method]:
            for s in args.stores or [cfg.store]:
                for n in args.n_support or [cfg.n_support]:
                    c = cfg.replace(
                        method=m,
                        store=s,
                        n_support=n,
                        method_params=(method_params or {}).get(m, cfg.method_params),
                        store_params=(store_params or {}).get(s, cfg.store_params),
                    )
                    p = out_dir / c.output_name(template)
                    if p.exists():
                        _warn_stale(p, c)
    t = time.perf_counter()
    results = sweep(
        cfg,
        n_values=args.n_support,
        methods=args.methods,
        stores=args.stores,
        method_params=method_params,
        store_params=store_params,
        output_dir=out_dir,
        output_template=template,
        skip_existing=args.skip_existing,
        progress=not args.no_progress,
        on_error=args.on_error,
    )
    rows = []
    for r in results:
        row = flatten_result(r)
        row["status"] = "error" if "error" in r else ("skipped" if r.get("skipped") else "ok")
        rows.append(row)
    df = _ordered_frame(rows)
    metrics = [
        m
        for m in (
            "t2i/R@1",
            "t2i/R@10",
            "i2t/R@1",
            "i2t/R@10",
            "t2i/nDCG@10",
            "classification/acc1",
            "classification/acc5",
        )
        if m in df.columns
    ]
    speed = [
        c for c in ("t2i_queries_per_s", "classification_queries_per_s", "fit_s") if c in df.columns
    ]
    cols = ["method", "store", "n_support_pairs", *metrics, *speed, "status"]
    if "error" in df.columns:
        cols.append("error")
    print()
    print(to_markdown(df, sort=False, columns=cols, bold_best=False), end="")
    n_err = sum("error" in r for r in results)
    print(
        f"{len(results)} runs ({n_err} failed) in {time.perf_counter() - t:.1f}s; results in {out_dir}/"
    )
    return 1 if n_err else 0


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
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
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
    return 0


def _write_text(path: Path, text: str, arg: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"{arg} {str(path)!r} cannot be written: {exc.strerror or exc}") from None


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() or c in "-_.@" else "-" for c in s)


def cmd_plot(args: argparse.Namespace) -> int:
    """``plot``: learning curves per dataset and metric, recall vs QPS per dataset."""
    from imsearch_align.leaderboard import LeaderboardWarning, load_result_dicts
    from imsearch_align.plots import learning_curve, recall_vs_qps

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LeaderboardWarning)
        try:
            results = [r for r in load_result_dicts(args.paths) if "error" not in r]
        except FileNotFoundError as exc:
            raise UsageError(str(exc)) from None
    for w in caught:
        _warn(str(w.message))
    if not results:
        print(f"error: no successful results in {' '.join(args.paths)}", file=sys.stderr)
        return 1
    out = Path(args.output_dir)
    by_ds: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by_ds.setdefault(str(r["config"].get("dataset")), []).append(r)
    written = []
    for ds, rs in sorted(by_ds.items()):
        keys = {k for r in rs for k in r.get("metrics", {})}
        metrics = args.metric or [
            m for m in ("t2i/R@1", "i2t/R@1", "classification/acc1") if m in keys
        ]
        for m in metrics:
            try:
                written.append(
                    learning_curve(rs, m, out / f"learning_curve_{_slug(ds)}_{_slug(m)}.png")
                )
            except ValueError as exc:
                if args.metric:
                    raise UsageError(f"--metric: {exc}") from None
        try:
            written.append(
                recall_vs_qps(
                    rs,
                    out / f"recall_vs_qps_{_slug(ds)}_{args.direction}.png",
                    metric=args.qps_metric,
                    direction=args.direction,
                )
            )
        except ValueError as exc:
            if args.qps_metric:
                raise UsageError(f"--qps-metric: {exc}") from None
            _warn(f"no recall-vs-QPS plot for {ds}: {exc}")
    for p in written:
        print(p)
    return 0 if written else 1


def _provider(name: str, params: dict[str, Any], modality: str) -> Any:
    from imsearch_align.experiment import make_encoder

    return make_encoder(name, modality, params)


def cmd_embed(args: argparse.Namespace) -> int:
    """``embed``: precompute a dataset's embeddings into the cache, split by
    split as ``eval`` reads them."""
    from imsearch_align.datasets.base import SUPPORT_SPLIT, TEST_SPLIT
    from imsearch_align.embedding import embed
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
    params = {
        "image": dict(args.image_encoder_param or ()),
        "text": dict(args.text_encoder_param or ()),
    }
    rows = []
    t0 = time.perf_counter()
    for modality, enc in wanted.items():
        if enc is None:
            continue
        provider = _provider(enc, params[modality], modality)
        for split in (SUPPORT_SPLIT, TEST_SPLIT):
            ids = ds.split_ids(split, modality)
            if len(ids) == 0:
                continue
            t = time.perf_counter()
            arr = embed(
                ds,
                provider,
                modality,
                ids=ids,
                cache_dir=cache,
                batch_size=args.batch_size,
                progress=not args.no_progress,
            )
            rows.append(
                [
                    modality,
                    enc,
                    split,
                    f"{arr.shape[0]} x {arr.shape[1]}",
                    str(arr.dtype),
                    f"{time.perf_counter() - t:.2f}s",
                ]
            )
    print(_table(["modality", "encoder", "split", "shape", "dtype", "time"], rows))
    new = sorted(p for p in cache.rglob("*") if p.is_file() and p not in before)
    print(f"cache: {cache.resolve()}  ({len(new)} new files, {time.perf_counter() - t0:.1f}s)")
    for p in new:
        print(f"  {p}")
    return 0


# -- list

_LIST_KINDS = ("datasets", "encoders", "methods", "stores", "metrics", "perturbations")

#: Metric families: our name, trec_eval (pytrec_eval) name, CLIP_benchmark name, meaning.
METRIC_FAMILIES = (
    ("P@k", "P_k", "-", "relevant in the top k / k"),
    ("R@k", "recall_k", "-", "relevant in the top k / all relevant"),
    ("nDCG@k", "ndcg_cut_k", "-", "DCG@k / ideal DCG@k (gain = relevance, log2 discount)"),
    ("AP@k", "map_cut_k", "-", "sum of P@i at relevant ranks i <= k / all relevant"),
    ("RR@k", "recip_rank (no cutoff)", "-", "1 / rank of the first relevant in the top k"),
    (
        "HitRate@k",
        "success_k",
        "image_retrieval_recall@k (t2i), text_retrieval_recall@k (i2t)",
        "1 if any relevant in the top k",
    ),
    ("Accuracy", "success_1", "acc1", "HitRate@1 (classification: top-1 class correct)"),
    ("acc5", "success_5", "acc5", "classification: true class in the top 5"),
    ("mean_per_class_recall", "-", "mean_per_class_recall", "balanced accuracy over classes"),
    (
        "ann_recall@k",
        "-",
        "-",
        "store's top k vs exact search's top k (ANN fidelity, --ann-fidelity)",
    ),
)


def _registry_names(kind: str) -> tuple[list[str], str | None]:
    from imsearch_align.framework import registry

    reg = getattr(registry, kind.upper())
    try:
        return reg.names(), None
    except Exception as exc:  # a plug-in module that fails to import
        return sorted(getattr(reg, "_entries", {})), f"{type(exc).__name__}: {exc}"


def _doc_line(obj: Any) -> str:
    doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    return doc[0].strip() if doc else ""


def cmd_list(args: argparse.Namespace) -> int:
    """``list``: what each registry holds."""
    from imsearch_align.framework import registry

    kinds = [args.kind] if args.kind else list(_LIST_KINDS)
    for i, kind in enumerate(kinds):
        if i:
            print()
        if kind == "metrics":
            print("metrics (reported per direction: t2i/…, i2t/…, classification/…; k from --k):")
            print(
                _table(
                    ["name", "trec_eval", "CLIP_benchmark", "meaning"],
                    [list(r) for r in METRIC_FAMILIES],
                )
            )
            continue
        names, err = _registry_names(kind)
        print(f"{kind}:")
        reg = getattr(registry, kind.upper())
        width = max((len(n) for n in names), default=0)
        for n in names:
            print(f"  {n.ljust(width)}  {_doc_line(reg._entries.get(n))}".rstrip())
        if not names:
            print("  (none registered)")
        if err:
            print(f"  (some {kind} could not be loaded: {err})")
    return 0


# -- doctor


def _versions() -> dict[str, str]:
    from imsearch_align.experiment import package_versions

    return package_versions()


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


def cmd_doctor(args: argparse.Namespace) -> int:
    """``doctor``: versions, BLAS and threads, GEMM speed, GPU, Milvus reachability."""
    import platform

    problems = 0  # only an unreachable --uri fails the command; slow BLAS is a warning
    print(f"python      {platform.python_version()}  ({platform.platform()})")
    print(
        f"cpu         {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"
    )
    print("packages:")
    for pkg, ver in _versions().items():
        print(f"  {pkg:<22}{ver}")
    # Import the BLAS users first, so threadpoolctl sees their libraries.
    import numpy  # noqa: F401

    for mod in ("faiss", "torch"):
        try:
            __import__(mod)
        except Exception:
            pass
    print("BLAS / OpenMP (threadpoolctl):")
    try:
        from threadpoolctl import threadpool_info

        for d in threadpool_info():
            print(
                f"  {d.get('internal_api', '?'):<9} {d.get('version') or ''!s:<14} "
                f"core={d.get('architecture') or '-'!s:<12} threads={d.get('num_threads')}  "
                f"{Path(d.get('filepath', '')).name}"
            )
    except ImportError:
        print("  threadpoolctl is not installed")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE"):
        if os.environ.get(var):
            print(f"  {var}={os.environ[var]}")
    if not args.no_gemm:
        n = args.gemm_size
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
    if args.uri:
        ok, msg = _check_milvus(args.uri, args.token)
        print(f"milvus {args.uri}: {'ok' if ok else 'error'}: {msg}")
        problems += not ok
    return 1 if problems else 0


# ----------------------------------------------------------------------------- main


def _given_flags(argv: Sequence[str]) -> set[str]:
    """Destinations of the flags that appear on the command line."""
    out = set()
    for a in argv:
        if a.startswith("--") and len(a) > 2:
            out.add(a[2:].split("=", 1)[0].replace("-", "_").removeprefix("no_"))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status (0 ok, 1 failure, 2 usage)."""
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
    from imsearch_align.framework.registry import UnknownNameError

    try:
        return int(args.func(args))
    except UnknownNameError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
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
