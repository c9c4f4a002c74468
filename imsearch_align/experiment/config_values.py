"""The values of config fields: checked against their annotation, recorded as JSON.

:func:`coerce` checks one value against a field's annotation and returns its
canonical form (a lone value where a list is meant becomes a one-item tuple;
a string is never split into characters nor taken for a boolean); a wrong
value raises :class:`ConfigError` naming the field, the expected type and
the value. :func:`digest_value` and :func:`plain` turn values into JSON:
in-memory inputs and long lists become content digests, so a result file
stays small and two different inputs never share a config key.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import numbers
import os
import types
import typing
from collections.abc import Mapping
from typing import Any

import numpy as np

from imsearch_align.framework.errors import ConfigError

__all__ = ["ConfigError", "coerce", "digest_value", "is_secret", "one_of", "plain"]

#: Lists longer than this in a parameter are recorded by digest, not inline.
MAX_INLINE_LIST = 64
SECRET_WORDS = ("token", "password", "secret", "api_key", "apikey")


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


def _coerce_union(name: str, tp: Any, value: Any) -> Any:
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    for a in args:
        if a is type(None):
            continue
        try:
            return coerce(name, a, value)
        except ConfigError:
            continue
    raise _bad(name, tp, value)


def _coerce_scalar(name: str, tp: Any, value: Any) -> Any:
    """``value`` as ``bool``, ``int``, ``float`` or ``str`` (a bool is no number here)."""
    is_bool = isinstance(value, bool | np.bool_)
    if tp is bool:
        ok = is_bool
    elif tp is int:
        ok = not is_bool and isinstance(value, numbers.Integral)
    elif tp is float:
        ok = not is_bool and isinstance(value, numbers.Real)
    else:
        ok = isinstance(value, str)
    if not ok:
        raise _bad(name, tp, value)
    return value if tp is str else tp(value)


def _coerce_tuple(name: str, tp: Any, value: Any) -> tuple[Any, ...]:
    (item,) = [a for a in typing.get_args(tp) if a is not Ellipsis]
    if isinstance(value, str | numbers.Number) and not isinstance(value, bool):
        value = [value]  # a lone value where a list is meant
    if not isinstance(value, list | tuple | np.ndarray):
        raise _bad(name, tp, value)
    try:
        return tuple(coerce(name, item, v) for v in value)
    except ConfigError:
        raise ConfigError(
            f"config field {name!r} must be {_type_name(tp)}, got {value!r}"
        ) from None


def coerce(name: str, tp: Any, value: Any) -> Any:
    """Check ``value`` against annotation ``tp`` of field ``name``; return the canonical value."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return _coerce_union(name, tp, value)
    if tp in (bool, int, float, str):
        return _coerce_scalar(name, tp, value)
    if origin is tuple:
        return _coerce_tuple(name, tp, value)
    if origin in (Mapping, dict) or tp is Mapping:
        if not isinstance(value, Mapping):
            raise _bad(name, tp, value)
        return {str(k): v for k, v in value.items()}
    raise TypeError(f"ExperimentConfig: no check for the annotation of {name!r} ({tp!r})")


def one_of(name: str, value: str, allowed: tuple[str, ...]) -> None:
    """Raise ``ConfigError`` (with "did you mean") unless ``value`` is in ``allowed``."""
    if value not in allowed:
        close = difflib.get_close_matches(value, allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(
            f"config field {name!r} must be one of {list(allowed)}, got {value!r}{hint}"
        )


# ----------------------------------------------------------------------------- JSON records


def digest_value(value: Any) -> dict[str, Any] | None:
    """A JSON record (type, size, ``sha256`` of the content) for a value JSON
    cannot hold inline: in-memory data (DataFrame, ``datasets`` Dataset, numpy
    array, PairedDataset: :func:`imsearch_align.datasets.describe_param_value`)
    or a list longer than :data:`MAX_INLINE_LIST`; None for anything else."""
    if isinstance(value, list | tuple) and len(value) > MAX_INLINE_LIST:
        blob = json.dumps([plain(v) for v in value], default=str, sort_keys=True).encode()
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


def plain(value: Any) -> Any:
    """``value`` as JSON-ready data: digests for what JSON cannot hold."""
    rec = digest_value(value)
    if rec is not None:
        return rec
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
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


def is_secret(key: str) -> bool:
    """A parameter name that holds a secret (``token``, ``password``, ``api_key``...)."""
    return any(w in key.lower() for w in SECRET_WORDS)
