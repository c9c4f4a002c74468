"""Plug-in loading: the modules that register names, imported when a registry is first used.

A name in a :class:`~imsearch_align.framework.registry.Registry` comes from
one of these, all loaded lazily (importing this module imports none of them):

1. **built-in** packages of ``imsearch_align``: :func:`import_packages`
   imports every public module under a kind's package (a module whose name
   starts with ``_`` holds no registration and is skipped), so a built-in
   registers by its ``@STORES.register("name")`` decorator alone;
2. **entry points** of installed distributions, in the group
   ``imsearch_align.<kind>s``: :func:`entry_point_refs` reads their metadata
   only (``importlib.metadata.entry_points``); the registry imports one when
   its name is first looked up;
3. modules named in the ``IMSEARCH_ALIGN_PLUGINS`` environment variable
   (:data:`ENV_VAR`, separated by commas or ``os.pathsep``);
4. modules the CLI's ``--plugin MODULE`` passes to :func:`load_plugins`.

A plug-in that cannot be used raises (or is recorded as) a :class:`PluginError`:
:class:`PluginLoadError`, :class:`PluginConflictError` or
:class:`PluginProtocolError`. While a plug-in is imported, :func:`registering_as`
tells the registry where its registrations come from.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import re
import threading
from collections.abc import Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUILTIN",
    "ENV_VAR",
    "LOCK",
    "EntryPointRef",
    "PluginConflictError",
    "PluginError",
    "PluginLoadError",
    "PluginProtocolError",
    "builtin_name_message",
    "conflict_message",
    "current_origin",
    "default_origin",
    "describe_error",
    "entry_point_refs",
    "failures_text",
    "how_to_add",
    "import_packages",
    "load_env_plugins",
    "load_plugins",
    "plugin_failures",
    "plugin_modules_from_env",
    "registering_as",
    "registers_nothing_message",
]

#: Environment variable naming plug-in modules to import on a registry's first use.
ENV_VAR = "IMSEARCH_ALIGN_PLUGINS"

#: The origin of a name registered by a module of this package.
BUILTIN = "built-in"

#: Guards every registry and the plug-in bookkeeping below (re-entrant: a
#: plug-in imported under it registers names).
LOCK = threading.RLock()

#: Where a registration being made comes from (set while a plug-in is imported).
_ORIGIN: ContextVar[str | None] = ContextVar("imsearch_align_registry_origin", default=None)
#: Plug-in modules imported by :func:`load_plugins`: module -> source.
_PLUGIN_MODULES: dict[str, str] = {}
#: Plug-in modules that failed to import: module -> "Type: message".
_PLUGIN_FAILURES: dict[str, str] = {}


class PluginError(ValueError):
    """A plug-in cannot be used; the message names it, where it comes from and why."""


class PluginLoadError(PluginError):
    """A plug-in module or entry point failed to import."""


class PluginConflictError(PluginError):
    """Two plug-ins (distributions or modules) provide the same name."""


class PluginProtocolError(PluginError, TypeError):
    """A plug-in does not satisfy its kind's protocol (a method or attribute is missing)."""


@dataclass(frozen=True)
class EntryPointRef:
    """An entry point found in a distribution's metadata, not imported yet.

    Attributes:
        ep: the ``importlib.metadata.EntryPoint``.
        dist: the distribution's name (None when metadata does not say).
        version: the distribution's version.
    """

    ep: Any  # importlib.metadata.EntryPoint
    dist: str | None
    version: str | None

    @property
    def label(self) -> str:
        """The origin shown by ``imsearch-align list``: ``"<dist> <version> (entry point)"``."""
        if self.dist:
            return f"{self.dist} {self.version} (entry point)"
        return f"entry point {self.ep.value}"

    @property
    def where(self) -> str:
        """The distribution and the entry point's line, for error messages."""
        dist = self.label.removesuffix(" (entry point)")
        return f"{dist}, entry point {self.ep.name} = {self.ep.value}"


def describe_error(exc: BaseException) -> str:
    """``"ErrorType: message"``, the form every recorded failure takes."""
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def registering_as(label: str) -> Iterator[None]:
    """Within the block, registrations made by non-built-in code have origin ``label``."""
    token = _ORIGIN.set(label)
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def current_origin() -> str | None:
    """The origin set by the enclosing :func:`registering_as` (None outside one)."""
    return _ORIGIN.get()


def default_origin(obj: Any) -> str:
    """:data:`BUILTIN` for an object defined in this package, else ``"registered by <module>"``."""
    mod = getattr(obj, "__module__", None) or ""
    if mod == "imsearch_align" or mod.startswith("imsearch_align."):
        return BUILTIN
    return f"registered by {mod or 'unknown module'}"


def import_packages(packages: Iterable[str], skip: Iterable[str] = ()) -> dict[str, str]:
    """Import each package and every public module under it, recursively.

    A module or package whose own name starts with ``_`` is skipped (private
    helpers and kernels hold no registration; ``tests/framework/test_registry.py``
    checks that none does), and so is each subpackage named in ``skip``
    (another kind's package inside this one). A name that is a plain module
    is just imported. One module that fails does not stop the others.

    Returns:
        ``{"module <name>": "ErrorType: message"}`` for each module that failed.
    """
    failed: dict[str, str] = {}
    skipped = set(skip)

    def visit(name: str) -> None:
        try:
            mod = importlib.import_module(name)
        except Exception as exc:  # one broken module must not hide the others
            failed[f"module {name}"] = describe_error(exc)
            return
        for info in pkgutil.iter_modules(getattr(mod, "__path__", None) or [], f"{name}."):
            if not info.name.rpartition(".")[2].startswith("_") and info.name not in skipped:
                visit(info.name)

    for package in packages:
        visit(package)
    return failed


def entry_point_refs(eps: Iterable[Any]) -> list[EntryPointRef]:
    """``importlib.metadata.entry_points(group=...)`` as refs, each distribution once.

    Reads metadata only (a distribution found twice on the path counts once).
    """
    refs: list[EntryPointRef] = []
    seen: set[tuple[str, str, str | None]] = set()
    for ep in eps:
        dist = getattr(ep, "dist", None)
        dname = dist.metadata["Name"] if dist is not None else None
        key = (ep.name, ep.value, dname)
        if key in seen:  # the same distribution found twice on the path
            continue
        seen.add(key)
        refs.append(EntryPointRef(ep, dname, dist.version if dist is not None else None))
    return refs


def plugin_modules_from_env(value: str | None = None) -> list[str]:
    """Module names in ``value`` (default: ``$IMSEARCH_ALIGN_PLUGINS``).

    Split on ``','`` and ``os.pathsep``; blanks dropped.
    """
    value = os.environ.get(ENV_VAR, "") if value is None else value
    parts = re.split(f"[,{re.escape(os.pathsep)}]", value)
    return [p.strip() for p in parts if p.strip()]


def load_plugins(
    modules: Iterable[str], *, source: str = "--plugin", strict: bool = False
) -> dict[str, str]:
    """Import plug-in modules, which register names with ``@STORES.register(...)`` and the like.

    Args:
        modules: importable module names (``"my_pkg.stores"``); a module is
            imported once per process, later calls skip it.
        source: how the modules were named, shown by ``Registry.origin``
            (``"--plugin"``, ``"IMSEARCH_ALIGN_PLUGINS"``).
        strict: raise :class:`PluginLoadError` (after trying every module)
            when one failed; otherwise failures are only recorded.

    Returns:
        ``{module: "ErrorType: message"}`` for the modules that failed in this call.
    """
    if isinstance(modules, str):
        raise TypeError(f"modules must be a list of module names, got the string {modules!r}")
    failed: dict[str, str] = {}
    with LOCK:
        for mod in modules:
            if not isinstance(mod, str) or not mod.strip():
                raise ValueError(f"plug-in module names must be non-empty strings, got {mod!r}")
            mod = mod.strip()
            if mod in _PLUGIN_MODULES:
                continue
            if mod in _PLUGIN_FAILURES:
                failed[mod] = _PLUGIN_FAILURES[mod]
                continue
            try:
                with registering_as(f"plug-in module {mod} ({source})"):
                    importlib.import_module(mod)
            except Exception as exc:  # any error: one broken plug-in must not stop the others
                _PLUGIN_FAILURES[mod] = failed[mod] = describe_error(exc)
            else:
                _PLUGIN_MODULES[mod] = source
    if strict and failed:
        raise PluginLoadError(
            "plug-in module(s) failed to import: "
            + "; ".join(f"{m} ({e})" for m, e in failed.items())
        )
    return failed


def load_env_plugins() -> None:
    """Import the modules named in :data:`ENV_VAR` (each once per process)."""
    mods = plugin_modules_from_env()
    if mods:
        load_plugins(mods, source=ENV_VAR)


def failures_text(failed: dict[str, str]) -> str:
    """``failed`` (a registry's ``{what: error}``) and the failed plug-in modules, for a message.

    Each failure is one ``"; ..."`` clause: ``"; module X failed to import (E)"``,
    ``"; store 'n' from D: E"``, ``"; plug-in module M failed to import (E)"``.
    """
    text = "".join(
        f"; {label} failed to import ({e})" if label.startswith("module ") else f"; {label}: {e}"
        for label, e in failed.items()
    )
    return text + "".join(
        f"; plug-in module {m} failed to import ({e})" for m, e in _PLUGIN_FAILURES.items()
    )


def how_to_add(kind: str, group: str, attr: str, name: Any) -> str:
    """The sentence telling how to add a ``kind`` named ``name`` from another package.

    ``group`` is the entry-point group, ``attr`` the registry's public name (``"STORES"``).
    """
    return (
        f" To add a {kind} from another package: declare an entry point in the group "
        f"'{group}' of its pyproject.toml ([project.entry-points.\"{group}\"] "
        f'{name} = "your_pkg.module:YourClass"), or pass --plugin your_pkg.module (a module '
        f"that calls @{attr}.register({str(name)!r})), or list such modules in "
        f"{ENV_VAR} (comma-separated)."
    )


def conflict_message(kind: str, name: str, who: list[str]) -> str:
    """The message of a ``kind`` named ``name`` that several plug-ins (``who``) provide."""
    return (
        f"{kind} {name!r} is provided by {len(who)} plug-ins: "
        f"{'; '.join(who)}. Uninstall all but one "
        "(pip uninstall <distribution>) or rename one entry point"
    )


def builtin_name_message(kind: str, name: str, obj: Any) -> str:
    """The message of a plug-in registering ``obj`` under a built-in ``kind``'s ``name``."""
    return (
        f"{kind} {name!r} is a built-in {kind}; a plug-in cannot replace it "
        f"(got {obj!r} from {current_origin() or default_origin(obj)}): register it under "
        "another name"
    )


def registers_nothing_message(
    kind: str, name: str, ref: EntryPointRef, module: str, attr: str
) -> str:
    """The message of an entry point naming a ``module`` that registers no ``kind`` ``name``."""
    return (
        f"{kind} {name!r} from {ref.where}: the module {module} registers "
        f"no {kind} named {name!r}; point the entry point at the class "
        f"({module}:YourClass) or register it with @{attr}.register({name!r})"
    )


def plugin_failures() -> dict[str, str]:
    """Plug-in modules that failed to import, with errors: ``{module: "Type: message"}``.

    Modules named by ``--plugin`` and by ``IMSEARCH_ALIGN_PLUGINS`` (loaded first).
    """
    load_env_plugins()
    return dict(_PLUGIN_FAILURES)
