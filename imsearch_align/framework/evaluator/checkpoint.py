"""Finished batches on disk, keyed on everything that fixes a ranking.

:class:`_Checkpoint` is one evaluation's folder (``<dir>/<digest>/batch_<i>.npz``
and a manifest); :func:`remove_checkpoints` removes every such folder under a
directory once the results are safe.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.atomic import atomic_write
from imsearch_align.framework.evaluator.result import _describe
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.validation import array_buffer, is_sparse

__all__ = ["remove_checkpoints"]

log = logging.getLogger("imsearch_align.framework.evaluator")

_CHECKPOINT_FORMAT = 2
_MANIFEST = "manifest.json"


class _Checkpoint:
    """Finished batches on disk: ``<dir>/<digest>/batch_<i>.npz``, one manifest.

    The digest covers the caller's ``checkpoint_key``, ``k``, the batch
    size, the queries and their ids, so a folder is only ever read back by
    an evaluation that would produce the same ranking.
    """

    def __init__(self, root: Path, manifest: dict[str, Any]) -> None:
        self.root = root
        self.manifest = manifest
        self._write_failed = False

    @classmethod
    def open(
        cls,
        checkpoint_dir: Path,
        key: str,
        k: int,
        batch_size: int,
        q: Any,
        qids: np.ndarray,
        n_batches: int,
    ) -> _Checkpoint:
        """The folder of this evaluation under ``checkpoint_dir`` (a torn or
        foreign one is started over)."""
        h = hashlib.sha256()
        h.update(f"format={_CHECKPOINT_FORMAT}|key={key}|".encode())
        h.update(f"k={k}|batch_size={batch_size}|shape={q.shape}|".encode())
        if is_sparse(q):
            h.update(b"csr|")
            for part in (q.data, q.indices, q.indptr):
                h.update(array_buffer(part))
        else:
            h.update(b"dense|")
            h.update(array_buffer(q))
        if qids.dtype == object:
            h.update(pd.util.hash_array(qids.astype(object)).tobytes())
        else:
            h.update(np.ascontiguousarray(qids, dtype=np.int64).tobytes())
        digest = h.hexdigest()
        manifest = {
            "format": _CHECKPOINT_FORMAT,
            "digest": digest,
            "k": k,
            "batch_size": batch_size,
            "n_queries": int(q.shape[0]),
            "n_batches": n_batches,
        }
        root = checkpoint_dir / digest[:32]
        ck = cls(root, manifest)
        path = root / _MANIFEST
        if path.exists():
            try:
                same = json.loads(path.read_text()) == manifest
            except (OSError, ValueError):
                same = False
            if not same:  # a torn or foreign folder: start it over
                log.warning("checkpoint folder %s does not match this run; starting over", root)
                ck.clear()
        if not path.exists():
            atomic_write(path, json.dumps(manifest, sort_keys=True))
        return ck

    def _path(self, i: int) -> Path:
        return self.root / f"batch_{i:06d}.npz"

    def load(self, i: int, span: tuple[int, int]) -> SearchResult | None:
        p = self._path(i)
        if not p.exists():
            return None
        try:
            with np.load(p, allow_pickle=False) as z:
                extra = {k[6:]: z[k] for k in z.files if k.startswith("extra_")}
                res = SearchResult(z["ids"], z["scores"], extra)
        except Exception as exc:  # a torn or corrupt file is redone, never used
            log.warning("checkpoint %s unreadable (%s); the batch is searched again", p, exc)
            return None
        if res.nq != span[1] - span[0]:
            log.warning(
                "checkpoint %s holds %d rows, expected %d; searched again",
                p,
                res.nq,
                span[1] - span[0],
            )
            return None
        return res

    def discard(self, i: int) -> None:
        """Forget batch ``i`` (its answer turned out to be wrong)."""
        self._path(i).unlink(missing_ok=True)

    def save(self, i: int, r: SearchResult) -> None:
        """Write batch ``i``; a failed write (disk full) is logged once and never fails the run."""
        arrays = {"ids": r.ids, "scores": r.scores}
        arrays.update({f"extra_{k}": np.asarray(v) for k, v in r.extra_scores.items()})
        try:
            atomic_write(self._path(i), lambda f: np.savez(f, **arrays))
        except OSError as exc:
            if not self._write_failed:
                self._write_failed = True
                log.warning(
                    "checkpoint %s not written (%s); the run goes on, a resume searches again",
                    self.root,
                    _describe(exc),
                )

    def clear(self) -> int:
        """Remove this folder's batch files and manifest (and the folder if then empty)."""
        n = 0
        if not self.root.is_dir():
            return 0
        for p in self.root.iterdir():
            if p.name == _MANIFEST or (p.name.startswith("batch_") and p.suffix == ".npz"):
                p.unlink(missing_ok=True)
                n += 1
            elif p.name.startswith(".batch_") and p.name.endswith(".tmp"):
                p.unlink(missing_ok=True)  # left by a write cut short
        try:
            self.root.rmdir()
        except OSError:
            pass
        return n


def remove_checkpoints(checkpoint_dir: str | os.PathLike) -> int:
    """Remove every evaluator checkpoint folder under ``checkpoint_dir``; returns files removed.

    Only folders holding an evaluator manifest are touched.
    """
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return 0
    n = 0
    for man in sorted(root.rglob(_MANIFEST)):
        n += _Checkpoint(man.parent, {}).clear()
    return n
