"""Registry: registration, built-in discovery, helpful errors, plug-ins (entry points, --plugin, env var).

Entry points are discovered for real: each test writes a distribution's
``.dist-info`` (METADATA, entry_points.txt) and modules into a temporary
folder put on ``sys.path``, and ``importlib.metadata`` finds it as it finds
a pip-installed one. No registry internals are patched.
"""

from __future__ import annotations

import sys
import types
import uuid

import pytest

from imsearch_align.framework import plugins
from imsearch_align.framework.plugins import (
    ENV_VAR,
    PluginConflictError,
    PluginLoadError,
    PluginProtocolError,
    load_plugins,
    plugin_failures,
    plugin_modules_from_env,
)
from imsearch_align.framework.protocol_checks import (
    STORE_ATTRIBUTES,
    STORE_METHODS,
    check_store,
    store_protocol_problems,
)
from imsearch_align.framework.registry import STORES, Registry
from imsearch_align.testing.plugins import write_distribution

GROUP = "imsearch_align.stores"

VALID_STORE = """
from imsearch_align.adapters.exact import ExactStore

class {cls}(ExactStore):
    '''A store from a plug-in distribution.'''
"""

HALF_STORE = """
class {cls}:
    supports_sparse = False
    def create_collection(self, name, dim=None, *, sparse=False, metric="ip"): ...
    def insert(self, name, vectors, ids): ...
    def drop_collection(self, name): ...
    def close(self): ...
"""


def uniq(prefix: str) -> str:
    """A module name no other test uses (modules stay in sys.modules)."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def _isolated_plugin_state(monkeypatch):
    """Plug-in module bookkeeping is process-wide: give each test its own."""
    monkeypatch.setattr(plugins, "_PLUGIN_MODULES", {})
    monkeypatch.setattr(plugins, "_PLUGIN_FAILURES", {})
    monkeypatch.delenv(ENV_VAR, raising=False)


def store_registry() -> Registry:
    return Registry("store", group=GROUP, check=store_protocol_problems)


# ----------------------------------------------------------------------------- basics


def test_register_get_names():
    r = Registry("store")

    @r.register("faiss")
    class Faiss: ...

    @r.register("milvus")
    def milvus(): ...

    assert r.get("faiss") is Faiss and r.get("milvus") is milvus
    assert r.names() == ["faiss", "milvus"] and "faiss" in r


def test_duplicate_name_raises():
    r = Registry("method")
    r.register("csa")(object)
    with pytest.raises(ValueError, match="method 'csa' is already registered"):
        r.register("csa")(dict)


def test_unknown_name_did_you_mean_valid_list_and_how_to_add_a_plugin():
    r = Registry("method", group="imsearch_align.methods")
    for n in ("csa", "asif", "cka"):
        r.register(n)(type(n, (), {}))
    with pytest.raises(
        KeyError, match=r"unknown method 'cas'. Did you mean 'csa'.*Valid names: asif, cka, csa"
    ) as err:
        r.get("cas")
    msg = str(err.value)
    assert "entry point in the group 'imsearch_align.methods'" in msg
    assert (
        '[project.entry-points."imsearch_align.methods"] cas = "your_pkg.module:YourClass"' in msg
    )
    assert "--plugin your_pkg.module" in msg and ENV_VAR in msg
    with pytest.raises(KeyError, match=r"unknown method 'zzz'. Valid names"):
        r.get("zzz")


def test_builtin_modules_load_lazily_on_first_use(tmp_path, monkeypatch):
    mod = uniq("fake_plugins_mod")
    lazy = Registry("thing", packages=(mod,))
    monkeypatch.setitem(sys.modules, "_registry_holder", types.SimpleNamespace(LAZY=lazy))
    (tmp_path / f"{mod}.py").write_text(
        "from _registry_holder import LAZY\nLAZY.register('late')(int)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert mod not in sys.modules
    assert lazy.names() == ["late"]


def test_empty_name_rejected():
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        Registry("x").register("")


def test_a_broken_builtin_module_does_not_hide_the_others(tmp_path, monkeypatch):
    good, missing, raising = uniq("good_mod"), uniq("missing_mod"), uniq("raising_mod")
    reg = Registry("store", packages=(good, missing, raising))
    monkeypatch.setitem(sys.modules, "_registry_holder2", types.SimpleNamespace(REG=reg))
    (tmp_path / f"{good}.py").write_text(
        "from _registry_holder2 import REG\nREG.register('ok')(int)\n"
    )
    (tmp_path / f"{raising}.py").write_text("raise RuntimeError('config file missing')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.names() == ["ok"]
    with pytest.raises(KeyError, match=f"module {missing} failed to import") as err:
        reg.get("nope")
    assert f"module {raising} failed to import (RuntimeError: config file missing)" in str(
        err.value
    )
    assert set(reg.failures()) == {f"module {missing}", f"module {raising}"}


def _write_package(root, pkg: str, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / pkg / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_builtin_package_is_walked_public_modules_only(tmp_path, monkeypatch):
    """Every public module under the package registers by its decorator alone, nested ones too."""
    pkg = uniq("walked_pkg")
    reg = Registry("store", packages=(pkg,), skip=(f"{pkg}.other_kind",))
    monkeypatch.setitem(sys.modules, "_registry_holder8", types.SimpleNamespace(REG=reg))
    deco = "from _registry_holder8 import REG\n@REG.register({name!r})\nclass C: ...\n"
    _write_package(
        tmp_path,
        pkg,
        {
            "__init__.py": "",
            "a_store.py": deco.format(name="a"),
            "nested/__init__.py": "",  # like adapters/milvus/: a package of modules
            "nested/store.py": deco.format(name="b"),
            "_kernels.py": "raise RuntimeError('private modules are not imported')\n",
            "_private/__init__.py": "",
            "_private/hidden.py": deco.format(name="hidden"),
            "other_kind/__init__.py": "raise RuntimeError('another kind: not walked')\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert pkg not in sys.modules
    assert reg.names() == ["a", "b"]
    assert reg.failures() == {}
    assert f"{pkg}._kernels" not in sys.modules and f"{pkg}._private" not in sys.modules
    assert f"{pkg}.other_kind" not in sys.modules


def test_a_name_registered_twice_by_builtins_is_an_error(tmp_path, monkeypatch):
    pkg = uniq("twice_pkg")
    reg = Registry("store", packages=(pkg,))
    monkeypatch.setitem(sys.modules, "_registry_holder9", types.SimpleNamespace(REG=reg))
    deco = "from _registry_holder9 import REG\n@REG.register('same')\nclass {cls}: ...\n"
    _write_package(
        tmp_path,
        pkg,
        {"__init__.py": "", "one.py": deco.format(cls="One"), "two.py": deco.format(cls="Two")},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.get("same").__name__ == "One"
    [(what, why)] = reg.failures().items()
    assert what == f"module {pkg}.two"
    assert why.startswith("ValueError: store 'same' is already registered (to <class")


def _registrations(registry_attrs: set[str]) -> list[tuple[str, str, str]]:
    """``(registry attr, module, name)`` of every ``ATTR.register("name")`` in the package."""
    import ast
    from pathlib import Path

    import imsearch_align

    root = Path(imsearch_align.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            f = node.func if isinstance(node, ast.Call) else None
            if (
                isinstance(f, ast.Attribute)
                and f.attr == "register"
                and isinstance(f.value, ast.Name)
                and f.value.id in registry_attrs
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                found.append((f.value.id, module, node.args[0].value))
    return found


def test_every_builtin_registration_is_found_without_a_list():
    """A built-in of any kind registers by its decorator alone, wherever in its package it lives.

    Each ``@STORES.register("name")`` (and the other kinds') in the source is
    in a public module under the registry's package, so the first use of the
    registry imports it and the name is listed as built-in.
    """
    from imsearch_align.framework import registry as reg_mod

    registries = {name: obj for name, obj in vars(reg_mod).items() if isinstance(obj, Registry)}
    assert set(registries) == {
        "METHODS",
        "STORES",
        "ENCODERS",
        "DATASETS",
        "TASKS",
        "PERTURBATIONS",
    }
    found = _registrations(set(registries))
    assert {attr for attr, _, _ in found} == set(registries)
    for attr, module, name in found:
        reg = registries[attr]
        under = [p for p in reg.packages if module == p or module.startswith(p + ".")]
        assert under, f"{module} registers {attr} {name!r} outside {reg.packages}"
        private = [part for part in module[len(under[0]) :].split(".") if part.startswith("_")]
        assert not private, f"{module} registers {attr} {name!r} in a private module"
        skipped = [p for p in reg.skip if module == p or module.startswith(p + ".")]
        assert not skipped, f"{module} registers {attr} {name!r} in {skipped[0]}, not walked"
        assert name in reg.names() and reg.origin(name) == "built-in", (attr, name)


# ----------------------------------------------------------------------------- entry points


def test_entry_point_store_is_found_lazily_with_its_distribution(tmp_path, monkeypatch):
    mod = uniq("acme_tiny")
    write_distribution(
        tmp_path,
        "acme-stores",
        "1.2.3",
        entry_points={GROUP: {"acme": f"{mod}:AcmeStore"}},
        files={f"{mod}.py": VALID_STORE.format(cls="AcmeStore")},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = store_registry()
    assert reg.names() == ["acme"] and "acme" in reg
    assert mod not in sys.modules  # listing names reads metadata only
    assert reg.origin("acme") == "acme-stores 1.2.3 (entry point)"
    cls = reg.get("acme")
    assert cls.__name__ == "AcmeStore" and mod in sys.modules
    assert reg.origin("acme") == "acme-stores 1.2.3 (entry point)"
    [row] = reg.listing()
    assert (row.name, row.origin, row.obj, row.error) == (
        "acme",
        "acme-stores 1.2.3 (entry point)",
        cls,
        None,
    )
    assert row.summary == "A store from a plug-in distribution."
    assert reg.failures() == {}


def test_a_broken_plugin_is_named_with_its_error_and_hides_nothing(tmp_path, monkeypatch):
    good, bad = uniq("good_store"), uniq("bad_store")
    write_distribution(
        tmp_path,
        "good-stores",
        "1.0",
        entry_points={GROUP: {"good": f"{good}:GoodStore"}},
        files={f"{good}.py": VALID_STORE.format(cls="GoodStore")},
    )
    write_distribution(
        tmp_path,
        "bad-stores",
        "0.3",
        entry_points={GROUP: {"bad": f"{bad}:BadStore"}},
        files={f"{bad}.py": "import numpy\nraise ImportError('bad-stores needs libbad.so')\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = store_registry()
    assert reg.names() == ["bad", "good"]
    with pytest.raises(PluginLoadError) as err:
        reg.get("bad")
    msg = str(err.value)
    assert f"store 'bad' from bad-stores 0.3, entry point bad = {bad}:BadStore" in msg
    assert "failed to import: ImportError: bad-stores needs libbad.so" in msg
    assert reg.get("good").__name__ == "GoodStore"  # the others still work
    assert reg.names() == ["good"]  # a name that cannot load is listed by listing()
    rows = {(r.name, r.origin): r for r in reg.listing()}
    assert rows["good", "good-stores 1.0 (entry point)"].error is None
    assert "libbad.so" in rows["bad", "bad-stores 0.3 (entry point)"].error
    assert "libbad.so" in reg.failures()["store 'bad'"]
    with pytest.raises(PluginLoadError, match=r"libbad\.so"):  # and again, same message
        reg.get("bad")


def test_two_distributions_registering_one_name(tmp_path, monkeypatch):
    a, b = uniq("dup_a"), uniq("dup_b")
    for dist, mod in (("dup-a", a), ("dup-b", b)):
        write_distribution(
            tmp_path,
            dist,
            "2.0",
            entry_points={GROUP: {"dup": f"{mod}:Store"}},
            files={f"{mod}.py": VALID_STORE.format(cls="Store")},
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = store_registry()
    assert reg.names() == ["dup"]
    origin = reg.origin("dup")
    assert "dup-a 2.0 (entry point)" in origin and "dup-b 2.0 (entry point)" in origin
    with pytest.raises(PluginConflictError) as err:
        reg.get("dup")
    msg = str(err.value)
    assert "store 'dup' is provided by 2 plug-ins" in msg
    assert f"dup-a 2.0, entry point dup = {a}:Store" in msg
    assert f"dup-b 2.0, entry point dup = {b}:Store" in msg
    assert "pip uninstall" in msg
    assert a not in sys.modules and b not in sys.modules  # neither was imported
    assert reg.names() == ["dup"]  # still listed, both rows in the listing
    rows = [r for r in reg.listing() if r.name == "dup"]
    assert sorted(r.origin for r in rows) == ["dup-a 2.0 (entry point)", "dup-b 2.0 (entry point)"]
    assert all("provided by 2 plug-ins" in r.error for r in rows)


def test_a_plugin_class_missing_a_protocol_method_is_refused(tmp_path, monkeypatch):
    mod = uniq("half_store")
    write_distribution(
        tmp_path,
        "half-stores",
        "0.1",
        entry_points={GROUP: {"half": f"{mod}:HalfStore"}},
        files={f"{mod}.py": HALF_STORE.format(cls="HalfStore")},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = store_registry()
    with pytest.raises(PluginProtocolError) as err:
        reg.get("half")
    assert str(err.value) == (
        "store 'half' (half-stores 0.1 (entry point)) does not satisfy the store protocol: "
        "missing method search(name, queries, k)"
    )
    assert isinstance(err.value, TypeError)
    assert "missing method search" in reg.failures()["store 'half'"]


def test_an_entry_point_naming_a_module_that_registers_itself(tmp_path, monkeypatch):
    selfreg, silent = uniq("selfreg"), uniq("silent")
    reg = store_registry()
    monkeypatch.setitem(sys.modules, "_registry_holder3", types.SimpleNamespace(REG=reg))
    source = (
        "from _registry_holder3 import REG\n"
        "from imsearch_align.adapters.exact import ExactStore\n"
        "@REG.register('selfreg')\n"
        "class SelfStore(ExactStore): ...\n"
    )
    write_distribution(
        tmp_path,
        "selfreg-pkg",
        "0.9",
        entry_points={GROUP: {"selfreg": selfreg, "silent": silent}},
        files={f"{selfreg}.py": source, f"{silent}.py": "X = 1\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.get("selfreg").__name__ == "SelfStore"
    assert reg.origin("selfreg") == "selfreg-pkg 0.9 (entry point)"
    with pytest.raises(PluginLoadError, match=f"the module {silent} registers no store named"):
        reg.get("silent")


def test_an_entry_point_cannot_shadow_a_builtin(tmp_path, monkeypatch):
    builtin, mod = uniq("builtin_mod"), uniq("shadow")
    reg = Registry("store", packages=(builtin,), group=GROUP)
    monkeypatch.setitem(sys.modules, "_registry_holder4", types.SimpleNamespace(REG=reg))
    # the holder module is outside imsearch_align: make the built-in look like one
    (tmp_path / f"{builtin}.py").write_text(
        "from _registry_holder4 import REG\n"
        "class Exact: ...\n"
        "Exact.__module__ = 'imsearch_align.adapters.exact'\n"
        "REG.register('exact')(Exact)\n"
    )
    write_distribution(
        tmp_path,
        "shadow-pkg",
        "1.0",
        entry_points={GROUP: {"exact": f"{mod}:Exact"}},
        files={f"{mod}.py": "class Exact: ...\n"},
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.get("exact").__module__ == "imsearch_align.adapters.exact"
    assert reg.origin("exact") == "built-in"
    [(what, why)] = reg.failures().items()
    assert what == f"store 'exact' from shadow-pkg 1.0, entry point exact = {mod}:Exact"
    assert "ignored: 'exact' is a built-in store" in why


def test_entry_point_and_plugin_module_for_one_name(tmp_path, monkeypatch):
    """The same class imported early is no conflict; another class under the name is."""
    same, other = uniq("same_pkg"), uniq("other_mod")
    reg = store_registry()
    monkeypatch.setitem(sys.modules, "_registry_holder7", types.SimpleNamespace(REG=reg))
    write_distribution(
        tmp_path,
        "same-pkg",
        "1.0",
        entry_points={GROUP: {"same": f"{same}:S", "taken": f"{same}:S"}},
        files={
            f"{same}.py": "from _registry_holder7 import REG\n"
            + VALID_STORE.format(cls="S")
            + "\nREG.register('same')(S)\n",
            f"{other}.py": "from _registry_holder7 import REG\n"
            + VALID_STORE.format(cls="T")
            + "\nREG.register('taken')(T)\n",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    load_plugins([same, other])  # both imported before the registry's first use
    assert reg.get("same").__name__ == "S"
    assert reg.origin("same") == "same-pkg 1.0 (entry point)"
    with pytest.raises(PluginConflictError) as err:
        reg.get("taken")
    assert f"plug-in module {other} (--plugin)" in str(err.value)
    assert f"same-pkg 1.0, entry point taken = {same}:S" in str(err.value)


# ----------------------------------------------------------------------------- --plugin, env var


def test_load_plugins_registers_and_records_the_origin(tmp_path, monkeypatch):
    ok, broken = uniq("cli_plugin"), uniq("cli_broken")
    reg = store_registry()
    monkeypatch.setitem(sys.modules, "_registry_holder5", types.SimpleNamespace(REG=reg))
    (tmp_path / f"{ok}.py").write_text(
        "from _registry_holder5 import REG\n" + VALID_STORE.format(cls="CliStore") + "\n"
        "REG.register('clistore')(CliStore)\n"
    )
    (tmp_path / f"{broken}.py").write_text("import does_not_exist_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failed = load_plugins([ok, broken])
    assert list(failed) == [broken] and "does_not_exist_anywhere" in failed[broken]
    assert reg.get("clistore").__name__ == "CliStore"
    assert reg.origin("clistore") == f"plug-in module {ok} (--plugin)"
    assert plugin_failures() == failed
    with pytest.raises(KeyError, match=f"plug-in module {broken} failed to import"):
        reg.get("nothing")
    with pytest.raises(PluginLoadError, match=f"{broken} .ModuleNotFoundError"):
        load_plugins([broken], strict=True)
    with pytest.raises(TypeError, match="modules must be a list of module names"):
        load_plugins(ok)


def test_env_var_plugins_load_on_first_use(tmp_path, monkeypatch):
    a, b, missing = uniq("env_a"), uniq("env_b"), uniq("env_missing")
    reg = store_registry()
    monkeypatch.setitem(sys.modules, "_registry_holder6", types.SimpleNamespace(REG=reg))
    for mod, name in ((a, "enva"), (b, "envb")):
        (tmp_path / f"{mod}.py").write_text(
            "from _registry_holder6 import REG\n" + VALID_STORE.format(cls="S") + "\n"
            f"REG.register({name!r})(S)\n"
        )
    monkeypatch.syspath_prepend(str(tmp_path))
    import os

    monkeypatch.setenv(ENV_VAR, f" {a}, {missing}{os.pathsep}{b} ")
    assert plugin_modules_from_env() == [a, missing, b]
    assert a not in sys.modules  # nothing happens before the registry is used
    assert reg.names() == ["enva", "envb"]
    assert reg.origin("enva") == f"plug-in module {a} (IMSEARCH_ALIGN_PLUGINS)"
    assert list(plugin_failures()) == [missing]
    with pytest.raises(KeyError, match=f"plug-in module {missing} failed to import"):
        reg.get("envc")


# ----------------------------------------------------------------------------- the store protocol


def test_store_protocol_members_match_the_interface():
    """The registry's list of members is the VectorStoreAdapter protocol's own."""
    from imsearch_align.framework.interfaces import VectorStoreAdapter

    own = {
        n
        for n, v in vars(VectorStoreAdapter).items()
        if callable(v) and not n.startswith("_") and n not in {"register"}
    }
    assert own == set(STORE_METHODS)
    assert set(VectorStoreAdapter.__annotations__) == set(STORE_ATTRIBUTES)


@pytest.mark.parametrize("name", ["exact", "faiss", "lancedb", "milvus", "qdrant"])
def test_builtin_stores_satisfy_the_protocol(name):
    if name not in STORES.names():
        pytest.skip(f"{name} not importable here: {STORES.failures()}")
    cls = STORES.get(name)
    assert store_protocol_problems(cls) == []
    assert STORES.origin(name) == "built-in"


def test_check_store_names_what_is_missing():
    class NoSearch:
        supports_sparse = True
        thread_safe = "yes"

        def create_collection(self, name, dim=None, *, sparse=False, metric="ip"): ...
        def insert(self, name, vectors, ids): ...
        def drop_collection(self, name): ...

    with pytest.raises(PluginProtocolError) as err:
        check_store(NoSearch())
    assert str(err.value) == (
        "NoSearch does not satisfy the VectorStoreAdapter protocol: missing method "
        "search(name, queries, k); missing method close(); thread_safe must be a bool, "
        "got str 'yes'"
    )

    from imsearch_align.adapters.base import BaseStore

    class Abstract(BaseStore):
        def _insert(self, info, vectors, ids): ...

    assert store_protocol_problems(Abstract) == ["abstract methods not implemented: _search"]


# ----------------------------------------------------------------------------- built-in names


@pytest.mark.parametrize("order", ["plugin-first", "builtins-first"])
def test_a_plugin_module_never_takes_a_builtin_name(tmp_path, monkeypatch, order):
    """Issue 28.6: a plug-in registering a built-in's own class under another built-in's
    name is refused whether the built-ins were walked before or after it was imported."""
    pkg, evil = uniq("builtin_pkg"), uniq("evil_plugin")
    reg = Registry("store", packages=(pkg,), group=GROUP)
    monkeypatch.setitem(sys.modules, "_registry_holder10", types.SimpleNamespace(REG=reg))
    deco = "from _registry_holder10 import REG\n@REG.register({name!r})\nclass {cls}: ...\n"
    _write_package(
        tmp_path,
        pkg,
        {
            "__init__.py": "",
            "exact.py": deco.format(name="exact", cls="Exact"),
            "faiss.py": deco.format(name="faiss", cls="Faiss"),
        },
    )
    (tmp_path / f"{evil}.py").write_text(
        f"from _registry_holder10 import REG\nfrom {pkg}.exact import Exact\n"
        "REG.register('faiss')(Exact)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    if order == "builtins-first":
        assert reg.names() == ["exact", "faiss"]
    with pytest.raises(PluginLoadError) as err:
        load_plugins([evil], strict=True)
    assert f"{evil} (PluginConflictError: store 'faiss' is a built-in store" in str(err.value)
    assert "register it under another name" in str(err.value)
    assert reg.get("faiss").__name__ == "Faiss" and reg.origin("faiss") == "built-in"
    assert reg.names() == ["exact", "faiss"]
    # The same class under a new name is a plug-in's, not a built-in.
    (tmp_path / f"{evil}_ok.py").write_text(
        f"from _registry_holder10 import REG\nfrom {pkg}.exact import Exact\n"
        "REG.register('exact2')(Exact)\n"
    )
    load_plugins([f"{evil}_ok"], strict=True)
    assert reg.origin("exact2") == f"plug-in module {evil}_ok (--plugin)"
