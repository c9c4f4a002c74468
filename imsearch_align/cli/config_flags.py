"""The flags of ``ExperimentConfig``'s fields on ``eval`` and ``sweep``, and the config they give.

One flag per field of :class:`~imsearch_align.experiment.config.ExperimentConfig`,
in field order, made from the field's annotation and its
:class:`~imsearch_align.experiment.config.Flag`: a field added to the config
is on the command line with nothing written here. A mapping is a repeatable
``--x-param KEY=VALUE``, a tuple takes one or more values, a bool is
``--x/--no-x``, anything else one value. :func:`config_mapping` merges a
``--config`` file with the flags given (flags win).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from imsearch_align.cli.common import UsageError, key_value, positive_int
from imsearch_align.experiment.config_file import ConfigFileError, read_config_file
from imsearch_align.experiment.flags import ConfigFlag, config_flags

__all__ = [
    "GIVEN",
    "ConfigFlag",
    "add_config_flags",
    "config_flags",
    "config_mapping",
    "given_flags",
]

#: The attribute of the parsed arguments holding the flags given on the command line.
GIVEN = "_given_flags"


# ----------------------------------------------------------------------------- parser


def value_type(field: str) -> Callable[[str], Any] | None:
    """What turns one word into a value of config field ``field`` (a sweep's axis uses it)."""
    (cf,) = [cf for cf in config_flags() if cf.field == field]
    return _value_type(cf)


def _value_type(cf: ConfigFlag) -> Callable[[str], Any] | None:
    """What turns one word into the field's value (or a list item): None keeps the word."""
    spec, words = cf.spec, cf.spec.none_words
    parse: Callable[[str], Any] | None = {int: int, float: float}.get(cf.item)
    if cf.item is int and spec.positive:
        parse = functools.partial(positive_int, alternative=words[0]) if words else positive_int
    if not words:
        return parse

    def value(text: str) -> Any:
        if text.lower() in words:
            return None
        return text if parse is None else parse(text)

    value.__name__ = getattr(
        parse, "__name__", cf.item.__name__
    )  # argparse's "invalid float value"
    return value


def _scoped_names() -> str:
    """The sweep axes a parameter can be scoped to: ``methods and stores``."""
    names = [
        cf.flag.removesuffix("-param") + "s" for cf in config_flags() if cf.spec.scope == "sweep"
    ]
    return " and ".join(names)


def _add_flag(g: Any, cf: ConfigFlag, *, sweep: bool) -> None:
    spec = cf.spec
    kw: dict[str, Any] = {"help": spec.help}
    if cf.kind == "mapping":
        kw.update(action="append", type=key_value, metavar=spec.metavar or "KEY=VALUE")
        if sweep and spec.scope == "sweep":
            note = f"NAME:KEY=VALUE for one name of --{cf.flag.removesuffix('-param')}s"
            kw["help"] = f"{spec.help}; {note}" if spec.help else note
    elif cf.kind == "bool":
        kw.update(action=argparse.BooleanOptionalAction, default=None)
    else:
        kw.update(type=_value_type(cf), metavar=spec.metavar, choices=spec.choices)
        if cf.kind == "list":
            kw["nargs"] = "+"
    g.add_argument(f"--{cf.flag}", **kw)


def add_config_flags(g: Any, *, axes: Mapping[str, Callable[[Any], None]] | None = None) -> None:
    """``--config``, then every config field's flag, in field order, to group ``g``.

    ``axes`` (a sweep): the fields a sweep varies, each with the function that
    adds its axis flags in the field's place; parameters that can be scoped
    to one name of an axis say so in their help.
    """
    g.add_argument("--config", metavar="FILE", help="YAML or JSON file of ExperimentConfig fields")
    for cf in config_flags():
        if axes is not None and cf.field in axes:
            axes[cf.field](g)
        else:
            _add_flag(g, cf, sweep=axes is not None)


# ----------------------------------------------------------------------------- the config


def given_flags(argv: Sequence[str]) -> set[str]:
    """Destinations of the flags that appear on the command line."""
    out = set()
    for a in argv:
        if a.startswith("--") and len(a) > 2:
            out.add(a[2:].split("=", 1)[0].replace("-", "_").removeprefix("no_"))
    return out


def read_config(path: str) -> dict[str, Any]:
    """The fields a ``--config`` file holds; an empty file, a directory, a key
    given twice or a YAML alias bomb is a usage error naming the file."""
    p = Path(path)
    try:
        data = read_config_file(p)
    except FileNotFoundError:
        raise UsageError(f"--config: file {str(p)!r} does not exist") from None
    except ConfigFileError as exc:
        if exc.problem is not None:
            raise UsageError(f"--config: {str(p)!r} {exc.problem}") from None
        raise UsageError(f"--config: cannot parse {str(p)!r}: {exc.reason}") from None
    except Exception as exc:
        raise UsageError(f"--config: cannot parse {str(p)!r}: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(
            f"--config: {str(p)!r} must hold a mapping of config fields, got {type(data).__name__}"
        )
    return data


def split_scoped(
    pairs: Sequence[tuple[str, Any]] | None,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``KEY=VALUE`` pairs apart from ``NAME:KEY=VALUE`` ones (by NAME)."""
    plain: dict[str, Any] = {}
    scoped: dict[str, dict[str, Any]] = {}
    for key, value in pairs or ():
        if ":" in key:
            name, _, k = key.partition(":")
            scoped.setdefault(name, {})[k] = value
        else:
            plain[key] = value
    return plain, scoped


def _set_named(args: argparse.Namespace, cf: ConfigFlag, data: dict[str, Any]) -> None:
    """A mapping of keyword arguments per name (``--perturbation-param typo:rate=0.2``)."""
    plain, scoped = split_scoped(getattr(args, cf.dest, None))
    if plain:
        raise UsageError(f"--{cf.flag}: expected NAME:KEY=VALUE, got {next(iter(plain))}=...")
    if scoped:
        base = dict(data.get(cf.field) or {})
        for name, kv in scoped.items():
            base[name] = {**base.get(name, {}), **kv}
        data[cf.field] = base


def _set_params(
    args: argparse.Namespace, cf: ConfigFlag, data: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """A ``KEY=VALUE`` mapping merged over the file's; returns its ``NAME:`` scoped pairs."""
    plain, scoped = split_scoped(getattr(args, cf.dest, None))
    if scoped and cf.spec.scope != "sweep":
        raise UsageError(f"--{cf.flag}: NAME:KEY=VALUE scoping is only for {_scoped_names()}")
    if scoped and args.command != "sweep":
        raise UsageError(f"--{cf.flag}: NAME:KEY=VALUE scoping is for sweep; use KEY=VALUE")
    if plain:
        base = data.get(cf.field) or {}
        if not isinstance(base, dict):
            raise UsageError(f"--config: {cf.field} must be a mapping, got {type(base).__name__}")
        data[cf.field] = {**base, **plain}
    return scoped


def config_mapping(
    args: argparse.Namespace, *, swept: Collection[str] = ()
) -> tuple[dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """The merged config mapping (file, then flags) and the scoped parameters of a sweep
    (by field); ``swept``: fields whose flags are a sweep's axes, not config values."""
    data = read_config(args.config) if args.config else {}
    given = getattr(args, GIVEN, set())
    params = []
    for cf in config_flags():
        value = getattr(args, cf.dest, None)
        if cf.field in swept:
            continue
        if cf.kind == "mapping":
            if cf.spec.scope == "name":
                _set_named(args, cf, data)
            else:
                params.append(cf)  # after every other flag, as their errors come last
        elif cf.kind == "list":
            if value is not None:
                data[cf.field] = list(value)
        elif value is not None or cf.dest in given:
            # 'none' encoders parse to None, so "given" is what tells them apart.
            data[cf.field] = value
    scoped = {cf.field: _set_params(args, cf, data) for cf in params}
    return data, scoped
