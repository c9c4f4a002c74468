"""Experiments: one config in, one typed result out; sweeps over a grid.

    load -> embed (cached) -> fit on N support pairs -> transform -> run the task

``ExperimentConfig`` (:mod:`.config`) holds everything that defines an
experiment; :func:`run_experiment` (:mod:`.pipeline`) runs it and returns an
:class:`ExperimentResult` (:mod:`.result`) with a status; the task itself
(retrieval, classification, matching, multilabel, linear_probe, captioning)
is a class in :mod:`.tasks`; :func:`sweep` runs a grid sharing one
:class:`Study`. See ``docs/architecture.md`` for the map.
"""

from __future__ import annotations

from imsearch_align.experiment.components import make_encoder, shared_encoder
from imsearch_align.experiment.config import DEFAULT_OUTPUT_TEMPLATE, ConfigError, ExperimentConfig
from imsearch_align.experiment.context import Study
from imsearch_align.experiment.output import check_writable
from imsearch_align.experiment.pipeline import ExperimentError, run_experiment
from imsearch_align.experiment.provenance import capture as capture_provenance
from imsearch_align.experiment.provenance import package_versions
from imsearch_align.experiment.result import (
    SCHEMA_VERSION,
    ExperimentResult,
    RankingResult,
    ResultSchemaError,
    RunStatus,
    TaskResult,
)
from imsearch_align.experiment.sweep import grid, sweep
from imsearch_align.experiment.tasks import class_prompts, class_vectors
from imsearch_align.experiment.templates import check_template

__all__ = [
    "DEFAULT_OUTPUT_TEMPLATE",
    "SCHEMA_VERSION",
    "ConfigError",
    "ExperimentConfig",
    "ExperimentError",
    "ExperimentResult",
    "RankingResult",
    "ResultSchemaError",
    "RunStatus",
    "Study",
    "TaskResult",
    "capture_provenance",
    "check_template",
    "check_writable",
    "class_prompts",
    "class_vectors",
    "grid",
    "make_encoder",
    "package_versions",
    "run_experiment",
    "shared_encoder",
    "sweep",
]
