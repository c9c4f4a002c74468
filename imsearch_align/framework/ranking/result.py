"""The typed result of one scored ranking: :class:`RankingResult` and its
:class:`SearchTimings`, as result files hold them (``to_dict``/``from_dict``
round-trip)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RankingResult", "SearchTimings"]


@dataclass(frozen=True)
class SearchTimings:
    """Timings of one evaluated ranking.

    Speed fields cover only the batches searched in this run: a resumed run
    that searched nothing has ``queries_per_s = None``.
    """

    index_build_s: float = 0.0
    search_s: float = 0.0
    metrics_s: float = 0.0
    queries_per_s: float | None = None
    batch_p50_ms: float | None = None
    batch_p95_ms: float | None = None
    batch_p99_ms: float | None = None
    n_batches: int = 0
    n_batches_searched: int = 0
    n_batches_resumed: int = 0


@dataclass(frozen=True)
class RankingResult:
    """One evaluated ranking: a retrieval direction, a perturbed query set, classification.

    Attributes:
        name: ``t2i``, ``i2t``, ``t2i[typo]``, ``classification``...
        metrics: canonical measure name -> mean over every qrels query.
        intervals: measure -> seeded 95% bootstrap interval of the mean.
        n_queries / n_docs: queries scored, documents indexed.
        n_failed: queries whose search failed (scored 0, counted in the mean).
        n_missing / n_ignored: qrels queries without a result / run queries without qrels.
        failed_queries: the first failed query ids.
        errors: distinct error messages of the failed queries.
        timings: see :class:`SearchTimings`.
        fidelity: ANN fidelity against exact search (``ann_recall@k``...).
        reasons: why this ranking is degraded besides failed queries
            (unsorted rankings, relevant documents missing from the index...);
            empty when it is clean.
        tie_rule: the measures under the id-ascending tie rule (``metrics``
            holds their expected value over the orders of tied documents;
            the two are equal when no scores tie).
        ties: the tie report: tolerance, whether tie groups crossing the
            cut-off were closed by an exact store, rows searched deeper, and
            per measure the low/high bounds and the queries whose value
            depends on tie order (see :mod:`imsearch_align.framework.ranking.tie_aware`).
    """

    name: str
    metrics: dict[str, float] = field(default_factory=dict)
    intervals: dict[str, tuple[float, float]] = field(default_factory=dict)
    n_queries: int = 0
    n_docs: int = 0
    n_failed: int = 0
    n_missing: int = 0
    n_ignored: int = 0
    failed_queries: tuple[Any, ...] = ()
    errors: tuple[str, ...] = ()
    timings: SearchTimings = field(default_factory=SearchTimings)
    fidelity: dict[str, float] = field(default_factory=dict)
    reasons: tuple[str, ...] = ()
    tie_rule: dict[str, float] = field(default_factory=dict)
    ties: dict[str, Any] = field(default_factory=dict)

    @property
    def n_tie_dependent(self) -> int:
        """Queries whose value of some measure depends on the order of tied documents."""
        per = (self.ties.get("measures") or {}).values()
        return max((int(v.get("n_tie_dependent", 0)) for v in per), default=0)

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form a result file holds."""
        d = asdict(self)
        d["intervals"] = {m: list(v) for m, v in self.intervals.items()}
        d["failed_queries"] = list(self.failed_queries)
        d["errors"] = list(self.errors)
        d["reasons"] = list(self.reasons)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RankingResult:
        """Read :meth:`to_dict`'s form back."""
        return cls(
            name=d["name"],
            metrics={k: float(v) for k, v in (d.get("metrics") or {}).items()},
            intervals={
                k: (float(v[0]), float(v[1])) for k, v in (d.get("intervals") or {}).items()
            },
            n_queries=int(d.get("n_queries", 0)),
            n_docs=int(d.get("n_docs", 0)),
            n_failed=int(d.get("n_failed", 0)),
            n_missing=int(d.get("n_missing", 0)),
            n_ignored=int(d.get("n_ignored", 0)),
            failed_queries=tuple(d.get("failed_queries") or ()),
            errors=tuple(d.get("errors") or ()),
            timings=SearchTimings(**(d.get("timings") or {})),
            fidelity={k: float(v) for k, v in (d.get("fidelity") or {}).items()},
            reasons=tuple(d.get("reasons") or ()),
            tie_rule={k: float(v) for k, v in (d.get("tie_rule") or {}).items()},
            ties=dict(d.get("ties") or {}),
        )
