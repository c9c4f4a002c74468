"""A MilvusStore's index: build parameters with their defaults, what a server builds, the sweep.

The index types and each one's parameters are in
:data:`~imsearch_align.adapters.milvus.config.INDEX_TYPES` (Milvus's names):
``FLAT`` (exact), ``IVF_FLAT`` and ``IVF_SQ8`` (build ``nlist``, search
``nprobe``), ``IVF_PQ`` (build ``nlist``, ``m``, ``nbits``; search
``nprobe``), ``HNSW`` (build ``M``, ``efConstruction``; search ``ef``) and
``AUTOINDEX`` (search ``level``). Here:

* :func:`check_server_accepts`: a type the server does not build is refused
  before any work, naming the ones it does (Milvus Lite 3.2.2 takes an
  ``IVF_PQ`` index and then fails every segment's build in the background,
  searching by brute force, so it is refused for a Lite uri);
* :func:`build_values`: the build parameters sent, defaults filled
  (:data:`~imsearch_align.adapters.milvus.config.PARAM_DEFAULTS`; ``IVF_PQ``'s
  ``m`` from the dimension, which it must divide);
* :func:`wire_params`: the build parameters as the server reads them
  (Milvus Lite reads only a JSON ``params`` entry, while pymilvus sends each
  parameter as its own entry, which a Lite server ignores);
* :func:`check_search_update`, :func:`effective_search` and
  :func:`request_params`: search-time parameters, which Milvus takes per
  search request, so a sweep over them (``MilvusStore.set_search_params``)
  never rebuilds the index.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from imsearch_align.adapters.milvus.config import (
    INDEX_TYPES,
    LITE_REFUSED,
    PARAM_DEFAULTS,
    check_params,
)

__all__ = [
    "accepted_types",
    "build_values",
    "check_search_update",
    "check_server_accepts",
    "effective_search",
    "pq_subquantizers",
    "request_params",
    "wire_params",
]


def accepted_types(*, lite: bool) -> list[str]:
    """The index types a deployment builds (Milvus Lite: all but :data:`LITE_REFUSED`)."""
    return sorted(t for t in INDEX_TYPES if not (lite and t in LITE_REFUSED))


def check_server_accepts(index: str, *, lite: bool, where: str) -> None:
    """Refuse an index type the deployment at ``where`` does not build, naming the ones it does.

    Raises:
        ValueError: ``index`` is in :data:`LITE_REFUSED` and ``lite``.
    """
    if lite and index in LITE_REFUSED:
        raise ValueError(
            f"index {index!r}: Milvus Lite ({where}) does not build it (it accepts the index, "
            "then fails every segment's build and searches by brute force); it builds "
            f"{', '.join(accepted_types(lite=True))}. A Milvus server (standalone or "
            f"cluster) builds {index}"
        )


def pq_subquantizers(m: int | None, dim: int, name: str) -> int:
    """``IVF_PQ``'s ``m`` for dimension ``dim``: the given one if it divides ``dim``, else
    (not given) the largest divisor of ``dim`` up to ``dim / 4``.

    Raises:
        ValueError: a given ``m`` that does not divide ``dim`` (collection ``name``).
    """
    if m is None:
        top = max(1, dim // 4)
        return max(d for d in range(1, top + 1) if dim % d == 0)
    if dim % m:
        divisors = [d for d in range(1, dim + 1) if dim % d == 0]
        raise ValueError(
            f"index_params['m']: IVF_PQ needs m to divide the dimension; collection {name!r} "
            f"has dim {dim} and m = {m} does not divide it (divisors: {divisors})"
        )
    return m


def build_values(index: str, given: Mapping[str, int]) -> dict[str, int]:
    """The build parameters of ``index``: ``given`` with the defaults of the others (``m``
    stays out until the dimension is known, see :func:`pq_subquantizers`)."""
    build_ok, _ = INDEX_TYPES[index]
    out = {p: PARAM_DEFAULTS[p] for p in sorted(build_ok) if p in PARAM_DEFAULTS}
    out.update(given)
    return out


def wire_params(params: Mapping[str, Any], *, lite: bool) -> dict[str, Any]:
    """Build parameters as ``add_index(params=...)`` takes them for the deployment.

    pymilvus sends every key of ``params`` as its own entry, which a Milvus
    server reads; Milvus Lite reads only an entry named ``params`` holding
    them as JSON (its own encoding), so for Lite they travel nested there.
    """
    params = dict(params)
    return {"params": params} if lite and params else params


def _accepts(index: str) -> str:
    build_ok, search_ok = INDEX_TYPES[index]
    return f"search-time {sorted(search_ok) or '(none)'}, build-time {sorted(build_ok) or '(none)'}"


def check_search_update(
    index: str, params: Mapping[str, Any], *, nlist: int | None, what: str = "set_search_params"
) -> dict[str, int]:
    """Search-time ``params`` for ``index``, checked; nothing is changed when one is bad.

    Raises:
        ValueError: a build-time parameter (set once, at creation), one the
            index does not take, a value out of range, or ``nprobe`` above
            the index's ``nlist``; the message names the parameter, the
            index and the parameters it accepts.
        TypeError: a value that is not an integer.
    """
    build_ok, search_ok = INDEX_TYPES[index]
    for key in params:
        if key in build_ok:
            raise ValueError(
                f"{what}: {key} is a build-time parameter of index {index!r} (fixed when the "
                f"collection is created: a new value is a new store and a new build); "
                f"the index takes {_accepts(index)}"
            )
        if key not in search_ok:
            raise ValueError(
                f"{what}: index {index!r} takes no parameter {key!r}; it takes {_accepts(index)}"
            )
    checked = check_params(params, search_ok, what)
    probe = checked.get("nprobe")
    if probe is not None and nlist is not None and probe > nlist:
        raise ValueError(
            f"{what}: nprobe = {probe} is above the index's nlist = {nlist} (index {index!r} "
            f"has {nlist} lists to visit); expected 1 <= nprobe <= {nlist}"
        )
    return checked


def effective_search(
    index: str, store: Mapping[str, int], collection: Mapping[str, int], *, nlist: int | None
) -> dict[str, int]:
    """The search-time values of a collection: the defaults of the index's parameters,
    then the store's (``search_params=``), then the collection's own (``set_search_params``)."""
    _, search_ok = INDEX_TYPES[index]
    out = {p: PARAM_DEFAULTS[p] for p in sorted(search_ok) if p in PARAM_DEFAULTS}
    if "nprobe" in out and nlist is not None:
        out["nprobe"] = min(out["nprobe"], nlist)
    out.update(store)
    out.update(collection)
    return out


def request_params(params: Mapping[str, int], limit: int) -> dict[str, int]:
    """The ``params`` of one search request of ``limit`` hits per query: HNSW's ``ef`` is
    at least ``limit`` (Milvus 2.3 refuses ``ef < limit``; later servers raise it themselves)."""
    out = dict(params)
    if "ef" in out and out["ef"] < limit:
        out["ef"] = limit
    return out
