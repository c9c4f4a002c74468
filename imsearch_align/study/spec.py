"""The collection study's typed spec: every choice of a study, checked on construction.

A :class:`StudySpec` is frozen and checked field by field when it is made, as
:class:`~imsearch_align.experiment.config.ExperimentConfig` is: a field of
the wrong type, a value out of range, an unknown store, method or index
setting raises :class:`StudySpecError` (a
:class:`~imsearch_align.framework.errors.ConfigError`: exit 2 on the command
line) naming the field, before any data is loaded. :meth:`StudySpec.from_dict`
refuses an unknown key with "did you mean"; :meth:`StudySpec.from_file` reads
YAML or JSON. Each field's ``help`` is the help of its flag on
``imsearch-align study`` (:mod:`imsearch_align.study.flags`), so the command
line and the spec never drift apart.

``None`` in ``stores``, ``sizes``, ``queries``, ``latency_queries`` and
``index`` means the default for ``quick`` or a full study
(:mod:`imsearch_align.study.defaults`); the resolved values are
:meth:`StudySpec.store_modes`, :meth:`~StudySpec.query_count`,
:meth:`~StudySpec.latency_count` and :meth:`~StudySpec.index_settings`.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imsearch_align.collection.settings import STORES, IndexSetting, SettingError, parse_index
from imsearch_align.experiment.config_file import read_config_file
from imsearch_align.framework.secrets import redact_uri
from imsearch_align.study.defaults import (
    DIRECTIONS,
    FULL_SIZES,
    QUICK_SIZES,
    default_index,
    default_stores,
)
from imsearch_align.study.spec_checks import StudySpecError, check_spec, flag

__all__ = ["StudySpec", "StudySpecError"]


def _f(default: Any, help: str, metavar: str | None = None, choices: Any = None) -> Any:
    meta = {"help": help, "metavar": metavar, "choices": choices}
    if isinstance(default, dict):
        return field(default_factory=dict, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class StudySpec:
    """One collection study (see the module docstring; each field's ``help``)."""

    data: str | None = _f(None, "local Flickr30k folder", "DIR")
    embeddings: str | None = _f(None, "folder with image.npy, text.npy (and text_image.npy)", "DIR")
    shapes: int | None = _f(None, "offline: N rendered shape images", "N_IMAGES")
    shapes_root: str | None = _f(None, "where --shapes writes its folder", "DIR")
    offline: bool = _f(False, "offline encoders (implied by --shapes)")
    methods: tuple[str, ...] = _f(("csa", "procrustes"), "alignment methods (dense outputs)")
    method_params: Mapping[str, Mapping[str, Any]] = _f(
        {}, "a method's parameters over the study's defaults: METHOD:KEY=VALUE", "METHOD:KEY=VALUE"
    )
    n: tuple[int, ...] | None = _f(None, "support sizes (default: every support pair)")
    stores: tuple[str, ...] | None = _f(
        None,
        f"{', '.join(STORES)} (default faiss; --quick: faiss and milvus-lite when installed)",
    )
    uri: str | None = _f(None, "Milvus server URI for --stores milvus")
    index: tuple[str, ...] | None = _f(
        None, "index settings (default: each store's grid)", "STORE:TYPE[:PARAMS]"
    )
    distractors: str | None = _f(None, "a count (synthetic), a file, or dataset:NAME[:SPLIT]")
    sizes: tuple[int, ...] | None = _f(None, "distractor counts (default 0 100k 1M)")
    directions: tuple[str, ...] = _f(("t2i",), "query directions", choices=DIRECTIONS)
    queries: int | None = _f(None, "sampled queries (default 10000; --quick 1000)")
    k: tuple[int, ...] = _f((1, 5, 10), "cut-offs")
    measures: tuple[str, ...] | None = _f(
        None,
        "ranking measures of every cell, any of `imsearch-align list metrics` with a cut-off "
        "up to the largest --k (default HitRate at each --k, nDCG at the largest)",
        "MEASURE",
    )
    filters: tuple[float | str, ...] = _f(
        (),
        "filtered search: shares of the collection kept (e.g. 0.5 0.1 0.01) and filter kinds "
        "by name (label: each query within its item's class; joins by itself on a dataset "
        "with class labels)",
        "SHARE|KIND",
    )
    concurrency: tuple[int, ...] = _f(
        (), "concurrent single-query clients on each largest-size build (e.g. 1 2 4 8 16)",
        "CLIENTS",
    )  # fmt: skip
    concurrency_duration: float = _f(5.0, "measured seconds per concurrency level", "S")
    concurrency_warmup: float = _f(
        1.0, "seconds each concurrency level searches unmeasured first", "S"
    )
    control: bool = _f(
        False,
        "also search every built index with as many in-distribution control queries "
        "of the indexed modality (in no collection, no test query): the cross-modal cost",
    )
    deploy_delta: float = _f(
        0.01, "how far below exact (at 95 %) a deployable setting's HitRate may be", "D"
    )
    batch: int = _f(100, "queries per batched search call")
    latency_queries: int | None = _f(None, "single queries timed (1000; --quick 100)")
    repeats: int | None = _f(
        None, "counted timed passes per cell, after a warm-up pass (3; --quick 1)"
    )
    block_rows: int = _f(8192, "rows per inserted block")
    image_encoder: str | None = _f(None, "ENCODERS name of the image encoder")
    image_model: str | None = _f(None, "model name or path for the image encoder")
    text_encoder: str | None = _f(None, "ENCODERS name of the text encoder")
    text_model: str | None = _f(None, "model name or path for the text encoder")
    seed: int = _f(0, "seeds the query sample, distractors and latency sample")
    quick: bool = _f(False, "20k distractors, small sweeps")
    out: str = _f("benchmarks/results/collection", "output folder", "DIR")
    cache_dir: str = _f(".cache/embeddings", "embedding cache folder ('none': no cache)", "DIR")
    truth_cache: str = _f(".cache/collection_truth", "exact ground-truth cache folder", "DIR")
    skip_existing: bool = _f(False, "reuse clean cells in --out")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(
                self, f.name, _typed(f.name, getattr(self, f.name), _hints()[f.name])
            )
        check_spec(self)
        self.index_settings()  # every index setting parses (SettingError -> StudySpecError)

    # -- resolved values ---------------------------------------------------
    def store_modes(self) -> tuple[str, ...]:
        """``stores``, else the default (FAISS; with ``quick`` Milvus Lite too when installed)."""
        return tuple(dict.fromkeys(self.stores or default_stores(self.quick)))

    def query_count(self) -> int:
        """Sampled queries: ``queries``, else 10,000 (``quick``: 1,000)."""
        return self.queries or (1000 if self.quick else 10_000)

    def latency_count(self) -> int:
        """Single queries timed: ``latency_queries``, else 1,000 (``quick``: 100)."""
        return self.latency_queries or (100 if self.quick else 1000)

    def repeat_count(self) -> int:
        """Counted timed passes per cell: ``repeats``, else 3 (``quick``: 1)."""
        return self.repeats or (1 if self.quick else 3)

    def size_grid(self) -> list[int] | None:
        """Distractor counts: ``sizes``; else the default when ``distractors`` is not set
        (None: 0 and every row of the distractor source)."""
        if self.sizes:
            return sorted(dict.fromkeys(self.sizes))
        if not self.distractors:
            return list(QUICK_SIZES if self.quick else FULL_SIZES)
        return None

    def index_settings(self) -> list[IndexSetting]:
        """The index settings: ``index``, else each store's default grid."""
        stores = self.store_modes()
        texts = self.index or tuple(t for s in stores for t in default_index(s, self.quick))
        out = []
        for text in dict.fromkeys(texts):
            try:
                settings = parse_index(text)
            except SettingError as exc:
                raise StudySpecError(str(exc)) from None
            for s in settings:
                if s.store not in stores:
                    raise StudySpecError(f"--index {text!r}: store {s.store} is not in --stores")
                out.append(s)
        return out

    def ks(self) -> tuple[int, ...]:
        """The cut-offs, ascending and distinct."""
        return tuple(sorted(set(self.k)))

    # -- (de)serialisation -------------------------------------------------
    @classmethod
    def field_names(cls) -> list[str]:
        """Names of every spec field."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StudySpec:
        """From a mapping (a YAML/JSON file); an unknown key is an error with "did you mean"."""
        if not isinstance(d, Mapping):
            raise StudySpecError(
                f"a study spec must be a mapping of fields, got {type(d).__name__}"
            )
        names = cls.field_names()
        unknown = sorted(set(map(str, d)) - set(names))
        if unknown:
            hints = []
            for u in unknown:
                close = difflib.get_close_matches(u.replace("-", "_"), names, n=1)
                hints.append(f"{u!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise StudySpecError(
                f"study spec has unknown field(s) {', '.join(hints)}; valid fields: "
                f"{', '.join(names)}"
            )
        return cls(**{str(k): v for k, v in d.items()})

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> StudySpec:
        """A ``.yaml``/``.yml`` or ``.json`` study file."""
        return cls.from_dict(read_config_file(path))

    def to_dict(self) -> dict[str, Any]:
        """Every field, JSON-ready (tuples as lists; the URI's password masked)."""
        out: dict[str, Any] = {}
        for name in self.field_names():
            v = getattr(self, name)
            if isinstance(v, tuple):
                v = list(v)
            elif isinstance(v, Mapping):
                v = {k: dict(p) for k, p in v.items()}
            out[name] = v
        out["uri"] = None if self.uri is None else redact_uri(self.uri)
        return out

    def replace(self, **changes: Any) -> StudySpec:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def command(self) -> list[str]:
        """``imsearch-align study`` with the flags that give this spec (defaults left out,
        the URI's password masked): what a cell records as its command."""
        words = ["imsearch-align", "study"]
        for f in dataclasses.fields(self):
            v, default = getattr(self, f.name), _default(f)
            if v == default:
                continue
            flag = "--" + f.name.replace("_", "-")
            if isinstance(v, bool):
                words.append(flag if v else "--no-" + f.name.replace("_", "-"))
            elif isinstance(v, Mapping):
                for m, params in v.items():
                    for key, val in params.items():
                        words += ["--method-param", f"{m}:{key}={val}"]
            elif isinstance(v, tuple):
                words += [flag, *map(str, v)]
            else:
                words += [flag, redact_uri(v) if f.name == "uri" else str(v)]
        return words


def _default(f: dataclasses.Field) -> Any:
    return {} if f.default is dataclasses.MISSING else f.default


# ----------------------------------------------------------------------------- field types


def _hints() -> dict[str, Any]:
    global _HINTS
    if _HINTS is None:
        _HINTS = typing.get_type_hints(StudySpec)
    return _HINTS


_HINTS: dict[str, Any] | None = None


def _typed(name: str, value: Any, tp: Any) -> Any:
    """``value`` as field ``name``'s type (a list becomes a tuple, an int a float where a
    float is expected); anything else raises naming the field, the type and the value."""
    optional = typing.get_origin(tp) in (typing.Union, types.UnionType)
    if optional:
        if value is None:
            return None
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
    origin = typing.get_origin(tp)
    if origin is tuple:
        item = typing.get_args(tp)[0]
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            raise StudySpecError(
                f"{flag(name)} must be a list of {getattr(item, '__name__', item)} values, "
                f"got {value!r}"
            )
        return tuple(_scalar(name, v, item) for v in value)
    if origin in (Mapping, dict) or tp is Mapping:
        if not isinstance(value, Mapping) or not all(
            isinstance(p, Mapping) for p in value.values()
        ):
            raise StudySpecError(
                f"{flag(name)} must map each method to a mapping of its parameters, got {value!r}"
            )
        return types.MappingProxyType({str(k): dict(p) for k, p in value.items()})
    return _scalar(name, value, tp)


def _scalar(name: str, value: Any, tp: Any) -> Any:
    types_ = (
        typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    )
    if float in types_ and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if bool in types_:
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, types_) and not isinstance(value, bool)
    if not ok:
        want = " or ".join(t.__name__ for t in types_)
        raise StudySpecError(
            f"{flag(name)} must be {'an' if want[0] in 'aeiou' else 'a'} {want}, "
            f"got {value!r} ({type(value).__name__})"
        )
    return value
