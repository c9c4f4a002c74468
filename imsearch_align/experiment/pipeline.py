"""``run_experiment``: load, embed, fit, transform, then run the configured task.

Orchestration only. What can be checked without work is checked first (the
output template and folder, every registry name and parameter, the task
against the dataset, the store connection); a run that fails later writes a
``failed`` result (with whatever finished) and raises :class:`ExperimentError`
carrying it; a run that loses queries returns a ``degraded`` result.
"""

from __future__ import annotations

import gc
import logging
import os
import time
from typing import Any

import numpy as np

from imsearch_align.embedding import provider_key
from imsearch_align.experiment.components import preflight
from imsearch_align.experiment.config import DEFAULT_OUTPUT_TEMPLATE, ConfigError, ExperimentConfig
from imsearch_align.experiment.context import Clock, Study, TaskContext
from imsearch_align.experiment.output import OutputPlan
from imsearch_align.experiment.provenance import capture
from imsearch_align.experiment.result import (
    DatasetInfo,
    EncoderInfo,
    ExperimentResult,
    MethodInfo,
    RunStatus,
    status_from,
)
from imsearch_align.experiment.tasks.base import TaskUnsupportedError
from imsearch_align.framework._heap import release_freed_memory

__all__ = ["ExperimentError", "run_experiment"]

log = logging.getLogger(__name__)


class ExperimentError(RuntimeError):
    """A run that failed after work began; ``result`` is its (written) failed result."""

    def __init__(self, message: str, result: ExperimentResult) -> None:
        super().__init__(message)
        self.result = result


def run_experiment(
    config: ExperimentConfig,
    *,
    output_dir: str | os.PathLike | None = None,
    output_template: str = DEFAULT_OUTPUT_TEMPLATE,
    skip_existing: bool = False,
    progress: bool = True,
    study: Study | None = None,
    preflighted: bool = False,
) -> ExperimentResult:
    """Run one experiment; return its result (written under ``output_dir`` when given).

    With ``skip_existing`` a clean stored result of the same config is
    returned without running (``result.skipped``); a degraded or failed one
    is run again. Search batches are checkpointed under
    ``output_dir/.checkpoints``, so a killed run resumes where it stopped.
    ``study`` shares loaded datasets and embeddings between the cells of a sweep.
    ``preflighted``: the caller has run :func:`~.components.preflight` on
    ``config`` already (a sweep and the CLI check every config before the
    first runs), so it is not checked again.
    """
    if not isinstance(config, ExperimentConfig):
        raise TypeError(f"config must be an ExperimentConfig, got {type(config).__name__}")
    plan = OutputPlan.make(config, output_dir, output_template)
    if skip_existing and (kept := plan.reusable(config)) is not None:
        return kept
    from imsearch_align.framework.registry import TASKS

    task_cls = TASKS.get(config.task)
    if not preflighted:
        preflight(config, task_cls)
    task = task_cls(**config.task_params)
    study = study or Study()
    clock = Clock()
    t0 = time.perf_counter()
    with clock("load_s"):
        data = study.load(config)
    task.check(data, config)
    ctx = TaskContext(
        config, data, study, clock, checkpoint_root=plan.checkpoint_root, progress=progress
    )
    task_result, status, error, diagnostics = None, RunStatus(), None, None
    try:
        _connect(ctx)
        ctx.fit()
        task_result = task.run(ctx)
        status = status_from(list(task_result.rankings.values()), ctx.notes)
        if config.diagnostics:
            from imsearch_align.experiment.geometry import space_diagnostics

            diagnostics = space_diagnostics(ctx)
    except (KeyboardInterrupt, ConfigError, TaskUnsupportedError):
        ctx.close()
        raise
    except Exception as exc:
        error = exc
        status = RunStatus("failed", error=f"{type(exc).__name__}: {exc}")
        if ctx.done:  # what finished before the failure is kept
            from imsearch_align.experiment.result import TaskResult

            task_result = TaskResult(config.task, dict(ctx.done), {}, {"partial": True})
    provenance = capture(ctx.open_store)
    ctx.close()
    release_freed_memory()  # the next cell of a study starts from what is live
    clock.timings["total_s"] = time.perf_counter() - t0
    result = ExperimentResult(
        config=config,
        status=status,
        dataset=_dataset_info(ctx, data),
        method=_method_info(ctx),
        encoders=EncoderInfo(provider_key(data.image_provider), provider_key(data.text_provider)),
        task=task_result,
        timings=dict(clock.timings),
        provenance=provenance,
        diagnostics=diagnostics,
        created=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    )
    result = plan.write(result, ctx.per_query if task_result is not None else [])
    ctx.per_query.clear()
    del ctx
    # Once a cell (seconds to minutes): a collection frees what reference
    # cycles of this cell still hold (pandas and tracebacks keep some), so the
    # next cell of a study does not start above where this one started.
    gc.collect()
    release_freed_memory()  # the per-query frames and the parquet writer's buffers
    if error is not None:
        raise ExperimentError(f"{config.task} run failed: {status.error}", result) from error
    return result


def _connect(ctx: TaskContext) -> None:
    """Open the store before any encoding, so an unreachable server fails in seconds."""
    from imsearch_align.framework.interfaces import CollectionCatalog

    store = ctx.store
    if isinstance(store, CollectionCatalog):
        store.list_collections()


def _dataset_info(ctx: TaskContext, data: Any) -> DatasetInfo:
    from imsearch_align.datasets.base import PairedDataset

    ds = data.dataset
    paired = isinstance(ds, PairedDataset)
    return DatasetInfo(
        name=ds.name,
        n_support_pairs=ctx.n_support_pairs,
        n_support_available=ctx.n_support_available,
        n_test_images=len(ds.split_ids("test", "image")),
        n_test_texts=len(ds.split_ids("test", "text")),
        support_dataset=data.support.name if data.support_is_external else None,
        skipped=dict(ds.skipped) if paired else {},
        n_uncaptioned_test_images=len(ds.uncaptioned_image_ids("test")) if paired else 0,
    )


def _method_info(ctx: TaskContext) -> MethodInfo | None:
    import json

    from imsearch_align.framework.interfaces import EstimatorParams

    m = ctx.method
    if m is None:
        return None
    params = dict(ctx.config.method_params)
    if isinstance(m, EstimatorParams):
        params = m.get_params()
    dim, sparse = ctx.space or (0, False)
    fitted = {
        k: v.item() if isinstance(v, np.generic) else v
        for k, v in vars(m).items()
        if k.endswith("_")
        and not k.startswith("_")
        and isinstance(v, int | float | str | bool | np.generic)
    }
    return MethodInfo(
        name=ctx.config.method,
        params=json.loads(json.dumps(params, default=str)),
        output_dim=dim,
        sparse=sparse,
        fitted=json.loads(json.dumps(fitted, default=str)),
    )
