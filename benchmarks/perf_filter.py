"""Perf section "filter": single filtered queries at a Milvus server, attributes typed (INT64
fields with a scalar index) against the dynamic JSON field.

Issue 37 (item 4): at 1M rows the study's filtered cells took 36-42 ms per filtered query
(p50) on Milvus 2.3.5, with the attributes in the collection's dynamic JSON field, which
Milvus parses row by row for every filter. ``MilvusStore`` now types the attributes a
collection declares (``attribute_storage="typed"``, the default: INT64 fields, an STL_SORT
index each on a server) and keeps the JSON path on request (``"dynamic"``).

Two collections of the same rows (cone-shaped clustered unit vectors, 256 dimensions,
IVF_FLAT nlist 1024, nprobe 16 by default) on one Milvus 2.3.5 standalone: attributes typed,
and dynamic. Each row has two attributes, ``cat10`` (10 categories, seeded at random: a
filter on one keeps 10 %) and ``cat100`` (100 categories: 1 % kept). Per pass, each of the
four cases (storage x share kept) sends the same single queries one at a time through
``MilvusStore.search_filtered``, the cases' order rotating from pass to pass (the load
average is recorded before each); the table gives each case's p50 / p95 / p99 as the
median over the passes with their range, and the ANN recall@10 of the first pass against
the exact filtered top-10 (numpy over the kept rows). Every id returned is checked against
the filter (``outside_filter``: ids whose category is not the kept one). The two
collections are two IVF builds (k-means and segment boundaries of their own), so above one
segment their approximate answers differ by as much as two builds do: recall against the
exact filtered truth is the figure to compare (``same_answers`` counts the identical rows).

    python benchmarks/perf_filter.py --rows 200000
    python benchmarks/perf_filter.py --rows 1000000 --passes 3 --out perf_filter.json
    python benchmarks/perf_filter.py --rows 100000 --uri http://127.0.0.1:19540  # a running server

Without ``--uri`` it starts a Milvus 2.3.5 standalone
(:func:`~imsearch_align.testing.servers.milvus_standalone_server`) and stops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

SECTION = "filter"
DIM, K = 256, 10
#: The attribute of each share kept: (name, categories); the filter keeps category 0.
SHARES = {"10%": ("cat10", 10), "1%": ("cat100", 100)}
STORAGES = ("typed", "dynamic")

__all__ = ["SECTION", "build", "exact_top", "main", "measure", "run", "summarize"]


def data(rows: int, queries: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """``rows`` cone-shaped vectors, ``queries`` more from the same clusters, and the seeded
    categories of each attribute."""
    from imsearch_align.collection.cone import cone_vectors

    allx = cone_vectors(rows + queries, DIM, seed=seed + 1)
    rng = np.random.default_rng(seed)
    attrs = {name: rng.integers(0, n, rows).astype(np.int64) for name, n in SHARES.values()}
    return allx[:rows], allx[rows:], attrs


def exact_top(x: np.ndarray, q: np.ndarray, keep: np.ndarray, k: int = K) -> np.ndarray:
    """The exact top-``k`` ids (row numbers) of each query over the rows ``keep`` marks."""
    rows = np.flatnonzero(keep)
    s = q @ x[rows].T
    top = np.argpartition(-s, k - 1, axis=1)[:, :k]
    return rows[top]


def build(store: Any, name: str, x: np.ndarray, attrs: dict, block: int = 50_000) -> dict:
    """Create ``name`` with the attributes declared, insert ``x`` in blocks, wait until it
    is searchable: the seconds of each step."""
    t0 = time.perf_counter()
    store.create_collection(name, x.shape[1], attributes={a: "int64" for a in attrs})
    create_s = time.perf_counter() - t0
    ids = np.arange(len(x), dtype=np.int64)
    t0 = time.perf_counter()
    for lo in range(0, len(x), block):
        sl = slice(lo, lo + block)
        store.insert(name, x[sl], ids[sl], attributes={a: v[sl] for a, v in attrs.items()})
    insert_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ready = store.make_searchable(name)
    ready_s = time.perf_counter() - t0
    return {"create_s": create_s, "insert_s": insert_s, "ready_s": ready_s, "ready": ready,
            "segment_rows": _segment_rows(store.uri, name)}  # fmt: skip


def _segment_rows(uri: str, name: str) -> list[int] | None:
    """The rows of each flushed segment (pymilvus's listing; None where it is refused)."""
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri)
    try:
        segs = client.list_persistent_segments(name)
        return sorted(int(s.num_rows) for s in segs if "flushed" in str(s.state).lower())
    except Exception:  # Milvus Lite does not list segments
        return None
    finally:
        client.close()


def _cases(stores: dict) -> list[tuple[str, str, Any]]:
    from imsearch_align.framework.interfaces import Filter

    return [(storage, share, Filter(SHARES[share][0], [0]))
            for storage in stores for share in SHARES]  # fmt: skip


def measure(stores: dict, names: dict, q: np.ndarray, passes: int, warmup: int = 20) -> dict:
    """Every case's per-query milliseconds per pass (the cases' order rotating), and the
    first pass's answers."""
    cases = _cases(stores)
    for storage, _, f in cases:  # warm: the expression checked, caches filled
        for i in range(min(warmup, len(q))):
            stores[storage].search_filtered(names[storage], q[i : i + 1], K, f)
    lat: dict[str, list[list[float]]] = {f"{s}/{sh}": [] for s, sh, _ in cases}
    load: dict[str, list[float]] = {f"{s}/{sh}": [] for s, sh, _ in cases}
    answers: dict[str, np.ndarray] = {}
    for p in range(passes):
        order = cases[p % len(cases) :] + cases[: p % len(cases)]
        for storage, share, f in order if p % 2 == 0 else order[::-1]:
            store, name = stores[storage], names[storage]
            load[f"{storage}/{share}"].append(os.getloadavg()[0])
            ms, ids = [], np.full((len(q), K), -1, dtype=np.int64)
            for i in range(len(q)):
                t = time.perf_counter()
                res = store.search_filtered(name, q[i : i + 1], K, f)
                ms.append((time.perf_counter() - t) * 1e3)
                ids[i] = res.ids[0]
            lat[f"{storage}/{share}"].append(ms)
            answers.setdefault(f"{storage}/{share}", ids)
    return {"latency_ms": lat, "answers": answers, "load_average_1min": load}


def _spread(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarize(lat: dict[str, list[list[float]]]) -> dict[str, dict[str, dict[str, float]]]:
    """Per case, p50 / p95 / p99 of each pass, as the median over the passes and their range."""
    out = {}
    for case, per_pass in lat.items():
        pct = [np.percentile(ms, [50, 95, 99]) for ms in per_pass]
        out[case] = {f"p{p}": _spread([float(x[j]) for x in pct])
                     for j, p in enumerate((50, 95, 99))}  # fmt: skip
    return out


def _quality(x: np.ndarray, q: np.ndarray, attrs: dict, answers: dict) -> dict:
    """Recall@10 of each case's first-pass answers against the exact filtered top-10, and the
    share of answers equal in both storages."""
    out: dict[str, Any] = {}
    for share, (attr, _) in SHARES.items():
        keep = attrs[attr] == 0
        exact = exact_top(x, q, keep)
        for storage in STORAGES:
            got = answers[f"{storage}/{share}"]
            hit = [len(np.intersect1d(g[g >= 0], e)) / K for g, e in zip(got, exact)]
            returned = got[got >= 0]
            out[f"{storage}/{share}"] = {"recall@10": float(np.mean(hit)),
                                         "kept_rows": int(keep.sum()),
                                         "returned_ids": int(returned.size),
                                         "outside_filter": int((~keep[returned]).sum())}  # fmt: skip
        same = answers[f"typed/{share}"] == answers[f"dynamic/{share}"]
        out[f"same_answers/{share}"] = float(np.mean(same.all(axis=1)))
    return out


def _server(uri: str | None) -> contextlib.AbstractContextManager:
    if uri:
        return contextlib.nullcontext(type("Given", (), {"uri": uri, "kind": "given"})())
    from imsearch_align.testing.servers import milvus_standalone_server

    return milvus_standalone_server()


def filter_latency(rows: int, *, queries: int = 200, passes: int = 3, index: str = "IVF_FLAT",
                   uri: str | None = None, seed: int = 0) -> dict:  # fmt: skip
    """The whole measurement (see the module docstring): builds, latencies, quality."""
    from imsearch_align.adapters.milvus import MilvusStore

    t0 = time.perf_counter()
    x, q, attrs = data(rows, queries, seed)
    gen_s = time.perf_counter() - t0
    build_p, search_p = ({"nlist": 1024}, {"nprobe": 16}) if index == "IVF_FLAT" else (
        {"M": 16, "efConstruction": 100}, {"ef": 64})  # fmt: skip
    out: dict[str, Any] = {"rows": rows, "dim": DIM, "queries": queries, "passes": passes,
                           "index": index, "build_params": build_p, "search_params": search_p,
                           "data_s": gen_s, "builds": {}}  # fmt: skip
    with _server(uri) as srv:
        stores = {s: MilvusStore(uri=srv.uri, index=index, index_params=build_p,
                                 search_params=search_p, attribute_storage=s,
                                 check_duplicates=False) for s in STORAGES}  # fmt: skip
        names = {s: f"perf_filter_{s}_{rows}" for s in STORAGES}
        try:
            for s in STORAGES:
                if names[s] in stores[s].list_collections():
                    stores[s].drop_collection(names[s], force=True)
                out["builds"][s] = build(stores[s], names[s], x, attrs)
                print(f"[filter] {s}: built in {out['builds'][s]['insert_s']:.0f} s insert + "
                      f"{out['builds'][s]['ready_s']:.0f} s until searchable", file=sys.stderr)  # fmt: skip
            time.sleep(5)  # Milvus 2.3.5 may merge a growing copy in for seconds after the wait
            out["provenance"] = {s: stores[s].provenance() for s in STORAGES}
            m = measure(stores, names, q, passes)
        finally:
            for s in STORAGES:
                if names[s] in stores[s].list_collections():
                    stores[s].drop_collection(names[s])
                stores[s].close()
    out["latency"] = summarize(m["latency_ms"])
    out["latency_ms_per_pass"] = m["latency_ms"]
    out["load_average_1min"] = m["load_average_1min"]
    out["quality"] = _quality(x, q, attrs, m["answers"])
    out["wall_s"] = time.perf_counter() - t0
    return out


def table(res: dict) -> str:
    """The Markdown table of one run."""
    head = ("| storage | kept | p50 ms | p95 ms | p99 ms | recall@10 | outside filter | load |\n"
            "|---|---|---|---|---|---|---|---|")  # fmt: skip
    lines = [head]
    for case, pct in res["latency"].items():
        storage, share = case.split("/")
        cells = [f"{v['median']:.1f} ({v['min']:.1f}-{v['max']:.1f})" for v in pct.values()]
        q = res["quality"][case]
        load = res["load_average_1min"][case]
        lines.append(f"| {storage} | {share} | " + " | ".join(cells)
                     + f" | {q['recall@10']:.3f} | {q['outside_filter']} of {q['returned_ids']}"
                     f" | {min(load):.1f}-{max(load):.1f} |")  # fmt: skip
    return "\n".join(lines)


def run(quick: bool = False) -> dict:
    """The perf section: 20,000 rows quick, else 200,000 (``--rows`` from the command line)."""
    from perf_common import row_maker

    row = row_maker(SECTION)
    res = filter_latency(20_000 if quick else 200_000, passes=3)
    rows = []
    for case, pct in res["latency"].items():
        item = (f"filtered single query p50, {case} kept ({res['rows']:,} x {DIM}, "
                f"{res['index']}; median of {res['passes']} passes)")  # fmt: skip
        rows.append(row(item, pct["p50"]["median"], "ms"))
    return {"rows": rows, "details": res}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=200_000, help="rows per collection")
    ap.add_argument("--queries", type=int, default=200, help="single queries per pass and case")
    ap.add_argument("--passes", type=int, default=3, help="interleaved passes (at least 1)")
    ap.add_argument("--index", default="IVF_FLAT", choices=["IVF_FLAT", "HNSW"])
    ap.add_argument("--uri", default=None, help="a running Milvus server (default: start one)")
    ap.add_argument("--out", default=None, help="write the whole result as JSON here")
    args = ap.parse_args(argv)
    if args.rows < 1000 or args.queries < 1 or args.passes < 1:
        ap.error("--rows must be >= 1000, --queries and --passes >= 1")
    res = filter_latency(args.rows, queries=args.queries, passes=args.passes,
                         index=args.index, uri=args.uri)  # fmt: skip
    print(table(res))
    for s, b in res["builds"].items():
        print(f"{s}: insert {b['insert_s']:.1f} s, until searchable {b['ready_s']:.1f} s "
              f"({b['ready']}); flushed segments' rows {b['segment_rows']}")  # fmt: skip
    for share in SHARES:
        print(
            f"same answers typed vs dynamic, {share}: {res['quality'][f'same_answers/{share}']:.3f}"
        )
    print(f"data {res['data_s']:.1f} s, whole run {res['wall_s']:.0f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
