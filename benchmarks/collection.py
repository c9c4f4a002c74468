"""The collection-scale study: the test split among distractors, ANN indexes swept.

    python benchmarks/collection.py --embeddings DIR                # 0, 100k, 1M distractors
    python benchmarks/collection.py --shapes 120 --quick            # offline, a couple of minutes
    python benchmarks/collection.py --data ~/data/flickr30k --stores faiss milvus \\
        --uri http://127.0.0.1:19530 --sizes 0 100000 1000000
    python benchmarks/collection.py --embeddings DIR --distractors coco_images.npy \\
        --index faiss:hnsw:M=16,efConstruction=100,efSearch=16,32,64,128

For each method (default csa, procrustes), direction (default t2i: a seeded
sample of 10,000 test captions searching the test images; ``--directions
i2t`` the other way), store, index setting and distractor count (``--sizes``,
default 0 100000 1000000), one row: HitRate@1/5/10 and nDCG@10 (tie-aware,
exact vs approximate), ANN recall@10 against the exact truth, batched
queries/s, single-query latency p50/p95/p99, insert rows/s, build and load
seconds (FAISS's IVF training counted as build), the store's memory (the
bytes a FAISS index holds; server RSS for a server; this process's RSS
growth for another in-process store) and disk. Every method has its own collections (the
distractors are aligned by it).

``--distractors``: a count of synthetic rows (a mixture fitted to the
dataset's support embeddings; the default, as many as the largest size), a
file of raw embeddings from the same encoder (.npy, .parquet, .safetensors),
or ``dataset:NAME[:SPLIT]``. ``--index STORE:TYPE[:PARAMS]`` (repeatable; see
:mod:`imsearch_align.collection.settings`): build-time parameters build,
search-time ones (``efSearch``, ``nprobe``, Milvus ``ef``) are swept on one
build; ``max_size=N`` leaves a setting out above N distractors.

``--filters 0.5 0.1 0.01``: every item carries a ``category`` attribute of
known selectivity (relevant items in the kept categories) and each built
index, set to its deployable search setting (the fastest with ANN recall@10
>= 0.9, else the most accurate), is also searched under a filter keeping
that share of the collection (:mod:`imsearch_align.collection.filtered_study`):
one ``kind: filtered`` cell per selectivity, with ANN recall against the
exact filtered truth. Where the dataset has class labels (``--shapes``), every
item also carries its ``label`` (a distractor: its mixture component's
majority label) and one more ``kind: filtered`` cell searches each query
within its relevant item's label (:mod:`imsearch_align.collection.label_filter`).
``--concurrency 1 2 4 8 16``: on the same setting of
each build of the largest collection, that many clients send single queries
for ``--concurrency-duration`` seconds (threads in-process, processes for a
server; :mod:`imsearch_align.collection.extras`): one ``kind: concurrency``
cell per level, with the saturation point printed.

``distractors.md`` puts the distractors beside the split's documents for each
method, raw and aligned (mean pairwise cosine, spectrum, nearest-neighbour
cosines) and how close the queries come to each
(:mod:`imsearch_align.collection.geometry_report`): distractors far closer to
the queries than the documents are would explain a collapse real data would not show.

Writes into ``--out``: one JSON per cell (``kind: collection_scale``, read by
``imsearch-align report``), ``collection.csv``, ``leaderboard.md`` and the
figures (quality against queries/s per size, quality against size). The
exact truth of each collection is cached under ``--truth-cache``.

Every argument is checked before any work: one ``error:`` line, exit 2,
nothing written (an unknown store, method or index parameter, a distractor
file of another dimension or encoder, more distractors than the source
holds, a collection larger than a store mode serves). Exit 0 every cell ok,
1 a cell failed or the data could not be loaded, 130 interrupted (the
finished cells' tables are written first; ``--skip-existing`` goes on).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from collection_args import (
    FULL_SIZES,
    QUICK_SIZES,
    _check_args,
    _default_stores,
    _settings,
    _unique,
    build_parser,
)
from flickr import UsageError, _base_config, dataset_spec, method_params

from imsearch_align.collection.settings import SettingError, check_size


def main(argv: list[str] | None = None) -> int:
    """Run the study and print the table (exit status in the module docstring)."""
    args = build_parser(__doc__).parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from imsearch_align.collection import DistractorError
    from imsearch_align.experiment import ConfigError, Study

    args.stores = args.stores or _default_stores(args.quick)
    args.k, args.stores, args.methods = (
        sorted(_unique(args.k)),
        _unique(args.stores),
        _unique(args.methods),
    )
    args.queries = args.queries or (1000 if args.quick else 10_000)
    args.latency_queries = args.latency_queries or (100 if args.quick else 1000)
    try:
        _check_args(args)
        settings = _settings(args)
        dataset, dparams, offline = dataset_spec(args)
        base = _base_config(args, dataset, dparams, offline or args.offline)
        base = base.replace(name="collection")
    except (UsageError, SettingError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    study = Study()
    try:
        study.load(base)
    except Exception as exc:
        if args.traceback:
            raise
        print(f"error: cannot load the data: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    try:
        sources, sizes = _sources(args, base, study)
    except (UsageError, SettingError, DistractorError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cells: list[dict[str, Any]] = []
    filtered: list[dict[str, Any]] = []
    extra: dict[str, Any] = {"concurrency": [], "seconds": {}}
    t0 = time.perf_counter()
    try:
        _run(args, base, study, settings, sources, sizes, cells, argv, filtered, extra)
    except KeyboardInterrupt:
        shutil.rmtree(out / ".stores", ignore_errors=True)
        print(
            f"\ninterrupted after {len(cells)} cells; run again with --skip-existing",
            file=sys.stderr,
        )
        _finish(cells, args, out, t0)
        return 130
    shutil.rmtree(out / ".stores", ignore_errors=True)  # Milvus Lite / Qdrant local data
    _finish(cells, args, out, t0)
    secs = extra["seconds"]
    for kind, found in (("filtered", filtered), ("concurrency", extra["concurrency"])):
        if found:
            bad = sum(1 for c in found if (c.get("status") or {}).get("state") != "ok")
            print(f"{kind + ':':<12} {len(found) - bad}/{len(found)} cells ok (kind {kind!r}), "
                  f"measured in {secs.get(kind, 0.0):.0f} s")  # fmt: skip
    done = cells + filtered + extra["concurrency"]
    return 0 if all((c.get("status") or {}).get("state") == "ok" for c in done) else 1


def _sources(args: argparse.Namespace, base: Any, study: Any) -> tuple[dict[str, Any], list[int]]:
    """The distractor source of each direction, the sizes, and the store-mode size checks."""
    from imsearch_align.collection.prepare import MODALITIES, distractor_source
    from imsearch_align.datasets.base import TEST_SPLIT

    sizes = _unique(args.sizes) if args.sizes else None
    if sizes is None and not args.distractors:
        sizes = list(QUICK_SIZES if args.quick else FULL_SIZES)
    spec = args.distractors or str(max(sizes or [0]))
    sources = {}
    ds = study.load(base).dataset
    for d in args.directions:
        src = distractor_source(spec, base, study, MODALITIES[d][0], seed=args.seed)
        if sizes is None:
            sizes = [0, src.n_rows]
        if max(sizes) > src.n_rows:
            raise UsageError(
                f"--sizes {max(sizes)}: the distractors {src.name!r} hold {src.n_rows} rows"
            )
        docs = len(ds.split_ids(TEST_SPLIT, MODALITIES[d][0]))
        for store in args.stores:
            check_size(store, docs + max(sizes), what=f"the largest {d} collection")
        sources[d] = src
    return sources, sorted(sizes)


def _run(args, base, study, settings, sources, sizes, cells, argv, filtered, extra) -> None:
    """Every cell: direction x method x support size x distractor count x setting."""
    from imsearch_align.collection import CollectionBlocks, exact_truth
    from imsearch_align.collection.extras import ConcurrencyPlan
    from imsearch_align.collection.filtered_study import FilterPlan
    from imsearch_align.collection.label_filter import LabelPlan
    from imsearch_align.collection.prepare import prepare
    from imsearch_align.collection.study import CellBase, CellRunner
    from imsearch_align.framework.atomic import atomic_write
    from imsearch_align.framework.interfaces import StoreUnavailableError

    runner = CellRunner(
        Path(args.out),
        uri=args.uri,
        batch=args.batch,
        latency_queries=args.latency_queries,
        skip_existing=args.skip_existing,
        seed=args.seed,
        filters=FilterPlan(
            tuple(args.filters), seed=args.seed, labels=LabelPlan.from_study(study, base)
        )
        if args.filters
        else None,
        concurrency=ConcurrencyPlan(
            tuple(args.concurrency), args.concurrency_duration, at_distractors=max(sizes)
        )
        if args.concurrency
        else None,
    )
    runner.filtered_cells = filtered  # the caller's lists: kept when interrupted
    runner.concurrency_cells = extra["concurrency"]
    extra["seconds"] = runner.seconds
    reports: list[str] = ["# The distractors beside the split\n"]
    command = ["python", "benchmarks/collection.py", *(sys.argv[1:] if argv is None else argv)]
    down: set[str] = set()
    for direction in args.directions:
        src = sources[direction]
        for method in args.methods:
            for n in args.n or [None]:
                mp = _params(method, min(args.n) if args.n else None, base, study)
                cfg = base.replace(method=method, n_support=n, method_params=mp)
                print(
                    f"fitting {method} (N={n or 'all'}) for {direction}",
                    file=sys.stderr,
                    flush=True,
                )
                prep = prepare(cfg, study, direction, args.queries, progress=not args.no_progress)
                if max(sizes) > 0:
                    reports.append(_geometry(study, cfg, prep, src, method, direction))
                    atomic_write(Path(args.out) / "distractors.md", "\n".join(reports))
                for size in sizes:
                    coll = CollectionBlocks(
                        prep.doc_ids,
                        prep.docs,
                        src.head(size) if size else None,
                        method=prep.method,
                        modality=prep.doc_modality,
                        block_rows=args.block_rows,
                    )
                    truths: dict[str, Any] = {}

                    def truth_of(digest: str, prep=prep, coll=coll, truths=truths) -> Any:
                        if digest not in truths:
                            truths[digest] = exact_truth(
                                prep.queries, prep.query_ids, coll, max(args.k),
                                cache_dir=args.truth_cache, docs_digest=digest,
                                block_rows=args.block_rows,
                            )  # fmt: skip
                        return truths[digest]

                    cb = CellBase(
                        study.load(cfg).dataset.name, method, direction, size, len(prep.doc_ids),
                        tuple(args.k), _identity(args, cfg, src, prep), tuple(command),
                    )  # fmt: skip
                    for s in settings:
                        if s.store in down or (s.max_size is not None and size > s.max_size):
                            continue
                        try:
                            cells.extend(runner.run(prep, coll, cb, s, truth_of))
                        except StoreUnavailableError as exc:
                            down.add(s.store)
                            print(f"  {s.store} unreachable ({exc}); its other cells are not run",
                                  file=sys.stderr)  # fmt: skip


def _geometry(study: Any, cfg: Any, prep: Any, src: Any, method: str, direction: str) -> str:
    """The distractors beside the split's documents (``distractors.md``; see
    :mod:`imsearch_align.collection.geometry_report`)."""
    from imsearch_align.collection.geometry_report import distractor_report
    from imsearch_align.datasets.base import TEST_SPLIT

    data = study.load(cfg)
    mod = prep.doc_modality
    prov = data.image_provider if mod == "image" else data.text_provider
    rows = study.embedding_rows(data.dataset, prov, mod, prep.doc_ids, split=TEST_SPLIT,
                                config=cfg, progress=False)  # fmt: skip
    text = distractor_report(prep, np.asarray(rows[: len(prep.doc_ids)]), src,
                             title=f"{method}, {direction}: {src.name}", seed=cfg.seed)  # fmt: skip
    print(f"  {method}: the distractors beside the split in distractors.md", file=sys.stderr)
    return text


def _params(method: str, n: int | None, base: Any, study: Any) -> dict[str, Any]:
    """The method's parameters for the sweep's smallest support size (as the Flickr study)."""
    data = study.load(base)
    dims = (int(data.image_provider.dim), int(data.text_provider.dim))
    return method_params(method, n or len(data.support.split_ids("train", "text")), dims)


def _identity(args: argparse.Namespace, cfg: Any, src: Any, prep: Any) -> dict[str, Any]:
    """What else defines a cell (enters its file key)."""
    rec = src.record()
    return {
        "dataset_params": cfg.dataset_params,
        "encoders": [
            cfg.image_encoder,
            cfg.image_encoder_params,
            cfg.text_encoder,
            cfg.text_encoder_params,
        ],
        "method_params": cfg.method_params,
        "n_support": prep.n_support,
        "seed": cfg.seed,
        "queries": len(prep.query_ids),
        "batch": args.batch,
        "distractors": rec,
    }


def _finish(cells: list[dict[str, Any]], args: argparse.Namespace, out: Path, t0: float) -> None:
    """The table, the CSV, the leaderboard and the figures of the cells that ran."""
    from imsearch_align.collection.study_report import (
        cells_frame,
        leaderboard,
        quality_vs_qps,
        quality_vs_size,
    )
    from imsearch_align.experiment.report import text_table
    from imsearch_align.framework.atomic import atomic_write

    if not cells:
        return
    df = cells_frame(cells, args.k)
    cols = ["method", "direction", "store", "index", "search", "size", f"HitRate@{max(args.k)}",
            f"HitRate@{max(args.k)} exact", f"ann_recall@{max(args.k)}", "q/s", "p50 ms",
            "insert rows/s", "status"]  # fmt: skip
    rows = [[_cell_text(v) for v in r] for r in df[cols].itertuples(index=False)]
    print()
    print(text_table(cols, rows))
    bad = sum(1 for c in cells if (c.get("status") or {}).get("state") != "ok")
    print(f"\n{len(cells) - bad}/{len(cells)} cells ok in {time.perf_counter() - t0:.0f} s; "
          f"results in {out}/")  # fmt: skip
    atomic_write(out / "collection.csv", df.to_csv(index=False))
    atomic_write(out / "leaderboard.md", leaderboard(df, args.k))
    for d in args.directions:
        metric = f"{d}/HitRate@{max(args.k)}"
        mine = [c for c in cells if c.get("direction") == d]
        for png in (
            quality_vs_qps(
                mine, metric, out / f"quality_vs_qps_{d}.png", title=f"{d}: quality vs speed"
            ),
            quality_vs_size(
                mine, metric, out / f"quality_vs_size_{d}.png", title=f"{d}: quality vs size"
            ),
        ):
            if png is not None:
                print(f"figure:      {png}")
    print(f"leaderboard: {out / 'leaderboard.md'} (CSV: {out / 'collection.csv'})")


def _cell_text(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    if isinstance(v, float):
        return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)[:60]


if __name__ == "__main__":
    sys.exit(main())
