"""Timings as distributions: the timed passes of a study cell, and what a cell reports of them.

A cell's speed is never one pass (issue 37: the same cell measured twice differed
x0.30-1.45 at 1M). :func:`timed_pass` is one pass: every query in batches (queries/s)
and a seeded sample of single queries (latency p50 / p95 / p99), with its start time,
its length, the store's outage count around it and, for a store that can tell, the
collection's segment count (:func:`segments`). :func:`summarize` reports the median
of the counted passes with their minimum and maximum, and keeps every pass.

With ``repeats`` R > 1 the first pass of each setting is its **warm-up** (it also gives
the answers the cell is scored on) and is kept but not counted; then R counted passes
follow, **interleaved** across the settings of one build when the store changes its
search setting in place (round r visits the settings starting at position r, so no
setting is always first after a change), else back to back on the setting's own build.
With R = 1 the one pass is counted (``--quick``: the study as before).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from imsearch_align.collection.measure import search_batched, search_latency, server_process

__all__ = [
    "LATENCY_KEYS",
    "CpuClock",
    "apply_passes",
    "interleaved_order",
    "repeated_passes",
    "segments",
    "summarize",
    "timed_pass",
    "wait_settled",
]

#: The latency percentiles a pass measures.
LATENCY_KEYS = ("p50", "p95", "p99")


def _now() -> str:
    """UTC now, ISO 8601 to the millisecond."""
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class CpuClock:
    """CPU seconds of whatever does the searching: the local server's process tree (a
    store on a server on this machine) or this process (an in-process store); ``what``
    says which, and None when neither can be read (a remote server)."""

    def __init__(self, uri: str | None, in_process: bool) -> None:
        self._proc = None if in_process else server_process(uri)
        self.what = "this process" if in_process else ("server" if self._proc else None)

    def __call__(self) -> float | None:
        import psutil

        if self.what is None:
            return None
        try:
            proc = self._proc or psutil.Process()
            total = 0.0
            for p in [proc, *proc.children(recursive=True)]:
                t = p.cpu_times()
                total += t.user + t.system
            return total
        except psutil.Error:
            return None


def segments(store: Any, name: str) -> int | None:
    """The collection's segment count, for a store that tells it (``segment_count``);
    None otherwise or when the store cannot answer."""
    count = getattr(store, "segment_count", None)
    if count is None:
        return None
    try:
        return int(count(name))
    except Exception:  # a count is a record, never a reason to fail the cell
        return None


def timed_pass(
    store: Any,
    name: str,
    queries: np.ndarray,
    k: int,
    *,
    batch: int,
    latency_queries: int,
    seed: int,
    counted: bool,
    cpu: CpuClock | None = None,
) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """One pass: ``(record, ids, scores)``; the record holds ``started`` (UTC),
    ``seconds``, ``queries_per_s``, ``latency_ms``, ``outages`` (the store's count went
    up by this many during the pass; None: the store does not count), ``segments``
    and ``segments_after`` (the collection's segment count before and after the pass: a
    server compacting meanwhile changes it), ``cpu_s`` (CPU seconds of ``cpu``'s process during the pass) and
    ``counted``."""
    before = getattr(store, "outages", None)
    record: dict[str, Any] = {"started": _now(), "counted": counted}
    record["segments"] = segments(store, name)
    cpu0 = cpu() if cpu is not None else None
    t = time.perf_counter()
    ids, scores, qps = search_batched(store, name, queries, k, batch)
    latency = search_latency(store, name, queries, k, latency_queries, seed)
    record["seconds"] = round(time.perf_counter() - t, 4)
    cpu1 = cpu() if cpu is not None else None
    record["cpu_s"] = None if cpu0 is None or cpu1 is None else round(cpu1 - cpu0, 4)
    after = getattr(store, "outages", None)
    record["queries_per_s"] = qps
    record["latency_ms"] = latency
    record["outages"] = None if before is None or after is None else after - before
    record["segments_after"] = segments(store, name)
    return record, ids, scores


def repeated_passes(
    store: Any,
    name: str,
    queries: np.ndarray,
    k: int,
    *,
    repeats: int,
    batch: int,
    latency_queries: int,
    seed: int,
    cpu: CpuClock | None = None,
    rest: bool = True,
) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
    """A setting's passes back to back: ``(passes, ids, scores)``. With ``repeats`` R > 1
    the warm-up pass (whose answers are scored) and R counted passes; with R = 1 the one
    pass, counted. ``rest`` False: the first pass only (a tunable build's counted passes
    run later, interleaved across its settings)."""
    kw = {"batch": batch, "latency_queries": latency_queries, "seed": seed, "cpu": cpu}
    first, ids, scores = timed_pass(store, name, queries, k, counted=repeats == 1, **kw)
    passes = [first]
    if repeats > 1 and rest:
        passes += [timed_pass(store, name, queries, k, counted=True, **kw)[0]
                   for _ in range(repeats)]  # fmt: skip
    return passes, ids, scores


def summarize(passes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What the cell reports from its ``passes``: the median ``queries_per_s`` and
    ``latency_ms`` of the counted passes, their ``[min, max]`` ranges, the number counted,
    and the outages of every pass (warm-up included)."""
    counted = [p for p in passes if p.get("counted")]
    n_counted = len(counted)
    counted = counted or list(passes)  # none counted yet: the warm-up's, until they are
    qps = [float(p["queries_per_s"]) for p in counted]
    out: dict[str, Any] = {
        "queries_per_s": statistics.median(qps),
        "queries_per_s_range": [min(qps), max(qps)],
        "passes_counted": n_counted,
    }
    latency: dict[str, float] = {}
    ranges: dict[str, list[float]] = {}
    for key in LATENCY_KEYS:
        vals = [float(p["latency_ms"][key]) for p in counted if key in (p["latency_ms"] or {})]
        if vals:
            latency[key] = round(statistics.median(vals), 4)
            ranges[key] = [min(vals), max(vals)]
    out["latency_ms"], out["latency_ms_range"] = latency, ranges
    found = [p.get("outages") for p in passes]
    out["outages"] = None if any(o is None for o in found) else sum(found)
    return out


def interleaved_order(n: int, round_: int) -> list[int]:
    """The settings' positions in round ``round_`` (0-based): ``0..n-1`` rotated by the
    round, so each setting is first after a change in some round."""
    if n <= 0:
        return []
    r = round_ % n
    return [*range(r, n), *range(r)]


def wait_settled(
    store: Any, name: str, *, bound_s: float = 120.0, quiet_s: float = 3.0, poll_s: float = 0.5
) -> dict[str, Any] | None:
    """Wait until the collection's segment count has not changed for ``quiet_s`` (a server
    compacting or re-indexing small segments after a load changes it), at most
    ``bound_s``. None for a store that does not tell its segments; else ``{"waited_s",
    "segments", "settled"}`` (``settled`` False: still changing at the bound; the cell
    says so)."""
    last = segments(store, name)
    if last is None:
        return None
    t0 = time.monotonic()
    since = t0
    while True:
        now = time.monotonic()
        if now - since >= quiet_s:
            settled = True
            break
        if now - t0 >= bound_s:
            settled = False
            break
        time.sleep(poll_s)
        count = segments(store, name)
        if count != last:
            last, since = count, time.monotonic()
    return {"waited_s": round(time.monotonic() - t0, 3), "segments": last, "settled": settled}


def _segments_moved(p: dict[str, Any]) -> bool:
    """Whether a pass saw the segment count change (unknown counts never do)."""
    before, after = p.get("segments"), p.get("segments_after")
    return before is not None and after is not None and before != after


def apply_passes(
    cell: dict[str, Any], passes: list[dict[str, Any]], repeats: int, order: str, cpu_of: Any
) -> None:
    """Put ``passes`` into ``cell``: every pass (``passes``), how they ran (``timing``),
    the median queries/s and latency with their ranges (:func:`summarize`), and the
    status: ``degraded`` when the store went through an outage during a pass (its
    timings would include it; a degraded cell is measured again, never reused)."""
    from imsearch_align.experiment.study_cell import status_record

    summary = summarize(passes)
    cell["passes"] = passes
    cell["timing"] = {
        "repeats": repeats,
        "counted": summary["passes_counted"],
        "warmup": repeats > 1,
        "order": order if repeats > 1 else "one pass",
        "cpu_of": cpu_of,
    }
    cell["queries_per_s"] = summary["queries_per_s"]
    cell["queries_per_s_range"] = summary["queries_per_s_range"]
    cell["latency_ms"] = summary["latency_ms"]
    cell["latency_ms_range"] = summary["latency_ms_range"]
    reasons = []
    if summary["outages"]:
        reasons.append(
            f"the server went through {summary['outages']} outage(s) during the timed "
            "searches: queries/s and latency include them; run the study again with "
            "--skip-existing"
        )
    moved = [p for p in passes if p.get("counted") and _segments_moved(p)]
    if moved:
        reasons.append(
            f"the collection's segments changed during {len(moved)} counted pass(es) (the "
            "server compacted or re-indexed them while the pass ran): queries/s and latency "
            "include that work; run the study again with --skip-existing"
        )
    if summary["passes_counted"] < repeats:
        reasons.append(
            f"{summary['passes_counted']} of {repeats} timed passes ran (the study stopped "
            "or a pass failed first): queries/s is from fewer passes than asked; run the "
            "study again with --skip-existing"
        )
    cell["status"] = status_record("degraded", reasons=tuple(reasons)) if reasons else (
        status_record()
    )  # fmt: skip
