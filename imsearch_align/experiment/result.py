"""``ExperimentResult``: what one experiment measured, typed, with a status.

A result is frozen data: the config, what was loaded, fitted and searched,
per-task results, timings and provenance, a ``schema_version`` and a
**status**:

* ``ok``: every query was searched and scored;
* ``degraded``: the numbers exist but something was lost (failed queries,
  scores a store reported wrongly...): ``status.reasons`` says what; the
  CLI exits non-zero unless ``--allow-failures``, ``--skip-existing`` runs
  the cell again, the leaderboard marks the row and never bolds it;
* ``failed``: the run stopped (``status.error``); whatever finished is kept.

Readers use this type only: :meth:`ExperimentResult.flatten` is the one
leaderboard row, :meth:`ExperimentResult.summary` the console text,
:meth:`ExperimentResult.to_json` / :meth:`ExperimentResult.from_json` the
file (they round-trip exactly). Files written by imsearch-align 0.1.0
(schema 1, no ``schema_version`` key) still load; a file without the key is
read by the schema its keys fit, and one that fits none is refused.
"""

from __future__ import annotations

import difflib
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from imsearch_align.experiment.config import ExperimentConfig
from imsearch_align.experiment.provenance import Provenance
from imsearch_align.framework.ranking.result import RankingResult, SearchTimings

__all__ = [
    "SCHEMA_VERSION",
    "DatasetInfo",
    "EncoderInfo",
    "ExperimentResult",
    "MethodInfo",
    "RankingResult",
    "ResultSchemaError",
    "RunStatus",
    "SearchTimings",
    "TaskResult",
]

SCHEMA_VERSION = 2
READABLE_SCHEMAS = (1, 2)
STATES = ("ok", "degraded", "failed")


class ResultSchemaError(ValueError):
    """A result file of a schema this version cannot read, or not a result at all."""


def _num(x: Any) -> float | None:
    """A float, or None for a missing value (NaN stays NaN: it is a measured value)."""
    return None if x is None else float(x)


# ----------------------------------------------------------------------------- parts


@dataclass(frozen=True)
class RunStatus:
    """``state`` is ``ok``, ``degraded`` (``reasons``) or ``failed`` (``error``)."""

    state: str = "ok"
    reasons: tuple[str, ...] = ()
    error: str | None = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"status state must be one of {STATES}, got {self.state!r}")
        object.__setattr__(self, "reasons", tuple(self.reasons))

    @property
    def ok(self) -> bool:
        """True when nothing was lost."""
        return self.state == "ok"

    def __str__(self) -> str:
        if self.state == "failed":
            return f"failed: {self.error}"
        if self.state == "degraded":
            return "degraded: " + "; ".join(self.reasons)
        return "ok"


@dataclass(frozen=True)
class TaskResult:
    """What a task produced: its rankings, task-level measures and JSON-ready details."""

    task: str
    rankings: dict[str, RankingResult] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task,
            "rankings": [r.to_dict() for r in self.rankings.values()],
            "metrics": dict(self.metrics),
            "details": self.details,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskResult:
        ranks = [RankingResult.from_dict(r) for r in d.get("rankings") or ()]
        return cls(
            task=d["task"],
            rankings={r.name: r for r in ranks},
            metrics={k: float(v) for k, v in (d.get("metrics") or {}).items()},
            details=dict(d.get("details") or {}),
        )


@dataclass(frozen=True)
class DatasetInfo:
    """What was evaluated: sizes of the support sample and the test split.

    ``skipped`` counts what the loader left out by reason (``missing_image``,
    ``empty_caption``...); ``n_uncaptioned_test_images`` are test images that
    cannot be image-to-text queries (they stay text-to-image distractors).
    """

    name: str
    n_support_pairs: int = 0
    n_support_available: int = 0
    n_test_images: int = 0
    n_test_texts: int = 0
    support_dataset: str | None = None
    skipped: dict[str, int] = field(default_factory=dict)
    n_uncaptioned_test_images: int = 0


@dataclass(frozen=True)
class MethodInfo:
    """The fitted method: name, parameters, what fitting chose (scalar attributes
    ending in ``_``, e.g. CSA's ``eps_``), output dimension, sparse or dense."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    output_dim: int = 0
    sparse: bool = False
    fitted: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EncoderInfo:
    """The embedding providers' ids (model and version)."""

    image: str = ""
    text: str = ""


# ----------------------------------------------------------------------------- the result


@dataclass(frozen=True, eq=False)
class ExperimentResult:
    """One experiment's result; see the module docstring.

    ``path`` (where it was read from or written to) and ``skipped`` (returned
    by ``--skip-existing`` without running) describe this object, not the
    measurement: they are not written into the file.
    """

    config: ExperimentConfig
    status: RunStatus = field(default_factory=RunStatus)
    dataset: DatasetInfo | None = None
    method: MethodInfo | None = None
    encoders: EncoderInfo | None = None
    task: TaskResult | None = None
    timings: dict[str, float] = field(default_factory=dict)
    provenance: Provenance = field(default_factory=Provenance)
    diagnostics: dict[str, Any] | None = None
    created: str = ""
    per_query_file: str | None = None
    key: str = ""
    schema_version: int = SCHEMA_VERSION
    path: str | None = None
    skipped: bool = False

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.config.key())

    # -- values ------------------------------------------------------------------
    @property
    def metrics(self) -> dict[str, float]:
        """Every measured value by flat name: ``t2i/HitRate@1``, ``t2i/ann_recall@10``,
        ``classification/acc1``, ``matching/accuracy``..."""
        out: dict[str, float] = {}
        if self.task is None:
            return out
        for r in self.task.rankings.values():
            out.update({f"{r.name}/{m}": v for m, v in r.metrics.items()})
            out.update({f"{r.name}/{m}": v for m, v in r.fidelity.items()})
        out.update({f"{self.task.task}/{m}": v for m, v in self.task.metrics.items()})
        return out

    def metric(self, name: str) -> float:
        """One value of :attr:`metrics`; an unknown name raises with close matches."""
        m = self.metrics
        if name in m:
            return m[name]
        close = difflib.get_close_matches(name, list(m), n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise KeyError(
            f"result has no metric {name!r}.{hint} Available: {', '.join(m) or '(none)'}"
        )

    @property
    def rankings(self) -> dict[str, RankingResult]:
        """The evaluated rankings by name (empty for a failed run)."""
        return dict(self.task.rankings) if self.task else {}

    @property
    def n_failed(self) -> int:
        """Failed queries over every ranking."""
        return sum(r.n_failed for r in self.rankings.values())

    def clip_benchmark(self) -> dict[str, float]:
        """CLIP_benchmark's names: its retrieval ``recall@k`` is our HitRate@k."""
        m, out = self.metrics, {}
        for k in self.config.k_values:
            for d, alias in (("t2i", "image_retrieval_recall"), ("i2t", "text_retrieval_recall")):
                if f"{d}/HitRate@{k}" in m:
                    out[f"{alias}@{k}"] = m[f"{d}/HitRate@{k}"]
        if "classification/acc1" in m:
            out["acc1"] = m["classification/acc1"]
        if "classification/acc5" in m:
            out["acc5"] = m["classification/acc5"]
        return out

    def with_(self, **changes: Any) -> ExperimentResult:
        """A copy with some fields changed."""
        return replace(self, **changes)

    # -- (de)serialisation -----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form written to result files."""
        return {
            "schema_version": self.schema_version,
            "status": asdict(self.status),
            "key": self.key,
            "config": self.config.to_dict(),
            "dataset": asdict(self.dataset) if self.dataset else None,
            "method": asdict(self.method) if self.method else None,
            "encoders": asdict(self.encoders) if self.encoders else None,
            "task": self.task.to_dict() if self.task else None,
            "metrics": self.metrics,
            "clip_benchmark": self.clip_benchmark(),
            "timings": dict(self.timings),
            "provenance": self.provenance.to_dict(),
            "diagnostics": self.diagnostics,
            "created": self.created,
            "per_query_file": self.per_query_file,
        }

    def to_json(self, *, indent: int | None = 2) -> str:
        """JSON text (NaN written as ``NaN``, which Python's json reads back)."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=True, default=_json_default)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], *, path: str | None = None) -> ExperimentResult:
        """Read a result dict of any readable schema (see :data:`READABLE_SCHEMAS`)."""
        if not isinstance(d, Mapping) or not isinstance(d.get("config"), Mapping):
            raise ResultSchemaError(
                f"{path or 'data'} is not an imsearch-align result (no 'config' mapping)"
            )
        version = d["schema_version"] if "schema_version" in d else _schema_of(d, path)
        if version not in READABLE_SCHEMAS:
            raise ResultSchemaError(
                f"{path or 'result'} has schema_version {version!r}; this imsearch-align reads "
                f"schema versions {list(READABLE_SCHEMAS)}: upgrade imsearch-align to read it"
            )
        if version == 1:
            from imsearch_align.experiment.result_v1 import upgrade_v1

            d = upgrade_v1(d)
        return cls(
            config=_config_from_record(d["config"]),
            status=RunStatus(**d.get("status") or {}),
            dataset=DatasetInfo(**d["dataset"]) if d.get("dataset") else None,
            method=MethodInfo(**d["method"]) if d.get("method") else None,
            encoders=EncoderInfo(**d["encoders"]) if d.get("encoders") else None,
            task=TaskResult.from_dict(d["task"]) if d.get("task") else None,
            timings={k: float(v) for k, v in (d.get("timings") or {}).items()},
            provenance=Provenance.from_dict(d.get("provenance") or {}),
            diagnostics=d.get("diagnostics"),
            created=d.get("created", ""),
            per_query_file=d.get("per_query_file"),
            key=d.get("key", ""),
            schema_version=SCHEMA_VERSION,
            path=path,
        )

    @classmethod
    def from_json(cls, text: str, *, path: str | None = None) -> ExperimentResult:
        """Parse JSON text written by :meth:`to_json` (or by 0.1.0)."""
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ResultSchemaError(f"{path or 'text'} is not valid JSON: {exc}") from None
        return cls.from_dict(data, path=path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ExperimentResult:
        """Read a result file."""
        p = Path(path)
        return cls.from_json(p.read_text(encoding="utf-8"), path=str(p))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ExperimentResult):
            return NotImplemented
        return self.to_json() == other.to_json()

    __hash__ = None  # type: ignore[assignment]

    # -- readers ---------------------------------------------------------------
    def flatten(self) -> dict[str, Any]:
        """The one leaderboard row (see :mod:`imsearch_align.experiment.report`)."""
        from imsearch_align.experiment.report import flatten

        return flatten(self)

    def summary(self) -> str:
        """The console text (see :mod:`imsearch_align.experiment.report`)."""
        from imsearch_align.experiment.report import summary

        return summary(self)


#: Keys only a schema 2 result has (written even when their value is None).
_V2_KEYS = ("status", "task")
#: Keys of a schema 1 result (0.1.0): its rankings, or a failed sweep cell's error.
_V1_KEYS = ("tasks", "error")


def _schema_of(d: Mapping[str, Any], path: str | None) -> int:
    """The schema of a result without ``schema_version``, from the keys it holds.

    Schema 1 (0.1.0) never wrote the key; a schema 2 result that lost it still
    has ``status`` and ``task``. A file with neither layout is refused rather
    than read as an empty result.
    """
    v2 = all(k in d for k in _V2_KEYS)
    v1 = any(k in d for k in _V1_KEYS)
    if v2 != v1:
        return 2 if v2 else 1
    raise ResultSchemaError(
        f"{path or 'result'} has no schema_version and fits no result schema: expected the keys "
        f"{' and '.join(_V2_KEYS)} (schema 2) or {' or '.join(_V1_KEYS)} (schema 1, "
        f"imsearch-align 0.1.0); it has {', '.join(map(str, d)) or 'none'}"
    )


def _config_from_record(d: Mapping[str, Any]) -> ExperimentConfig:
    """The config of a stored result. Digest records of in-memory inputs stay
    as they are (they describe the input; the input itself is not stored);
    fields of a newer or older config that this version lacks are dropped."""
    names = set(ExperimentConfig.field_names())
    return ExperimentConfig.from_dict({k: v for k, v in d.items() if k in names})


def _json_default(o: Any) -> Any:
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, tuple):
        return list(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def status_from(rankings: Sequence[RankingResult], extra_reasons: Sequence[str] = ()) -> RunStatus:
    """``ok``, or ``degraded`` with, per ranking, how many queries failed (and
    the first error), its other reasons (unsorted rankings...), then the run's
    own (``extra_reasons``)."""
    reasons = []
    for r in rankings:
        if r.n_failed:
            first = (
                f" ({r.errors[0]}"
                + (f"; {len(r.errors) - 1} other errors)" if len(r.errors) > 1 else ")")
                if r.errors
                else ""
            )
            reasons.append(f"{r.name}: {r.n_failed} of {r.n_queries} queries failed{first}")
        reasons += [f"{r.name}: {why}" for why in r.reasons]
    reasons += list(extra_reasons)
    return RunStatus("degraded", tuple(reasons)) if reasons else RunStatus()


def result_fields() -> list[str]:
    """Names of the serialised fields (for docs and tests)."""
    return [f.name for f in fields(ExperimentResult) if f.name not in ("path", "skipped")]


def is_number(v: Any) -> bool:
    """A real number that is not NaN."""
    return isinstance(v, int | float) and not isinstance(v, bool) and not math.isnan(float(v))
