"""Concurrent search: queries/s, latency and quality of a built index under 1-16 clients.

VectorDBBench's concurrent-search case, with the task's quality scored on
the very answers that were timed::

    from imsearch_align.concurrency import concurrency_cells, quality, run_concurrent, write_cells

    res = run_concurrent(store, "docs", Q, qids, 10, duration_s=30, warmup_s=2)
    res.level(8).queries_per_s, res.level(8).latency_ms["p99"], res.saturation
    q = {lv.concurrency: quality(lv.answers, qrels, ["HitRate@10"]) for lv in res.levels}
    write_cells(concurrency_cells(res, store="faiss", method="procrustes", quality=q), "out/")

In-process stores (exact, faiss, lancedb, qdrant local) run their clients
in threads sharing the store; a server (Milvus by URI) runs them in
processes, each opening its own client from a :class:`StoreSpec`
(``mode="processes"``).

Rooms:

* :mod:`.runner`: :func:`run_concurrent`, the levels one after another;
* :mod:`.client`: one client's loop (warm-up, measured queries, records)
  and the seeded plan of what each client sends;
* :mod:`.threads` / :mod:`.processes`: one level in threads / in processes
  (start together, bounded end, processes always reaped);
* :mod:`.limits`: how many clients a store's client allows, refused above;
* :mod:`.spec`: :class:`StoreSpec`, a store by registry name and arguments;
* :mod:`.result`: answers, per-level counts and speed, the saturation point;
* :mod:`.quality`: :func:`quality` on a level's answers;
* :mod:`.cells`: the report's ``kind: "concurrency"`` cells.
"""

from __future__ import annotations

from imsearch_align.concurrency.cells import concurrency_cells, write_cells
from imsearch_align.concurrency.client import ConcurrencyRunError
from imsearch_align.concurrency.limits import (
    ClientLimit,
    ConcurrencyLimit,
    ConcurrencyLimitError,
    process_limit,
    thread_limit,
)
from imsearch_align.concurrency.quality import Quality, quality
from imsearch_align.concurrency.result import (
    SATURATION_GAIN,
    Answers,
    ConcurrencyResult,
    LevelResult,
    saturation,
)
from imsearch_align.concurrency.runner import DEFAULT_LEVELS, run_concurrent
from imsearch_align.concurrency.spec import StoreSpec

__all__ = [
    "DEFAULT_LEVELS",
    "SATURATION_GAIN",
    "Answers",
    "ClientLimit",
    "ConcurrencyLimit",
    "ConcurrencyLimitError",
    "ConcurrencyResult",
    "ConcurrencyRunError",
    "LevelResult",
    "Quality",
    "StoreSpec",
    "concurrency_cells",
    "process_limit",
    "quality",
    "run_concurrent",
    "saturation",
    "thread_limit",
    "write_cells",
]
