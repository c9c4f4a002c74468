"""On-disk embedding cache: one ``.npy`` plus a JSON sidecar per entry.

Key: provider id (model and version), dataset id, modality, split and a
SHA-256 of the inputs (ids plus what identifies each item). The file name
holds a hash of the whole key, the sidecar holds the key itself, the array's
shape, dtype and SHA-256.

Writes are atomic (:func:`~imsearch_align.framework.atomic.atomic_write`);
the sidecar is written last, so
a reader never sees a sidecar whose array is half-written. Reads verify the
sidecar's key and the array's checksum; anything that does not match (a
truncated file, flipped bytes, a foreign sidecar) is reported with a warning
and treated as a miss, so the caller recomputes and overwrites it. A corrupt
entry is never returned.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from imsearch_align.framework.atomic import atomic_write
from imsearch_align.framework.validation import array_buffer

__all__ = ["CacheKey", "CorruptCacheWarning", "EmbeddingCache"]

_FORMAT = 1


class CorruptCacheWarning(UserWarning):
    """A cache entry failed verification and is being recomputed."""


@dataclass(frozen=True)
class CacheKey:
    """What a cached array was computed from.

    Attributes:
        provider_id: provider + model + version (``EmbeddingProvider.id``).
        dataset_id: dataset identifier (its name).
        modality: ``"image"`` or ``"text"``.
        split: split label of the rows (``"test"``, ``"train+test"``, ``"all"``...).
        inputs_sha256: SHA-256 over the ids and item identities, in order.
    """

    provider_id: str
    dataset_id: str
    modality: str
    split: str
    inputs_sha256: str

    @property
    def digest(self) -> str:
        """SHA-256 of the whole key (file-name part)."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()


def _slug(s: str, n: int = 40) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", s)[:n].strip("_") or "x"


class EmbeddingCache:
    """A folder of cached embedding arrays.

    >>> cache = EmbeddingCache("/tmp/emb")                      # doctest: +SKIP
    >>> arr = cache.get_or_compute(key, lambda: provider.encode(items))  # doctest: +SKIP
    """

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def paths(self, key: CacheKey) -> tuple[Path, Path]:
        """``(array .npy, sidecar .json)`` paths of ``key``."""
        folder = self.root / _slug(key.provider_id, 80)
        stem = f"{_slug(key.dataset_id)}-{key.modality}-{_slug(key.split, 20)}-{key.digest[:20]}"
        return folder / f"{stem}.npy", folder / f"{stem}.json"

    def load(self, key: CacheKey) -> np.ndarray | None:
        """The cached array for ``key``, or None on a miss or a corrupt entry (with a warning)."""
        npy, side = self.paths(key)
        if not side.exists() and not npy.exists():
            return None
        try:
            meta = json.loads(side.read_text())
            if meta.get("key") != asdict(key):
                raise ValueError("sidecar key does not match the requested key")
            data = npy.read_bytes()
            if hashlib.sha256(data).hexdigest() != meta["file_sha256"]:
                raise ValueError("file checksum mismatch")
            arr = np.load(npy, allow_pickle=False)
            if list(arr.shape) != meta["shape"] or str(arr.dtype) != meta["dtype"]:
                raise ValueError(
                    f"array is {arr.shape} {arr.dtype}, sidecar says {meta['shape']} {meta['dtype']}"
                )
            if hashlib.sha256(array_buffer(arr)).hexdigest() != meta["array_sha256"]:
                raise ValueError("array checksum mismatch")
        except Exception as exc:  # any failure to verify means "do not use"
            warnings.warn(
                f"embedding cache entry {npy} is corrupt or unreadable ({type(exc).__name__}: {exc}); "
                "recomputing it",
                CorruptCacheWarning,
                stacklevel=2,
            )
            return None
        return arr

    def save(self, key: CacheKey, arr: np.ndarray) -> None:
        """Store ``arr`` under ``key`` atomically (array first, sidecar last)."""
        arr = np.ascontiguousarray(arr)
        npy, side = self.paths(key)
        npy.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(npy, lambda f: np.save(f, arr, allow_pickle=False))
        meta = {
            "format": _FORMAT,
            "key": asdict(key),
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "array_sha256": hashlib.sha256(array_buffer(arr)).hexdigest(),
            "file_sha256": hashlib.sha256(npy.read_bytes()).hexdigest(),
            "created_unix": time.time(),
        }
        atomic_write(side, json.dumps(meta, indent=1))

    def get_or_compute(self, key: CacheKey, compute: Callable[[], np.ndarray]) -> np.ndarray:
        """The cached array, or ``compute()`` stored under ``key`` and returned."""
        arr = self.load(key)
        if arr is None:
            arr = np.asarray(compute())
            self.save(key, arr)
        return arr
