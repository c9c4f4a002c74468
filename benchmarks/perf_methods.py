"""Perf section "methods": CSA fit vs cca_zoo, ASIF transform throughput and memory.

Run alone: ``python benchmarks/perf_methods.py [--quick]``. Uses only the public API.

* CSA: ``fit`` (numpy whitening + SVD, float64) against ``cca_zoo.linear.CCA``
  on the same data, 256 components; the ratio is measured within one run (the
  machine is shared) and the canonical correlations must agree to 1e-6.
* ASIF: ``transform_images`` of Q queries against M anchors with k non-zeros;
  rows/s, and the peak of memory allocated during the transform as traced by
  ``tracemalloc`` (numpy reports its buffers to it; the stored anchors are
  allocated before tracing starts and are not counted).
* ASIF at Flickr30k size (issue 12): ``transform_texts`` of 47,675 captions
  (384-d) and ``transform_images`` of 9,535 images (768-d) against 29,000
  anchors, non_zeros 800: wall and CPU time beside the GEMM floor (the same
  float32 products in the same blocks, no selection) measured in the same
  run, and the output's bytes per non-zero (target 8: float32 + int32).
"""

from __future__ import annotations

import sys
import time
import tracemalloc
from typing import Any

import numpy as np
from perf_common import row_maker

from imsearch_align import METHODS
from imsearch_align.datasets.synthetic import make_synthetic_pairs

SECTION = "methods"


_row = row_maker(SECTION)


def bench_csa(n: int, d_image: int, d_text: int, r: int) -> tuple[list[dict], dict[str, Any]]:
    """CSA fit time vs cca_zoo's, and the largest difference in canonical correlations."""
    from cca_zoo.linear import CCA as ZooCCA

    data = make_synthetic_pairs(n, d_latent=64, d_image=d_image, d_text=d_text, seed=0)
    X, Y = (a.astype(np.float64) for a in data.paired())
    # Warm both code paths (BLAS threads, imports) so neither pays first-call costs.
    METHODS.get("csa")(sim_dim=4).fit(X[:500, :32], Y[:500, :16])
    ZooCCA(n_components=4).fit([X[:500, :32], Y[:500, :16]])
    t0 = time.perf_counter()
    csa = METHODS.get("csa")(sim_dim=r).fit(X, Y)
    t_csa = time.perf_counter() - t0
    t0 = time.perf_counter()
    zoo = ZooCCA(n_components=r).fit([X, Y])
    t_zoo = time.perf_counter() - t0
    Zx = (X - X.mean(0)) @ zoo.weights_[0]
    Zy = (Y - Y.mean(0)) @ zoo.weights_[1]
    rho_zoo = np.abs(np.einsum("ij,ij->j", Zx, Zy)) / (
        np.linalg.norm(Zx, axis=0) * np.linalg.norm(Zy, axis=0)
    )
    delta = float(np.max(np.abs(csa.canonical_correlations_ - np.sort(rho_zoo)[::-1])))
    ratio = t_zoo / t_csa
    shape = f"{n}x{d_image}/{d_text}, r={r}"
    rows = [
        _row(f"CSA fit ({shape})", t_csa, "s"),
        _row(f"cca_zoo CCA fit ({shape})", t_zoo, "s"),
        _row("CSA fit speed-up vs cca_zoo", ratio, "x", ">= 4", ratio >= 4),
        _row("CSA vs cca_zoo max |delta rho|", delta, "abs", "<= 1e-6", delta <= 1e-6),
    ]
    return rows, {"csa_fit_s": t_csa, "cca_zoo_fit_s": t_zoo, "max_abs_delta_rho": delta}


def bench_asif(n_queries: int, n_anchors: int, d: int, k: int) -> tuple[list[dict], dict[str, Any]]:
    """ASIF transform rows/s and traced peak memory."""
    rng = np.random.default_rng(0)
    anchors_img = rng.standard_normal((n_anchors, d), dtype=np.float32)
    anchors_txt = rng.standard_normal((n_anchors, d), dtype=np.float32)
    queries = rng.standard_normal((n_queries, d), dtype=np.float32)
    budget_gb = 2.0
    m = METHODS.get("asif")(non_zeros=k, max_memory_gb=budget_gb, progress=False)
    m.fit(anchors_img, anchors_txt)
    tracemalloc.start()
    t0 = time.perf_counter()
    out = m.transform_images(queries)
    dt = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out_mb = (out.data.nbytes + out.indices.nbytes + out.indptr.nbytes) / 2**20
    shape = f"{n_queries} q x {n_anchors} anchors, d={d}, k={k}"
    peak_gb = peak / 2**30
    rows = [
        _row(f"ASIF transform ({shape})", n_queries / dt, "rows/s"),
        _row("ASIF transform wall time", dt, "s"),
        _row(
            f"ASIF transform peak traced memory (budget {budget_gb:g} GB)",
            peak_gb,
            "GiB",
            f"<= {budget_gb:g} + output",
            peak_gb <= budget_gb + out_mb / 1024,
        ),
    ]
    return rows, {"asif_seconds": dt, "asif_peak_bytes": int(peak), "asif_output_mib": out_mb}


def bench_asif_flickr(quick: bool) -> tuple[list[dict], dict[str, Any]]:
    """ASIF transforms at Flickr30k size against the float32 GEMM floor of the same shapes."""
    from imsearch_align.methods.asif import plan_rows

    n_anchors, n_cap, n_img = (2_900, 4_767, 953) if quick else (29_000, 47_675, 9_535)
    k = min(800, n_anchors)
    rng = np.random.default_rng(0)
    data = make_synthetic_pairs(
        n_anchors + n_img, d_latent=64, d_image=768, d_text=384, n_classes=500, seed=0
    )
    m = METHODS.get("asif")(non_zeros=k, progress=False)
    m.fit(data.image_emb[:n_anchors], data.text_emb[:n_anchors])
    queries = {
        "texts": (rng.standard_normal((n_cap, 384)) + data.text_emb[:1]).astype(np.float32),
        "images": data.image_emb[n_anchors:],
    }
    m.transform_texts(queries["texts"][:10])  # compile / load the kernels
    rows: list[dict] = []
    details: dict[str, Any] = {}
    for side, X in queries.items():
        anchors = m.anchors_text_ if side == "texts" else m.anchors_image_
        fn = m.transform_texts if side == "texts" else m.transform_images
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn(X)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        # the floor: the same float32 products in the same blocks, nothing else
        rows_per_block = plan_rows(len(X), n_anchors, k, float(m.max_memory_gb))
        buf = np.empty((rows_per_block, n_anchors), np.float32)
        t0 = time.perf_counter()
        for r0 in range(0, len(X), rows_per_block):
            q = X[r0 : r0 + rows_per_block].astype(np.float32)
            np.matmul(q, anchors.T, out=buf[: len(q)])
        floor = time.perf_counter() - t0
        bpn = (out.data.nbytes + out.indices.nbytes) / max(out.nnz, 1)
        shape = f"{len(X):,} x {n_anchors:,} x {X.shape[1]}, k={k}"
        rows += [
            _row(f"ASIF transform_{side} ({shape})", wall, "s"),
            _row(f"ASIF transform_{side} CPU", cpu, "s"),
            _row(f"ASIF transform_{side} GEMM floor (same blocks)", floor, "s"),
            _row(f"ASIF transform_{side} GEMM floor / wall", floor / wall, "x"),
            _row(f"ASIF transform_{side} output bytes per non-zero", bpn, "B", "8", bpn == 8),
        ]
        details[f"asif_flickr_{side}"] = {"wall_s": wall, "cpu_s": cpu, "gemm_floor_s": floor}
    return rows, details


def run(quick: bool = False) -> dict:
    """Run the section; ``quick`` shrinks every size by about 10x."""
    if quick:
        csa_rows, csa_d = bench_csa(4000, 192, 96, 64)
        asif_rows, asif_d = bench_asif(3000, 3000, 768, 800)
    else:
        csa_rows, csa_d = bench_csa(20_000, 768, 384, 256)
        asif_rows, asif_d = bench_asif(30_000, 30_000, 768, 800)
    flickr_rows, flickr_d = bench_asif_flickr(quick)
    return {
        "rows": csa_rows + asif_rows + flickr_rows,
        "details": {**csa_d, **asif_d, **flickr_d, "quick": quick},
    }


if __name__ == "__main__":
    if "--flickr" in sys.argv[1:]:  # only the Flickr30k-size ASIF transforms
        result = {"rows": bench_asif_flickr("--quick" in sys.argv[1:])[0]}
    else:
        result = run(quick="--quick" in sys.argv[1:])
    for r in result["rows"]:
        flag = "" if r["ok"] is None else ("  ok" if r["ok"] else "  MISS")
        target = f"  (target {r['target']})" if r["target"] else ""
        print(f"{r['item']:<62} {r['value']:>12.4g} {r['unit']}{target}{flag}")
