"""The Flickr30k study: training-free alignment methods x support size x store.

    python benchmarks/flickr.py                          # Hub data (nlphuji/flickr30k), when online
    python benchmarks/flickr.py --data ~/data/flickr30k  # a local folder (results.csv, captions.txt
                                                         #   or Karpathy's dataset_flickr30k.json)
    python benchmarks/flickr.py --embeddings DIR         # precomputed image.npy / text.npy (+ text_image.npy)
    python benchmarks/flickr.py --shapes 600 --quick     # offline: rendered shapes in the Flickr30k layout
    python benchmarks/flickr.py --stores faiss milvus --uri http://127.0.0.1:19530

Methods csa, asif, cka, procrustes (and a jointly trained CLIP baseline with
``--clip MODEL`` when that model is available) x N support pairs in
{1k, 5k, 10k, 29k} x stores faiss (default), milvus-lite (embedded), or
milvus (a server at ``--uri``). Prints the table, writes one result JSON per
cell, a CSV + Markdown leaderboard and the learning-curve PNG into ``--out``.

Every argument is checked before any work (unknown method or store, ``--stores
milvus`` without ``--uri``, a support size or cut-off below 1, a missing
``--embeddings`` file): one ``error:`` line, exit 2, nothing written. A cell
that fails is reported in the table and the others go on; a store found
unreachable (its server down) is not tried again: its other cells are listed
as not run. ``--skip-existing``
reuses a clean stored result of the same cell (a re-run after Ctrl-C goes on
where it stopped).

Exit status, as ``imsearch-align``: 0 every cell ok; 1 a cell failed (or the
data could not be loaded); 2 a bad argument; 3 a cell finished **degraded**
(failed queries: its numbers are not the full measurement; ``--allow-failures``
makes it 0); 130 interrupted (the finished cells' table and reports are
written first).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from imsearch_align.cli import exit_status
from imsearch_align.experiment import (
    ExperimentConfig,
    ExperimentError,
    ExperimentResult,
    RunStatus,
    Study,
    run_experiment,
    shared_encoder,
)
from imsearch_align.framework.interfaces import StoreUnavailableError
from imsearch_align.study.data import base_config, method_params
from imsearch_align.study.data import dataset_spec as _dataset_spec

# The table and reports are in the sibling flickr_report.py. Run as a script,
# this folder is on sys.path already; loaded by its file path (the tests), it
# is appended, after everything else, so that it shadows no installed module.
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.append(str(HERE))

from flickr_report import finish  # noqa: E402
from flickr_report import format_table as format_table  # noqa: E402  (re-exported)

FULL_N = (1000, 5000, 10000, 29000)
QUICK_N = (250, 1000)


STORE_CHOICES = ("faiss", "exact", "milvus-lite", "milvus")


class UsageError(ValueError):
    """A bad argument, found before any work: ``error: ...``, exit 2."""


def store_spec(store: str, out: Path, uri: str | None) -> tuple[str, dict[str, Any]]:
    """Registry name and parameters of a store choice on the command line."""
    if store in ("faiss", "exact"):
        return store, {}
    if store == "milvus-lite":
        return "milvus", {"uri": str(out / "milvus_lite.db")}
    if store == "milvus":
        if not uri:
            raise UsageError(
                "--stores milvus needs --uri http://HOST:PORT (a running Milvus server)"
            )
        return "milvus", {"uri": uri}
    raise UsageError(f"--stores: unknown store {store!r}; choose from {', '.join(STORE_CHOICES)}")


def dataset_spec(args: argparse.Namespace) -> tuple[str, dict[str, Any], bool]:
    """(DATASETS name, params, offline?) from --data / --embeddings / --shapes."""
    return _dataset_spec(
        data=args.data, embeddings=args.embeddings, shapes=args.shapes,
        shapes_root=args.shapes_root, seed=args.seed,
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--data", help="local Flickr30k folder")
    src.add_argument("--embeddings", help="folder with image.npy, text.npy (and text_image.npy)")
    src.add_argument(
        "--shapes",
        type=int,
        metavar="N_IMAGES",
        help="offline: render N shape images in the Flickr30k layout",
    )
    ap.add_argument(
        "--shapes-root", help="where --shapes writes its folder (default .cache/shapes/nN-sSEED)"
    )
    ap.add_argument(
        "--offline",
        action="store_true",
        help="use the offline encoders (EfficientNet-Lite0 + packaged MiniLM); implied by --shapes",
    )
    ap.add_argument("--methods", nargs="+", default=["csa", "asif", "cka", "procrustes"])
    ap.add_argument(
        "--n",
        nargs="+",
        type=int,
        help="support sizes (default 1000 5000 10000 29000; --quick: 250 1000)",
    )
    ap.add_argument(
        "--stores",
        nargs="+",
        default=["faiss"],
        help="faiss, exact, milvus-lite, milvus (with --uri)",
    )
    ap.add_argument("--uri", help="Milvus server URI for --stores milvus")
    ap.add_argument(
        "--image-encoder",
        help="ENCODERS name (default hf-image facebook/dinov2-base; offline: efficientnet-lite0)",
    )
    ap.add_argument("--image-model", help="model name or path for the image encoder")
    ap.add_argument("--text-encoder", help="ENCODERS name (default sentence-transformers)")
    ap.add_argument("--text-model", help="model name or path for the text encoder")
    ap.add_argument(
        "--clip",
        metavar="MODEL",
        help="add the jointly trained CLIP baseline (method identity) with this model",
    )
    ap.add_argument("--k", nargs="+", type=int, default=[1, 5, 10])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="small N grid for a fast run")
    ap.add_argument("--out", default="benchmarks/results/flickr", help="output folder")
    ap.add_argument("--cache-dir", default=".cache/embeddings")
    ap.add_argument(
        "--skip-existing",
        action="store_true",
        help="reuse a clean stored result of the same cell in --out (degraded or failed: run again)",
    )
    ap.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 even when a cell is degraded (failed queries)",
    )
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    return ap


def _unique(values: list[Any]) -> list[Any]:
    """``values`` without repeats, in their first order."""
    return list(dict.fromkeys(values))


def _check_args(args: argparse.Namespace) -> None:
    """Every argument that can be checked before any work (raises :class:`UsageError`)."""
    from imsearch_align.framework.registry import ENCODERS, METHODS, UnknownNameError

    for flag, values in (("--n", args.n or []), ("--k", args.k)):
        bad = [v for v in values if v < 1]
        if bad:
            raise UsageError(f"{flag} must be positive integers, got {bad[0]}")
    if args.shapes is not None and args.shapes < 1:
        raise UsageError(f"--shapes must be a positive number of images, got {args.shapes}")
    for store in args.stores:
        store_spec(store, Path(args.out), args.uri)
    if args.uri and "milvus" not in args.stores:
        raise UsageError(
            "--uri is for --stores milvus (a running server) and no milvus store is asked for; "
            "--stores milvus-lite keeps its database in --out"
        )
    named = [("--methods", METHODS, m) for m in args.methods]
    named += [(f, ENCODERS, v) for f, v in (("--image-encoder", args.image_encoder),
                                            ("--text-encoder", args.text_encoder)) if v]  # fmt: skip
    for flag, registry, name in named:
        try:
            registry.get(name)
        except UnknownNameError as exc:
            raise UsageError(f"{flag}: {exc}") from None
    if args.clip and args.embeddings:
        raise UsageError(
            "--clip encodes the images and captions with CLIP, --embeddings gives no images or "
            "captions to encode; run the CLIP baseline with --data or --shapes"
        )
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {args.out!r} is a file, not a folder")


def main(argv: list[str] | None = None) -> int:
    """Run the study and print the table; the exit status is in the module docstring."""
    ap = build_parser()
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from imsearch_align.experiment import ConfigError

    args.k = sorted(_unique(args.k))
    args.n = _unique(args.n) if args.n else None
    args.stores, args.methods = _unique(args.stores), _unique(args.methods)
    try:
        _check_args(args)
        dataset, dparams, offline = dataset_spec(args)
        base = _base_config(args, dataset, dparams, offline or args.offline)
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    study = Study()  # datasets and embeddings loaded once for every cell
    try:
        dims = _dims(base, study)
    except Exception as exc:
        if args.traceback:
            raise
        print(
            f"error: cannot load the data: {type(exc).__name__}: {exc}\n"
            "(run with --traceback for details)",
            file=sys.stderr,
        )
        return 1
    out.mkdir(parents=True, exist_ok=True)
    n_values = args.n or (QUICK_N if args.quick else FULL_N)
    cells = _cells(args, base, out, n_values, dims)
    progress = not args.no_progress
    results: list[tuple[str, ExperimentResult]] = []
    down: dict[str, str] = {}  # store -> the error that showed it unreachable
    t0 = time.perf_counter()
    try:
        for store, cfg in cells:
            if store in down:  # its server stopped answering: the rest of its cells wait
                results.append((store, _not_run(cfg, store, down[store])))
                continue
            res, cause = _run(cfg, out, store, progress, study, args.skip_existing)
            results.append((store, res))
            if isinstance(cause, StoreUnavailableError):
                down[store] = res.status.error or ""
                left = sum(1 for s, _ in cells[len(results) :] if s == store)
                if left:
                    print(
                        f"  {store} is unreachable: its {left} remaining cells are not run "
                        "(start the server and run the same command with --skip-existing)",
                        file=sys.stderr,
                    )
    except KeyboardInterrupt:
        print(
            f"\ninterrupted after {len(results)} of {len(cells)} cells; finished cells are "
            "below and in --out (run the same command with --skip-existing to go on)",
            file=sys.stderr,
        )
        finish(results, args.k, out, t0)
        return 130
    finish(results, args.k, out, t0)
    return exit_status([r for _, r in results], args.allow_failures)


def _base_config(
    args: argparse.Namespace, dataset: str, dparams: dict[str, Any], offline: bool
) -> ExperimentConfig:
    """What every cell shares: data, encoders, cut-offs, seed."""
    return base_config(
        dataset, dparams, offline=offline, precomputed=bool(args.embeddings),
        image_encoder=args.image_encoder, image_model=args.image_model,
        text_encoder=args.text_encoder, text_model=args.text_model,
        k=tuple(args.k), seed=args.seed, cache_dir=args.cache_dir, name="flickr",
    )  # fmt: skip


def _cells(
    args: argparse.Namespace,
    base: ExperimentConfig,
    out: Path,
    n_values: Any,
    dims: tuple[int, int],
) -> list[tuple[str, ExperimentConfig]]:
    """(store label, config) of every cell, in run order: store x method x N, then CLIP."""
    cells = []
    for store in args.stores:
        sname, sparams = store_spec(store, out, args.uri)
        for method in args.methods:
            for n in n_values:
                cfg = base.replace(
                    method=method,
                    method_params=method_params(method, min(n_values), dims),
                    store=sname,
                    store_params=sparams,
                    n_support=n,
                )
                cells.append((store, cfg))
        if args.clip:
            cfg = base.replace(
                image_encoder="clip",
                image_encoder_params={"model": args.clip},
                text_encoder="clip",
                text_encoder_params={"model": args.clip},
                method="identity",
                method_params={},
                store=sname,
                store_params=sparams,
                n_support=None,
            )
            cells.append((store, cfg))
    return cells


def _dims(base: ExperimentConfig, study: Study) -> tuple[int, int]:
    """Encoder output dimensions (for the CSA ridge rule)."""
    if base.image_encoder is None:
        data = study.load(base)
        return int(data.image_provider.dim), int(data.text_provider.dim)
    return (
        int(shared_encoder(base.image_encoder, "image", base.image_encoder_params).dim),
        int(shared_encoder(base.text_encoder, "text", base.text_encoder_params).dim),
    )


def _run(
    cfg: ExperimentConfig,
    out: Path,
    store_label: str,
    progress: bool,
    study: Study,
    skip_existing: bool = False,
) -> tuple[ExperimentResult, BaseException | None]:
    """One cell: its result, and the exception it failed with (None if it did not)."""
    label = f"{cfg.method:<10} {store_label:<11} N={cfg.n_support if cfg.n_support else 'all'}"
    print(f"running {label}", file=sys.stderr, flush=True)
    try:
        res = run_experiment(
            cfg,
            output_dir=out,
            output_template="{dataset}_{method}_{store}_{n}_{key}.json",
            skip_existing=skip_existing,
            progress=progress,
            study=study,
        )
    except ExperimentError as exc:  # one failed cell is reported, the others go on
        print(f"  failed: {exc.result.status.error}", file=sys.stderr)
        return exc.result, exc.__cause__ or exc
    except Exception as exc:
        print(f"  failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        status = RunStatus("failed", error=f"{type(exc).__name__}: {exc}")
        return ExperimentResult(config=cfg, status=status), exc
    if not res.status.ok:
        print(f"  {res.status}", file=sys.stderr)
    return res, None


def _not_run(cfg: ExperimentConfig, store: str, error: str) -> ExperimentResult:
    """The failed result of a cell not run because its store was found unreachable."""
    return ExperimentResult(
        config=cfg,
        status=RunStatus(
            "failed", error=f"not run: {store} unreachable in an earlier cell ({error})"
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
