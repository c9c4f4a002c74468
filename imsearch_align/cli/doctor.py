"""``doctor``: versions, BLAS and threads, GEMM speed, GPU, Milvus reachability.

Only an unreachable ``--uri`` fails the command; a slow BLAS is a warning.
The URI's user info (``user:password@``) and the token are never printed.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from imsearch_align.cli.common import positive_int, warn
from imsearch_align.framework.secrets import MASK, redact_text, redact_uri

__all__ = ["add_doctor_command", "cmd_doctor", "gemm_probes"]


def add_doctor_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The ``doctor`` sub-command."""
    d = sub.add_parser(
        "doctor", parents=parents, help="versions, BLAS, GEMM speed, GPU, Milvus reachability"
    )
    d.add_argument("--uri", help="a Milvus URI to try (http://host:19530 or a Lite *.db path)")
    d.add_argument("--token", help="Milvus token (never printed)")
    d.add_argument("--no-gemm", action="store_true", help="skip the GEMM probes")
    d.add_argument(
        "--gemm-size", type=positive_int, default=1024, metavar="N", help="GEMM probe size (N x N)"
    )
    d.set_defaults(func=cmd_doctor)  # fmt: skip


def _gflops(fn: Any, n: int, flops: float | None = None, repeats: int = 3) -> float:
    fn()  # warm-up: thread pools, page faults
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return (flops or 2.0 * n**3) / best / 1e9


def gemm_probes(n: int = 1024) -> dict[str, float | str]:
    """Single-precision GEMM speed (GFLOP/s, best of 3) of numpy, torch and
    faiss (IndexFlatIP search of n queries over n vectors in n dimensions, its
    BLAS path); a library that is missing or fails gives its error string."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out: dict[str, float | str] = {"numpy": _gflops(lambda: a @ b, n)}
    try:
        import torch

        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        out["torch"] = _gflops(lambda: torch.mm(ta, tb), n)
    except Exception as exc:
        out["torch"] = f"{type(exc).__name__}: {exc}"
    try:
        import faiss

        index = faiss.IndexFlatIP(n)
        index.add(b)
        out["faiss"] = _gflops(lambda: index.search(a, 1), n)
    except Exception as exc:
        out["faiss"] = f"{type(exc).__name__}: {exc}"
    return out


def _check_milvus(uri: str, token: str | None) -> tuple[bool, str]:
    try:
        from pymilvus import MilvusClient
    except ImportError:
        return False, "pymilvus is not installed (pip install 'imsearch-align[milvus]')"
    t = time.perf_counter()
    try:
        kw: dict[str, Any] = {"uri": uri, "timeout": 10}
        if token:
            kw["token"] = token
        client = MilvusClient(**kw)
        try:
            version = client.get_server_version()
            n = len(client.list_collections())
        finally:
            client.close()
    except Exception as exc:
        msg = redact_text(str(exc), uri)
        msg = msg.replace(token, MASK) if token else msg
        return False, f"{type(exc).__name__}: {msg.splitlines()[0] if msg else ''}"
    return True, f"server {version}, {n} collections, {1000 * (time.perf_counter() - t):.0f} ms"


def _print_environment() -> None:
    import platform

    from imsearch_align.experiment.provenance import blas_info, package_versions

    print(f"python      {platform.python_version()}  ({platform.platform()})")
    print(
        f"cpu         {platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"
    )
    print("packages:")
    for pkg, ver in package_versions(
        ("pymilvus", "milvus-lite", "lancedb", "qdrant-client")
    ).items():
        print(f"  {pkg:<22}{ver}")
    # Import the BLAS users first, so threadpoolctl sees their libraries.
    for mod in ("numpy", "faiss", "torch"):
        try:
            __import__(mod)
        except Exception:
            pass
    print("BLAS / OpenMP (threadpoolctl):")
    libs = blas_info()
    for d in libs:
        print(
            f"  {d.get('internal_api') or '?':<9} {d.get('version') or ''!s:<14} "
            f"core={d.get('architecture') or '-'!s:<12} threads={d.get('num_threads')}"
        )
    if not libs:
        print("  (threadpoolctl is not installed or sees no library)")
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_CORETYPE"):
        if os.environ.get(var):
            print(f"  {var}={os.environ[var]}")


def _print_gemm(n: int) -> None:
    print(f"GEMM float32 {n}x{n} (GFLOP/s, best of 3):")
    probes = gemm_probes(n)
    for lib, v in probes.items():
        print(
            f"  {lib:<7}"
            + (f"{v:8.1f} GFLOP/s" if isinstance(v, float) else f"  unavailable ({v})")
        )
    npv, fv = probes.get("numpy"), probes.get("faiss")
    if isinstance(npv, float) and isinstance(fv, float) and fv < 0.3 * npv:
        warn(
            f"faiss's BLAS runs at {fv:.1f} GFLOP/s, {npv / fv:.1f}x below numpy's {npv:.1f}: flat search "
            "and IVF training are BLAS-bound, so faiss timings here understate it. faiss-cpu bundles its "
            "own OpenBLAS, which may pick a slow kernel for this CPU (see the BLAS lines above)."
        )


def _print_gpu() -> None:
    print("GPU:")
    try:
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            print(f"  torch.cuda  {', '.join(names)} (CUDA {torch.version.cuda})")
        else:
            print("  torch.cuda  none")
    except ImportError:
        print("  torch       not installed")
    try:
        import faiss

        ng = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        print(f"  faiss       {ng} GPU(s)")
    except ImportError:
        print("  faiss       not installed")


def cmd_doctor(args: argparse.Namespace) -> int:
    """``doctor``: versions, BLAS and threads, GEMM speed, GPU, Milvus reachability.

    Only an unreachable ``--uri`` fails the command; a slow BLAS is a warning.
    """
    _print_environment()
    if not args.no_gemm:
        _print_gemm(args.gemm_size)
    _print_gpu()
    if args.uri:
        ok, msg = _check_milvus(args.uri, args.token)
        print(f"milvus {redact_uri(args.uri)}: {'ok' if ok else 'error'}: {msg}")
        return 0 if ok else 1
    return 0
