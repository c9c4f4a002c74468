"""``ExperimentConfig``: everything that defines one experiment, typed and checked.

Every field is validated on construction against its annotation, whether the
config comes from Python, a YAML/JSON file or the command line: a wrong type
raises ``ConfigError`` naming the field, the expected type and the value. A
lone value is accepted where a list is meant (``k_values: 10`` is ``(10,)``,
``directions: t2i`` is ``("t2i",)``), but a string is never split into
characters and a string is never a boolean (``ann_fidelity: "no"`` is an
error, not ``True``).

A field and its command-line flag are one place: each field's
:class:`Flag` (its ``metadata["flag"]``) says how ``eval`` and ``sweep``
spell it, and the CLI builds the flag from it and the field's annotation.

Values that cannot go into JSON (an in-memory DataFrame, a ``datasets``
Dataset, a numpy array, a long list) are recorded by a content digest in
:meth:`ExperimentConfig.to_dict` and in :meth:`ExperimentConfig.key`, so a
result file stays small and two different in-memory inputs never share a key
(:mod:`.config_values`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imsearch_align.experiment.config_file import read_config_file
from imsearch_align.experiment.config_values import (
    ConfigError,
    coerce,
    digest_value,
    is_secret,
    one_of,
    plain,
)
from imsearch_align.experiment.templates import DEFAULT_OUTPUT_TEMPLATE, check_template
from imsearch_align.framework.secrets import redact_uri

__all__ = [
    "DEFAULT_OUTPUT_TEMPLATE",
    "DIRECTIONS",
    "ConfigError",
    "ExperimentConfig",
    "Flag",
    "digest_value",
]

DIRECTIONS = ("t2i", "i2t")
ENSEMBLES = ("mean", "best")


# ----------------------------------------------------------------------------- flags


def _recorded(key: str, value: Any) -> Any:
    """A parameter's value as recorded: a secret key masked, a URI without its user info."""
    if is_secret(key):
        return "***"
    if isinstance(value, str) and "://" in value:
        return redact_uri(value)
    return value


@dataclass(frozen=True)
class Flag:
    """How a config field is spelled on the command line of ``eval`` and ``sweep``.

    The CLI makes the flag's kind from the field's annotation: a mapping is a
    repeatable ``--x-param KEY=VALUE``, a tuple takes one or more values, a
    bool is ``--x/--no-x``, anything else one value.

    Attributes:
        help: the flag's help text (None: none shown).
        name: the flag without ``--``; default the field's name with ``-``
            for ``_`` (a mapping ``x_params``: ``x-param``).
        metavar: the value's placeholder in the help (None: argparse's).
        choices: the values allowed.
        positive: integers must be >= 1.
        none_words: words that mean None (``none`` for an encoder).
        scope: mappings only: ``""`` takes ``KEY=VALUE``; ``"sweep"`` also
            ``NAME:KEY=VALUE`` in a sweep, for one name of its ``--<x>s``;
            ``"name"`` always ``NAME:KEY=VALUE`` (keyword arguments per name).
    """

    help: str | None = None
    name: str = ""
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    positive: bool = False
    none_words: tuple[str, ...] = ()
    scope: str = ""


def _field(default: Any, **flag: Any) -> Any:
    """A config field: ``default`` (``{}``: a fresh dict per config) and its :class:`Flag`."""
    meta = {"flag": Flag(**flag)}
    if isinstance(default, dict):
        if default:
            raise TypeError(f"a mapping config field defaults to an empty mapping, got {default!r}")
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


_NONE = ("none", "null", "")
_ENCODER_HELP = "ENCODERS name; 'none' uses the dataset's own embeddings"
_TIE_HELP = "scores within this relative tolerance tie ('none', the default: equal true scores)"


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
            see :mod:`imsearch_align.framework.ranking.tie_aware`); ``0`` ties only
            equal scores.
        cache_dir: embedding cache folder (``None`` disables it).
        batch_size: queries per store call. encode_batch_size: items per encoder pass.
        workers: concurrent search threads.
        name: a free label stored in the result.
    """

    dataset: str = _field("shapes", help="DATASETS name (imsearch-align list datasets [NAME])")
    dataset_params: Mapping[str, Any] = _field(
        {}, help="dataset loader argument (repeatable; VALUE parsed as JSON when possible)"
    )
    support_dataset: str | None = _field(
        None, metavar="NAME", help="fit the alignment on this dataset's pairs (zero-shot protocol)"
    )
    support_dataset_params: Mapping[str, Any] = _field({})
    image_encoder: str | None = _field(
        "efficientnet-lite0", metavar="NAME", none_words=_NONE, help=_ENCODER_HELP
    )
    image_encoder_params: Mapping[str, Any] = _field({})
    text_encoder: str | None = _field(
        "sentence-transformers", metavar="NAME", none_words=_NONE, help=_ENCODER_HELP
    )
    text_encoder_params: Mapping[str, Any] = _field({})
    method: str = _field("csa", help="METHODS name (csa, asif, cka, procrustes, linear, identity)")
    method_params: Mapping[str, Any] = _field(
        {}, scope="sweep", help="method argument (repeatable)"
    )
    store: str = _field("faiss", help="STORES name (faiss, exact, milvus, lancedb, qdrant...)")
    store_params: Mapping[str, Any] = _field(
        {}, scope="sweep", help="store argument, e.g. uri=http://127.0.0.1:19530"
    )
    task: str = _field("retrieval", metavar="NAME", help="TASKS name (imsearch-align list tasks)")
    task_params: Mapping[str, Any] = _field(
        {}, help="task argument, e.g. candidates=100 for matching"
    )
    n_support: int | None = _field(
        None,
        metavar="N",
        positive=True,
        none_words=("all", "none"),
        help="support pairs ('all' = every pair)",
    )
    seed: int = _field(0)
    k_values: tuple[int, ...] = _field(
        (1, 5, 10), name="k", metavar="K", positive=True, help="cutoffs (default 1 5 10)"
    )
    directions: tuple[str, ...] = _field(DIRECTIONS, choices=DIRECTIONS)
    ensemble: str = _field("mean", choices=ENSEMBLES, help="classification prompt ensembling")
    perturbations: tuple[str, ...] = _field(
        (),
        metavar="NAME",
        help="query perturbations to also evaluate (imsearch-align list perturbations)",
    )
    perturbation_params: Mapping[str, Any] = _field(
        {},
        scope="name",
        metavar="NAME:KEY=VALUE",
        help="a perturbation's argument, e.g. typo:rate=0.2 (repeatable)",
    )
    ann_fidelity: bool = _field(
        False,
        help="also report the store's recall@k against exact search (true inner products)",
    )
    diagnostics: bool = _field(False, help="embedding-space geometry of the raw and aligned spaces")
    tie_tolerance: float | None = _field(None, metavar="TOL", none_words=_NONE, help=_TIE_HELP)
    cache_dir: str | None = _field(
        ".cache/embeddings",
        metavar="DIR",
        none_words=_NONE,
        help="embedding cache ('none' disables)",
    )
    batch_size: int = _field(1024, metavar="N", positive=True, help="queries per store call")
    encode_batch_size: int = _field(32, metavar="N", positive=True, help="items per encoder pass")
    workers: int = _field(2, metavar="N", positive=True, help="concurrent search threads")
    name: str = _field("", help="a free label stored in the result")

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "cache_dir" and isinstance(value, os.PathLike):
                value = os.fspath(value)
            object.__setattr__(self, f.name, coerce(f.name, hints[f.name], value))
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
            one_of("directions", d, DIRECTIONS)
        object.__setattr__(self, "directions", tuple(dict.fromkeys(self.directions)))
        one_of("ensemble", self.ensemble, ENSEMBLES)
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
        """Load a ``.json`` or ``.yaml``/``.yml`` config file
        (:func:`~imsearch_align.experiment.config_file.read_config_file`: an empty
        file, a key given twice or an alias bomb is a ``ConfigError``)."""
        return cls.from_dict(read_config_file(path))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping; values JSON cannot hold are recorded by digest,
        secrets (``token``, ``password``, ``api_key``...) as ``"***"``."""
        return json.loads(json.dumps(self._record))

    def _make_record(self) -> dict[str, Any]:
        """The config as results record it: secrets masked (a ``token``-like key's
        value, the user info of any URI in a parameter), so no file holds them."""
        out = {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}
        for name, value in out.items():
            if name.endswith("_params") and isinstance(value, dict):
                out[name] = {k: _recorded(k, v) for k, v in value.items()}
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
