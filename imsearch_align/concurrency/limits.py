"""How many concurrent clients a store's client allows, and the refusal of a level above it.

Every level is checked before the first one runs, so a study never measures
half its curve and then fails. What limits a level:

* **Threads** (one store shared by the client threads):

  - a store that declares ``thread_safe = False``
    (:class:`~imsearch_align.framework.interfaces.ThreadSafety`) allows one
    client. The evaluator serialises such a store behind a lock, which keeps
    answers right; here it would make queries/s at 2, 4, 8... clients a
    measurement of the lock, not of the store, and the chart would show a
    saturation that is the harness's own. It is refused above 1, with the
    way out (``mode="processes"``, one store per client);
  - a store that declares ``max_concurrency`` (:class:`ConcurrencyLimit`)
    allows that many.

  ExactStore and FaissStore have no limit beyond the threads themselves.
  pymilvus's ``MilvusClient`` has none either: it opens one gRPC channel
  with no client-side cap on concurrent calls (pymilvus 3.0.2,
  ``GrpcHandler._create_grpc_channel`` sets only message sizes, retries and
  keep-alive); calls beyond the server's HTTP/2 stream limit wait on the
  channel, they do not fail, so nothing is refused there.

* **Processes** (each client process opens its own store from a
  :class:`~imsearch_align.concurrency.spec.StoreSpec`):

  - ``exact``, ``faiss`` and an in-memory ``qdrant`` keep their collections
    in the memory of the process that filled them: a client process would
    open an empty store. Refused (use threads);
  - a Milvus Lite ``uri`` (a ``.db`` path or a directory): Milvus Lite
    serves a data directory from one process (it holds a lock on it). One
    client process; serve it with ``milvus-lite server`` and pass its
    ``http://`` URI for more;
  - ``qdrant`` local mode (``path=``) locks its folder to one client;
  - a store class that declares ``max_concurrency`` allows that many.

  A Milvus or Qdrant server URI, and LanceDB (an embedded database several
  processes may read), have no limit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from imsearch_align.concurrency.spec import StoreSpec
from imsearch_align.framework.interfaces import is_thread_safe

__all__ = [
    "MODES",
    "ClientLimit",
    "ConcurrencyLimit",
    "ConcurrencyLimitError",
    "check_levels",
    "process_limit",
    "refuse_above",
    "thread_limit",
]

#: How clients run: threads sharing one store, or processes with a store each.
MODES = ("threads", "processes")


@runtime_checkable
class ConcurrencyLimit(Protocol):
    """A store that declares the most clients that may search it at once (None: no limit)."""

    max_concurrency: int | None


class ConcurrencyLimitError(ValueError):
    """A concurrency level above what the store's client allows, or a mode it cannot run in."""


@dataclass(frozen=True)
class ClientLimit:
    """The most concurrent clients a store allows in one mode, and why.

    Attributes:
        limit: the most clients; ``None`` no limit; ``0`` the mode cannot run the store.
        reason: what sets the limit, for the error message.
    """

    limit: int | None
    reason: str = ""


def check_levels(levels: Iterable[Any]) -> tuple[int, ...]:
    """``levels`` as ascending distinct ints >= 1; anything else raises naming the value."""
    try:
        raw = list(levels)
    except TypeError:
        raise TypeError(f"levels must be a sequence of integers, got {levels!r}") from None
    if not raw:
        raise ValueError("levels is empty; expected concurrency levels such as (1, 2, 4, 8, 16)")
    out = []
    for v in raw:
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"levels: each concurrency must be an integer >= 1, got {v!r}")
        out.append(int(v))
    if len(set(out)) != len(out):
        raise ValueError(f"levels: each concurrency may appear once, got {raw!r}")
    return tuple(sorted(out))


def _declared(obj: Any) -> int | None:
    value = obj.max_concurrency if isinstance(obj, ConcurrencyLimit) else None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"{obj!r}: max_concurrency must be an integer >= 1 or None, got {value!r}")
    return value


def _tighter(a: ClientLimit, b: ClientLimit) -> ClientLimit:
    if a.limit is None:
        return b
    if b.limit is None:
        return a
    return a if a.limit <= b.limit else b


def thread_limit(store: Any) -> ClientLimit:
    """The most client threads that may share ``store`` (see the module docstring)."""
    name = type(store).__name__
    out = ClientLimit(None)
    declared = _declared(store)
    if declared is not None:
        out = ClientLimit(declared, f"{name} declares max_concurrency = {declared}")
    if not is_thread_safe(store):
        unsafe = ClientLimit(
            1,
            f"{name} declares thread_safe = False: threads sharing it would wait on a lock and "
            "queries/s would measure the lock; run it with mode='processes' (a store per "
            "client) or at concurrency 1",
        )
        out = _tighter(out, unsafe)
    return out


def _builtin_process_limit(spec: StoreSpec) -> ClientLimit:
    """What the store class says of client processes opening it with ``spec.params``
    (``client_process_limit``; a store without it: no limit)."""
    declares = getattr(spec.factory(), "client_process_limit", None)
    if declares is None:
        return ClientLimit(None)
    limit, reason = declares(dict(spec.params))
    return ClientLimit(limit, reason) if limit is not None else ClientLimit(None)


def process_limit(spec: StoreSpec) -> ClientLimit:
    """The most client processes that may each open ``spec`` (see the module docstring)."""
    out = _builtin_process_limit(spec)
    declared = _declared(spec.factory())
    if declared is not None:
        out = _tighter(out, ClientLimit(declared, f"{spec.name!r} declares max_concurrency"))
    return out


def refuse_above(levels: tuple[int, ...], limit: ClientLimit, *, mode: str, what: str) -> None:
    """Raise :class:`ConcurrencyLimitError` when the largest level is above ``limit``."""
    if limit.limit is None or levels[-1] <= limit.limit:
        return
    if limit.limit == 0:
        raise ConcurrencyLimitError(f"mode={mode!r} cannot run {what}: {limit.reason}")
    above = [lv for lv in levels if lv > limit.limit]
    raise ConcurrencyLimitError(
        f"concurrency {above[0]} is above what {what} allows in mode={mode!r} "
        f"(at most {limit.limit} client{'s' if limit.limit != 1 else ''}): {limit.reason}; "
        f"levels above the limit: {above}"
    )
