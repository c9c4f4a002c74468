"""The pure half of ``benchmarks/scale_out.py --measure-cores``: which cores the server and
the clients may use, and how the measured rates become a ``core_scaling`` entry of the
cost model's inputs (:mod:`.cost_figures`).

The measurement (in the script, it needs a Milvus server) starts one Milvus 2.3.5
standalone per server core set (the script's own affinity set to those cores before the
start: the server inherits it, and Go and knowhere size their thread pools from it),
then moves itself and its client processes to the client cores, builds the collection,
and measures the build (rows over flush + index), batched q/s and single-query q/s (the
highest level of concurrent one-query clients) ``repeats`` times. Server and clients on
disjoint cores is the point: the study's figures had clients on the server's cores.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from imsearch_align.collection.cost_figures import CORE_KINDS, INDEX_TYPES

__all__ = ["check_core_sets", "core_entry", "merge_core_entry", "parse_cores"]


def parse_cores(text: str, what: str, available: set[int] | None = None) -> frozenset[int]:
    """``"0,1"`` or ``"2-3"`` as a set of CPU numbers, each one this process may run on
    (``available``: default ``os.sched_getaffinity(0)``); ValueError naming ``what``."""
    have = set(os.sched_getaffinity(0)) if available is None else set(available)
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise ValueError(f"{what} {text!r}: expected CPU numbers like 0,1 or 2-3") from None
    if not out or not out <= have:
        raise ValueError(
            f"{what} {text!r}: CPUs {sorted(out - have) or '(none)'} are not available to this "
            f"process (available: {','.join(map(str, sorted(have)))})"
        )
    return frozenset(out)


def check_core_sets(server: Sequence[frozenset[int]], client: frozenset[int]) -> None:
    """Server core sets of 1 and 2 CPUs, none sharing a CPU with the clients."""
    sizes = sorted(len(s) for s in server)
    if sizes != [1, 2]:
        raise ValueError(f"--server-cores: give one set of 1 CPU and one of 2 (got sizes {sizes})")
    shared = sorted(set().union(*server) & client)
    if shared:
        raise ValueError(
            f"--client-cores shares CPU(s) {shared} with --server-cores: the clients must run "
            "outside the server's share (a machine with at least 3 CPUs)"
        )


def _band(values: Sequence[float]) -> dict[str, float]:
    return {"value": float(statistics.median(values)), "low": float(min(values)),
            "high": float(max(values))}  # fmt: skip


def core_entry(
    results: Mapping[int, Mapping[str, Sequence[float]]],
    *,
    kind: str,
    n: int,
    dim: int,
    setting: str,
    command: str,
    when: str,
) -> dict[str, Any]:
    """``core_scaling[kind]`` from ``results[cores][what]`` (the repeats' rates at 1 and 2
    server cores, ``what`` in ``single``, ``batched``, ``build``); a kind not measured
    stays null."""
    if kind not in INDEX_TYPES:
        raise ValueError(f"index must be one of {', '.join(INDEX_TYPES)}, got {kind!r}")
    entry: dict[str, Any] = {}
    for what in CORE_KINDS:
        entry[what] = {}
        for cores in (1, 2):
            values = [float(v) for v in (results.get(cores) or {}).get(what) or []]
            if any(not v > 0 for v in values):
                raise ValueError(f"{what} at {cores} core(s): every rate must be > 0, got {values}")
            entry[what][str(cores)] = (
                {**_band(values), "n": n, "dim": dim, "cores": cores} if values else None
            )
    counts = {c: len((results.get(c) or {}).get("single") or []) for c in (1, 2)}
    entry["source"] = (
        f"--measure-cores {when}: Milvus 2.3.5 standalone pinned to 1 and to 2 cores, clients "
        f"on other cores; {setting} at {n:,} x {dim}; median of {counts[1]} and {counts[2]} "
        f"repeat(s) with their extremes: {command}"
    )
    return entry


def merge_core_entry(inputs: Mapping[str, Any], kind: str, entry: Mapping[str, Any]) -> dict:
    """``inputs`` with ``core_scaling[kind]`` replaced by ``entry`` (everything else kept)."""
    out = dict(inputs)
    scaling = dict(out.get("core_scaling") or {})
    scaling[kind] = dict(entry)
    out["core_scaling"] = scaling
    return out
