"""``sweep``: a grid of support sizes x methods x stores, sharing one study.

:func:`grid` is the one place that builds the cells; :func:`sweep` runs a
base config's grid or a list of cells built before. Every cell is validated
before the first one runs (its names and parameters by one preflight, its
output name and folder), datasets and embeddings are loaded once for the whole grid
(:class:`~imsearch_align.experiment.context.Study`), and each cell's aligned
spaces are released when it ends, so memory grows with the largest cell,
not with the number of cells.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from imsearch_align.experiment.components import preflight
from imsearch_align.experiment.config import DEFAULT_OUTPUT_TEMPLATE, ExperimentConfig
from imsearch_align.experiment.context import Study
from imsearch_align.experiment.output import OutputPlan
from imsearch_align.experiment.pipeline import ExperimentError, run_experiment
from imsearch_align.experiment.result import ExperimentResult, RunStatus

__all__ = ["grid", "sweep"]

log = logging.getLogger(__name__)


def grid(
    base: ExperimentConfig,
    *,
    n_values: Sequence[int | None] | None = None,
    methods: Sequence[str] | None = None,
    stores: Sequence[str] | None = None,
    method_params: Mapping[str, Mapping[str, Any]] | None = None,
    store_params: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[ExperimentConfig]:
    """The configs of ``methods x stores x n_values`` (each defaults to ``base``'s);
    a value given twice is one cell (it would run twice and overwrite its own file)."""
    methods = list(dict.fromkeys(methods)) if methods else methods
    stores = list(dict.fromkeys(stores)) if stores else stores
    n_values = list(dict.fromkeys(n_values)) if n_values else n_values
    out = []
    for m in methods or [base.method]:
        mp = (method_params or {}).get(m, base.method_params if m == base.method else {})
        for s in stores or [base.store]:
            sp = (store_params or {}).get(s, base.store_params if s == base.store else {})
            for n in n_values or [base.n_support]:
                out.append(
                    base.replace(
                        method=m,
                        store=s,
                        n_support=n,
                        method_params=dict(mp),
                        store_params=dict(sp),
                    )
                )
    return out


def sweep(
    base: ExperimentConfig | Sequence[ExperimentConfig],
    *,
    output_dir: str | os.PathLike | None = None,
    output_template: str = DEFAULT_OUTPUT_TEMPLATE,
    skip_existing: bool = False,
    progress: bool = True,
    on_error: str = "raise",
    study: Study | None = None,
    preflighted: bool = False,
    **axes: Any,
) -> list[ExperimentResult]:
    """Run the grid; one :class:`ExperimentResult` per cell, in grid order.

    ``base`` is a config and ``axes`` the keyword arguments of :func:`grid`
    (``n_values``, ``methods``, ``stores``, ``method_params``,
    ``store_params``), or ``base`` is the list of cells (from :func:`grid`).
    Every cell is checked before the first runs; ``preflighted``: the caller
    has run :func:`~.components.preflight` on every cell already (the CLI).
    ``on_error="record"`` keeps going after a failed cell (its result has
    status ``failed``); ``"raise"`` stops at the first.
    """
    if on_error not in ("raise", "record"):
        raise ValueError(f"on_error must be 'raise' or 'record', got {on_error!r}")
    from imsearch_align.framework.registry import TASKS

    if isinstance(base, ExperimentConfig):
        configs = grid(base, **axes)
    elif axes:
        raise TypeError(f"sweep: {sorted(axes)} apply to a base config, not to a list of cells")
    else:
        configs = list(base)
    for cfg in configs:  # every cell checked before the first runs
        OutputPlan.make(cfg, output_dir, output_template)
        if not preflighted:
            preflight(cfg, TASKS.get(cfg.task))
    study = study or Study()
    run = {"output_dir": output_dir, "output_template": output_template,
           "skip_existing": skip_existing, "progress": progress, "study": study}  # fmt: skip
    return [_run_cell(cfg, on_error, run) for cfg in configs]


def _run_cell(cfg: ExperimentConfig, on_error: str, run: dict[str, Any]) -> ExperimentResult:
    """One checked cell; a failure is raised or recorded as a failed result."""
    try:
        return run_experiment(cfg, preflighted=True, **run)
    except ExperimentError as exc:
        if on_error == "raise":
            raise
        log.error("cell %s/%s/n=%s failed: %s", cfg.method, cfg.store, cfg.n_support, exc)
        return exc.result
    except Exception as exc:
        if on_error == "raise":
            raise
        log.error("cell %s/%s/n=%s failed: %s", cfg.method, cfg.store, cfg.n_support, exc)
        return ExperimentResult(
            config=cfg, status=RunStatus("failed", error=f"{type(exc).__name__}: {exc}")
        )
