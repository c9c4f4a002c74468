"""Perf section "stores": exact search throughput and the vector-store table.

Four parts, each in its own module (whose docstring says what it measures):

(a) Issue 2, exact dense search: ``ExactStore.search`` GFLOP/s against a plain
    numpy ``Q @ D.T`` of the same shape (``perf_stores_dense.exact_gflops``).
(b) Issue 4, the stores table: build time, queries/s, batch latency,
    recall@10 and peak memory of ExactStore, faiss flat/HNSW/IVF and Milvus
    Lite, and the harness overhead against raw faiss
    (``perf_stores_table.stores_table``).
(c) Issue 12, sparse search at Flickr30k size on ASIF spaces, with scipy and
    sparse-dot-topn timed in the same run (``perf_stores_sparse.sparse_flickr``).
(d) Issue 12, dense flat search at Flickr30k size against the numpy GEMM
    floor (``perf_stores_dense.dense_flickr``).

    python benchmarks/perf_stores.py [--quick]            # every part, and the stores table
    python benchmarks/perf_stores.py --flickr [--quick]   # parts (c) and (d) only

``quick=True`` shrinks every size about tenfold. Uses the public API only.
"""

from __future__ import annotations

import sys

from perf_stores_dense import dense_flickr, exact_gflops
from perf_stores_sparse import sparse_flickr
from perf_stores_table import stores_table

SECTION = "stores"

__all__ = ["SECTION", "dense_flickr", "exact_gflops", "run", "sparse_flickr", "stores_table"]


def run(quick: bool = False) -> dict:
    """All parts; see the module docstring."""
    rows_a, det_a = exact_gflops(quick)
    rows_b, det_b = stores_table(quick)
    rows_c, det_c = sparse_flickr(quick)
    rows_d, det_d = dense_flickr(quick)
    return {
        "rows": rows_a + rows_b + rows_c + rows_d,
        "details": {
            "exact_gflops": det_a,
            "stores": det_b,
            "sparse_flickr": det_c,
            "dense_flickr": det_d,
        },
    }


def _print_table(out: dict) -> None:
    for r in out["rows"]:
        tgt = f"  target {r['target']}: {'ok' if r['ok'] else 'MISSED'}" if r["target"] else ""
        print(f"{r['item']:<58} {r['value']:>12.3f} {r['unit']}{tgt}")
    t = out["details"]["stores"]["table"]
    print()
    print(
        f"{'store':<28}{'build s':>9}{'q/s':>10}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'R@10':>8}{'peak MiB':>10}"
    )
    for r in t:
        print(
            f"{r['store']:<28}{r['build_s']:>9.2f}{r['qps']:>10.0f}{r['p50_ms']:>9.1f}{r['p95_ms']:>9.1f}"
            f"{r['p99_ms']:>9.1f}{r['recall@10']:>8.4f}{r['peak_mem_mb']:>10.0f}"
        )
    for note in out["details"]["stores"]["notes"]:
        print("note:", note)


if __name__ == "__main__":
    if "--flickr" in sys.argv:  # only parts (c) and (d)
        quick = "--quick" in sys.argv
        for part in (sparse_flickr, dense_flickr):
            for r in part(quick)[0]:
                print(f"{r['item']:<96} {r['value']:>12.4g} {r['unit']}")
    else:
        _print_table(run(quick="--quick" in sys.argv))
