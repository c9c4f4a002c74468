"""Index settings of the collection study: which store, which index, which parameters.

An :class:`IndexSetting` is one build of one store's index (its type and
build-time parameters) with the search-time values swept on it. It is
written on the command line of ``benchmarks/collection.py`` as
``STORE:TYPE[:PARAMS]``, ``PARAMS`` comma-separated ``name=value`` items
where a bare value continues the previous name's list, and ``:`` may stand
for ``,`` after the type::

    faiss:flat
    faiss:hnsw:M=16,efConstruction=100,efSearch=16,32,64,128
    faiss:ivf_flat:nprobe=1,8                 # nlist from the collection size
    milvus:HNSW:M=16,efConstruction=100:ef=16,64,max_size=100000

A build-time parameter given several values is several builds; a search-time
one is swept on one build (through
:class:`~imsearch_align.framework.interfaces.TunableSearch` where the store
implements it, else one build per value, recorded as ``rebuilt``).
``max_size`` (not a store parameter) leaves the setting out above that
collection size. An IVF index without ``nlist`` takes :func:`auto_nlist` of
each collection size (Milvus at most :data:`MILVUS_NLIST_CAP`: it trains per
segment), and ``nprobe`` values above it are capped.

Each store mode (:mod:`~imsearch_align.collection.store_modes`) declares
its index types, aliases, refusals and ``nlist`` cap; this module reads
them and branches on no store's name. :func:`check_size` refuses a
collection larger than a mode can serve (Milvus Lite above 1M rows, Qdrant
local above 100k), naming the size and the alternative. Every check raises
:class:`SettingError` (a ``ValueError``) before any work.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from imsearch_align.collection.store_modes import MILVUS_NLIST_CAP, STORES, StoreMode

__all__ = [
    "MILVUS_NLIST_CAP",
    "STORES",
    "IndexSetting",
    "SettingError",
    "StoreMode",
    "auto_nlist",
    "check_size",
    "index_types",
    "parse_index",
    "resolve",
]


class SettingError(ValueError):
    """An index setting or collection size a store cannot take (the message says why)."""


#: Harness settings an index spec may carry besides the store's parameters.
HARNESS_PARAMS = ("max_size",)


def index_types(store: str) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """``{type: (build-time names, search-time names)}`` of a store mode, in its own spelling."""
    if store not in STORES:
        raise SettingError(f"unknown store {store!r}; choose from {', '.join(STORES)}")
    return STORES[store].index_types()


def _canonical_type(store: str, given: str) -> str:
    mode = STORES[store]
    types = mode.index_types()
    aliases = {k.lower(): v for k, v in mode.aliases.items()}
    for t in types:
        if t.lower() == aliases.get(given.lower(), given.lower()):
            return t
    why = next((f" ({w})" for t, w in mode.refused.items() if t.lower() == given.lower()), "")
    raise SettingError(
        f"--index {store}:{given}: store {store} has no index {given!r}{why}; "
        f"it accepts {', '.join(types)}"
    )


@dataclass(frozen=True)
class IndexSetting:
    """One build of a store's index and the search-time values swept on it.

    Attributes:
        store: the store mode (a key of :data:`STORES`).
        index_type: the store's own spelling (``hnsw``, ``IVF_FLAT``).
        build: build-time parameters (one value each; ``nlist`` absent = per size).
        sweep: search-time parameters, a list of values each (the grid is swept).
        max_size: leave the setting out for collections larger than this.
    """

    store: str
    index_type: str
    build: Mapping[str, int] = field(default_factory=dict)
    sweep: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    max_size: int | None = None

    @property
    def label(self) -> str:
        """``store:type:k=v,...`` (build parameters only)."""
        params = ",".join(f"{k}={v}" for k, v in self.build.items())
        return f"{self.store}:{self.index_type}" + (f":{params}" if params else "")

    @property
    def ivf(self) -> bool:
        """Whether the index is an inverted file (``nlist`` / ``nprobe``)."""
        return self.index_type.lower().startswith("ivf")


def _items(text: str) -> dict[str, list[str]]:
    """``a=1,b=2,3`` -> ``{"a": ["1"], "b": ["2", "3"]}`` (a bare value continues a list)."""
    out: dict[str, list[str]] = {}
    last = None
    for tok in (t.strip() for t in text.replace(":", ",").split(",")):
        if not tok:
            continue
        if "=" in tok:
            last, _, v = tok.partition("=")
            last = last.strip()
            if last in out:
                raise SettingError(f"parameter {last!r} is given twice")
            out[last] = [v.strip()]
        elif last is None:
            raise SettingError(f"{tok!r} has no name (expected name=value)")
        else:
            out[last].append(tok)
    return out


def _int(name: str, text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise SettingError(f"{name} must be a positive integer, got {text!r}") from None
    if v < 1:
        raise SettingError(f"{name} must be a positive integer, got {v}")
    return v


def parse_index(text: str) -> list[IndexSetting]:
    """The settings of one ``--index`` value (several when a build parameter has several
    values); unknown stores, types and parameters are refused, naming what is accepted."""
    store, _, rest = text.partition(":")
    if store not in STORES:
        raise SettingError(
            f"--index {text!r}: unknown store {store!r}; choose from {', '.join(STORES)}"
        )
    given, _, params = rest.partition(":")
    if not given:
        raise SettingError(f"--index {text!r}: expected STORE:TYPE[:PARAMS]")
    itype = _canonical_type(store, given)
    build_ok, search_ok = index_types(store)[itype]
    try:
        items = _items(params)
        values = {k: [_int(k, v) for v in vs] for k, vs in items.items()}
    except SettingError as exc:
        raise SettingError(f"--index {text!r}: {exc}") from None
    for name in values:
        if name not in build_ok + search_ok + HARNESS_PARAMS:
            accepted = ", ".join(build_ok + search_ok) or "no parameters"
            raise SettingError(
                f"--index {text!r}: {name} is not a parameter of {store} index {itype!r}; "
                f"it accepts {accepted} (and max_size)"
            )
    max_size = values.pop("max_size", [None])
    if len(max_size) > 1:
        raise SettingError(f"--index {text!r}: max_size takes one value")
    sweep = {k: tuple(dict.fromkeys(v)) for k, v in values.items() if k in search_ok}
    builds = [k for k in values if k in build_ok]
    out = []
    for combo in itertools.product(*(dict.fromkeys(values[k]) for k in builds)):
        s = IndexSetting(store, itype, dict(zip(builds, combo, strict=True)), sweep, max_size[0])
        _check_values(s, text)
        out.append(s)
    return out


def _check_values(s: IndexSetting, text: str) -> None:
    """The store mode's own checks of the values (FAISS: ranges, ``nprobe`` within ``nlist``)."""
    try:
        STORES[s.store].check_setting(s.index_type, s.build, s.sweep)
    except (TypeError, ValueError) as exc:
        raise SettingError(f"--index {text!r}: {exc}") from None


def auto_nlist(rows: int, cap: int | None = None) -> int:
    """IVF lists for a collection of ``rows``: ``4 sqrt(rows)``, at most ``rows / 39``
    (FAISS's rows per centroid) and ``cap`` (when given), at least 1."""
    n = min(int(4 * math.sqrt(max(rows, 1))), rows // 39)
    return max(1, n if cap is None else min(n, cap))


def resolve(s: IndexSetting, rows: int) -> tuple[dict[str, int], list[dict[str, int]]]:
    """Build parameters and the search grid of ``s`` for a collection of ``rows``.

    ``nlist`` absent from an IVF setting is :func:`auto_nlist` of ``rows``
    (at most the store mode's ``nlist_cap``: Milvus trains per segment); ``nprobe`` values are capped at ``nlist`` (repeats after capping dropped).
    """
    build = dict(s.build)
    sweep = {k: list(v) for k, v in s.sweep.items()}
    if s.ivf and "nlist" not in build:
        build["nlist"] = auto_nlist(rows, STORES[s.store].nlist_cap)
    if "nprobe" in sweep and "nlist" in build:
        sweep["nprobe"] = list(dict.fromkeys(min(v, build["nlist"]) for v in sweep["nprobe"]))
    names = list(sweep)
    grid = [dict(zip(names, c, strict=True)) for c in itertools.product(*sweep.values())]
    return build, grid or [{}]


def check_size(store: str, rows: int, *, what: str = "the collection") -> None:
    """Refuse ``rows`` above what store mode ``store`` can serve (the size and the alternative)."""
    mode = STORES[store]
    if mode.max_rows is not None and rows > mode.max_rows:
        raise SettingError(
            f"{what} has {rows:,} rows, more than --stores {store} serves (at most "
            f"{mode.max_rows:,}): {mode.alternative}"
        )
