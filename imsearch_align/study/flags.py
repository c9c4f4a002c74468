"""The flags of ``imsearch-align study``: one per :class:`~imsearch_align.study.spec.StudySpec`
field, made from the field's annotation and its ``help`` metadata.

A field added to the spec is on the command line with nothing written here:
a tuple takes one or more values (repeatable: the values add up), a bool is
``--x/--no-x``, ``method_params`` a repeatable ``--method-param
METHOD:KEY=VALUE``, anything else one value. Every flag's default is
*absent*, so :func:`spec_mapping` knows what was given: the spec's own
defaults apply, a ``--config`` file's fields come next and the flags given
win.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

from imsearch_align.experiment.flags import json_or_str
from imsearch_align.study.spec import StudySpec

__all__ = ["add_spec_flags", "spec_mapping"]


def _method_param(text: str) -> tuple[str, str, Any]:
    """``METHOD:KEY=VALUE`` (VALUE parsed as JSON when it is JSON)."""
    head, sep, value = text.partition("=")
    method, colon, key = head.partition(":")
    if not sep or not colon or not method.strip() or not key.strip():
        raise argparse.ArgumentTypeError(
            f"expected METHOD:KEY=VALUE (e.g. csa:sim_dim=256), got {text!r}"
        )
    return method.strip(), key.strip(), json_or_str(value)


def _number_or_word(text: str) -> float | str:
    """A number where the word is one (``0.5``), else the word (``label``)."""
    try:
        return float(text)
    except ValueError:
        return text


def _base_type(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
    return tp


def add_spec_flags(g: Any) -> None:
    """``--config``, then one flag per spec field, in field order, to parser or group ``g``."""
    g.add_argument("--config", metavar="FILE", help="YAML or JSON study file (StudySpec fields); "
                   "flags given on the command line win")  # fmt: skip
    hints = typing.get_type_hints(StudySpec)
    for f in dataclasses.fields(StudySpec):
        tp, meta = _base_type(hints[f.name]), f.metadata
        kw: dict[str, Any] = {
            "help": (meta.get("help") or "").replace("%", "%%") or None,
            "default": argparse.SUPPRESS,
        }  # argparse formats help with %
        flag = "--" + f.name.replace("_", "-")
        if typing.get_origin(tp) in (Mapping, dict) or tp is Mapping:
            flag = "--method-param"
            kw.update(action="append", type=_method_param, dest=f.name,
                      metavar=meta.get("metavar"))  # fmt: skip
        elif tp is bool:
            kw.update(action=argparse.BooleanOptionalAction)
        elif typing.get_origin(tp) is tuple:
            item = typing.get_args(tp)[0]
            item = item if isinstance(item, type) else _number_or_word
            kw.update(nargs="+", action="extend", type=item,
                      metavar=meta.get("metavar"), choices=meta.get("choices"))  # fmt: skip
        else:
            kw.update(type=tp, metavar=meta.get("metavar"), choices=meta.get("choices"))
        g.add_argument(flag, **kw)


def spec_mapping(
    args: argparse.Namespace, from_file: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The spec's fields: those of ``from_file`` (a ``--config`` file), then the flags given."""
    out = dict(from_file or {})
    for name in StudySpec.field_names():
        if not hasattr(args, name):
            continue
        value = getattr(args, name)
        if name == "method_params":
            merged: dict[str, dict[str, Any]] = {
                m: dict(p) for m, p in (out.get(name) or {}).items()
            }
            for method, key, v in value:
                merged.setdefault(method, {})[key] = v
            value = merged
        out[name] = value
    return out
