"""What a concurrency run measured: the answers, each level's counts and speed, the saturation.

* :class:`Answers`: every answered query of a level (the clients' records
  merged, in send order), what quality is scored on.
* :class:`LevelResult`: one level: sent, answered, failed, queries/s
  (answered / the level's wall time, from the end of the warm-up to the end
  of the last measured query, at least the duration), latency p50/p95/p99 in ms (numpy's linear
  percentiles, as VectorDBBench reports them), errors.
* :class:`ConcurrencyResult`: every level and the saturation point, the
  report's own definition (:func:`imsearch_align.report_html.production.saturation`:
  the smallest level after which queries/s never grows by
  :data:`~imsearch_align.report_html.production.SATURATION_GAIN` or more;
  None while it still grows at the last level).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imsearch_align.concurrency.client import ClientRecord
from imsearch_align.experiment.result import RunStatus
from imsearch_align.report_html.production import SATURATION_GAIN, saturation

__all__ = [
    "PERCENTILES",
    "SATURATION_GAIN",
    "Answers",
    "ConcurrencyResult",
    "LevelResult",
    "latency_percentiles",
    "level_result",
    "saturation",
]

#: The latency percentiles reported, by their cell names.
PERCENTILES = {"p50": 50.0, "p95": 95.0, "p99": 99.0}


@dataclass(frozen=True, eq=False)
class Answers:
    """Every answered query of one level, in send order.

    Attributes:
        query_ids: the whole query set's ids (position -> id).
        query: ``(n,)`` positions of the answered queries (a query may repeat).
        ids, scores: ``(n, k)`` each answer's top-k.
        latency_s: ``(n,)`` each answer's latency.
        started_s: ``(n,)`` when each was sent, seconds after the warm-up.
        client: ``(n,)`` the client that sent it.
        failed_query: positions of the measured queries whose search raised.
    """

    query_ids: np.ndarray
    query: np.ndarray
    ids: np.ndarray
    scores: np.ndarray
    latency_s: np.ndarray
    started_s: np.ndarray
    client: np.ndarray
    failed_query: np.ndarray

    def __len__(self) -> int:
        return len(self.query)

    @classmethod
    def merge(cls, query_ids: np.ndarray, records: Sequence[ClientRecord]) -> Answers:
        """The records of a level's clients, merged and sorted by send time."""
        k = max((r.ids.shape[1] for r in records if len(r.query)), default=0)
        rec = [r for r in records if len(r.query)]
        started = np.concatenate([r.started_s for r in rec]) if rec else np.zeros(0)
        order = np.argsort(started, kind="stable")

        def cat(get: Any, dtype: Any, shape: tuple[int, ...] = ()) -> np.ndarray:
            if not rec:
                return np.zeros((0, *shape), dtype)
            return np.concatenate([get(r) for r in rec])[order]

        failed = [r.failed_query for r in records]
        return cls(
            query_ids=query_ids,
            query=cat(lambda r: r.query, np.int64),
            ids=cat(lambda r: r.ids, np.int64, (k,)),
            scores=cat(lambda r: r.scores, np.float32, (k,)),
            latency_s=cat(lambda r: r.latency_s, np.float64),
            started_s=started[order],
            client=cat(lambda r: np.full(len(r.query), r.client, np.int32), np.int32),
            failed_query=np.concatenate(failed) if failed else np.zeros(0, np.int64),
        )

    def first(self) -> np.ndarray:
        """Row index of each answered query's first answer (in send order)."""
        _, rows = np.unique(self.query, return_index=True)
        return np.sort(rows)


@dataclass(frozen=True, eq=False)
class LevelResult:
    """One concurrency level (see the module docstring for the definitions)."""

    concurrency: int
    mode: str
    sent: int
    answered: int
    failed: int
    warmup_sent: int
    wall_s: float
    queries_per_s: float
    latency_ms: dict[str, float]
    errors: dict[str, int]
    stopped: tuple[str, ...]
    answers: Answers

    @property
    def status(self) -> RunStatus:
        """ok; degraded when some queries failed; failed when none was answered."""
        if self.answered == 0:
            top = next(iter(self.errors), "no query was sent")
            return RunStatus("failed", error=f"no query answered at {self.concurrency}: {top}")
        if self.failed:
            top = max(self.errors.items(), key=lambda kv: kv[1])[0]
            return RunStatus(
                "degraded", reasons=(f"{self.failed} of {self.sent} queries failed ({top})",)
            )
        return RunStatus()

    def summary(self) -> dict[str, Any]:
        """JSON-ready counts, speed and errors (not the answers)."""
        return {
            "concurrency": self.concurrency,
            "mode": self.mode,
            "sent": self.sent,
            "answered": self.answered,
            "failed": self.failed,
            "warmup_sent": self.warmup_sent,
            "wall_s": self.wall_s,
            "queries_per_s": self.queries_per_s,
            "latency_ms": dict(self.latency_ms),
            "errors": dict(self.errors),
            "stopped": list(self.stopped),
        }


def latency_percentiles(latency_s: np.ndarray) -> dict[str, float]:
    """p50/p95/p99 (and the mean) of latencies in seconds, in ms; empty when there are none."""
    if not len(latency_s):
        return {}
    ms = np.asarray(latency_s) * 1e3
    out = {name: float(np.percentile(ms, q)) for name, q in PERCENTILES.items()}
    out["mean"] = float(ms.mean())
    return out


def level_result(
    concurrency: int,
    mode: str,
    query_ids: np.ndarray,
    records: Sequence[ClientRecord],
    t_measure: float,
    duration_s: float,
) -> LevelResult:
    """Merge a level's client records into its :class:`LevelResult`.

    The wall time runs from ``t_measure`` to the end of the last measured
    query, and is at least ``duration_s`` (a client that ended early, or
    whose last answer came just before the end, leaves the window as long).
    """
    answers = Answers.merge(query_ids, records)
    sent = sum(r.sent for r in records)
    failed = sum(len(r.failed_query) for r in records)
    errors: Counter[str] = Counter()
    for r in records:
        errors.update(r.errors)
    wall = max(duration_s, max((r.end for r in records), default=t_measure) - t_measure)
    return LevelResult(
        concurrency=concurrency,
        mode=mode,
        sent=sent,
        answered=len(answers),
        failed=failed,
        warmup_sent=sum(r.warmup_sent for r in records),
        wall_s=float(wall),
        queries_per_s=len(answers) / wall if wall > 0 and len(answers) else 0.0,
        latency_ms=latency_percentiles(answers.latency_s),
        errors=dict(errors.most_common()),
        stopped=tuple(f"client {r.client}: {r.stopped}" for r in records if r.stopped),
        answers=answers,
    )


@dataclass(frozen=True, eq=False)
class ConcurrencyResult:
    """Every level of one run and its saturation point.

    Attributes:
        levels: one :class:`LevelResult` per concurrency, ascending.
        saturation: the concurrency beyond which queries/s stops growing
            (None: it still grows at the last level, or fewer than two levels answered).
        collection, k, mode, duration_s, warmup_s, seed: the run's settings.
    """

    levels: tuple[LevelResult, ...]
    collection: str
    k: int
    mode: str
    duration_s: float
    warmup_s: float
    seed: int
    saturation: int | None = field(default=None)

    def level(self, concurrency: int) -> LevelResult:
        """The result at ``concurrency``; an unknown level raises naming the measured ones."""
        for lv in self.levels:
            if lv.concurrency == concurrency:
                return lv
        have = [lv.concurrency for lv in self.levels]
        raise KeyError(f"concurrency {concurrency} was not measured; measured: {have}")

    def curve(self) -> list[tuple[int, float]]:
        """``(concurrency, queries/s)`` of the levels that answered a query."""
        return [(lv.concurrency, lv.queries_per_s) for lv in self.levels if lv.answered]

    def summary(self) -> dict[str, Any]:
        """JSON-ready settings, every level's summary and the saturation point."""
        return {
            "collection": self.collection,
            "k": self.k,
            "mode": self.mode,
            "duration_s": self.duration_s,
            "warmup_s": self.warmup_s,
            "seed": self.seed,
            "saturation": self.saturation,
            "levels": [lv.summary() for lv in self.levels],
        }
