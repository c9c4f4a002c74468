"""``ExperimentConfig``: everything that defines one experiment, typed and checked.

Every field is validated on construction against its annotation, whether the
config comes from Python, a YAML/JSON file or the command line: a wrong type
raises ``ConfigError`` naming the field, the expected type and the value. A
lone value is accepted where a list is meant (``k_values: 10`` is ``(10,)``,
``directions: t2i`` is ``("t2i",)``), but a string is never split into
characters and a string is never a boolean (``ann_fidelity: "no"`` is an
error, not ``True``).

Values that cannot go into JSON (an in-memory DataFrame, a ``datasets``
Dataset, a numpy array, a long list) are recorded by a content digest in
:meth:`ExperimentConfig.to_dict` and in :meth:`ExperimentConfig.key`, so a
result file stays small and two different in-memory inputs never share a key.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import numbers
import os
import string
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEFAULT_OUTPUT_TEMPLATE",
    "DIRECTIONS",
    "ConfigError",
    "ExperimentConfig",
    "digest_value",
]

DEFAULT_OUTPUT_TEMPLATE = "{dataset}_{method}_{store}_{n}.json"
DIRECTIONS = ("t2i", "i2t")
#: Lists longer than this in a parameter are recorded by digest, not inline.
MAX_INLINE_LIST = 64


class ConfigError(ValueError):
    """A config field has the wrong type or value; the message names the field."""


# ----------------------------------------------------------------------------- digests


def digest_value(value: Any) -> dict[str, Any] | None:
    """A JSON record (type, size, ``sha256`` of the content) for a value JSON
    cannot hold inline: in-memory data (DataFrame, ``datasets`` Dataset, numpy
    array, PairedDataset: :func:`imsearch_align.datasets.describe_param_value`)
    or a list longer than :data:`MAX_INLINE_LIST`; None for anything else."""
    if isinstance(value, list | tuple) and len(value) > MAX_INLINE_LIST:
        blob = json.dumps([_plain(v) for v in value], default=str, sort_keys=True).encode()
        return {"type": "list", "len": len(value), "sha256": hashlib.sha256(blob).hexdigest()}
    if value is None or isinstance(
        value, str | bool | int | float | Mapping | list | tuple | os.PathLike | np.generic
    ):
        return None
    from imsearch_align.datasets import describe_param_value

    try:
        rec = describe_param_value(value)
    except TypeError as exc:
        raise ConfigError(
            f"cannot record a {type(value).__name__} in a config ({exc}); pass a path, a number, "
            "a string, a list, a mapping, a numpy array, a DataFrame or a datasets Dataset"
        ) from None
    return rec if isinstance(rec, dict) else None


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data: digests for what JSON cannot hold."""
    rec = digest_value(value)
    if rec is not None:
        return rec
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if value is None or isinstance(value, str | bool | int | float):
        return value
    raise ConfigError(
        f"cannot record a {type(value).__name__} in a config: pass a path, a number, a string, "
        "a list, a mapping, a numpy array, a DataFrame or a datasets Dataset"
    )


SECRET_WORDS = ("token", "password", "secret", "api_key", "apikey")


def _is_secret(key: str) -> bool:
    return any(w in key.lower() for w in SECRET_WORDS)


# ----------------------------------------------------------------------------- field checks


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin is tuple:
        return f"a list of {_type_name(typing.get_args(tp)[0])}"
    if origin in (Mapping, dict):
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _bad(name: str, tp: Any, value: Any) -> ConfigError:
    return ConfigError(
        f"config field {name!r} must be {_type_name(tp)}, got {type(value).__name__} {value!r}"
    )


def _coerce(name: str, tp: Any, value: Any) -> Any:
    """Check ``value`` against annotation ``tp``; return the canonical value."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return _coerce(name, a, value)
            except ConfigError:
                continue
        raise _bad(name, tp, value)
    if tp is bool:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        raise _bad(name, tp, value)
    if tp is int:
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
            raise _bad(name, tp, value)
        return int(value)
    if tp is float:
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            raise _bad(name, tp, value)
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise _bad(name, tp, value)
        return value
    if origin is tuple:
        (item,) = [a for a in typing.get_args(tp) if a is not Ellipsis]
        if isinstance(value, str | numbers.Number) and not isinstance(value, bool):
            value = [value]  # a lone value where a list is meant
        if not isinstance(value, list | tuple | np.ndarray):
            raise _bad(name, tp, value)
        try:
            return tuple(_coerce(name, item, v) for v in value)
        except ConfigError:
            raise ConfigError(
                f"config field {name!r} must be {_type_name(tp)}, got {value!r}"
            ) from None
    if origin in (Mapping, dict) or tp is Mapping:
        if not isinstance(value, Mapping):
            raise _bad(name, tp, value)
        return {str(k): v for k, v in value.items()}
    raise TypeError(f"ExperimentConfig: no check for the annotation of {name!r} ({tp!r})")


def _one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"config field {name!r} must be one of {list(allowed)}, got {value!r}{hint}"
        )


# ----------------------------------------------------------------------------- the config


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that defines one experiment.

    Attributes:
        dataset: a DATASETS name (``shapes``, ``flickr30k``, ``coco``,
            ``imagenet``, ``hf``, ``precomputed``, ``synthetic``...).
        dataset_params: keyword arguments of the dataset loader.
        support_dataset: fit the alignment on this dataset's support pairs
            instead of ``dataset``'s (for example COCO pairs, then classify
            ImageNet: the protocol of the ASIF and CSA papers); ``None`` uses
            ``dataset``'s own support split.
        support_dataset_params: keyword arguments of its loader.
        image_encoder / text_encoder: ENCODERS names; ``None`` uses the
            vectors an embedding-only dataset brings (precomputed, synthetic).
        image_encoder_params / text_encoder_params: their keyword arguments.
        method: a METHODS name (``csa``, ``asif``, ``cka``, ``procrustes``,
            ``linear``, ``identity``).
        method_params: the method's keyword arguments.
        store: a STORES name (``faiss``, ``exact``, ``milvus``, ``lancedb``, ``qdrant``...).
        store_params: the store's keyword arguments (``uri`` for Milvus).
        task: a TASKS name (``retrieval``, ``classification``, ``matching``,
            ``multilabel``, ``linear_probe``, ``captioning``).
        task_params: the task's keyword arguments (``imsearch-align list tasks``).
        n_support: support (image, caption) pairs the method is fitted on;
            ``None`` = every pair of the support split.
        seed: seed of the support sample, the bootstrap intervals and perturbations.
        k_values: cutoffs reported for every measure family.
        directions: retrieval directions, ``t2i`` and/or ``i2t``.
        ensemble: classification prompt handling, ``mean`` (normalise each
            prompt vector, average, normalise, as CLIP_benchmark, where the
            method's rows are unit-norm; the plain average of the prompt
            vectors, i.e. the mean of the prompts' similarities, for CSA and
            local CKA, whose inner product is not a cosine of rows) or ``best``.
        perturbations: PERTURBATIONS names applied to the queries before
            encoding (retrieval), searched against the same index.
        perturbation_params: per-name keyword arguments (``{"typo": {"rate": 0.2}}``).
        ann_fidelity: also search exactly and report the store's recall@k,
            computed from the true inner products of the ids it returned.
        diagnostics: embedding-space geometry of the raw and aligned test spaces.
        tie_tolerance: scores within this relative tolerance tie (chained);
            ``None``: documents with equal true scores tie (float64 scores of
            the vectors where the store's cannot order them, 1e-12 relative;
            see :mod:`imsearch_align.experiment.tie_aware`); ``0`` ties only
            equal scores.
        cache_dir: embedding cache folder (``None`` disables it).
        batch_size: queries per store call. encode_batch_size: items per encoder pass.
        workers: concurrent search threads.
        name: a free label stored in the result.
    """

    dataset: str = "shapes"
    dataset_params: Mapping[str, Any] = field(default_factory=dict)
    support_dataset: str | None = None
    support_dataset_params: Mapping[str, Any] = field(default_factory=dict)
    image_encoder: str | None = "efficientnet-lite0"
    image_encoder_params: Mapping[str, Any] = field(default_factory=dict)
    text_encoder: str | None = "sentence-transformers"
    text_encoder_params: Mapping[str, Any] = field(default_factory=dict)
    method: str = "csa"
    method_params: Mapping[str, Any] = field(default_factory=dict)
    store: str = "faiss"
    store_params: Mapping[str, Any] = field(default_factory=dict)
    task: str = "retrieval"
    task_params: Mapping[str, Any] = field(default_factory=dict)
    n_support: int | None = None
    seed: int = 0
    k_values: tuple[int, ...] = (1, 5, 10)
    directions: tuple[str, ...] = DIRECTIONS
    ensemble: str = "mean"
    perturbations: tuple[str, ...] = ()
    perturbation_params: Mapping[str, Any] = field(default_factory=dict)
    ann_fidelity: bool = False
    diagnostics: bool = False
    tie_tolerance: float | None = None
    cache_dir: str | None = ".cache/embeddings"
    batch_size: int = 1024
    encode_batch_size: int = 32
    workers: int = 2
    name: str = ""

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "cache_dir" and isinstance(value, os.PathLike):
                value = os.fspath(value)
            object.__setattr__(self, f.name, _coerce(f.name, hints[f.name], value))
        self._check_values()
        # The JSON record (digests of in-memory inputs) is computed once, now: a value
        # that cannot be recorded fails on construction, before any work.
        object.__setattr__(self, "_record", self._make_record())

    def _check_values(self) -> None:
        from imsearch_align.framework.validation import check_int

        def positive(name: str, value: int, high: int | None = None) -> None:
            try:
                check_int(value, name, low=1, high=high)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"config field {exc}") from None

        for name in ("dataset", "method", "store", "task"):
            if not getattr(self, name):
                raise ConfigError(f"config field {name!r} must be a non-empty name, got ''")
        if not self.k_values:
            raise ConfigError("config field 'k_values' must name at least one cutoff, got []")
        for k in self.k_values:
            positive("k_values", k, 16384)
        object.__setattr__(self, "k_values", tuple(sorted(set(self.k_values))))
        if not self.directions:
            raise ConfigError(
                f"config field 'directions' must name some of {list(DIRECTIONS)}, got []"
            )
        for d in self.directions:
            _one_of("directions", d, DIRECTIONS)
        object.__setattr__(self, "directions", tuple(dict.fromkeys(self.directions)))
        _one_of("ensemble", self.ensemble, ("mean", "best"))
        if self.n_support is not None:
            positive("n_support", self.n_support)
        if self.tie_tolerance is not None and not (
            math.isfinite(self.tie_tolerance) and self.tie_tolerance >= 0
        ):
            raise ConfigError(
                f"config field 'tie_tolerance' must be a finite number >= 0 (or null for the "
                f"default), got {self.tie_tolerance!r}"
            )
        if self.seed < 0:
            raise ConfigError(f"config field 'seed' must be >= 0, got {self.seed}")
        for name in ("batch_size", "encode_batch_size", "workers"):
            positive(name, getattr(self, name))
        for pname, value in self.perturbation_params.items():
            if not isinstance(value, Mapping):
                raise ConfigError(
                    f"config field 'perturbation_params' must map a perturbation name to its "
                    f"keyword arguments, got {pname!r}: {value!r}"
                )
        unknown = sorted(set(self.perturbation_params) - set(self.perturbations))
        if unknown:
            raise ConfigError(
                f"config field 'perturbation_params' names {unknown}, which are not in "
                f"perturbations {list(self.perturbations)}"
            )
        if self.perturbations and self.task != "retrieval":
            raise ConfigError(f"perturbations apply to the retrieval task, got task={self.task!r}")
        if self.support_dataset is None and self.support_dataset_params:
            raise ConfigError(
                "config field 'support_dataset_params' is set but 'support_dataset' is not"
            )

    # -- (de)serialisation ---------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        """Names of every config field."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExperimentConfig:
        """Build from a mapping (a YAML/JSON file); an unknown key is an error."""
        if not isinstance(d, Mapping):
            raise ConfigError(f"config must be a mapping of fields, got {type(d).__name__}")
        names = cls.field_names()
        unknown = sorted(set(d) - set(names))
        if unknown:
            hints = []
            for u in unknown:
                close = difflib.get_close_matches(str(u), names, n=1)
                hints.append(f"{u!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ConfigError(
                f"config has unknown key(s) {', '.join(hints)}; valid keys: {', '.join(names)}"
            )
        return cls(**dict(d))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ExperimentConfig:
        """Load a ``.json`` or ``.yaml``/``.yml`` config file."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"config file {str(p)!r} does not exist")
        text = p.read_text(encoding="utf-8-sig")
        try:
            if p.suffix.lower() in (".yaml", ".yml"):
                import yaml

                data = yaml.safe_load(text)
            else:
                data = json.loads(text)
        except Exception as exc:
            raise ConfigError(f"cannot parse config file {str(p)!r}: {exc}") from None
        return cls.from_dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping; values JSON cannot hold are recorded by digest,
        secrets (``token``, ``password``, ``api_key``...) as ``"***"``."""
        return json.loads(json.dumps(self._record))

    def _make_record(self) -> dict[str, Any]:
        out = {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        for name, value in out.items():
            if name.endswith("_params") and isinstance(value, dict):
                out[name] = {k: "***" if _is_secret(k) else v for k, v in value.items()}
        return out

    def replace(self, **changes: Any) -> ExperimentConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """Short stable hash of the config (names result files and checkpoints)."""
        blob = json.dumps(self._record, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    # -- output names ----------------------------------------------------------
    def template_fields(self) -> dict[str, str]:
        """The values an output template can use, by field name."""
        return {
            "dataset": self.dataset,
            "method": self.method,
            "store": self.store,
            "n": "all" if self.n_support is None else str(self.n_support),
            "seed": str(self.seed),
            "task": self.task,
            "image_encoder": self.image_encoder or "precomputed",
            "text_encoder": self.text_encoder or "precomputed",
            "key": self.key(),
            "name": self.name or "run",
        }

    def output_name(self, template: str = DEFAULT_OUTPUT_TEMPLATE) -> str:
        """Fill an output template (see :func:`check_template`); ``/`` inside a
        value becomes ``-``, ``/`` in the template makes sub-folders."""
        check_template(template)
        values = {k: str(v).replace("/", "-") for k, v in self.template_fields().items()}
        return template.format(**values)


TEMPLATE_FIELDS = (
    "dataset",
    "method",
    "store",
    "n",
    "seed",
    "task",
    "image_encoder",
    "text_encoder",
    "key",
    "name",
)


def check_template(template: Any) -> str:
    """Validate an output file-name template before any work.

    Named fields only (``{dataset} {method} {store} {n} {seed} {task}
    {image_encoder} {text_encoder} {key} {name}``), no positional ``{}``, no
    attribute or index access, no conversion; the name ends in ``.json``; a
    relative path (sub-folders are created).
    """
    if not isinstance(template, str) or not template:
        raise ConfigError(f"output template must be a non-empty string, got {template!r}")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"output template {template!r} is malformed: {exc}") from None
    for _, fname, spec, conv in parsed:
        if fname is None:
            continue
        if fname == "" or fname.isdigit():
            raise ConfigError(
                f"output template {template!r} has a positional field {{{fname}}}; use named "
                f"fields: {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}"
            )
        if fname not in TEMPLATE_FIELDS:
            close = difflib.get_close_matches(fname, TEMPLATE_FIELDS, n=1)
            hint = f" (did you mean {{{close[0]}}}?)" if close else ""
            raise ConfigError(
                f"output template {template!r} uses unknown field {{{fname}}}{hint}; valid "
                f"fields: {', '.join(TEMPLATE_FIELDS)}"
            )
        if conv or spec:
            raise ConfigError(
                f"output template {template!r}: field {{{fname}}} takes no conversion or format spec"
            )
    if not template.endswith(".json"):
        raise ConfigError(
            f"output template {template!r} must end in '.json' (build and plot read *.json files)"
        )
    if Path(template).is_absolute() or ".." in Path(template).parts:
        raise ConfigError(
            f"output template {template!r} must be a relative path inside the output folder"
        )
    return template
