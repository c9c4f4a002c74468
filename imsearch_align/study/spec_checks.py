"""The study spec's value checks: everything a spec can be refused for without data.

:func:`check_spec` runs on construction of every
:class:`~imsearch_align.study.spec.StudySpec` (after its field types):
sources, counts, stores and their URI, methods, measures, distractors,
filters and the output folder; each refusal is one
:class:`StudySpecError` line naming the flag.
"""

from __future__ import annotations

import difflib
import math
import os
from pathlib import Path
from typing import Any

from imsearch_align.collection.filter_kinds import parse_filter
from imsearch_align.collection.settings import STORES
from imsearch_align.concurrency.limits import check_levels
from imsearch_align.experiment.deploy import check_delta
from imsearch_align.framework.errors import ConfigError
from imsearch_align.framework.measures import lookup, needs_vectors
from imsearch_align.framework.registry import DATASETS, METHODS, UnknownNameError
from imsearch_align.study.defaults import DIRECTIONS

__all__ = ["StudySpecError", "check_spec", "flag"]


class StudySpecError(ConfigError):
    """A study field with the wrong type or value (the message names the flag)."""


def flag(name: str) -> str:
    """The flag of spec field ``name`` (``--latency-queries``)."""
    return "--" + name.replace("_", "-")


def check_spec(spec: Any) -> None:
    """Every check that needs no data (the module docstring)."""

    sources = [f for f in ("data", "embeddings", "shapes") if getattr(spec, f) is not None]
    if len(sources) > 1:
        raise StudySpecError(
            f"give one of --data, --embeddings, --shapes; got {' and '.join(flag(s) for s in sources)}"
        )
    _positive(spec)
    for name in ("stores", "methods", "directions", "k"):
        if getattr(spec, name) is not None and not getattr(spec, name):
            raise StudySpecError(f"{flag(name)} is empty; give at least one value")
    for store in spec.stores or ():
        if store not in STORES:
            close = difflib.get_close_matches(store, list(STORES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise StudySpecError(
                f"--stores: unknown store {store!r}{hint}; choose from {', '.join(STORES)}"
            )
    for d in spec.directions:
        if d not in DIRECTIONS:
            raise StudySpecError(f"--directions: {d!r} is not one of {', '.join(DIRECTIONS)}")
    if spec.concurrency:
        try:
            check_levels(spec.concurrency)
        except (TypeError, ValueError) as exc:
            raise StudySpecError(f"--concurrency: {exc}") from None
    if not (math.isfinite(spec.concurrency_warmup) and spec.concurrency_warmup >= 0):
        raise StudySpecError(
            "--concurrency-warmup must be a finite number of seconds >= 0, "
            f"got {spec.concurrency_warmup}"
        )
    if not (math.isfinite(spec.concurrency_duration) and spec.concurrency_duration > 0):
        raise StudySpecError(
            "--concurrency-duration must be a finite number of seconds > 0, "
            f"got {spec.concurrency_duration}"
        )
    try:
        check_delta(spec.deploy_delta)
    except ValueError as exc:
        raise StudySpecError(str(exc)) from None
    served = [s for s in spec.store_modes() if STORES[s].needs_uri]
    if served and not spec.uri:
        raise StudySpecError(
            f"--stores {served[0]} needs --uri http://HOST:PORT (a running server)"
        )
    if spec.uri and not served:
        with_uri = ", ".join(n for n, m in STORES.items() if m.needs_uri)
        raise StudySpecError(
            f"--uri is for a store mode with a server ({with_uri}); an in-process mode keeps "
            "its data in --out"
        )
    for method in spec.methods:
        try:
            factory = METHODS.get(method)
        except UnknownNameError as exc:
            raise StudySpecError(f"--methods: {exc}") from None
        if getattr(factory, "sparse_output", False):
            raise StudySpecError(
                f"--methods {method}: it maps into a sparse space; the collection study takes "
                "dense aligned spaces (csa, procrustes, cka)"
            )
    for method in spec.method_params:
        if method not in spec.methods:
            raise StudySpecError(
                f"--method-param {method}:...: {method!r} is not in --methods "
                f"({', '.join(spec.methods)})"
            )
    _check_measures(spec)
    _check_distractors(spec)
    for value in spec.filters:
        try:
            parse_filter(value)
        except ValueError as exc:
            raise StudySpecError(f"--filters: {exc}") from None
    for name in ("out", "truth_cache", "cache_dir"):
        value = getattr(spec, name)
        if name == "cache_dir" and str(value).lower() == "none":
            continue
        _writable_folder(name, Path(value))


def _writable_folder(name: str, path: Path) -> None:
    """``path`` is a folder, or can be made one: its first existing ancestor is a folder
    this process may write in."""
    if path.exists():
        if not path.is_dir():
            raise StudySpecError(f"{flag(name)} {str(path)!r} is a file, not a folder")
        if not os.access(path, os.W_OK):
            raise StudySpecError(f"{flag(name)} {str(path)!r} is not writable")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise StudySpecError(
            f"{flag(name)} {str(path)!r} cannot be made: {str(parent)!r} is a file, not a folder"
        )
    if not os.access(parent, os.W_OK):
        raise StudySpecError(
            f"{flag(name)} {str(path)!r} cannot be made: {str(parent)!r} is not writable"
        )


def _positive(spec: Any) -> None:
    for name in ("n", "k"):
        values = getattr(spec, name) or ()
        if any(v < 1 for v in values):
            raise StudySpecError(f"{flag(name)} must be positive integers, got {min(values)}")
    if any(v < 0 for v in spec.sizes or ()):
        raise StudySpecError(f"--sizes must be distractor counts >= 0, got {min(spec.sizes)}")
    for name in ("queries", "batch", "latency_queries", "block_rows", "shapes", "repeats"):
        v = getattr(spec, name)
        if v is not None and v < 1:
            raise StudySpecError(f"{flag(name)} must be a positive integer, got {v}")


def _check_measures(spec: Any) -> None:

    for name in spec.measures or ():
        try:
            _, cut = lookup(name)
        except ValueError as exc:
            raise StudySpecError(f"--measures: {exc}") from None
        if needs_vectors(name):
            raise StudySpecError(
                f"--measures {name}: it needs the documents' vectors, which a cell does not keep"
            )
        if cut > max(spec.k):
            raise StudySpecError(
                f"--measures {name}: its cut-off {cut} is above the largest --k {max(spec.k)} "
                "(the exact truth is exact to that rank)"
            )


def _check_distractors(spec: Any) -> None:

    text = spec.distractors or ""
    if text.startswith("dataset:"):
        if spec.embeddings:
            raise StudySpecError("--distractors dataset:NAME needs encoders; --embeddings has none")
        try:
            DATASETS.get(text.split(":")[1])
        except UnknownNameError as exc:
            raise StudySpecError(f"--distractors: {exc}") from None
    elif text and not text.isdigit() and not Path(text).expanduser().is_file():
        raise StudySpecError(
            f"--distractors {text!r}: no such file (expected a count, a file or dataset:NAME)"
        )
    if text.isdigit() and spec.sizes and max(spec.sizes) > int(text):
        raise StudySpecError(
            f"--sizes {max(spec.sizes)} is more than the {int(text)} --distractors rows"
        )
