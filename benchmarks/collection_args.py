"""The command line of ``benchmarks/collection.py``: its flags, their defaults (the
default index grid of each store) and every check that needs no data."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from flickr import UsageError

from imsearch_align.collection.settings import STORES, parse_index

FULL_SIZES = (0, 100_000, 1_000_000)
QUICK_SIZES = (0, 20_000)
DEFAULT_INDEX = {
    "faiss": (
        "faiss:flat:max_size=100000",
        "faiss:ivf_flat:nprobe=1,4,16,64",
        "faiss:hnsw:M=16,efConstruction=100,efSearch=16,32,64,128,max_size=100000",
    ),
    "milvus": (
        "milvus:FLAT:max_size=100000",
        "milvus:IVF_FLAT:nprobe=1,4,16,64",
        "milvus:HNSW:M=16,efConstruction=100,ef=16,32,64,128,max_size=100000",
    ),
    "milvus-lite": ("milvus-lite:FLAT", "milvus-lite:IVF_FLAT:nprobe=8"),
    "exact": ("exact:flat",),
    "qdrant-local": ("qdrant-local:flat",),
    "lancedb": ("lancedb:flat",),
}
QUICK_INDEX = {
    "faiss": (
        "faiss:flat",
        "faiss:ivf_flat:nprobe=1,8",
        "faiss:hnsw:M=16,efConstruction=64,efSearch=16,64",
    ),
    "milvus": ("milvus:FLAT", "milvus:IVF_FLAT:nprobe=8"),
    "milvus-lite": ("milvus-lite:FLAT",),
}


def build_parser(description: str = "") -> argparse.ArgumentParser:
    """The command line (``description``: the study's docstring, its help text)."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--data", help="local Flickr30k folder")
    src.add_argument("--embeddings", help="folder with image.npy, text.npy (and text_image.npy)")
    src.add_argument("--shapes", type=int, metavar="N_IMAGES", help="offline: N shape images")
    ap.add_argument("--shapes-root", help="where --shapes writes its folder")
    ap.add_argument("--offline", action="store_true", help="offline encoders (implied by --shapes)")
    ap.add_argument("--methods", nargs="+", default=["csa", "procrustes"])
    ap.add_argument("--n", nargs="+", type=int, help="support sizes (default: every support pair)")
    ap.add_argument(
        "--stores",
        nargs="+",
        help=f"{', '.join(STORES)} (default faiss; --quick: faiss and milvus-lite when installed)",
    )
    ap.add_argument("--uri", help="Milvus server URI for --stores milvus")
    ap.add_argument("--index", nargs="+", action="extend", metavar="STORE:TYPE[:PARAMS]")
    ap.add_argument("--distractors", help="a count (synthetic), a file, or dataset:NAME[:SPLIT]")
    ap.add_argument("--sizes", nargs="+", type=int, help="distractor counts (default 0 100k 1M)")
    ap.add_argument("--directions", nargs="+", default=["t2i"], choices=["t2i", "i2t"])
    ap.add_argument("--queries", type=int, help="sampled queries (default 10000; --quick 1000)")
    ap.add_argument("--k", nargs="+", type=int, default=[1, 5, 10])
    ap.add_argument(
        "--filters", nargs="+", type=float, metavar="SHARE",
        help="filtered search keeping these shares of the collection (e.g. 0.5 0.1 0.01)",
    )  # fmt: skip
    ap.add_argument(
        "--concurrency", nargs="+", type=int, metavar="CLIENTS",
        help="concurrent single-query clients on each largest-size build (e.g. 1 2 4 8 16)",
    )  # fmt: skip
    ap.add_argument(
        "--concurrency-duration", type=float, default=5.0, metavar="S",
        help="measured seconds per concurrency level (default 5)",
    )  # fmt: skip
    ap.add_argument("--batch", type=int, default=100, help="queries per batched search call")
    ap.add_argument("--latency-queries", type=int, help="single queries timed (1000; --quick 100)")
    ap.add_argument("--block-rows", type=int, default=8192, help="rows per inserted block")
    for flag in ("--image-encoder", "--image-model", "--text-encoder", "--text-model"):
        ap.add_argument(flag)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="20k distractors, small sweeps")
    ap.add_argument("--out", default="benchmarks/results/collection", help="output folder")
    ap.add_argument("--cache-dir", default=".cache/embeddings")
    ap.add_argument("--truth-cache", default=".cache/collection_truth")
    ap.add_argument("--skip-existing", action="store_true", help="reuse clean cells in --out")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--traceback", action="store_true", help="show the traceback of an error")
    return ap


def _unique(values: Any) -> list[Any]:
    return list(dict.fromkeys(values))


def _default_stores(quick: bool) -> list[str]:
    """FAISS; with --quick also Milvus Lite when ``milvus-lite`` is installed."""
    import importlib.util

    lite = quick and importlib.util.find_spec("milvus_lite") is not None
    return ["faiss", "milvus-lite"] if lite else ["faiss"]


def _check_args(args: argparse.Namespace) -> None:
    """Every check that needs no data (raises UsageError / SettingError)."""
    from imsearch_align.framework.registry import DATASETS, METHODS, UnknownNameError

    for flag, values in (("--n", args.n or []), ("--k", args.k), ("--sizes", [])):
        if any(v < 1 for v in values):
            raise UsageError(f"{flag} must be positive integers, got {min(values)}")
    if any(v < 0 for v in args.sizes or []):
        raise UsageError(f"--sizes must be distractor counts >= 0, got {min(args.sizes)}")
    for flag in ("queries", "batch", "latency_queries", "block_rows", "shapes"):
        v = getattr(args, flag)
        if v is not None and v < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be a positive integer, got {v}")
    for store in args.stores:
        if store not in STORES:
            raise UsageError(f"--stores: unknown store {store!r}; choose from {', '.join(STORES)}")
    if args.concurrency:
        from imsearch_align.concurrency.limits import check_levels

        try:
            check_levels(args.concurrency)
        except (TypeError, ValueError) as exc:
            raise UsageError(f"--concurrency: {exc}") from None
    if not args.concurrency_duration > 0:
        raise UsageError(
            f"--concurrency-duration must be > 0 seconds, got {args.concurrency_duration}"
        )
    if "milvus" in args.stores and not args.uri:
        raise UsageError("--stores milvus needs --uri http://HOST:PORT (a running Milvus server)")
    if args.uri and "milvus" not in args.stores:
        raise UsageError(
            "--uri is for --stores milvus; --stores milvus-lite keeps its database in --out"
        )
    for method in args.methods:
        try:
            factory = METHODS.get(method)
        except UnknownNameError as exc:
            raise UsageError(f"--methods: {exc}") from None
        if getattr(factory, "sparse_output", False):
            raise UsageError(
                f"--methods {method}: it maps into a sparse space; the collection study takes "
                "dense aligned spaces (csa, procrustes, cka)"
            )
    spec = args.distractors or ""
    if spec.startswith("dataset:"):
        if args.embeddings:
            raise UsageError("--distractors dataset:NAME needs encoders; --embeddings has none")
        try:
            DATASETS.get(spec.split(":")[1])
        except UnknownNameError as exc:
            raise UsageError(f"--distractors: {exc}") from None
    elif spec and not spec.isdigit() and not Path(spec).expanduser().is_file():
        raise UsageError(
            f"--distractors {spec!r}: no such file (expected a count, a file or dataset:NAME)"
        )
    if spec.isdigit() and args.sizes and max(args.sizes) > int(spec):
        raise UsageError(
            f"--sizes {max(args.sizes)} is more than the {int(spec)} --distractors rows"
        )
    if args.filters:
        from imsearch_align.collection.filters import selectivity_filter

        for share in args.filters:
            try:
                selectivity_filter(share)
            except ValueError as exc:
                raise UsageError(f"--filters: {exc}") from None
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out!r} is a file, not a folder")


def _settings(args: argparse.Namespace) -> list[Any]:
    """The index settings: --index, else each store's defaults (quick or full)."""
    texts = args.index or [
        t for s in args.stores for t in (QUICK_INDEX if args.quick else {}).get(s, DEFAULT_INDEX[s])
    ]
    out = []
    for text in _unique(texts):
        for s in parse_index(text):
            if s.store not in args.stores:
                raise UsageError(f"--index {text!r}: store {s.store} is not in --stores")
            out.append(s)
    return out
