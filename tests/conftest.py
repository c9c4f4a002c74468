"""Suite-wide settings (offline, deterministic, quiet) and the real Milvus
servers on 127.0.0.1, started once per session and shared by every folder.

* ``milvus_lite_server``: ``milvus-lite server`` (dense + sparse over gRPC).
* ``milvus_standalone``: a real Milvus 2.3.5 standalone from the PyPI
  ``milvus`` package (dense only).
* ``own_lite_server`` (alias ``dead_lite_server``): a function-scoped Lite
  server a test may stop, kill and restart (see
  :class:`~imsearch_align.testing.servers.ServerHandle`).

Each server is stopped with SIGTERM by the context manager in
:mod:`imsearch_align.testing.servers`, also when tests fail (the fixture's
``with`` block is its finaliser). A server that cannot start skips the tests
that need it, with the reason and the log tail.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# Nothing in the suite may reach a model or dataset hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# A suite started in the background by a non-interactive shell inherits SIGINT
# ignored, and then neither Ctrl-C nor _thread.interrupt_main() reaches Python
# (nor the subprocesses it starts): the Ctrl-C tests would test nothing.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

from imsearch_align.testing.servers import (  # after the offline settings
    ServerHandle,
    ServerStartError,
)
from imsearch_align.testing.servers import (
    milvus_lite_server as _lite,
)
from imsearch_align.testing.servers import (
    milvus_standalone_server as _standalone,
)


@contextlib.contextmanager
def _started(server: contextlib.AbstractContextManager, what: str) -> Iterator[ServerHandle]:
    """Enter a server context; a server that cannot start skips the test.

    Only the start is guarded: a ServerStartError raised later by the test
    (a failed restart) is a failure, not a skip.
    """
    with contextlib.ExitStack() as stack:
        try:
            srv = stack.enter_context(server)
        except ServerStartError as exc:
            pytest.skip(f"{what} did not start: {exc}")
        yield srv


def _have(name: str) -> bool:
    return (Path(sys.executable).parent / name).exists() or shutil.which(name) is not None


@pytest.fixture(scope="session")
def milvus_lite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One ``milvus-lite server`` for the session."""
    if not _have("milvus-lite"):
        pytest.skip("milvus-lite is not installed (pip install 'imsearch-align[milvus]')")
    with _started(_lite(tmp_path_factory.mktemp("lite-server")), "milvus-lite server") as srv:
        yield srv


@pytest.fixture(scope="session")
def milvus_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerHandle]:
    """One real Milvus 2.3.5 standalone for the session."""
    if not _have("milvus-server"):
        pytest.skip("the PyPI package 'milvus' (milvus-server) is not installed")
    with _started(_standalone(tmp_path_factory.mktemp("milvus-2.3.5")), "Milvus 2.3.5") as srv:
        yield srv


@pytest.fixture
def own_lite_server(tmp_path: Path) -> Iterator[ServerHandle]:
    """A Lite server of the test's own, which the test may stop, kill and restart."""
    if not _have("milvus-lite"):
        pytest.skip("milvus-lite is not installed (pip install 'imsearch-align[milvus]')")
    with _started(_lite(tmp_path / "own"), "milvus-lite server") as srv:
        yield srv


@pytest.fixture
def dead_lite_server(own_lite_server: ServerHandle) -> ServerHandle:
    """``own_lite_server`` under the name of a test that kills it."""
    return own_lite_server


# ----------------------------------------------------------------------------- benchmark scripts

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _load_benchmark(name: str, module_name: str | None = None):
    """``benchmarks/<name>.py`` loaded as a module (scripts, not package modules)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        module_name or f"benchmark_{name}", BENCHMARKS / f"{name}.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def load_benchmark():
    """``load_benchmark(name, module_name=None)``: a benchmark script as a module, whose
    ``main(argv)`` a test calls (the package never reads the checkout's ``benchmarks/``)."""
    return _load_benchmark
