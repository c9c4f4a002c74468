"""Perf section "scale": the default Flickr30k study at full size on this machine.

Run alone: ``python benchmarks/perf_scale.py [--quick]``, or through
``python benchmarks/perf.py --only scale``. Uses only the public API, the way
``benchmarks/flickr.py --embeddings DIR`` runs it.

Data: Flickr30k-sized embeddings with a learnable shared structure (31,783
images x 768, 158,915 captions x 384, five per image; a shared 64-d latent
seen through a nonlinear image map and a linear text map with noise, so an
alignment fitted on more pairs retrieves better and no metric is at chance or
at 1.0), written once as ``image.npy``, ``text.npy`` and ``text_image.npy``
under ``.cache/scale/`` and read by the ``precomputed`` dataset (seeded split,
30% of images in test: 9,535 images, 47,675 captions).

Grid: csa, asif, cka, procrustes x N in {1k, 5k, 10k, 29k}, store faiss
(``--quick``: a tenth of the data, N in {1k, 5k}). One :class:`Study` holds the
embeddings for every cell, as the study script does.

Per cell: fit, transform, index build and search per direction, HitRate@1,
queries/s, peak resident memory above the interpreter's baseline (Linux
``VmHWM``, reset before each cell through ``/proc/self/clear_refs``; the
baseline is read after one small warm-up cell per method, so the libraries'
code and pools count once, not in the first cell; both baselines are
reported), and the
compute floor: for dense cells the multiply-adds of search, transform and fit
divided by this machine's measured float32 GEMM speed; for ASIF the transform
as a GEMM against the N anchors plus the expected sparse product count
``nq * nd * non_zeros^2 / N``.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from perf_common import row_maker

SECTION = "scale"
HERE = Path(__file__).resolve().parent
FULL = {
    "n_images": 31_783,
    "captions": 5,
    "d_image": 768,
    "d_text": 384,
    "n": (1000, 5000, 10000, 29000),
}
QUICK = {"n_images": 3_178, "captions": 5, "d_image": 768, "d_text": 384, "n": (1000, 2000)}
METHODS = ("csa", "asif", "cka", "procrustes")
#: Noise of the generator: the image view, a caption's own latent draw, the text view.
NOISE = {"image": 1.5, "caption": 1.5, "text": 0.8}
TARGET_STUDY_S, TARGET_ASIF_S, TARGET_DENSE_S = 300.0, 60.0, 15.0


_row = row_maker(SECTION, as_float=False)


# ----------------------------------------------------------------------------- memory


def rss_mb() -> float:
    """Current resident set size (MiB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmRSS in /proc/self/status")


def peak_mb() -> float:
    """Peak resident set size since the last :func:`reset_peak` (MiB)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise OSError("no VmHWM in /proc/self/status")


def reset_peak() -> None:
    """Reset the kernel's peak-RSS counter to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


# ----------------------------------------------------------------------------- data


def make_embeddings(folder: Path, size: dict, seed: int = 0) -> Path:
    """Write Flickr-sized embeddings with a learnable shared structure (cached)."""
    folder = folder / f"noise-{NOISE['image']}-{NOISE['caption']}-{NOISE['text']}-seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    names = [folder / f for f in ("image.npy", "text.npy", "text_image.npy")]
    if all(p.exists() for p in names):
        return folder
    rng = np.random.default_rng(seed)
    n, c, dz = size["n_images"], size["captions"], 64
    z = rng.standard_normal((n, dz)).astype(np.float32)
    A = rng.standard_normal((dz, size["d_image"])).astype(np.float32) / np.sqrt(dz)
    B = rng.standard_normal((dz, size["d_text"])).astype(np.float32) / np.sqrt(dz)
    X = np.tanh(z @ A) + NOISE["image"] * rng.standard_normal(
        (n, size["d_image"]), dtype=np.float32
    )
    text_image = np.repeat(np.arange(n), c)
    Y = np.empty((n * c, size["d_text"]), dtype=np.float32)
    for s in range(0, n * c, 20_000):  # blockwise: no (n*c, 64) float64 temporaries
        e = min(s + 20_000, n * c)
        zt = z[text_image[s:e]] + NOISE["caption"] * rng.standard_normal(
            (e - s, dz), dtype=np.float32
        )
        Y[s:e] = zt @ B + NOISE["text"] * rng.standard_normal(
            (e - s, size["d_text"]), dtype=np.float32
        )
    for p, arr in zip(names, (X.astype(np.float32), Y, text_image.astype(np.int64))):
        np.save(p, arr)
    return folder


def gemm_gflops(n: int = 2048) -> float:
    """float32 GEMM speed of numpy here (best of 3)."""
    a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    a @ a
    best = min(_timed(lambda: a @ a) for _ in range(3))
    return 2 * n**3 / best / 1e9


def _timed(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


# ----------------------------------------------------------------------------- floors


def floor(res: Any, d_image: int, d_text: int, gflops: float) -> dict[str, float]:
    """The cell's arithmetic: dense multiply-adds / GEMM speed; ASIF's sparse products."""
    d = res.dataset
    n_img, n_txt, dim = d.n_test_images, d.n_test_texts, res.method.output_dim
    N = d.n_support_pairs
    if res.method.sparse:
        k = int(res.method.params.get("non_zeros", min(800, N)))
        transform = (n_img * d_image + n_txt * d_text) * N
        sparse_products = 2 * n_img * n_txt * k * k / N
        return {"floor_s": 2 * transform / gflops / 1e9, "sparse_products": float(sparse_products)}
    search = 2 * n_img * n_txt * dim  # both directions score the same pairs
    transform = (n_img * d_image + n_txt * d_text) * dim
    fit = N * (d_image + d_text) ** 2
    return {"floor_s": 2 * (search + transform + fit) / gflops / 1e9, "sparse_products": 0.0}


# ----------------------------------------------------------------------------- the study


def _load_libraries() -> None:
    """Import what a cell loads lazily (faiss, the numba kernels, scipy, sklearn), so
    the baseline is the interpreter with its code, before any data."""
    import faiss  # noqa: F401
    import scipy.sparse  # noqa: F401
    import sklearn.linear_model  # noqa: F401

    from imsearch_align.adapters import _sparse_kernels, faiss_store  # noqa: F401
    from imsearch_align.methods import _asif_kernels, asif, cka, csa, procrustes  # noqa: F401


#: The warm-up cells' data: small enough to take seconds, large enough for ASIF's k.
WARM = {"n_images": 1_500, "captions": 5, "n": 1000}


def warm_up(base: Any, size: dict) -> None:
    """One small cell of each method, in its own study, before the baseline is read.

    The first cell of a process pages in the libraries' code, loads the numba
    kernels from their cache and fills the allocators' and pyarrow's pools
    (about 40 MiB here); that is the interpreter's own state, the same for a
    study of one cell or of sixteen, so it belongs to the baseline and not to
    whichever cell happens to run first. Nothing of these cells is kept.
    """
    sys.path.insert(0, str(HERE))
    from flickr import method_params

    from imsearch_align.experiment import Study, run_experiment
    from imsearch_align.framework._heap import release_freed_memory

    small = {**size, "n_images": WARM["n_images"], "captions": WARM["captions"]}
    with tempfile.TemporaryDirectory(prefix="imsearch-warm-") as tmp:
        emb = make_embeddings(Path(tmp), small)
        cfg = base.replace(
            dataset_params={
                "image_path": str(emb / "image.npy"),
                "text_path": str(emb / "text.npy"),
                "text_image": str(emb / "text_image.npy"),
            },
            n_support=WARM["n"],
        )
        for method in METHODS:
            p = method_params(method, WARM["n"], (size["d_image"], size["d_text"]))
            run_experiment(
                cfg.replace(method=method, method_params=p),
                output_dir=Path(tmp) / "out",
                progress=False,
                study=Study(),
            )
    release_freed_memory()


def run_cells(emb: Path, size: dict, out: Path) -> tuple[list[dict], float, float]:
    """Run the grid in this process; per-cell figures, study wall time and the
    baselines (MiB): ``cold`` after the imports, ``warm`` after :func:`warm_up`,
    which the cells' peaks are measured above."""
    sys.path.insert(0, str(HERE))
    from flickr import method_params

    from imsearch_align.experiment import ExperimentConfig, ExperimentError, Study, run_experiment

    base = ExperimentConfig(
        dataset="precomputed",
        dataset_params={
            "image_path": str(emb / "image.npy"),
            "text_path": str(emb / "text.npy"),
            "text_image": str(emb / "text_image.npy"),
        },
        image_encoder=None,
        text_encoder=None,
        store="faiss",
        cache_dir=None,
        k_values=(1, 5, 10),
        name="scale",
    )
    _load_libraries()
    cold = rss_mb()
    warm_up(base, size)
    baseline = rss_mb()
    study = Study()
    cells = []
    t0 = time.perf_counter()
    for method in METHODS:
        for n in size["n"]:
            cfg = base.replace(
                method=method,
                n_support=n,
                method_params=method_params(
                    method, min(size["n"]), (size["d_image"], size["d_text"])
                ),
            )
            reset_peak()
            t = time.perf_counter()
            try:
                res = run_experiment(cfg, output_dir=out, progress=False, study=study)
            except ExperimentError as exc:
                res = exc.result
            cells.append(
                {"result": res, "wall_s": time.perf_counter() - t, "peak_mb": peak_mb() - baseline}
            )
            print(
                f"  {method:<10} N={n:<6} {cells[-1]['wall_s']:6.1f} s  peak +{cells[-1]['peak_mb']:.0f} MiB  {res.status}",
                file=sys.stderr,
                flush=True,
            )
    return cells, time.perf_counter() - t0, {"cold": cold, "warm": baseline}


def _cell_rows(cell: dict, size: dict, gflops: float, emb_mb: float, quick: bool) -> list[dict]:
    """One cell's rows; with ``quick`` the memory target is not judged (at a tenth
    of the data the libraries' fixed working buffers dominate the peak)."""
    res = cell["result"]
    cfg = res.config
    tag = f"{cfg.method} N={cfg.n_support}"
    if res.status.state == "failed":
        return [_row(f"{tag} FAILED: {(res.status.error or '')[:60]}", 0.0, "", None, False)]
    target = TARGET_ASIF_S if res.method.sparse else TARGET_DENSE_S
    fl = floor(res, size["d_image"], size["d_text"], gflops)
    t = res.timings
    rows = [
        _row(
            f"{tag} cell wall time",
            cell["wall_s"],
            "s",
            f"<= {target:.0f}",
            cell["wall_s"] <= target,
        ),
        _row(
            f"{tag} fit / transform",
            f"{t.get('fit_s', 0):.2f} / {t.get('transform_s', 0):.2f}",
            "s",
        ),
    ]
    for d in ("t2i", "i2t"):
        r = res.rankings.get(d)
        if r is None:
            continue
        rows.append(
            _row(
                f"{tag} {d}: build {r.timings.index_build_s:.2f} s, search {r.timings.search_s:.2f} s, "
                f"HitRate@1 {r.metrics.get('HitRate@1', float('nan')):.3f}",
                r.timings.queries_per_s or 0.0,
                "q/s",
            )
        )
    rows.append(
        _row(
            f"{tag} peak RSS above baseline",
            cell["peak_mb"],
            "MiB",
            f"<= {2 * emb_mb:.0f}",
            None if quick else cell["peak_mb"] <= 2 * emb_mb,
        )
    )
    rows.append(
        _row(
            f"{tag} compute floor"
            + (f" (+{fl['sparse_products']:.3g} sparse products)" if fl["sparse_products"] else ""),
            fl["floor_s"],
            "s",
        )
    )
    return rows


def run(quick: bool = False) -> dict:
    """The perf-section entry point (see benchmarks/perf.py)."""
    size = QUICK if quick else FULL
    emb = make_embeddings(Path(".cache") / "scale" / ("quick" if quick else "full"), size)
    emb_mb = sum((emb / f).stat().st_size for f in ("image.npy", "text.npy")) / 2**20
    gflops = gemm_gflops()
    with tempfile.TemporaryDirectory(prefix="imsearch-scale-") as tmp:
        cells, study_s, base = run_cells(emb, size, Path(tmp))
        sizes = [os.path.getsize(p) for p in Path(tmp).glob("*.json")]
    n_failed = sum(c["result"].status.state == "failed" for c in cells)
    rows = [
        _row("numpy float32 GEMM", gflops, "GFLOP/s"),
        _row(
            f"embeddings held by the study ({size['n_images']:,} x {size['d_image']} + {size['n_images'] * size['captions']:,} x {size['d_text']})",
            emb_mb,
            "MiB",
        ),
        _row(
            "whole study wall time",
            study_s,
            "s",
            f"<= {TARGET_STUDY_S:.0f}",
            (study_s <= TARGET_STUDY_S and not quick) or None,
        ),
        _row("cells that failed", n_failed, "", "0", n_failed == 0),
        _row(
            "largest result JSON",
            max(sizes, default=0) / 1024,
            "KiB",
            "<= 50",
            max(sizes, default=0) <= 50 * 1024,
        ),
        _row("interpreter baseline: libraries imported", base["cold"], "MiB"),
        _row(
            "interpreter baseline: warm (one small cell per method first)",
            base["warm"],
            "MiB",
        ),
        _row(
            "peak RSS above baseline, whole study",
            max(c["peak_mb"] for c in cells),
            "MiB",
            f"<= {2 * emb_mb:.0f}",
            max(c["peak_mb"] for c in cells) <= 2 * emb_mb if not quick else None,
        ),
        _row(
            "peak RSS above the imports-only baseline, whole study",
            max(c["peak_mb"] for c in cells) + base["warm"] - base["cold"],
            "MiB",
        ),
    ]
    for c in cells:
        rows += _cell_rows(c, size, gflops, emb_mb, quick)
    return {"rows": rows, "gemm_gflops": gflops, "study_s": study_s, "embedding_mb": emb_mb}


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    from perf import format_table

    print(format_table(run(quick="--quick" in sys.argv)["rows"]))
