"""``embed``: precompute a dataset's embeddings into the cache ``eval`` reads."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from imsearch_align.cli.common import UsageError, key_value, name_or_none, positive_int

__all__ = ["add_embed_command", "cmd_embed"]


def add_embed_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The ``embed`` sub-command."""
    em = sub.add_parser(
        "embed", parents=parents, help="precompute a dataset's embeddings into the cache"
    )
    em.add_argument("--dataset", required=True)
    em.add_argument("--dataset-param", action="append", type=key_value, metavar="KEY=VALUE")
    for side in ("image", "text"):
        em.add_argument(f"--{side}-encoder", type=name_or_none, metavar="NAME")
        em.add_argument(
            f"--{side}-encoder-param", action="append", type=key_value, metavar="KEY=VALUE"
        )
    em.add_argument(
        "--cache-dir",
        type=name_or_none,
        default=".cache/embeddings",
        metavar="DIR",
        help="embedding cache (default .cache/embeddings, what eval reads)",
    )
    em.add_argument(
        "--batch-size", type=positive_int, default=32, metavar="N", help="items per encoder pass"
    )
    em.add_argument("--no-progress", action="store_true")
    em.set_defaults(func=cmd_embed)


def cmd_embed(args: argparse.Namespace) -> int:
    """``embed``: precompute a dataset's embeddings into the cache, split by
    split as ``eval`` reads them."""
    from imsearch_align.datasets.base import SUPPORT_SPLIT, TEST_SPLIT
    from imsearch_align.embedding import embed
    from imsearch_align.experiment import make_encoder
    from imsearch_align.experiment.value_checks import check_cache_folder
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
    check_cache_folder(args.cache_dir)  # before loading or encoding anything
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
