"""How a config field is spelled on the command line, and how one word reads as a value.

Every field of :class:`~imsearch_align.experiment.config.ExperimentConfig` has one
flag (:func:`config_flags`), made from its annotation and its
:class:`~imsearch_align.experiment.config.Flag`. The CLI builds its parser from
these, and readers that write a result's command line back (the HTML report)
spell it with the same flags. :func:`json_or_str` is how a ``KEY=VALUE`` word
reads as a value.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from imsearch_align.experiment.config import ExperimentConfig, Flag

__all__ = ["ConfigFlag", "config_flags", "json_or_str"]

#: Python spellings of JSON's literals: ``--method-param equal_weights=False``
#: must not be the (truthy) string "False".
_PY_LITERALS = {"True": True, "False": False, "None": None}


def json_or_str(text: str) -> Any:
    """``text`` parsed as JSON (or a Python literal ``True``/``False``/``None``), else itself."""
    if text.strip() in _PY_LITERALS:
        return _PY_LITERALS[text.strip()]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


@dataclass(frozen=True)
class ConfigFlag:
    """One config field's flag: ``--flag``, its kind and the type of its values."""

    field: str
    flag: str  # without "--"
    kind: str  # "mapping", "list", "bool" or "value"
    item: type  # the value's type (a list's items'): str, int, float or bool
    spec: Flag

    @property
    def dest(self) -> str:
        """The attribute of the parsed arguments."""
        return self.flag.replace("-", "_")


def _item_type(tp: Any) -> type:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is tuple:
        tp = typing.get_args(tp)[0]
    return tp if tp in (int, float, bool) else str


def _kind(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (Mapping, dict) or tp is Mapping:
        return "mapping"
    if origin is tuple:
        return "list"
    return "bool" if tp is bool else "value"


@functools.cache
def config_flags() -> tuple[ConfigFlag, ...]:
    """Every config field's flag, in field order."""
    hints = typing.get_type_hints(ExperimentConfig)
    out = []
    for f in dataclasses.fields(ExperimentConfig):
        spec = f.metadata.get("flag", Flag())
        kind = _kind(hints[f.name])
        name = spec.name or (f.name.removesuffix("s") if kind == "mapping" else f.name)
        out.append(
            ConfigFlag(f.name, name.replace("_", "-"), kind, _item_type(hints[f.name]), spec)
        )
    return tuple(out)
