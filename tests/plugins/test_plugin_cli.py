"""Plug-ins seen by the command line with no wrapper: an installed package, the env var.

``tests/plugins/tiny_store_pkg`` (a store package that lives outside
imsearch_align) is installed for real into a temporary folder with
``pip install --no-deps --no-build-isolation --target`` from a copy of its
source, so its ``entry_points.txt`` is what setuptools writes from its
``pyproject.toml``. That folder goes on ``PYTHONPATH`` of a subprocess that
runs the ``imsearch-align`` console script: ``importlib.metadata`` discovers
the entry point as it would in any environment. Where setuptools is not in
the environment (``python -m venv`` on Python >= 3.12), the same
``.dist-info`` is written from the package's pyproject.toml instead.

What the eval test runs (keep it working)::

    imsearch-align eval --dataset synthetic --image-encoder none --text-encoder none \\
        --method procrustes --store tiny --output-dir <tmp> --no-progress

and it reads ``config.store``, ``status.state`` and ``provenance.store`` of
the result JSON written into ``<tmp>``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imsearch_align.testing.plugins import write_distribution

PKG = Path(__file__).resolve().parent / "tiny_store_pkg"
ROOT = Path(__file__).resolve().parents[2]


def _cli() -> list[str]:
    """The installed console script, else ``python -m imsearch_align.cli``."""
    script = Path(sys.executable).parent / "imsearch-align"
    return [str(script)] if script.exists() else [sys.executable, "-m", "imsearch_align.cli"]


def _install(target: Path, work: Path, *, pip: bool) -> None:
    src = work / "src"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "tests"))
    if pip:
        proc = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
             "--no-index", "--quiet", "--target", str(target), str(src)],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return
    import tomllib

    meta = tomllib.loads((src / "pyproject.toml").read_text())["project"]
    files = {str(p.relative_to(src)): p.read_text() for p in (src / "tiny_store_pkg").rglob("*.py")}
    write_distribution(
        target,
        meta["name"],
        meta["version"],
        entry_points=meta["entry-points"],
        files=files,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding tiny-store-pkg, installed."""
    target = tmp_path_factory.mktemp("site")
    pip = importlib.util.find_spec("setuptools") is not None
    _install(target, tmp_path_factory.mktemp("build"), pip=pip)
    assert next(target.glob("tiny_store_pkg-0.1.0.dist-info")).is_dir()
    return target


def _env(*paths: Path, plugins: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), str(ROOT)])
    env.pop("IMSEARCH_ALIGN_PLUGINS", None)
    if plugins is not None:
        env["IMSEARCH_ALIGN_PLUGINS"] = plugins
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_entry_points_txt_is_what_the_guide_says(installed: Path):
    ep = next(installed.glob("tiny_store_pkg-*.dist-info")) / "entry_points.txt"
    assert "[imsearch_align.stores]\ntiny = tiny_store_pkg:TinyStore" in ep.read_text()


def test_the_fallback_dist_info_is_discovered_the_same_way(tmp_path: Path, monkeypatch):
    target = tmp_path / "site"
    _install(target, tmp_path, pip=False)
    monkeypatch.syspath_prepend(str(target))
    from importlib.metadata import entry_points

    [ep] = [e for e in entry_points(group="imsearch_align.stores") if e.name == "tiny"]
    assert (ep.value, ep.dist.metadata["Name"], ep.dist.version) == (
        "tiny_store_pkg:TinyStore",
        "tiny-store-pkg",
        "0.1.0",
    )


def test_list_stores_shows_the_installed_plugin(installed: Path, tmp_path: Path):
    proc = _run([*_cli(), "list", "stores"], _env(installed), tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()[1:] if line.strip()]
    assert "tiny" in names and "exact" in names and "qdrant" in names, proc.stdout


def test_origin_names_the_distribution(installed: Path, tmp_path: Path):
    code = (
        "from imsearch_align.framework.registry import STORES\n"
        "print(STORES.origin('tiny')); print(STORES.origin('exact'))\n"
        "print(STORES.get('tiny').__module__)\n"
    )
    proc = _run([sys.executable, "-c", code], _env(installed), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "tiny-store-pkg 0.1.0 (entry point)",
        "built-in",
        "tiny_store_pkg",
    ]


def test_eval_runs_on_the_plugin_store_with_no_wrapper(installed: Path, tmp_path: Path):
    out = tmp_path / "out"
    args = [
        *_cli(), "eval", "--dataset", "synthetic", "--image-encoder", "none",
        "--text-encoder", "none", "--method", "procrustes", "--store", "tiny",
        "--output-dir", str(out), "--no-progress",
    ]  # fmt: skip
    proc = _run(args, _env(installed), tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    [path] = out.glob("*.json")
    res = json.loads(path.read_text())
    assert res["config"]["store"] == "tiny"
    assert res["status"]["state"] == "ok"
    # the plug-in's own provenance flows into the result
    assert res["provenance"]["store"]["packages"]["tiny-store-pkg"] == "0.1.0"


def test_unknown_store_without_the_plugin_says_how_to_add_one(tmp_path: Path):
    args = [
        *_cli(), "eval", "--dataset", "synthetic", "--image-encoder", "none",
        "--text-encoder", "none", "--method", "procrustes", "--store", "tiny",
        "--output-dir", str(tmp_path / "out"), "--no-progress",
    ]  # fmt: skip
    proc = _run(args, _env(), tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "unknown store 'tiny'" in proc.stderr
    assert "imsearch_align.stores" in proc.stderr and "IMSEARCH_ALIGN_PLUGINS" in proc.stderr


def test_env_var_plugin_module_is_listed_and_a_broken_one_reported(tmp_path: Path):
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "envtiny_mod.py").write_text(
        "from imsearch_align.adapters.exact import ExactStore\n"
        "from imsearch_align.framework.registry import STORES\n\n"
        "@STORES.register('envtiny')\n"
        "class EnvTiny(ExactStore):\n"
        "    '''An exact store registered by a module named in IMSEARCH_ALIGN_PLUGINS.'''\n"
    )
    (mods / "envbroken_mod.py").write_text("raise ImportError('envbroken needs libzzz')\n")
    env = _env(mods, plugins=f"envtiny_mod,envbroken_mod{os.pathsep}")
    proc = _run([*_cli(), "list", "stores"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()[1:] if line.strip()]
    assert "envtiny" in names and "exact" in names, proc.stdout
    code = (
        "from imsearch_align.framework.plugins import plugin_failures\n"
        "from imsearch_align.framework.registry import STORES\n"
        "print(STORES.origin('envtiny')); print(plugin_failures())\n"
    )
    proc = _run([sys.executable, "-c", code], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    origin, failures = proc.stdout.splitlines()
    assert origin == "plug-in module envtiny_mod (IMSEARCH_ALIGN_PLUGINS)"
    assert "envbroken_mod" in failures and "envbroken needs libzzz" in failures


HIJACK = """
from imsearch_align.adapters.exact import ExactStore
from imsearch_align.framework.registry import STORES
{first}
STORES.register("faiss")(ExactStore)
"""


@pytest.mark.parametrize(
    "first",
    [
        "",  # the plug-in registers before the built-ins are walked
        "assert 'faiss' in STORES.names()",  # ... after they are
    ],
    ids=["plugin-first", "builtins-first"],
)
def test_a_plugin_never_takes_a_builtin_name(tmp_path: Path, first: str):
    """Issue 28.6: a ``--plugin`` module registering ExactStore as ``faiss`` is refused
    in both load orders, with one message; the built-in stays what ``faiss`` runs."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "hijack_faiss.py").write_text(HIJACK.format(first=first))
    args = [
        *_cli(), "--plugin", "hijack_faiss", "eval", "--dataset", "synthetic",
        "--dataset-param", "n_images=200", "--image-encoder", "none", "--text-encoder", "none",
        "--method", "csa", "--store", "faiss", "--n-support", "100",
        "--output-dir", str(tmp_path / "out"), "--no-progress",
    ]  # fmt: skip
    proc = _run(args, _env(mods), tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    (err,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert "hijack_faiss" in err and "store 'faiss' is a built-in store" in err, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.json"))
    listing = _run([*_cli(), "--plugin", "hijack_faiss", "list", "stores"], _env(mods), tmp_path)
    assert listing.returncode == 2 and "store 'faiss' is a built-in store" in listing.stderr
    # Named in IMSEARCH_ALIGN_PLUGINS, the module is refused too; faiss stays the built-in.
    code = (
        "from imsearch_align.framework.plugins import plugin_failures\n"
        "from imsearch_align.framework.registry import STORES\n"
        "print(STORES.get('faiss').__name__, STORES.origin('faiss'))\n"
        "print(plugin_failures())\n"
    )
    proc = _run([sys.executable, "-c", code], _env(mods, plugins="hijack_faiss"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    store, failures = proc.stdout.splitlines()
    assert store == "FaissStore built-in"
    assert "hijack_faiss" in failures and "store 'faiss' is a built-in store" in failures
