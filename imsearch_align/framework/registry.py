"""One small registry type, and one registry per kind of plug-in.

A registry maps a user-facing name (what goes on the command line) to a
factory. Registration happens where the plug-in is defined; the package's
modules that define plug-ins are imported lazily by :func:`load_builtins`,
so importing the registry never imports faiss, pymilvus or torch.
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "DATASETS",
    "ENCODERS",
    "METHODS",
    "PERTURBATIONS",
    "STORES",
    "Registry",
    "UnknownNameError",
]

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """An unknown registry name; the message lists close matches and valid names."""

    def __str__(self) -> str:  # KeyError would print the message inside quotes
        return str(self.args[0]) if self.args else ""


class Registry:
    """Name -> factory mapping with helpful errors.

    >>> r = Registry("thing")
    >>> @r.register("a")
    ... class A: ...
    >>> r.get("a") is A
    True
    """

    def __init__(self, kind: str, *, builtin_modules: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self._entries: dict[str, Any] = {}
        self._builtin_modules = builtin_modules
        self._loaded = False
        self._failed: dict[str, str] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers ``obj`` under ``name``; a duplicate raises."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} registry: name must be a non-empty string, got {name!r}")

        def deco(obj: T) -> T:
            if name in self._entries and self._entries[name] is not obj:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered (to {self._entries[name]!r})"
                )
            self._entries[name] = obj
            return obj

        return deco

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for mod in self._builtin_modules:
            try:
                importlib.import_module(mod)
            except ImportError as exc:
                # One broken plug-in module must not hide the others; its
                # error is shown when a name is not found.
                self._failed[mod] = f"{type(exc).__name__}: {exc}"

    def get(self, name: str) -> Any:
        """The factory registered as ``name``; unknown names raise with a hint."""
        self._ensure_loaded()
        try:
            return self._entries[name]
        except KeyError:
            valid = sorted(self._entries)
            close = difflib.get_close_matches(str(name), valid, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            broken = "".join(
                f"; module {m} failed to import ({e})" for m, e in self._failed.items()
            )
            raise UnknownNameError(
                f"unknown {self.kind} {name!r}.{hint} Valid names: {', '.join(valid) or '(none)'}{broken}"
            ) from None

    def names(self) -> list[str]:
        """All registered names, sorted."""
        self._ensure_loaded()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"


METHODS = Registry(
    "method",
    builtin_modules=(
        "imsearch_align.methods.csa",
        "imsearch_align.methods.asif",
        "imsearch_align.methods.cka",
        "imsearch_align.methods.procrustes",
        "imsearch_align.methods.linear",
        "imsearch_align.methods.identity",
    ),
)
STORES = Registry(
    "store",
    builtin_modules=(
        "imsearch_align.adapters.exact",
        "imsearch_align.adapters.faiss_store",
        "imsearch_align.adapters.milvus_store",
        "imsearch_align.adapters.lancedb_store",
    ),
)
ENCODERS = Registry("encoder", builtin_modules=("imsearch_align.adapters.encoders",))
DATASETS = Registry(
    "dataset", builtin_modules=("imsearch_align.datasets", "imsearch_align.datasets.synthetic")
)
PERTURBATIONS = Registry(
    "perturbation", builtin_modules=("imsearch_align.diagnostics.perturbations",)
)
