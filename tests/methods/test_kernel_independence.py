"""Floats decide nothing by accident: one study, two OpenBLAS kernels, the same values.

The offline shapes study's support set repeats its images (five captions
each), so it spans fewer directions than it has pairs. Procrustes and CSA
used to take directions past that rank: null-space vectors that each BLAS
kernel chooses differently, which moved 28 (procrustes) and 21 (csa) of the
40 values of this study (120 rendered images, the offline encoders, the
exact store) between ``OPENBLAS_CORETYPE=Haswell`` and ``Prescott``. The study runs in two
processes, one per kernel, sharing the embedding cache (the encoders run in
torch, not OpenBLAS); every value must be equal. Where the machine's BLAS
cannot switch kernels the test says so and skips.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERNELS = ("Haswell", "Prescott")


def _arch(kernel: str) -> str | None:
    code = ("import numpy, threadpoolctl; print([i.get('architecture') for i in "
            "threadpoolctl.threadpool_info() if i.get('internal_api') == 'openblas'])")  # fmt: skip
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    found = json.loads(out.stdout.replace("'", '"') or "[]") if out.returncode == 0 else []
    return found[0] if found else None


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> Path:
    """One shapes folder and embedding cache for every run of the module."""
    return tmp_path_factory.mktemp("kernels")


def _run(tmp: Path, kernel: str, method: str, out: Path) -> dict:
    env = {**os.environ, "OPENBLAS_CORETYPE": kernel, "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "imsearch_align.cli", "eval", "--dataset", "shapes",
            "--dataset-param", "n_images=120", "--dataset-param", f"root={tmp / 'shapes'}",
            "--image-encoder", "efficientnet-lite0", "--text-encoder", "sentence-transformers",
            "--text-encoder-param", "model=all-MiniLM-L6-v2", "--method", method,
            "--store", "exact", "--cache-dir", str(tmp / "cache"), "--no-progress",
            "--output-dir", str(out)]  # fmt: skip
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    (path,) = out.glob("*.json")
    return json.loads(path.read_text())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "rank_key"), [("procrustes", "support_rank_image_"), ("csa", "spanned_dim_")]
)
def test_the_offline_study_gives_equal_values_under_two_openblas_kernels(
    shared, tmp_path, method, rank_key
):
    archs = [_arch(k) for k in KERNELS]
    if None in archs or archs[0] == archs[1]:
        pytest.skip(f"this BLAS does not switch kernels by OPENBLAS_CORETYPE (got {archs})")
    a, b = (_run(shared, k, method, tmp_path / k) for k in KERNELS)
    fitted = a["method"]["fitted"]
    assert fitted[rank_key] < a["dataset"]["n_support_pairs"] - 1  # repeated images
    assert a["metrics"].keys() == b["metrics"].keys() and len(a["metrics"]) > 30
    # a ranking that moved changes a value by at least 1/n; Diversity@k's own float
    # sums may differ in the last ulp
    for key, value in a["metrics"].items():
        assert b["metrics"][key] == pytest.approx(value, rel=0, abs=1e-12), key
