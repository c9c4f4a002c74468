"""Perf section "stores", dense exact search against the numpy GEMM (parts a and d).

(a) Issue 2, exact dense search: achieved GFLOP/s of ``ExactStore.search``
    (2,000 queries x 100,000 docs x 512, k = 100; FLOPs counted as
    ``2 * nq * n * d``) against a plain numpy ``Q @ D.T`` of the same shape
    in the same run, best of 3, alternated. Target ratio >= 0.7. The two
    top-k backends (numpy argpartition, torch.topk) are both timed.

(d) Issue 12, dense flat search at Flickr30k size: 47,675 x 9,535 (and the
    reverse), d = 256 and 384, k = 10: ``ExactStore.search`` and
    ``FaissStore("flat").search`` against the numpy GEMM floor (the same
    product in blocks of 4,096 queries, no selection) in the same run.

``quick=True`` shrinks every size about tenfold. The section is
``benchmarks/perf_stores.py``; this module holds its dense parts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from perf_common import row_maker

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.testing.store_conformance import clustered_vectors

SECTION = "stores"


_row = row_maker(SECTION)


def best_time(fn: Callable[[], Any], repeat: int) -> float:
    """The shortest of ``repeat`` wall times of ``fn()``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# -- (a) ExactStore vs numpy GEMM ------------------------------------------------------------
def exact_gflops(quick: bool) -> tuple[list[dict], dict]:
    nq, n, d, k = (500, 20_000, 512, 100) if quick else (2_000, 100_000, 512, 100)
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((n, d), dtype=np.float32)
    q = rng.standard_normal((nq, d), dtype=np.float32)
    flops = 2.0 * nq * n * d
    stores = {}
    for topk in ("numpy", "torch"):
        try:
            s = ExactStore(topk=topk)
            s.create_collection("bench", d)
            s.insert("bench", docs, np.arange(n))
            s.search("bench", q[:10], k)  # consolidate and warm up
            stores[topk] = s
        except ImportError:
            continue
    t_np = float("inf")
    t_store = {name: float("inf") for name in stores}
    for _ in range(3):  # alternate, so noise hits both sides alike
        t_np = min(t_np, best_time(lambda: q @ docs.T, 1))
        for name, s in stores.items():
            t_store[name] = min(t_store[name], best_time(lambda s=s: s.search("bench", q, k), 1))
    gf_np = flops / t_np / 1e9
    rows = [_row(f"numpy Q@D.T {nq}x{n}x{d}", gf_np, "GFLOP/s")]
    details: dict[str, Any] = {"shape": [nq, n, d], "k": k, "numpy_gemm_s": t_np}
    auto = "torch" if "torch" in stores else "numpy"
    for name, t in t_store.items():
        gf = flops / t / 1e9
        ratio = gf / gf_np
        rows.append(_row(f"ExactStore k={k} topk={name}", gf, "GFLOP/s"))
        rows.append(
            _row(
                f"ExactStore/numpy GFLOP/s ratio topk={name}"
                + (" (default)" if name == auto else ""),
                ratio,
                "x",
                ">= 0.7" if name == auto else None,
                bool(ratio >= 0.7) if name == auto else None,
            )
        )
        details[f"exact_{name}_s"] = t
    for s in stores.values():
        s.close()
    return rows, details


# -- (d) dense flat search at Flickr30k size ------------------------------------------------
def dense_flickr(quick: bool) -> tuple[list[dict], dict]:
    n_cap, n_img, k = (4_767, 953, 10) if quick else (47_675, 9_535, 10)
    rows: list[dict] = []
    table: list[dict] = []
    for dim in (256, 384):
        x, q = clustered_vectors(n_img, dim, n_clusters=500, n_queries=n_cap, seed=dim)
        for direction, (qs, docs) in (("t2i", (q, x)), ("i2t", (x, q))):
            times = _dense_times(qs, docs, dim, k)
            floor = times["numpy GEMM floor"]
            flops = 2.0 * qs.shape[0] * docs.shape[0] * dim
            r = {"dim": dim, "direction": direction, "flops": flops, **times}
            table.append(r)
            shape = f"{qs.shape[0]:,}x{docs.shape[0]:,}x{dim}"
            rows.append(_row(f"dense {shape} numpy GEMM floor", floor, "s"))
            for lb in ("exact", "faiss flat"):
                rows.append(_row(f"dense {shape} {lb} search", times[lb], "s"))
                ratio = floor / times[lb]
                rows.append(
                    _row(
                        f"dense {shape} {lb}: GEMM floor / search",
                        ratio,
                        "x",
                        ">= 0.7" if lb == "exact" else None,
                        bool(ratio >= 0.7) if lb == "exact" else None,
                    )
                )
    return rows, {"table": table, "k": k}


def _dense_times(qs: np.ndarray, docs: np.ndarray, dim: int, k: int) -> dict[str, float]:
    """Seconds of the numpy GEMM floor, ExactStore and FaissStore("flat"): best of 2, alternated."""
    from imsearch_align.adapters.faiss_store import FaissStore

    ids = np.arange(docs.shape[0], dtype=np.int64)
    stores = {}
    for label, make in (("exact", ExactStore), ("faiss flat", lambda: FaissStore("flat"))):
        s = make()
        s.create_collection("c", dim)
        s.insert("c", docs, ids)
        s.search("c", qs[:10], k)  # consolidate / warm up
        stores[label] = s
    times = {"numpy GEMM floor": float("inf"), **{lb: float("inf") for lb in stores}}
    for _ in range(2):  # alternate, best of 2
        t0 = time.perf_counter()
        for s0 in range(0, qs.shape[0], 4096):
            qs[s0 : s0 + 4096] @ docs.T
        times["numpy GEMM floor"] = min(times["numpy GEMM floor"], time.perf_counter() - t0)
        for lb, s in stores.items():
            t0 = time.perf_counter()
            s.search("c", qs, k)
            times[lb] = min(times[lb], time.perf_counter() - t0)
    for s in stores.values():
        s.close()
    return times
