"""Stores for the end-to-end fault suite (``tests/test_faults.py``), loaded by the CLI with
``--plugin fault_suite_stores`` and this folder on ``PYTHONPATH``.

* ``fault-milvus``: the real :class:`~imsearch_align.adapters.milvus.MilvusStore`
  (every request goes to the server) with hooks a test drives through the
  environment, so that a fault lands at a known moment of a CLI run:

  - ``FAULT_SLEEP_S``: seconds to sleep before each search, so a run lasts long
    enough for a server to be restarted or killed while it searches;
  - ``FAULT_LOG``: a file; each search appends ``pid start end n_queries``
    (``time.time()`` seconds), so a test can tell which calls came before or
    after a fault and whether two runs searched at the same time;
  - ``FAULT_HOLD_DIR``: a folder; after its first insert the store creates
    ``indexed.<pid>`` there and waits (at most ``FAULT_HOLD_MAX_S``, default
    120 s) until ``go`` exists, so a test can act between indexing and searching.

* ``sign-flip-faiss``: FAISS that ranks by ``-<q, x>`` and reports that score (the
  worst documents, confidently); ``shifted-ids-faiss``: FAISS that reports every
  id plus one with the right scores (a row-to-id mapping bug). Both lie about
  their results; only a truth check recomputed from the stored vectors sees it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.adapters.faiss_store import FaissStore
from imsearch_align.adapters.milvus import MilvusStore
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.registry import STORES

__all__ = ["FaultMilvus", "ShiftedIdsFaiss", "SignFlipFaiss"]


def _register(name: str):
    """``STORES.register(name)``, tolerant of a second import of this module."""

    def deco(cls: type) -> type:
        if name not in STORES.names():
            STORES.register(name)(cls)
        return cls

    return deco


@_register("fault-milvus")
class FaultMilvus(MilvusStore):
    """MilvusStore with test hooks: a sleep before each search, a call log, a hold after insert."""

    _held = False

    def insert(self, name: str, vectors: Any, ids: Any, **kw: Any) -> None:
        """Insert, then (once per process, with ``FAULT_HOLD_DIR``) wait for the test's ``go``."""
        super().insert(name, vectors, ids, **kw)
        hold = os.environ.get("FAULT_HOLD_DIR")
        if hold and not FaultMilvus._held:
            FaultMilvus._held = True
            folder = Path(hold)
            (folder / f"indexed.{os.getpid()}").write_text(name)
            deadline = time.monotonic() + float(os.environ.get("FAULT_HOLD_MAX_S", "120"))
            while not (folder / "go").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"fault-milvus: the test never created {folder / 'go'}")
                time.sleep(0.02)

    def search(self, name: str, queries: Any, k: int, **kw: Any) -> SearchResult:
        """Sleep ``FAULT_SLEEP_S``, search the server, log the call to ``FAULT_LOG``."""
        t0 = time.time()
        time.sleep(float(os.environ.get("FAULT_SLEEP_S", "0")))
        res = super().search(name, queries, k, **kw)
        log = os.environ.get("FAULT_LOG")
        if log:
            with open(log, "a") as f:  # one short line per call: appends do not interleave
                f.write(f"{os.getpid()} {t0:.6f} {time.time():.6f} {queries.shape[0]}\n")
        return res


@_register("sign-flip-faiss")
class SignFlipFaiss(FaissStore):
    """Ranks by ``-<q, x>`` and reports that score: the worst documents, sorted as if best."""

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        """The exact top-k of the negated queries."""
        return super().search(name, -np.asarray(queries), k)


@_register("shifted-ids-faiss")
class ShiftedIdsFaiss(FaissStore):
    """Returns every id plus one (a row-to-id mapping bug), with the right scores."""

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        """The exact top-k, each id reported as ``id + 1``."""
        r = super().search(name, queries, k)
        return SearchResult(np.where(r.ids >= 0, r.ids + 1, -1), r.scores)
