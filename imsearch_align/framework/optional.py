"""Importing optional dependencies: one helper that names the extra to install.

Every third-party library outside the core dependencies is imported where it
is used, through :func:`require`, so a missing one raises an ``ImportError``
that says what needed it and the ``pip install`` line that brings it::

    qdrant_client = require("qdrant_client", "qdrant", "QdrantStore", needs="qdrant-client")
    # ImportError: QdrantStore needs qdrant-client: pip install 'imsearch-align[qdrant]'

:func:`maybe_import` is for a library whose absence only drops a detail
(``None`` instead of an error).
"""

from __future__ import annotations

import sys
from types import ModuleType

__all__ = ["maybe_import", "require"]


def _import(module: str) -> ModuleType:
    # What an ``import`` statement does (through ``builtins.__import__``, so a
    # test that patches it to hide a library sees the same as with the statement).
    __import__(module)
    return sys.modules[module]


def require(
    module: str,
    extra: str | None,
    feature: str,
    *,
    needs: str | None = None,
    pip: str | None = None,
    note: str = "",
) -> ModuleType:
    """Import ``module``, or raise ImportError naming ``feature`` and how to install it.

    The message is ``"{feature} needs {needs}: pip install {pip}{note}"``.

    Args:
        module: the module to import (dotted names allowed); it is returned.
        extra: the ``imsearch-align`` extra that brings it: ``pip`` defaults to
            ``'imsearch-align[{extra}]'``.
        feature: what needs it (``"QdrantStore"``, ``"retrieval captioning BLEU"``).
        needs: what to name as missing (default: ``module``'s top-level
            package; ``""``: nothing, the message reads ``"{feature} needs: ..."``).
        pip: the install argument instead of the extra's (``"'numba>=0.59'"``).
        note: text after the install line; ``{exc}`` in it is replaced by the
            import error (``" (import failed: {exc})"``).

    Raises:
        ImportError: the import failed; the original error is its ``__cause__``.
    """
    try:
        return _import(module)
    except ImportError as exc:
        what = module.split(".")[0] if needs is None else needs
        spec = pip if pip is not None else f"'imsearch-align[{extra}]'"
        raise ImportError(
            f"{feature} needs{' ' + what if what else ''}: pip install {spec}"
            + note.replace("{exc}", str(exc))
        ) from exc


def maybe_import(module: str) -> ModuleType | None:
    """``module`` imported, or None when it (or a library it needs) is not installed."""
    try:
        return _import(module)
    except ImportError:
        return None
