"""The values of a config, checked before any work (its names are checked by
:func:`~imsearch_align.experiment.components.check_params`).

:func:`check_values` builds the task, the method and each perturbation from
the config's parameters (their constructors check their arguments and do no
work), so ``dense_limit=0`` or ``rate=5`` is refused in a second rather than
after the encoding; checks the method parameters bounded by the number of
support pairs (:data:`SUPPORT_BOUNDED`); refuses encoders for a dataset
that brings embeddings only; and proves the embedding cache folder writable.
Each problem is a ``ConfigError`` naming the parameter, what was expected
and what was given.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from imsearch_align.experiment.config import ConfigError, ExperimentConfig
from imsearch_align.framework.atomic import writable_folder_error
from imsearch_align.framework.registry import DATASETS, ENCODERS, METHODS, PERTURBATIONS

__all__ = [
    "SUPPORT_BOUNDED",
    "check_cache_dir",
    "check_cache_folder",
    "check_encoders_fit_dataset",
    "check_support_bounds",
    "check_values",
    "support_bound_default",
]

#: Method parameters that count support pairs: method -> (parameter, lowest value);
#: the highest is ``n_support`` (ASIF's anchors kept per row, local CKA's base set).
SUPPORT_BOUNDED: dict[str, tuple[str, int]] = {"asif": ("non_zeros", 1), "cka": ("base_size", 2)}


def check_values(config: ExperimentConfig, task_factory: Callable[..., Any]) -> None:
    """Every value :func:`preflight` can check without data; raise ``ConfigError``."""
    _build("task", config.task, task_factory, config.task_params)
    _build("method", config.method, METHODS.get(config.method), config.method_params)
    for name in config.perturbations:
        params = config.perturbation_params.get(name, {})
        _build("perturbation", name, PERTURBATIONS.get(name), params)
    check_support_bounds(config)
    check_encoders_fit_dataset(config)
    check_cache_dir(config)


def _build(kind: str, name: str, factory: Callable[..., Any], params: Mapping[str, Any]) -> None:
    """Build ``factory(**params)`` and drop it: a bad value raises ``ConfigError``."""
    try:
        factory(**params)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{kind} {name!r}: {exc}") from None


def support_bound_default(method: str) -> tuple[str, int, Any] | None:
    """``(parameter, lowest, default)`` of ``method``'s support-bounded parameter, or None."""
    bound = SUPPORT_BOUNDED.get(method)
    if bound is None:
        return None
    try:
        param = inspect.signature(METHODS.get(method)).parameters.get(bound[0])
    except (TypeError, ValueError):
        param = None
    default = None if param is None or param.default is param.empty else param.default
    return bound[0], bound[1], default


def check_support_bounds(config: ExperimentConfig) -> None:
    """A support-bounded method parameter (given, or its default) within
    ``[lowest, n_support]``; unknown until loading when ``n_support`` is all pairs."""
    found = support_bound_default(config.method)
    if found is None or config.n_support is None:
        return
    param, low, default = found
    given = param in config.method_params
    value = config.method_params[param] if given else default
    if isinstance(value, bool) or not isinstance(value, int):
        return  # None (no bound) or a wrong type: the method's own check says which
    n = config.n_support
    if not low <= value <= n:
        origin = "" if given else " (its default)"
        raise ConfigError(
            f"method {config.method!r} parameter {param} must be in [{low}, {n}] (at most "
            f"n_support={n}, the support pairs), got {value}{origin}; pass "
            f"--method-param {param}=N with N <= {n}"
        )


def _encoding_sides(config: ExperimentConfig) -> list[str]:
    """The sides (image, text) whose named encoder encodes items (not a lookup by id)."""
    sides = []
    for side in ("image", "text"):
        enc = getattr(config, f"{side}_encoder")
        if enc is not None and not getattr(ENCODERS.get(enc), "lookup_by_id", False):
            sides.append(side)
    return sides


def check_encoders_fit_dataset(config: ExperimentConfig) -> None:
    """A dataset whose loader returns an ``EmbeddedDataset`` holds vectors, no
    images or captions: an encoder has nothing to encode."""
    try:
        ann = inspect.signature(DATASETS.get(config.dataset)).return_annotation
    except (TypeError, ValueError):
        return
    if (ann if isinstance(ann, str) else getattr(ann, "__name__", "")) != "EmbeddedDataset":
        return
    sides = _encoding_sides(config)
    if sides:
        named = " and ".join(f"{s}_encoder {getattr(config, f'{s}_encoder')!r}" for s in sides)
        flags = " ".join(f"--{s}-encoder none" for s in sides)
        raise ConfigError(
            f"dataset {config.dataset!r} holds embeddings only (no images or captions to "
            f"encode), got {named}; expected no encoder: pass {flags} to use the "
            "dataset's own vectors"
        )


def check_cache_dir(config: ExperimentConfig) -> None:
    """The embedding cache folder is created if needed and can be written,
    when an encoder will write to it."""
    if config.cache_dir is not None and _encoding_sides(config):
        check_cache_folder(config.cache_dir)


def check_cache_folder(path: str | os.PathLike) -> None:
    """Create the embedding cache folder ``path`` if needed and prove it writable."""
    exc = writable_folder_error(path)
    if exc is not None:
        raise ConfigError(
            f"cache_dir {str(Path(path))!r} cannot be written ({exc.strerror or exc}); expected a "
            "writable folder: choose another (--cache-dir DIR) or run without the cache "
            "(--cache-dir none)"
        )
