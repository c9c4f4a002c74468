"""One small registry type, one registry per kind of plug-in, and plug-in loading.

A registry maps a user-facing name (what goes on the command line) to a
factory. Names come from four places, all loaded lazily on a registry's
first use (``get``, ``names``, ``in``), so importing this module never
imports faiss, pymilvus or torch:

1. **built-in** modules of the package (``builtin_modules``), which register
   with ``@STORES.register("name")`` when imported;
2. **entry points** of installed distributions, in the group
   ``imsearch_align.<kind>s`` (``imsearch_align.stores``,
   ``imsearch_align.methods``, ``imsearch_align.encoders``,
   ``imsearch_align.datasets``, ``imsearch_align.tasks``). The entry point's
   name is the registry name; its object (``pkg.module:Class``) is imported
   only when that name is first looked up (``names()`` reads metadata only);
   an entry point naming a module (``pkg.module``) must register the name
   itself when imported;
3. modules named in the ``IMSEARCH_ALIGN_PLUGINS`` environment variable
   (separated by commas or ``os.pathsep``), imported on first use;
4. modules the CLI's ``--plugin MODULE`` passes to :func:`load_plugins`.

A plug-in that fails (an import error, two distributions claiming one name,
a class that lacks a protocol method) is recorded and reported when its name
is used, by :meth:`Registry.failures` and :func:`plugin_failures`; it never
hides the other names. :meth:`Registry.origin` says where each name comes
from (``"built-in"``, ``"<distribution> <version> (entry point)"``,
``"plug-in module <module> (--plugin)"``), for ``imsearch-align list``.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import importlib.metadata
import inspect
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = [
    "DATASETS",
    "ENCODERS",
    "ENV_VAR",
    "METHODS",
    "PERTURBATIONS",
    "STORES",
    "STORE_ATTRIBUTES",
    "STORE_METHODS",
    "TASKS",
    "PluginConflictError",
    "PluginError",
    "PluginLoadError",
    "PluginProtocolError",
    "Registry",
    "RegistryEntry",
    "UnknownNameError",
    "check_store",
    "load_plugins",
    "plugin_failures",
    "plugin_modules_from_env",
    "store_protocol_problems",
]

T = TypeVar("T")

#: Environment variable naming plug-in modules to import on a registry's first use.
ENV_VAR = "IMSEARCH_ALIGN_PLUGINS"

BUILTIN = "built-in"

#: Where a registration being made comes from (set while a plug-in is imported).
_ORIGIN: ContextVar[str | None] = ContextVar("imsearch_align_registry_origin", default=None)
_LOCK = threading.RLock()
#: Plug-in modules imported by :func:`load_plugins`: module -> source.
_PLUGIN_MODULES: dict[str, str] = {}
#: Plug-in modules that failed to import: module -> "Type: message".
_PLUGIN_FAILURES: dict[str, str] = {}


class UnknownNameError(KeyError, ValueError):
    """An unknown registry name; the message lists close matches, valid names, how to add one."""

    def __str__(self) -> str:  # KeyError would print the message inside quotes
        return str(self.args[0]) if self.args else ""


class PluginError(ValueError):
    """A plug-in cannot be used; the message names it, where it comes from and why."""


class PluginLoadError(PluginError):
    """A plug-in module or entry point failed to import."""


class PluginConflictError(PluginError):
    """Two plug-ins (distributions or modules) provide the same name."""


class PluginProtocolError(PluginError, TypeError):
    """A plug-in does not satisfy its kind's protocol (a method or attribute is missing)."""


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


@dataclass(frozen=True)
class _EntryPointRef:
    ep: Any  # importlib.metadata.EntryPoint
    dist: str | None
    version: str | None

    @property
    def label(self) -> str:
        if self.dist:
            return f"{self.dist} {self.version} (entry point)"
        return f"entry point {self.ep.value}"

    @property
    def where(self) -> str:
        return f"{self.label.removesuffix(' (entry point)')}, entry point {self.ep.name} = {self.ep.value}"


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def _origin(label: str) -> Iterator[None]:
    token = _ORIGIN.set(label)
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def _default_origin(obj: Any) -> str:
    mod = getattr(obj, "__module__", None) or ""
    if mod == "imsearch_align" or mod.startswith("imsearch_align."):
        return BUILTIN
    return f"registered by {mod or 'unknown module'}"


def plugin_modules_from_env(value: str | None = None) -> list[str]:
    """Module names in ``value`` (default: ``$IMSEARCH_ALIGN_PLUGINS``), split on ',' and os.pathsep."""
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
        source: how the modules were named, shown by :meth:`Registry.origin`
            (``"--plugin"``, ``"IMSEARCH_ALIGN_PLUGINS"``).
        strict: raise :class:`PluginLoadError` (after trying every module)
            when one failed; otherwise failures are only recorded.

    Returns:
        ``{module: "ErrorType: message"}`` for the modules that failed in this call.
    """
    if isinstance(modules, str):
        raise TypeError(f"modules must be a list of module names, got the string {modules!r}")
    failed: dict[str, str] = {}
    with _LOCK:
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
                with _origin(f"plug-in module {mod} ({source})"):
                    importlib.import_module(mod)
            except Exception as exc:  # any error: one broken plug-in must not stop the others
                _PLUGIN_FAILURES[mod] = failed[mod] = _err(exc)
            else:
                _PLUGIN_MODULES[mod] = source
    if strict and failed:
        raise PluginLoadError(
            "plug-in module(s) failed to import: "
            + "; ".join(f"{m} ({e})" for m, e in failed.items())
        )
    return failed


def plugin_failures() -> dict[str, str]:
    """Plug-in modules (``--plugin``, ``IMSEARCH_ALIGN_PLUGINS``) that failed to import, with errors."""
    _load_env_plugins()
    return dict(_PLUGIN_FAILURES)


def _load_env_plugins() -> None:
    mods = plugin_modules_from_env()
    if mods:
        load_plugins(mods, source=ENV_VAR)


# ----------------------------------------------------------------------------- protocol checks

#: Methods of :class:`~imsearch_align.framework.interfaces.VectorStoreAdapter`, with signatures.
STORE_METHODS = {
    "create_collection": "create_collection(name, dim=None, *, sparse=False, metric='ip')",
    "insert": "insert(name, vectors, ids)",
    "search": "search(name, queries, k)",
    "drop_collection": "drop_collection(name)",
    "close": "close()",
}
#: Attributes of the store protocol: name -> meaning.
STORE_ATTRIBUTES = {"supports_sparse": "bool: whether sparse (CSR) collections are accepted"}

_METHOD_METHODS = {
    "fit": "fit(image_emb, text_emb) -> self",
    "transform_images": "transform_images(X)",
    "transform_texts": "transform_texts(Y)",
}
_ENCODER_METHODS = {"encode": "encode(items, *, batch_size=32, progress=True)"}


def _protocol_problems(
    obj: Any, methods: dict[str, str], attributes: dict[str, str] | None = None
) -> list[str]:
    """Missing methods and attributes of a class or instance (a plain factory function passes)."""
    if not isinstance(obj, type) and (inspect.isfunction(obj) or inspect.ismethod(obj)):
        return []  # a factory: its product is checked where it is built
    problems = [
        f"missing method {sig}" for m, sig in methods.items() if not callable(getattr(obj, m, None))
    ]
    for attr, meaning in (attributes or {}).items():
        if not hasattr(obj, attr):
            problems.append(f"missing attribute {attr} ({meaning})")
    if isinstance(obj, type) and inspect.isabstract(obj):
        names = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        problems.append(f"abstract methods not implemented: {names}")
    return problems


def store_protocol_problems(obj: Any) -> list[str]:
    """What a store class or instance lacks of the VectorStoreAdapter protocol (empty: nothing).

    Methods :data:`STORE_METHODS`, attributes :data:`STORE_ATTRIBUTES`, a
    ``thread_safe`` that is a bool when declared, no unimplemented abstract
    method. A plain factory function passes (check what it builds).
    """
    problems = _protocol_problems(obj, STORE_METHODS, STORE_ATTRIBUTES)
    ts = inspect.getattr_static(obj, "thread_safe", None)
    if ts is not None and not isinstance(ts, bool | property):
        problems.append(f"thread_safe must be a bool, got {type(ts).__name__} {ts!r}")
    return problems


def check_store(obj: Any) -> None:
    """Raise :class:`PluginProtocolError` when a store class or instance lacks a protocol member.

    The registry checks classes when a name is first used; a factory
    function's product is checked by calling this on the instance.
    """
    problems = store_protocol_problems(obj)
    if problems:
        what = obj.__name__ if isinstance(obj, type) else type(obj).__name__
        raise PluginProtocolError(
            f"{what} does not satisfy the VectorStoreAdapter protocol: {'; '.join(problems)}"
        )


# ----------------------------------------------------------------------------- the registry


class Registry:
    """Name -> factory mapping with lazy plug-in loading and helpful errors.

    Args:
        kind: what the registry holds, singular (``"store"``), used in messages.
        builtin_modules: package modules imported on first use.
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
        builtin_modules: tuple[str, ...] = (),
        group: str | None = None,
        attr: str | None = None,
        check: Callable[[Any], list[str]] | None = None,
    ) -> None:
        self.kind = kind
        self.group = group
        self.attr = attr or f"{kind.upper()}S"
        self._entries: dict[str, Any] = {}
        self._origins: dict[str, str] = {}
        self._builtin_modules = builtin_modules
        self._check = check
        self._loaded = False
        #: label -> error, for everything that failed (modules, entry points, protocol)
        self._failed: dict[str, str] = {}
        #: entry points found but not imported yet: name -> refs (several = conflict)
        self._pending: dict[str, list[_EntryPointRef]] = {}
        #: names that cannot be used: name -> (exception, [(origin, error)])
        self._broken: dict[str, tuple[PluginError, list[tuple[str, str]]]] = {}
        self._checked: set[str] = set()

    # -- registration --------------------------------------------------------------
    def register(self, name: str) -> Callable[[T], T]:
        """Decorator that registers ``obj`` under ``name``; a duplicate raises."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"{self.kind} registry: name must be a non-empty string, got {name!r}")

        def deco(obj: T) -> T:
            with _LOCK:
                if name in self._entries and self._entries[name] is not obj:
                    raise ValueError(
                        f"{self.kind} {name!r} is already registered (to "
                        f"{self._entries[name]!r}, {self._origins.get(name, BUILTIN)})"
                    )
                origin = _default_origin(obj)
                if origin != BUILTIN and _ORIGIN.get() is not None:
                    origin = str(_ORIGIN.get())
                self._entries[name] = obj
                self._origins.setdefault(name, origin)
                self._checked.discard(name)
            return obj

        return deco

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a plug-in registered for a while, e.g. by a test);
        an unknown name raises :class:`UnknownNameError`."""
        with _LOCK:
            if name not in self._entries:
                raise UnknownNameError(f"{self.kind} {name!r} is not registered")
            del self._entries[name]
            self._origins.pop(name, None)
            self._checked.discard(name)

    # -- loading -------------------------------------------------------------------------
    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        with _LOCK:
            if self._loaded:
                return
            self._loaded = True
            for mod in self._builtin_modules:
                try:
                    importlib.import_module(mod)
                except Exception as exc:
                    # One broken module must not hide the others; its error is
                    # shown when a name is not found and by failures().
                    self._failed[f"module {mod}"] = _err(exc)
            _load_env_plugins()
            if self.group:
                self._discover()

    def _discover(self) -> None:
        try:
            eps = importlib.metadata.entry_points(group=self.group)
        except Exception as exc:  # broken metadata of some distribution
            self._failed[f"entry points {self.group}"] = _err(exc)
            return
        seen: set[tuple[str, str, str | None]] = set()
        for ep in eps:
            dist = getattr(ep, "dist", None)
            dname = dist.metadata["Name"] if dist is not None else None
            ref = _EntryPointRef(ep, dname, dist.version if dist is not None else None)
            key = (ep.name, ep.value, dname)
            if key in seen:  # the same distribution found twice on the path
                continue
            seen.add(key)
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
        msg = (
            f"{self.kind} {name!r} is provided by {len(who)} plug-ins: "
            f"{'; '.join(w for _, w in who)}. Uninstall all but one "
            "(pip uninstall <distribution>) or rename one entry point"
        )
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
            with _origin(ref.label):
                obj = ref.ep.load()
        except Exception as exc:
            msg = f"{self.kind} {name!r} from {ref.where} failed to import: {_err(exc)}"
            raise self._break(name, PluginLoadError(msg), [(ref.label, msg)]) from exc
        if inspect.ismodule(obj):
            if name not in self._entries:
                msg = (
                    f"{self.kind} {name!r} from {ref.where}: the module {obj.__name__} registers "
                    f"no {self.kind} named {name!r}; point the entry point at the class "
                    f"({obj.__name__}:YourClass) or register it with @{self.attr}.register({name!r})"
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
        if _default_origin(obj) != BUILTIN:
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
        with _LOCK:
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
        broken = "".join(
            f"; {label} failed to import ({e})"
            if label.startswith("module ")
            else f"; {label}: {e}"
            for label, e in self._failed.items()
        )
        broken += "".join(
            f"; plug-in module {m} failed to import ({e})" for m, e in _PLUGIN_FAILURES.items()
        )
        how = ""
        if self.group:
            how = (
                f" To add a {self.kind} from another package: declare an entry point in the group "
                f"'{self.group}' of its pyproject.toml ([project.entry-points.\"{self.group}\"] "
                f'{name} = "your_pkg.module:YourClass"), or pass --plugin your_pkg.module (a module '
                f"that calls @{self.attr}.register({str(name)!r})), or list such modules in "
                f"{ENV_VAR} (comma-separated)."
            )
        return (
            f"unknown {self.kind} {name!r}.{hint} Valid names: {', '.join(valid) or '(none)'}"
            f"{broken}.{how}"
        )

    def names(self) -> list[str]:
        """All usable-looking names, sorted: registered, entry points not imported yet, conflicts.

        Reads entry-point metadata only; a name whose plug-in fails is listed
        by :meth:`listing` and :meth:`failures` instead.
        """
        self._ensure_loaded()
        with _LOCK:
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
        with _LOCK:
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
        with _LOCK:
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
        with _LOCK:
            return dict(self._failed)

    def __contains__(self, name: object) -> bool:
        return name in self.names()

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self._entries)} entries)"


def _method_problems(obj: Any) -> list[str]:
    return _protocol_problems(obj, _METHOD_METHODS)


def _encoder_problems(obj: Any) -> list[str]:
    return _protocol_problems(obj, _ENCODER_METHODS)


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
    group="imsearch_align.methods",
    check=_method_problems,
)
STORES = Registry(
    "store",
    builtin_modules=(
        "imsearch_align.adapters.exact",
        "imsearch_align.adapters.faiss_store",
        "imsearch_align.adapters.milvus_store",
        "imsearch_align.adapters.lancedb_store",
        "imsearch_align.adapters.qdrant_store",
    ),
    group="imsearch_align.stores",
    check=store_protocol_problems,
)
ENCODERS = Registry(
    "encoder",
    builtin_modules=("imsearch_align.adapters.encoders",),
    group="imsearch_align.encoders",
    check=_encoder_problems,
)
DATASETS = Registry(
    "dataset",
    builtin_modules=("imsearch_align.datasets", "imsearch_align.datasets.synthetic"),
    group="imsearch_align.datasets",
)
TASKS = Registry(
    "task", builtin_modules=("imsearch_align.experiment.tasks",), group="imsearch_align.tasks"
)
PERTURBATIONS = Registry(
    "perturbation", builtin_modules=("imsearch_align.diagnostics.perturbations",)
)
