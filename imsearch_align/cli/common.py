"""What every command shares: the usage error (exit 2), argument value types, warnings, notes.

A value type turns one command-line word into a value or raises
``argparse.ArgumentTypeError`` with the message argparse prints.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from imsearch_align.experiment.flags import json_or_str

__all__ = [
    "UsageError",
    "json_or_str",
    "key_value",
    "name_or_none",
    "note",
    "positive_int",
    "warn",
]


class UsageError(Exception):
    """A user error found before any work: printed as ``error: ...``, exit 2."""


def key_value(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` (VALUE parsed as JSON when it is JSON, else a string);
    ``NAME:KEY=VALUE`` scopes it to one method/store in a sweep."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(
            f"expected KEY=VALUE (e.g. sim_dim=256 or uri=http://host:19530), got {text!r}"
        )
    return key.strip(), json_or_str(value)


def positive_int(text: str, alternative: str = "") -> int:
    """An integer >= 1; ``alternative`` names the word also accepted (in the message)."""
    hint = f" or {alternative!r}" if alternative else ""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a positive integer{hint}, got {text!r}"
        ) from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer{hint}, got {n}")
    return n


def name_or_none(text: str) -> str | None:
    """A name, or None for ``none``, ``null`` or an empty word (``--image-encoder none``)."""
    return None if text.lower() in ("none", "null", "") else text


def warn(msg: str) -> None:
    """Print ``warning: msg`` on stderr."""
    print(f"warning: {msg}", file=sys.stderr)


def note(msg: str) -> None:
    """Print ``note: msg`` on stderr: a choice made for the user, said once."""
    print(f"note: {msg}", file=sys.stderr)
