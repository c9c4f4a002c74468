"""Building the parts of an experiment from registry names, checked before any work.

:func:`preflight` resolves every name of a config (dataset, encoders, method,
store, task, perturbations), checks every parameter name against the
factory's signature, with "did you mean", and every value it can check
without data (:mod:`.value_checks`): a typo or a bad value is reported in a
second, before any encoding (the run then connects to the store first, so an
unreachable server is too). It runs once per config: a sweep and the CLI
check every config first and tell :func:`~.pipeline.run_experiment` so.
"""

from __future__ import annotations

import difflib
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.experiment.config import ConfigError, ExperimentConfig, digest_value
from imsearch_align.experiment.value_checks import check_values
from imsearch_align.framework.registry import DATASETS, ENCODERS, METHODS, PERTURBATIONS, STORES

__all__ = [
    "LoadedData",
    "check_params",
    "make_encoder",
    "make_method",
    "make_store",
    "preflight",
    "shared_encoder",
    "support_pairs",
]


def _accepted(factory: Callable[..., Any]) -> tuple[list[str], bool] | None:
    """(keyword names, takes **kwargs) of a factory, or None when it has no signature."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return None
    names = [
        p.name
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"
    ]
    return names, any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())


def check_params(
    factory: Callable[..., Any],
    params: Mapping[str, Any],
    what: str,
    *,
    implied: tuple[str, ...] = (),
) -> None:
    """Raise ``ConfigError`` for a parameter ``factory`` does not take (with did-you-mean)."""
    acc = _accepted(factory)
    if acc is None or acc[1]:
        return
    names = [n for n in acc[0] if n not in implied]
    unknown = [p for p in params if p not in names]
    if unknown:
        parts = []
        for u in unknown:
            close = difflib.get_close_matches(u, names, n=1)
            parts.append(f"{u!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        raise ConfigError(
            f"{what} takes no parameter {', '.join(parts)}; its parameters: "
            f"{', '.join(names) or '(none)'}"
        )
    _check_flags(factory, params, what)


def _check_flags(factory: Callable[..., Any], params: Mapping[str, Any], what: str) -> None:
    """A parameter that is a flag (annotated ``bool``, or defaulting to True/False)
    takes a bool: the string ``"false"`` (a quoted YAML value, a CLI value that
    was not JSON) is truthy and would silently run the other setting."""
    try:
        sig = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    for name, value in params.items():
        p = sig.parameters.get(name)
        if p is None or isinstance(value, bool):
            continue
        flag = p.annotation in (bool, "bool") or isinstance(p.default, bool)
        if flag and not isinstance(value, bool):
            raise ConfigError(
                f"{what} parameter {name!r} is a flag: expected true or false, got "
                f"{type(value).__name__} {value!r}"
            )


def make_encoder(name: str, modality: str, params: Mapping[str, Any] | None = None) -> Any:
    """Build encoder ``name`` for ``modality``; a class serving both modalities
    (CLIP) takes ``modality`` as a keyword argument."""
    factory = ENCODERS.get(name)
    kw = dict(params or {})
    acc = _accepted(factory)
    if acc is not None and "modality" in acc[0]:
        kw.setdefault("modality", modality)
    return factory(**kw)


_ENCODERS_IN_USE: dict[str, Any] = {}


def shared_encoder(name: str, modality: str, params: Mapping[str, Any] | None = None) -> Any:
    """Like :func:`make_encoder`, one instance per (name, modality, params) in
    this process, so a sweep loads each model once."""
    key = json.dumps([name, modality, dict(params or {})], sort_keys=True, default=str)
    if key not in _ENCODERS_IN_USE:
        _ENCODERS_IN_USE[key] = make_encoder(name, modality, params)
    return _ENCODERS_IN_USE[key]


def make_method(config: ExperimentConfig, *, progress: bool = False) -> Any:
    """An unfitted method instance; a method that takes ``progress`` (a bar over
    its blocks, ASIF) follows the run's setting, and one that takes ``seed``
    (local CKA's base-set sample) the run's seed, unless the config sets them:
    a seed sweep varies every random choice of the fit."""
    factory = METHODS.get(config.method)
    kw = dict(config.method_params)
    acc = _accepted(factory)
    if acc is not None and "progress" in acc[0]:
        kw.setdefault("progress", progress)
    if acc is not None and "seed" in acc[0]:
        kw.setdefault("seed", config.seed)
    return factory(**kw)


def make_store(config: ExperimentConfig, *, owner: str | None = None) -> Any:
    """A store instance (it may connect to a server); a store that takes an
    ``owner`` token (collections owned by one run, MilvusStore) gets ``owner``
    unless the config sets it, so a resumed run owns its collections again."""
    factory = STORES.get(config.store)
    kw = dict(config.store_params)
    acc = _accepted(factory)
    if owner is not None and acc is not None and "owner" in acc[0]:
        kw.setdefault("owner", owner)
    return factory(**kw)


def preflight(config: ExperimentConfig, task_factory: Callable[..., Any]) -> None:
    """Every name and parameter of ``config`` checked, names and values; no work done.

    Names against the factories' signatures (with did-you-mean); values by
    building the task, the method and each perturbation (cheap: they only
    check their arguments) and by :func:`check_values`; the encoders against
    an embedding-only dataset; the embedding cache folder is writable.
    """
    check_params(DATASETS.get(config.dataset), config.dataset_params, f"dataset {config.dataset!r}")
    if config.support_dataset is not None:
        check_params(
            DATASETS.get(config.support_dataset),
            config.support_dataset_params,
            f"support dataset {config.support_dataset!r}",
        )
    for side in ("image", "text"):
        enc = getattr(config, f"{side}_encoder")
        if enc is not None:
            check_params(
                ENCODERS.get(enc),
                getattr(config, f"{side}_encoder_params"),
                f"{side} encoder {enc!r}",
                implied=("modality",),
            )
    check_params(METHODS.get(config.method), config.method_params, f"method {config.method!r}")
    check_params(STORES.get(config.store), config.store_params, f"store {config.store!r}")
    check_params(task_factory, config.task_params, f"task {config.task!r}")
    for name in config.perturbations:
        check_params(
            PERTURBATIONS.get(name),
            config.perturbation_params.get(name, {}),
            f"perturbation {name!r}",
        )
    check_values(config, task_factory)


@dataclass(frozen=True)
class LoadedData:
    """What an experiment evaluates on, and what it fits on.

    ``dataset`` provides the test split (and, without ``support_dataset``, the
    support pairs); ``support`` is the dataset the support pairs come from
    (``dataset`` itself by default). Providers encode both.
    """

    dataset: Any
    support: Any
    image_provider: Any
    text_provider: Any

    @property
    def support_is_external(self) -> bool:
        """The alignment is fitted on another dataset's pairs."""
        return self.support is not self.dataset


def _unpack(loaded: Any) -> tuple[Any, Any, Any]:
    if isinstance(loaded, tuple) and len(loaded) == 3:
        return loaded[0], loaded[1], loaded[2]
    return loaded, None, None


def load_data(config: ExperimentConfig, loader_cache: dict[str, Any]) -> LoadedData:
    """Load (or reuse from ``loader_cache``) the datasets and build the providers."""

    def load(name: str, params: Mapping[str, Any]) -> tuple[Any, Any, Any]:
        key = json.dumps(
            [name, {k: digest_value(v) or v for k, v in params.items()}],
            sort_keys=True,
            default=str,
        )
        if key not in loader_cache:
            loader_cache[key] = _unpack(DATASETS.get(name)(**params))
        return loader_cache[key]

    ds, img_p, txt_p = load(config.dataset, config.dataset_params)
    support = ds
    if config.support_dataset is not None:
        from imsearch_align.datasets import load_support_dataset

        key = json.dumps(
            ["support", config.support_dataset, config.to_dict()["support_dataset_params"]],
            sort_keys=True,
        )
        if key not in loader_cache:  # only its train split is read (test images never checked)
            loader_cache[key] = _unpack(
                load_support_dataset(config.support_dataset, config.support_dataset_params)
            )
        support = loader_cache[key][0]
        if config.image_encoder is None or config.text_encoder is None:
            raise ConfigError(
                "support_dataset needs image_encoder and text_encoder: the support pairs and the "
                "evaluated data must be encoded by the same models"
            )
    if config.image_encoder is not None:
        img_p = shared_encoder(config.image_encoder, "image", config.image_encoder_params)
    if config.text_encoder is not None:
        txt_p = shared_encoder(config.text_encoder, "text", config.text_encoder_params)
    if img_p is None or txt_p is None:
        side = "image_encoder" if img_p is None else "text_encoder"
        raise ConfigError(
            f"{side} is None but dataset {config.dataset!r} brings no embeddings of its own; "
            f"name an encoder (one of {', '.join(ENCODERS.names())})"
        )
    return LoadedData(ds, support, img_p, txt_p)


def support_pairs(ds: Any, n: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` seeded (text_id, image_id) pairs from the support split of ``ds``."""
    from imsearch_align.datasets.base import SUPPORT_SPLIT

    texts = ds.texts[ds.texts["split"] == SUPPORT_SPLIT]
    avail = len(texts)
    if avail == 0:
        raise ConfigError(
            f"dataset {ds.name!r} has no support pairs (split {SUPPORT_SPLIT!r} is empty); "
            "check its split parameters (imsearch-align list datasets "
            f"{ds.name}) or fit on another dataset with support_dataset"
        )
    if n is None:
        pick = np.arange(avail)
    else:
        if n > avail:
            raise ConfigError(
                f"n_support={n} is larger than the {avail} support pairs available in split "
                f"{SUPPORT_SPLIT!r} of dataset {ds.name!r}"
            )
        pick = np.sort(np.random.default_rng(seed).choice(avail, size=n, replace=False))
    return texts["text_id"].to_numpy()[pick], texts["image_id"].to_numpy()[pick]
