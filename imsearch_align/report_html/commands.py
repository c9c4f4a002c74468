"""The command line that made a result, from its recorded config, and secrets kept out of text.

Results record their config, not the command: :func:`eval_command` writes
the ``imsearch-align eval`` line that gives the same config (only the
fields that differ from the defaults, spelled by the CLI's own flags);
:func:`commands_for` writes one ``sweep`` line for results that form a
grid of methods x stores x support sizes, else one ``eval`` line each.
:func:`redact` (:func:`~imsearch_align.framework.secrets.redact_uris`) drops the
``user:password@`` of every URI in a text.
"""

from __future__ import annotations

import functools
import itertools
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from imsearch_align.experiment.flags import config_flags, json_or_str
from imsearch_align.framework.secrets import redact_uris as redact

__all__ = ["commands_for", "eval_command", "redact", "sweep_command"]

#: What a sweep varies, per cell: never part of its shared flags.
_AXES = ("method", "store", "n_support", "method_params", "store_params")


@functools.cache
def _defaults() -> dict[str, Any]:
    from imsearch_align.experiment.config import ExperimentConfig

    return ExperimentConfig().to_dict()


def _word(value: Any) -> str:
    """A ``KEY=VALUE`` value as the CLI reads it back (JSON where a plain word would not)."""

    if isinstance(value, str) and json_or_str(value) == value:
        return value
    return json.dumps(value)


def _flag_words(cf: Any, value: Any) -> list[str]:
    flag = f"--{cf.flag}"
    if cf.kind == "mapping":
        if cf.spec.scope == "name":
            return [
                w
                for name, kv in value.items()
                for k, v in kv.items()
                for w in (flag, f"{name}:{k}={_word(v)}")
            ]
        return [w for k, v in value.items() for w in (flag, f"{k}={_word(v)}")]
    if cf.kind == "list":
        return [flag, *(str(v) for v in value)] if value else []
    if cf.kind == "bool":
        return [flag if value else f"--no-{cf.flag}"]
    if value is None:
        return [flag, cf.spec.none_words[0]] if cf.spec.none_words else []
    return [flag, str(value)]


def _flags(config: Mapping[str, Any], skip: Sequence[str] = ()) -> list[str]:

    defaults = _defaults()
    out: list[str] = []
    for cf in config_flags():
        if cf.field in skip or cf.field not in config or config[cf.field] == defaults[cf.field]:
            continue
        out += _flag_words(cf, config[cf.field])
    return out


def _line(argv: list[str]) -> str:
    return redact(shlex.join(argv))


def eval_command(config: Mapping[str, Any]) -> str:
    """The ``imsearch-align eval`` line of a recorded config (``ExperimentConfig.to_dict()``)."""
    return _line(["imsearch-align", "eval", *_flags(config)])


def _per_name(configs: Sequence[Mapping[str, Any]], name: str, params: str) -> dict | None:
    """``name`` -> its parameters, or None when one name has two sets (not one sweep)."""
    out: dict[str, Any] = {}
    for c in configs:
        if out.setdefault(c[name], c[params]) != c[params]:
            return None
    return out


def sweep_command(configs: Sequence[Mapping[str, Any]]) -> str | None:
    """The ``imsearch-align sweep`` line whose grid is exactly ``configs``, or None."""
    if len(configs) < 2:
        return None
    base = {k: v for k, v in configs[0].items() if k not in _AXES}
    if any({k: v for k, v in c.items() if k not in _AXES} != base for c in configs):
        return None
    mp, sp = (
        _per_name(configs, "method", "method_params"),
        _per_name(configs, "store", "store_params"),
    )
    if mp is None or sp is None:
        return None
    ns = list(dict.fromkeys(c["n_support"] for c in configs))
    cells = {(c["method"], c["store"], c["n_support"]) for c in configs}
    if cells != set(itertools.product(mp, sp, ns)):
        return None
    argv = ["imsearch-align", "sweep", *_flags(base, skip=_AXES)]
    if ns != [_defaults()["n_support"]]:
        argv += ["--n-support", *("all" if n is None else str(n) for n in ns)]
    argv += ["--methods", *mp, "--stores", *sp]
    for flag, per_name in (("--method-param", mp), ("--store-param", sp)):
        argv += [
            w
            for n, kv in per_name.items()
            for k, v in kv.items()
            for w in (flag, f"{n}:{k}={_word(v)}")
        ]
    return _line(argv)


def commands_for(configs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The lines that made ``configs``: one sweep when they are its grid; else, per store
    setting, a sweep of its methods x support sizes where they form one, else one eval each."""
    unique = list({json.dumps(c, sort_keys=True): c for c in configs}.values())
    whole = sweep_command(unique)
    if whole:
        return [whole]
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for c in unique:
        rest = {k: v for k, v in c.items() if k not in ("method", "n_support", "method_params")}
        groups.setdefault(json.dumps(rest, sort_keys=True), []).append(c)
    lines: list[str] = []
    for group in groups.values():
        line = sweep_command(group)
        lines += [line] if line else [eval_command(c) for c in group]
    return list(dict.fromkeys(lines))
