"""The environment a result was measured in, captured once for results and ``doctor``.

Package versions, Python, machine, BLAS libraries and their thread counts,
torch threads and GPU, the git commit, and what the store itself declares
(:class:`~imsearch_align.framework.interfaces.StoreProvenance`: its client
packages and, for a server, the server's version). Nothing here records an
absolute local path, a user name or a token.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from imsearch_align.framework.optional import maybe_import

__all__ = ["KEY_PACKAGES", "Provenance", "blas_info", "capture", "package_versions"]

#: Packages whose versions every result records (a store adds its own).
KEY_PACKAGES = (
    "imsearch-align",
    "numpy",
    "scipy",
    "pandas",
    "scikit-learn",
    "faiss-cpu",
    "faiss-gpu",
    "torch",
    "transformers",
    "sentence-transformers",
    "pyarrow",
)


@dataclass(frozen=True)
class Provenance:
    """Where and with what a result was measured.

    Attributes:
        versions: distribution -> version for :data:`KEY_PACKAGES` that are
            installed, plus the store's own packages.
        python: Python version.
        platform: OS and kernel (``platform.platform()``).
        cpu: processor name or machine type.
        cpu_count: logical cores.
        git_commit: the commit of the imsearch_align checkout, when it is one.
        blas: per BLAS/OpenMP library: ``internal_api``, ``version``,
            ``num_threads``, ``architecture`` (no file paths).
        torch_threads: torch's intra-op threads, when torch is loaded.
        gpu: the first CUDA device's name, when there is one.
        store: what the store declared (``packages``, ``server_version``...).
    """

    versions: dict[str, str] = field(default_factory=dict)
    python: str = ""
    platform: str = ""
    cpu: str = ""
    cpu_count: int | None = None
    git_commit: str | None = None
    blas: tuple[dict[str, Any], ...] = ()
    torch_threads: int | None = None
    gpu: str | None = None
    store: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        d = asdict(self)
        d["blas"] = [dict(b) for b in self.blas]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Provenance:
        """Inverse of :meth:`to_dict` (unknown keys are ignored, missing ones default)."""
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        known["blas"] = tuple(dict(b) for b in known.get("blas") or ())
        known["versions"] = dict(known.get("versions") or {})
        known["store"] = dict(known.get("store") or {})
        return cls(**known)


def package_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed versions of :data:`KEY_PACKAGES` and ``extra`` (absent ones left out)."""
    from imsearch_align.adapters.base import package_versions as versions_of

    return versions_of(list(dict.fromkeys((*KEY_PACKAGES, *extra))))


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def blas_info() -> list[dict[str, Any]]:
    """The BLAS/OpenMP libraries loaded in this process (threadpoolctl), without file paths."""
    threadpoolctl = maybe_import("threadpoolctl")
    if threadpoolctl is None:
        return []
    keys = ("internal_api", "version", "num_threads", "architecture")
    return [{k: d.get(k) for k in keys} for d in threadpoolctl.threadpool_info()]


def capture(store: Any = None) -> Provenance:
    """The provenance of a result measured now, with ``store``'s own declaration."""
    from imsearch_align.framework.interfaces import StoreProvenance

    store_info: dict[str, Any] = {}
    if store is not None and isinstance(store, StoreProvenance):
        try:
            store_info = dict(store.provenance())
        except Exception as exc:  # a store that cannot tell must not lose the result
            store_info = {"error": f"{type(exc).__name__}: {exc}"}
    packages = tuple((store_info.get("packages") or {}).keys())
    torch = sys.modules.get("torch")
    gpu = None
    if torch is not None and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
    return Provenance(
        versions=package_versions(packages),
        python=platform.python_version(),
        platform=platform.platform(),
        cpu=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        git_commit=_git_commit(),
        blas=tuple(blas_info()),
        torch_threads=torch.get_num_threads() if torch is not None else None,
        gpu=gpu,
        store=store_info,
    )
