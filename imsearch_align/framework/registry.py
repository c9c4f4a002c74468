"""The ``Registry`` type and one registry per kind of plug-in.

A registry maps a user-facing name (what goes on the command line) to a
factory: ``METHODS``, ``STORES``, ``ENCODERS``, ``DATASETS``, ``TASKS``,
``PERTURBATIONS``. A built-in registers by its decorator alone
(``@STORES.register("name")``): on a registry's first use (``get``,
``names``, ``in``) it imports every public module of its kind's package
(``imsearch_align.adapters`` for stores), so importing this module never
imports faiss, pymilvus or torch. Plug-ins (entry points of the group
``imsearch_align.<kind>s``, ``--plugin`` modules, ``IMSEARCH_ALIGN_PLUGINS``)
are loaded by :mod:`imsearch_align.framework.plugins`; one that fails is
recorded and reported when its name is used (:meth:`Registry.failures`),
never hiding the other names. :meth:`Registry.origin` says where each name
comes from, for ``imsearch-align list``.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.metadata
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from imsearch_align.framework import plugins
from imsearch_align.framework.plugins import (
    BUILTIN,
    PluginConflictError,
    PluginError,
    PluginLoadError,
    PluginProtocolError,
)
from imsearch_align.framework.protocol_checks import (
    encoder_problems,
    method_problems,
    store_protocol_problems,
)

__all__ = [
    "BUILTIN",
    "DATASETS",
    "ENCODERS",
    "METHODS",
    "PERTURBATIONS",
    "STORES",
    "TASKS",
    "PluginConflictError",
    "PluginError",
    "PluginLoadError",
    "PluginProtocolError",
    "Registry",
    "RegistryEntry",
    "UnknownNameError",
]

T = TypeVar("T")


class UnknownNameError(KeyError, ValueError):
    """An unknown registry name; the message lists close matches, valid names, how to add one."""

    def __str__(self) -> str:  # KeyError would print the message inside quotes
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class RegistryEntry:
    """One row of :meth:`Registry.listing`.

    Attributes:
        name: the registry name.
        origin: where it comes from (see :meth:`Registry.origin`).
        obj: the registered factory, or None when it cannot be used.
        error: why it cannot be used (import error, conflict, protocol), or None.
    """

    name: str
    origin: str
    obj: Any = None
    error: str | None = None

    @property
    def summary(self) -> str:
        """The first line of the factory's docstring ('' when none)."""
        doc = (getattr(self.obj, "__doc__", None) or "").strip().splitlines()
        return doc[0].strip() if doc and self.obj is not None else ""


class Registry:
    """Name -> factory mapping with lazy plug-in loading and helpful errors.

    Args:
        kind: what the registry holds, singular (``"store"``), used in messages.
        packages: built-in packages imported on first use with every public
            module under them (:func:`~imsearch_align.framework.plugins.import_packages`);
            a plain module is just imported.
        skip: subpackages of ``packages`` not walked (another kind's package).
        group: entry-point group read on first use (e.g. ``"imsearch_align.stores"``);
            None = no entry points.
        attr: the registry's public name, used in messages (default ``KIND + "S"``).
        check: ``check(obj) -> list of problems``: the protocol check applied to
            each name when it is first used.

    >>> r = Registry("thing")
    >>> @r.register("a")
    ... class A: ...
    >>> r.get("a") is A
    True
    """

    def __init__(
        self,
        kind: str,
        *,
        packages: tuple[str, ...] = (),
        skip: tuple[str, ...] = (),
        group: str | None = None,
        attr: str | None = None,
        check: Callable[[Any], list[str]] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self.attr = attr or f"{kind.upper()}S"
        self._entries: dict[str, Any] = {}
        self._origins: dict[str, str] = {}
        self.packages = packages
        self.skip = skip
        self._check = check
        self._loaded = False
        self._walked = False
        #: label -> error, for everything that failed (modules, entry points, protocol)
        self._failed: dict[str, str] = {}
        #: entry points found but not imported yet: name -> refs (several = conflict)
        self._pending: dict[str, list[plugins.EntryPointRef]] = {}
        #: names that cannot be used: name -> (exception, [(origin, error)])
        self._broken: dict[str, tuple[PluginError, list[tuple[str, str]]]] = {}
        self._checked: set[str] = set()

    # -- registration --------------------------------------------------------------
    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers ``obj`` under ``name``; a duplicate raises.

        A registration made by a module outside this registry's built-in
        packages (and outside ``imsearch_align``) is a plug-in's: the built-ins
        are walked first, and a built-in's name is refused
        (:class:`PluginConflictError`), whichever was imported first.
        """
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} registry: name must be a non-empty string, got {name!r}")
        caller = sys._getframe(1).f_globals.get("__name__") or ""

        def deco(obj: T) -> T:
            builtin = self._is_builtin_module(caller)
            if not builtin:
                self._walk_builtins()  # a plug-in never gets a built-in's name
            with plugins.LOCK:
                taken = self._entries.get(name, obj)
                if taken is not obj and not builtin and self._origins.get(name) == BUILTIN:
                    raise PluginConflictError(plugins.builtin_name_message(self.kind, name, obj))
                if taken is not obj:
                    raise ValueError(
                        f"{self.kind} {name!r} is already registered (to "
                        f"{taken!r}, {self._origins.get(name, BUILTIN)})"
                    )
                self._entries[name] = obj
                self._origins.setdefault(name, self._origin_of(obj, caller, builtin))
                self._checked.discard(name)
            return obj

        return deco

    def _is_builtin_module(self, module: str) -> bool:
        """A module of ``imsearch_align`` or of this registry's built-in packages."""
        return any(
            module == pkg or module.startswith(f"{pkg}.")
            for pkg in ("imsearch_align", *self.packages)
        )

    @staticmethod
    def _origin_of(obj: Any, caller: str, builtin: bool) -> str:
        """Where a registration of ``obj`` made by module ``caller`` comes from."""
        if builtin:
            return BUILTIN
        origin = plugins.default_origin(obj)
        if plugins.current_origin() is not None:
            return str(plugins.current_origin())
        if origin == BUILTIN:  # a built-in class registered by other code
            return f"registered by {caller or 'unknown module'}"
        return origin

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a plug-in registered for a while, e.g. by a test);
        an unknown name raises :class:`UnknownNameError`."""
        with plugins.LOCK:
            if name not in self._entries:
                raise UnknownNameError(f"{self.kind} {name!r} is not registered")
            del self._entries[name]
            self._origins.pop(name, None)
            self._checked.discard(name)

    # -- loading -------------------------------------------------------------------------
    def _walk_builtins(self) -> None:
        """Import the built-in packages once (before any plug-in registers a name)."""
        if self._walked:
            return
        with plugins.LOCK:
            if self._walked:
                return
            self._walked = True
            # One broken module must not hide the others; its error is shown
            # when a name is not found and by failures().
            self._failed.update(plugins.import_packages(self.packages, self.skip))

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with plugins.LOCK:
            if self._loaded:
                return
            self._loaded = True
            self._walk_builtins()
            plugins.load_env_plugins()
            if self.group:
                self._discover()

    def _discover(self) -> None:
        try:
            eps = importlib.metadata.entry_points(group=self.group)
        except Exception as exc:  # broken metadata of some distribution
            self._failed[f"entry points {self.group}"] = plugins.describe_error(exc)
            return
        for ref in plugins.entry_point_refs(eps):
            ep = ref.ep
            if self._origins.get(ep.name) == BUILTIN:
                self._failed[f"{self.kind} {ep.name!r} from {ref.where}"] = (
                    f"ignored: {ep.name!r} is a built-in {self.kind}; pick another entry-point name"
                )
                continue
            self._pending.setdefault(ep.name, []).append(ref)

    def _break(self, name: str, exc: PluginError, rows: list[tuple[str, str]]) -> PluginError:
        self._broken[name] = (exc, rows)
        self._failed[f"{self.kind} {name!r}"] = str(exc)
        return exc

    def _conflict(self, name: str, who: list[tuple[str, str]]) -> PluginError:
        """Record that several plug-ins provide ``name``: ``who`` = (origin, description)."""
        msg = plugins.conflict_message(self.kind, name, [w for _, w in who])
        return self._break(name, PluginConflictError(msg), [(o, msg) for o, _ in who])

    def _load_entry_point(self, name: str) -> None:
        refs = self._pending.pop(name)
        before = self._entries.get(name)
        if len(refs) > 1:
            who = [(r.label, r.where) for r in refs]
            if before is not None:
                who.insert(0, (self._origins.get(name, BUILTIN),) * 2)
            raise self._conflict(name, who)
        ref = refs[0]
        try:
            with plugins.registering_as(ref.label):
                obj = ref.ep.load()
        except Exception as exc:
            error = plugins.describe_error(exc)
            msg = f"{self.kind} {name!r} from {ref.where} failed to import: {error}"
            raise self._break(name, PluginLoadError(msg), [(ref.label, msg)]) from exc
        if inspect.ismodule(obj):
            if name not in self._entries:
                msg = plugins.registers_nothing_message(
                    self.kind, name, ref, obj.__name__, self.attr
                )
                raise self._break(name, PluginLoadError(msg), [(ref.label, msg)])
            obj = self._entries[name]
            if before is not None and getattr(before, "__module__", None) != ref.ep.module:
                who = [(self._origins.get(name, BUILTIN),) * 2, (ref.label, ref.where)]
                raise self._conflict(name, who)
        elif before is not None and before is not obj:
            # registered by other code (a --plugin module) before the entry point was loaded
            raise self._conflict(
                name, [(self._origins.get(name, BUILTIN),) * 2, (ref.label, ref.where)]
            )
        self._entries[name] = obj
        if plugins.default_origin(obj) != BUILTIN:
            self._origins[name] = ref.label

    def _validate(self, name: str) -> None:
        if self._check is None or name in self._checked:
            return
        problems = self._check(self._entries[name])
        if problems:
            origin = self._origins.get(name, BUILTIN)
            msg = (
                f"{self.kind} {name!r} ({origin}) does not satisfy the {self.kind} protocol: "
                + "; ".join(problems)
            )
            raise self._break(name, PluginProtocolError(msg), [(origin, msg)])
        self._checked.add(name)

    # -- lookup --------------------------------------------------------------------------
    def get(self, name: str) -> Any:
        """The factory registered as ``name``.

        Raises:
            UnknownNameError: an unknown name (with "did you mean" and how to add a plug-in).
            PluginLoadError, PluginConflictError, PluginProtocolError: a plug-in
                provides the name but cannot be used; the message says which and why.
        """
        self._ensure_loaded()
        with plugins.LOCK:
            if name in self._pending:
                self._load_entry_point(name)
            if name in self._broken:
                raise self._broken[name][0]
            if name in self._entries:
                self._validate(name)
                return self._entries[name]
        raise UnknownNameError(self._unknown_message(name))

    def _unknown_message(self, name: Any) -> str:
        valid = self.names()
        close = difflib.get_close_matches(str(name), valid, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        how = plugins.how_to_add(self.kind, self.group, self.attr, name) if self.group else ""
        return (
            f"unknown {self.kind} {name!r}.{hint} Valid names: {', '.join(valid) or '(none)'}"
            f"{plugins.failures_text(self._failed)}.{how}"
        )

    def names(self) -> list[str]:
        """All usable-looking names, sorted: registered, entry points not imported yet, conflicts.

        Reads entry-point metadata only; a name whose plug-in fails is listed
        by :meth:`listing` and :meth:`failures` instead.
        """
        self._ensure_loaded()
        with plugins.LOCK:
            conflicts = {
                n for n, (e, _) in self._broken.items() if isinstance(e, PluginConflictError)
            }
            return sorted(set(self._entries) | set(self._pending) | conflicts)

    def origin(self, name: str) -> str:
        """Where ``name`` comes from, without importing it.

        ``"built-in"``; ``"<distribution> <version> (entry point)"``;
        ``"plug-in module <module> (--plugin)"`` or ``"(IMSEARCH_ALIGN_PLUGINS)"``;
        ``"registered by <module>"`` for a registration made by other code; for
        a name claimed by several plug-ins, each of them joined by ``" and "``.
        """
        self._ensure_loaded()
        with plugins.LOCK:
            if name in self._pending:
                labels = [r.label for r in self._pending[name]]
                if name in self._entries:
                    labels.insert(0, self._origins.get(name, BUILTIN))
                return " and ".join(labels)
            if name in self._broken:
                return " and ".join(o for o, _ in self._broken[name][1])
            if name in self._entries:
                return self._origins.get(name, BUILTIN)
        raise UnknownNameError(self._unknown_message(name))

    def load_all(self) -> None:
        """Import every pending entry point and check every name, recording failures."""
        for name in self.names():
            with contextlib.suppress(PluginError):
                self.get(name)

    def listing(self) -> list[RegistryEntry]:
        """Every name with its origin and object or error, for ``imsearch-align list``.

        Imports every plug-in (:meth:`load_all`). A name two plug-ins claim
        appears once per plug-in, each row with the conflict as its error;
        a plug-in that failed to import appears with its error.
        """
        self.load_all()
        rows: list[RegistryEntry] = []
        with plugins.LOCK:
            for name, obj in self._entries.items():
                if name not in self._broken:
                    rows.append(RegistryEntry(name, self._origins.get(name, BUILTIN), obj))
            for name, (_, who) in self._broken.items():
                for origin, error in who:
                    rows.append(RegistryEntry(name, origin, None, error))
        return sorted(rows, key=lambda r: (r.name, r.origin))

    def failures(self) -> dict[str, str]:
        """Everything of this kind that failed, ``{what: error}``, after :meth:`load_all`.

        Built-in modules that failed to import, entry points that failed to
        import or were ignored, conflicts, protocol violations. Plug-in
        modules (``--plugin``, the environment variable) are in
        :func:`plugin_failures`.
        """
        self.load_all()
        with plugins.LOCK:
            return dict(self._failed)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"


METHODS = Registry(
    "method",
    packages=("imsearch_align.methods",),
    group="imsearch_align.methods",
    check=method_problems,
)
ENCODERS = Registry(
    "encoder",
    packages=("imsearch_align.adapters.encoders",),
    group="imsearch_align.encoders",
    check=encoder_problems,
)
STORES = Registry(
    "store",
    packages=("imsearch_align.adapters",),
    skip=ENCODERS.packages,
    group="imsearch_align.stores",
    check=store_protocol_problems,
)
DATASETS = Registry(
    "dataset", packages=("imsearch_align.datasets",), group="imsearch_align.datasets"
)
TASKS = Registry(
    "task", packages=("imsearch_align.experiment.tasks",), group="imsearch_align.tasks"
)
PERTURBATIONS = Registry("perturbation", packages=("imsearch_align.diagnostics",))
