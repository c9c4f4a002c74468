"""Start and stop real Milvus servers on 127.0.0.1, for tests and benchmarks.

Two servers, both without Docker, both reachable with
``MilvusStore(uri=server.uri)``:

* :func:`milvus_lite_server` runs ``milvus-lite server --data-dir D --host
  127.0.0.1 --port P`` (Milvus Lite 3.x over gRPC; dense and sparse vectors).
* :func:`milvus_standalone_server` runs ``milvus-server`` from the PyPI
  package ``milvus`` 2.3.5: a real Milvus standalone (embedded etcd, rocksmq,
  local storage) in one process; dense vectors only.

Both are context managers that pick free ports, wait until the server
answers, and on exit stop it with SIGTERM (the Lite server ignores SIGINT
when started in the background; the ``milvus-server`` wrapper only traps
SIGINT, so the whole process group gets SIGTERM), escalate to SIGKILL only
after a grace period, and delete the data directory they created::

    with milvus_lite_server() as srv:
        store = MilvusStore(uri=srv.uri)

For fault tests the handle drives the process: :meth:`ServerHandle.stop`
(SIGTERM, a clean shutdown), :meth:`ServerHandle.kill` (SIGKILL, a crash),
:meth:`ServerHandle.pause` / :meth:`ServerHandle.resume` (SIGSTOP/SIGCONT, a hang),
:meth:`ServerHandle.start` (the same command on the same data directory and
port, waiting until the server answers) and :meth:`ServerHandle.restart`.
Whatever state a test leaves the process in, the context manager stops it.

Listening sockets: the Lite server binds only 127.0.0.1. Milvus 2.3.5 binds
its proxy, metrics and component ports on all interfaces (the binary has no
option to bind them to loopback; every ``*.ip`` is set to 127.0.0.1 so all
traffic stays on loopback); its embedded etcd binds 127.0.0.1:2379/2380 by
default, so :func:`milvus_standalone_server` gives etcd a free client port
and refuses to start while another process holds the etcd peer port 2380,
which the binary does not let us move.

The package: :mod:`~imsearch_align.testing.servers.launch` (the two
launchers), :mod:`~imsearch_align.testing.servers.handle` (the handle),
:mod:`~imsearch_align.testing.servers.readiness` (is it answering?) and
:mod:`~imsearch_align.testing.servers.processes` (ports, processes,
signals); every name below is importable from here.
"""

from __future__ import annotations

from imsearch_align.testing.servers.handle import ServerHandle
from imsearch_align.testing.servers.launch import milvus_lite_server, milvus_standalone_server
from imsearch_align.testing.servers.processes import (
    ETCD_PEER_PORT,
    HOST,
    ServerStartError,
    free_port,
    port_in_use,
)

__all__ = [
    "ETCD_PEER_PORT",
    "HOST",
    "ServerHandle",
    "ServerStartError",
    "free_port",
    "milvus_lite_server",
    "milvus_standalone_server",
    "port_in_use",
]
