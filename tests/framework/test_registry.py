"""Registry: registration, duplicates, helpful unknown-name errors."""

from __future__ import annotations

import pytest

from imsearch_align.framework.registry import Registry


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


def test_unknown_name_did_you_mean_and_valid_list():
    r = Registry("method")
    for n in ("csa", "asif", "cka"):
        r.register(n)(type(n, (), {}))
    with pytest.raises(
        KeyError, match=r"unknown method 'cas'. Did you mean 'csa'.*Valid names: asif, cka, csa"
    ):
        r.get("cas")
    with pytest.raises(KeyError, match=r"unknown method 'zzz'. Valid names"):
        r.get("zzz")


def test_builtin_modules_load_lazily_on_first_use(tmp_path, monkeypatch):
    import sys
    import types

    lazy = Registry("thing", builtin_modules=("fake_plugins_mod",))
    monkeypatch.setitem(sys.modules, "_registry_holder", types.SimpleNamespace(LAZY=lazy))
    (tmp_path / "fake_plugins_mod.py").write_text(
        "from _registry_holder import LAZY\nLAZY.register('late')(int)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "fake_plugins_mod" not in sys.modules
    assert lazy.names() == ["late"]


def test_empty_name_rejected():
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        Registry("x").register("")


def test_a_broken_plugin_module_does_not_hide_the_others(tmp_path, monkeypatch):
    import sys
    import types

    reg = Registry("store", builtin_modules=("good_plugin_mod", "missing_plugin_mod"))
    monkeypatch.setitem(sys.modules, "_registry_holder2", types.SimpleNamespace(REG=reg))
    (tmp_path / "good_plugin_mod.py").write_text(
        "from _registry_holder2 import REG\nREG.register('ok')(int)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert reg.names() == ["ok"]
    with pytest.raises(KeyError, match="module missing_plugin_mod failed to import"):
        reg.get("nope")
