"""Readiness: a collection made searchable once after its inserts, so no search pays for it.

A production Milvus deployment does not search at ``Strong`` consistency:
each ``Strong`` request waits for the query node to catch up with "now"
(about 280 ms per request on Milvus 2.3.5, single query or batch of 100).
It inserts, flushes, waits until the index covers every row and the
collection is loaded, and then searches at ``Bounded`` (or ``Session``).
:func:`wait_searchable` is that wait, run once per collection after inserts
(``MilvusStore.make_searchable``, called by the first search that follows
them):

1. **flush**: the growing segments are sealed and persisted;
2. **indexed**: every index on the collection reports ``indexed_rows ==
   total_rows`` with no pending rows (a failed build raises);
3. **loaded**: the load state is ``Loaded`` (a released collection is loaded
   again) and, for an approximate index (HNSW, IVF, AUTOINDEX) on a server
   that lists segments (a Milvus server; Milvus Lite answers UNIMPLEMENTED
   and serves every row at once), every flushed segment is among the query
   nodes' loaded segments with its index: the indexed segments were handed
   off, so searches run on the index and not on an interim one (about 13 s
   after a flush on Milvus 2.3.5; a segment loaded before its index was
   built is listed without an index name and does not count). With scalar indexes beside
   the vector one (typed attributes), the listing names one of a segment's loaded indexes,
   changing from one listing to the next, so a segment counts once it was listed under the
   vector index's name. An exact index (FLAT, the sparse inverted index) returns the same
   rows from either, so it does not wait;
4. **counted at Strong, once**: ``count(*)`` at ``Strong`` holds at least the
   rows this store inserted (fewer: rows were lost, an error). The query
   node's safe timestamp is then past every insert; a ``Bounded`` or
   ``Session`` search reads at the node's current safe timestamp, which only
   grows, so it sees every row from then on;
5. **counted at the store's level**: ``count(*)`` at the search
   consistency level is polled until it holds the same rows, which checks
   step 4's conclusion on the server itself.

Every step is bounded by ``ready_timeout_s``; a step not reached in time
raises :class:`~imsearch_align.adapters.milvus.errors.MilvusStoreError`
saying which step and what the server reported last.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from imsearch_align.adapters.base import CollectionInfo
from imsearch_align.adapters.milvus.config import VEC_FIELD, redact_uri
from imsearch_align.adapters.milvus.errors import MilvusStoreError

__all__ = ["EXACT_INDEXES", "Readiness", "count_rows", "wait_searchable"]

_FIRST_POLL_S = 0.05
_MAX_POLL_S = 1.0
#: Index types whose answer does not depend on which segment serves a row.
EXACT_INDEXES = frozenset({"FLAT", "SPARSE_INVERTED_INDEX"})


@dataclass
class Readiness:
    """What making one collection searchable took (seconds) and the rows it holds."""

    flush_s: float = 0.0
    index_s: float = 0.0
    load_s: float = 0.0
    count_s: float = 0.0
    rows: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields."""
        return asdict(self)


def count_rows(call: Callable[..., Any], name: str, consistency_level: str = "Strong") -> int:
    """``count(*)`` of collection ``name`` read at ``consistency_level``."""
    res = call(
        "count",
        name,
        "query",
        name,
        filter="",
        output_fields=["count(*)"],
        consistency_level=consistency_level,
    )
    return int(res[0]["count(*)"])


class _Deadline:
    """Polls a step until it is reached or ``ready_timeout_s`` is spent."""

    def __init__(self, info: CollectionInfo, uri: str, timeout_s: float) -> None:
        self._what = f"collection {info.name!r} at {redact_uri(uri)}"
        self._timeout_s = timeout_s
        self._end = time.monotonic() + timeout_s

    def poll(self, step: str, check: Callable[[], tuple[bool, str]]) -> float:
        """Call ``check`` until it says done; the seconds it took.

        ``check`` returns ``(done, what the server reports)``; the report
        goes into the error raised when the deadline passes.
        """
        t0 = time.monotonic()
        pause = _FIRST_POLL_S
        while True:
            done, seen = check()
            if done:
                return time.monotonic() - t0
            left = self._end - time.monotonic()
            if left <= 0:
                raise MilvusStoreError(
                    f"{self._what} is not searchable after {self._timeout_s:g} s "
                    f"(ready_timeout_s): {step} not reached; the server reports {seen}"
                )
            time.sleep(min(pause, left))
            pause = min(pause * 2, _MAX_POLL_S)


def _indexes(call: Callable[..., Any], name: str) -> list[tuple[str, dict[str, Any]]]:
    """``(index name, describe_index)`` of every index on ``name``."""
    return [
        (index_name, call("describe_index", name, "describe_index", name, index_name))
        for index_name in call("list_indexes", name, "list_indexes", name)
    ]


def _indexed(call: Callable[..., Any], name: str) -> tuple[bool, str]:
    """Whether every index of ``name`` covers every row (a failed build raises)."""
    seen = []
    done = True
    for index_name, d in _indexes(call, name):
        state = str(d.get("state", ""))
        if state.lower() == "failed":
            raise MilvusStoreError(
                f"index {index_name!r} of collection {name!r} failed to build: "
                f"{d.get('index_state_fail_reason') or d.get('fail_reason') or state}"
            )
        total, indexed = int(d.get("total_rows", 0)), int(d.get("indexed_rows", 0))
        pending = int(d.get("pending_index_rows", 0))
        ok = indexed >= total and pending == 0 and state.lower() in ("finished", "")
        done = done and ok
        seen.append(f"index {index_name!r} {state}: {indexed} of {total} rows, {pending} pending")
    return done, "; ".join(seen) or "no index"


def _loaded(call: Callable[..., Any], name: str) -> tuple[bool, str]:
    """Whether ``name`` is loaded; a released collection is loaded again."""
    state = call("load state", name, "get_load_state", name)["state"]
    label = getattr(state, "name", str(state))
    if label == "NotLoad":
        call("load_collection", name, "load_collection", name)
    return label == "Loaded", f"load state {label}"


#: Milvus's ``indexCoord.segment.minSegmentNumRowsToEnableIndex`` default: a segment with
#: fewer rows gets no index and is served as it is.
UNINDEXED_ROWS = 1024


#: Listings taken at once, at most, while a segment is listed under another index's name.
_RELISTS = 16
_RELIST_PAUSE_S = 0.01


def _with_index(s: Any, vector_index: str | None) -> bool:
    """Whether loaded segment ``s`` is listed as served with the vector index (see
    :func:`_handed_off`)."""
    listed = getattr(s, "index_name", None)
    if listed is None or s.num_rows < UNINDEXED_ROWS:
        return True
    return listed == vector_index if vector_index is not None else listed != ""


def _handed_off(
    call: Callable[..., Any],
    name: str,
    vector_index: str | None = None,
    served: set[int] | None = None,
) -> tuple[bool, str]:
    """Whether every flushed segment of ``name`` is loaded on a query node with its index.

    A query node loads a flushed segment as soon as queryCoord's target moves,
    also before its index is built; it then serves it from an interim index
    (``index_name`` empty in the listing: seen for 11 s on Milvus 2.3.5 with
    60,000 rows, HNSW) until the indexed copy replaces it under the same
    segment id. Such a segment is not counted, unless it holds fewer than
    :data:`UNINDEXED_ROWS` rows (Milvus builds no index for it and serves it
    as it is). A listing without ``index_name`` (another server version)
    counts every loaded segment.

    With ``vector_index`` (the collection has other indexes: a scalar index
    per typed attribute), a segment counts only when listed under that name:
    Milvus 2.3.5 names one of the indexes a segment has loaded, changing
    between listings (a scalar index alone was listed for 3.7 s while the
    HNSW index of 60,000 rows was still loading), so a segment listed under a
    scalar index's name says nothing about its vector index. ``served`` keeps
    the segments seen with it across polls (a loaded index stays loaded), and
    while one is listed under another name the listing is taken again at
    once, a few times.
    """
    served = set() if served is None else served
    flushed = {
        s.segment_id
        for s in call("segments", name, "list_persistent_segments", name)
        if "flushed" in str(s.state).lower()
    }
    for _ in range(_RELISTS):
        loaded = call("segments", name, "list_loaded_segments", name)
        served.update(s.segment_id for s in loaded if _with_index(s, vector_index))
        other = [
            s for s in loaded
            if s.segment_id in flushed - served and getattr(s, "index_name", "") != ""
        ]  # fmt: skip
        if not other:
            break
        time.sleep(_RELIST_PAUSE_S)
    missing = flushed - served
    return not missing, (
        f"{len(missing)} of {len(flushed)} flushed segments not yet served with their index"
    )


def _lists_segments(call: Callable[..., Any], name: str) -> bool:
    """Whether the server answers the segment listings (Milvus Lite does not)."""
    try:
        call("segments", name, "list_loaded_segments", name)
    except MilvusStoreError as exc:
        if "unimplemented" in str(exc).lower() or "not implemented" in str(exc).lower():
            return False
        raise
    return True


def wait_searchable(
    call: Callable[..., Any],
    info: CollectionInfo,
    *,
    expected: int | None,
    consistency_level: str,
    timeout_s: float,
    lists_segments: Callable[[], bool],
    uri: str,
) -> Readiness:
    """Flush ``info``'s collection and wait until a search at ``consistency_level`` sees every row.

    Args:
        call: the store's ``_call`` (a client method through the retries).
        info: the collection (created on the server).
        expected: rows this store knows are stored (None: not known).
        consistency_level: the level searches will use.
        timeout_s: the longest the whole wait may take.
        lists_segments: whether the server lists its segments (False for
            Milvus Lite, which does not implement the listings); asked only
            for an approximate index.
        uri: the store's uri (for error messages).

    Returns:
        What each step took, and the rows the collection holds.

    Raises:
        MilvusStoreError: the server holds fewer rows than ``expected``, an
            index build failed, or a step was not reached within ``timeout_s``.
    """
    name = info.name
    out = Readiness()
    deadline = _Deadline(info, uri, timeout_s)
    t0 = time.monotonic()
    call("flush", name, "flush", name)
    out.flush_s = time.monotonic() - t0
    out.index_s = deadline.poll("index built on every row", lambda: _indexed(call, name))
    out.load_s = deadline.poll("collection loaded", lambda: _loaded(call, name))
    indexes = _indexes(call, name)
    vector = [(n, d) for n, d in indexes if d.get("field_name", VEC_FIELD) == VEC_FIELD]
    approximate = any(str(d.get("index_type", "")).upper() not in EXACT_INDEXES for _, d in vector)
    if approximate and lists_segments() and _lists_segments(call, name):
        # beside scalar indexes a segment counts once listed under the vector index's name
        named = vector[0][0] if len(indexes) > 1 and len(vector) == 1 else None
        served: set[int] = set()
        out.load_s += deadline.poll(
            "every flushed segment loaded",
            lambda: _handed_off(call, name, named, served),
        )
    t0 = time.monotonic()
    held = count_rows(call, name, "Strong")
    if expected is not None and held < expected:
        raise MilvusStoreError(
            f"collection {name!r} at {redact_uri(uri)} holds {held} rows after a flush, "
            f"where this store inserted or counted {expected}: rows were lost (changed by "
            "another client?)"
        )
    if consistency_level != "Strong":
        deadline.poll(
            f"every row visible at consistency_level={consistency_level!r}",
            lambda: _visible(call, name, consistency_level, held),
        )
    out.count_s = time.monotonic() - t0
    out.rows = held
    return out


def _visible(call: Callable[..., Any], name: str, level: str, held: int) -> tuple[bool, str]:
    """Whether ``count(*)`` at ``level`` holds the ``held`` rows counted at Strong."""
    seen = count_rows(call, name, level)
    return seen >= held, f"count(*) {seen} of {held} rows at consistency_level={level!r}"
