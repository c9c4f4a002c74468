"""perf section "diagnostics": the geometry set on 31,783 x 512 pairs (Flickr30k size).

Times :func:`imsearch_align.diagnostics.diagnose` (gap, alignment, SVM
separability on a 10,000-pair subsample, uniformity per modality and on the
union, spherical k-NN entropy per modality) on synthetic CLIP-like pairs:
shared content plus noise plus a modality offset, L2-normalised. Target:
under a minute on the 2-core reference machine. Also compares the k-NN step
(chunked Gram products + blocked top-k) with FAISS ``IndexFlatIP`` when faiss
is installed; the Gram path is kept because one Gram pass also serves the
uniformity sum. Ratios within one run are what to compare on a noisy machine.

Run alone: ``python benchmarks/perf_diagnostics.py [--quick]``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
from perf_common import row_maker

from imsearch_align.diagnostics import diagnose, spherical_knn_entropy

SECTION = "diagnostics"
N_FULL, DIM = 31_783, 512


def _pairs(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, d), dtype=np.float32)
    offset = rng.standard_normal(d).astype(np.float32)
    offset *= 8.0 / np.linalg.norm(offset)
    x = z + 0.5 * rng.standard_normal((n, d), dtype=np.float32) + offset
    y = z + 0.5 * rng.standard_normal((n, d), dtype=np.float32) - offset
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    return x, y


_row = row_maker(SECTION)


def _faiss_knn_seconds(x: np.ndarray, k: int) -> float | None:
    try:
        import faiss
    except ImportError:
        return None
    t0 = time.perf_counter()
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    index.search(x, k + 1)
    return time.perf_counter() - t0


def run(quick: bool = False) -> dict[str, Any]:
    """Time the diagnostics; ``quick`` uses 4,000 pairs (no target check)."""
    n = 4_000 if quick else N_FULL
    x, y = _pairs(n, DIM)
    rows = []
    t0 = time.perf_counter()
    res = diagnose(x, y, seed=0, k=5)
    total = time.perf_counter() - t0
    target = "< 60 s" if not quick else None
    rows.append(
        _row(
            f"diagnose all, {n} x {DIM} pairs",
            total,
            "s",
            target,
            total < 60 if not quick else None,
        )
    )
    for part, secs in res["seconds"].items():
        rows.append(_row(f"  {part}", secs, "s"))

    t0 = time.perf_counter()
    spherical_knn_entropy(x, k=5)
    gram_knn = time.perf_counter() - t0
    rows.append(_row(f"kNN entropy (Gram + blocked top-k), {n} x {DIM}", gram_knn, "s"))
    faiss_s = _faiss_knn_seconds(x, 5)
    if faiss_s is not None:
        rows.append(_row(f"faiss IndexFlatIP self-kNN (k=6), {n} x {DIM}", faiss_s, "s"))
        rows.append(_row("faiss / Gram kNN time ratio", faiss_s / gram_knn, "x"))
    details = {k: v for k, v in res.items() if k != "seconds"}
    details["n"], details["dim"] = n, DIM
    return {"rows": rows, "details": details}


if __name__ == "__main__":
    out = run(quick="--quick" in sys.argv[1:])
    for r in out["rows"]:
        ok = "" if r["ok"] is None else ("ok" if r["ok"] else "MISSED")
        print(f"{r['item']:<55} {r['value']:>10.3f} {r['unit']:<3} {r['target'] or '':<8} {ok}")
