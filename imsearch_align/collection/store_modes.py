"""The store modes of the collection study: each one declares what the study needs to know.

A :class:`StoreMode` is one way to run a store in a study, by the name the
study spec uses (``--stores faiss milvus``). It declares its registry name,
its index types and their build- and search-time parameters, the spelling
aliases and refusals of its types, the most rows it serves (and what to use
instead), whether it runs in this process, whether it needs a server URI,
its IVF ``nlist`` cap, its default index grids, how it opens for one index
setting, and the bytes it keeps on disk. Nothing in ``collection/``,
``concurrency/`` or ``study/`` branches on a store's name: adding a store to
the study is one subclass here, added to :data:`STORES`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from imsearch_align.framework.registry import STORES as REGISTRY

__all__ = [
    "MILVUS_NLIST_CAP",
    "STORES",
    "ExactMode",
    "FaissMode",
    "LanceDBMode",
    "MilvusLiteMode",
    "MilvusServerMode",
    "QdrantLocalMode",
    "StoreMode",
    "disk_bytes",
]

#: The most IVF lists a Milvus collection gets by default. Milvus trains one IVF index
#: per sealed segment (at most ``dataCoord.segment.maxSize``, 512 MB: about 350k rows
#: of 384 float32), not one over the collection; Milvus's own guidance is ``4 sqrt``
#: of the rows searched together, 2,366 for such a segment, and the IVF_FLAT build
#: of 1M x 256 on Milvus 2.3.5 here took 315 s at nlist 1024 (build time grows with
#: nlist). Give ``nlist=`` to override.
MILVUS_NLIST_CAP = 1024


def disk_bytes(path: str | Path) -> int | None:
    """Bytes of a file or of every file under a folder (None when it does not exist)."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    if not p.is_dir():
        return None
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


class StoreMode:
    """One way to run a store in the study (see the module docstring).

    Class attributes a mode sets: ``name`` (the spec's spelling),
    ``registry`` (its :data:`~imsearch_align.framework.registry.STORES`
    name), ``max_rows`` and ``alternative`` (the size it serves at most and
    what to use above it), ``in_process``, ``needs_uri``, ``nlist_cap``,
    ``aliases`` (type spellings), ``refused`` (types it refuses with why),
    ``default_index`` and ``quick_index`` (its grids in a full and a quick
    study; the quick one defaults to the full one).
    """

    name: ClassVar[str]
    registry: ClassVar[str]
    max_rows: ClassVar[int | None] = None
    alternative: ClassVar[str] = ""
    in_process: ClassVar[bool] = True
    needs_uri: ClassVar[bool] = False
    nlist_cap: ClassVar[int | None] = None
    aliases: ClassVar[Mapping[str, str]] = {}
    refused: ClassVar[Mapping[str, str]] = {}
    default_index: ClassVar[tuple[str, ...]] = ()
    quick_index: ClassVar[tuple[str, ...] | None] = None

    def index_types(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        """``{type: (build-time names, search-time names)}`` in the store's own spelling."""
        return {"flat": ((), ())}

    def check_setting(self, index_type: str, build: Mapping[str, int],
                      sweep: Mapping[str, tuple[int, ...]]) -> None:  # fmt: skip
        """The store's own checks of an index setting's values (raise ``ValueError``)."""

    def open(
        self, index_type: str, build: dict[str, int], search: dict[str, int], *,
        uri: str | None, workdir: Path,
    ) -> Any:  # fmt: skip
        """The store for one index setting (build and initial search parameters)."""

        return REGISTRY.get(self.registry)()

    def disk_bytes(self, workdir: Path) -> int | None:
        """Bytes the mode keeps under the study's work folder (None: nothing on disk)."""
        return None

    def grid(self, quick: bool) -> tuple[str, ...]:
        """The index settings of a full (or quick) study."""
        return self.quick_index if quick and self.quick_index is not None else self.default_index


class ExactMode(StoreMode):
    """The exact in-process store (brute force, tie-aware)."""

    name, registry = "exact", "exact"
    default_index = ("exact:flat",)


class FaissMode(StoreMode):
    """FAISS in this process: flat, HNSW, IVF-Flat/SQ8/PQ."""

    name, registry = "faiss", "faiss"
    aliases: ClassVar[Mapping[str, str]] = {"ivf": "ivf_flat"}
    default_index = (
        "faiss:flat:max_size=100000",
        "faiss:ivf_flat:nprobe=1,4,16,64",
        "faiss:hnsw:M=16,efConstruction=100,efSearch=16,32,64,128,max_size=100000",
    )
    quick_index = (
        "faiss:flat",
        "faiss:ivf_flat:nprobe=1,8",
        "faiss:hnsw:M=16,efConstruction=64,efSearch=16,64",
    )

    def index_types(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        from imsearch_align.adapters.faiss_index import BUILD_PARAMS, SEARCH_PARAMS

        return {t: (BUILD_PARAMS[t], SEARCH_PARAMS[t]) for t in BUILD_PARAMS}

    def check_setting(self, index_type: str, build: Mapping[str, int],
                      sweep: Mapping[str, tuple[int, ...]]) -> None:  # fmt: skip
        """FAISS's own checks of the values (ranges, ``nprobe`` within a given ``nlist``)."""
        from imsearch_align.adapters.faiss_index import check_search_params, make_spec

        spec = make_spec(index_type, {**build, "nlist": build.get("nlist")})
        for name, vals in sweep.items():
            for v in vals:
                if name == "nprobe" and "nlist" not in build:
                    continue  # capped at the per-size nlist
                check_search_params(spec, {name: v})

    def open(self, index_type, build, search, *, uri, workdir):

        return REGISTRY.get(self.registry)(index=index_type, **build, **search)


class _MilvusMode(StoreMode):
    registry = "milvus"
    nlist_cap = MILVUS_NLIST_CAP

    def index_types(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        from imsearch_align.adapters.milvus.config import INDEX_TYPES

        out = {t: (tuple(sorted(b)), tuple(sorted(s))) for t, (b, s) in INDEX_TYPES.items()}
        return {t: v for t, v in out.items() if t not in self.refused}

    def _open(self, where: str, index_type: str, build: dict, search: dict) -> Any:
        return REGISTRY.get(self.registry)(
            where, index=index_type, index_params=build, search_params=search,
            check_duplicates=False,  # ids are unique by construction (checked by the truth)
        )  # fmt: skip


class MilvusServerMode(_MilvusMode):
    """A Milvus server at a URI (the 2.3.5 standalone, a cluster)."""

    name = "milvus"
    in_process, needs_uri = False, True
    default_index = (
        "milvus:FLAT:max_size=100000",
        "milvus:IVF_FLAT:nprobe=1,4,16,64",
        "milvus:HNSW:M=16,efConstruction=100,ef=16,32,64,128,max_size=100000",
    )
    quick_index = ("milvus:FLAT", "milvus:IVF_FLAT:nprobe=8")

    def open(self, index_type, build, search, *, uri, workdir):
        return self._open(uri, index_type, build, search)


#: Index types Milvus Lite refuses although a Milvus server takes them.
_LITE_REFUSES = "Milvus Lite refuses it; a Milvus server takes it: --stores milvus"


class MilvusLiteMode(_MilvusMode):
    """Milvus Lite in this process, its database in the study's work folder."""

    name = "milvus-lite"
    max_rows = 1_000_000
    alternative = (
        "Milvus Lite searches one index per 100k-row segment (p50 445 ms per query at 1M); "
        "use --stores milvus --uri http://HOST:19530 (a Milvus standalone) or faiss"
    )
    refused: ClassVar[Mapping[str, str]] = {"IVF_PQ": _LITE_REFUSES, "DISKANN": _LITE_REFUSES}
    # FLAT only by default: Milvus Lite searched its IVF_FLAT index or brute force by how far
    # its segments had been indexed, so one cell gave ANN recall@10 0.439, 0.678 and 1.000
    # in identical runs; measure IVF on a Milvus server (--stores milvus), or ask for it
    # here with --index milvus-lite:IVF_FLAT:nprobe=8 knowing that
    default_index = ("milvus-lite:FLAT",)

    def open(self, index_type, build, search, *, uri, workdir):
        Path(workdir).mkdir(parents=True, exist_ok=True)
        return self._open(str(Path(workdir) / "milvus_lite.db"), index_type, build, search)

    def disk_bytes(self, workdir: Path) -> int | None:
        return disk_bytes(Path(workdir) / "milvus_lite.db")


class QdrantLocalMode(StoreMode):
    """Qdrant's local mode: exact search on the client, its data in the work folder."""

    name, registry = "qdrant-local", "qdrant"
    max_rows = 100_000
    alternative = (
        "Qdrant's local mode searches by brute force on the client (4-11 q/s at 100k); use "
        "a Qdrant server, or faiss / milvus"
    )
    default_index = ("qdrant-local:flat",)

    def open(self, index_type, build, search, *, uri, workdir):

        Path(workdir).mkdir(parents=True, exist_ok=True)
        return REGISTRY.get(self.registry)(path=str(Path(workdir) / "qdrant_local"), exact=True)

    def disk_bytes(self, workdir: Path) -> int | None:
        return disk_bytes(Path(workdir) / "qdrant_local")


class LanceDBMode(StoreMode):
    """LanceDB embedded, a table in the work folder: flat is exact, ``ivf_flat`` is
    rebuilt per ``nprobe``."""

    name, registry = "lancedb", "lancedb"
    default_index = ("lancedb:flat",)

    def index_types(self) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
        return {"flat": ((), ()), "ivf_flat": (("nlist",), ("nprobe",))}

    def open(self, index_type, build, search, *, uri, workdir):

        Path(workdir).mkdir(parents=True, exist_ok=True)
        factory = REGISTRY.get(self.registry)
        return factory(str(Path(workdir) / "lancedb"), index=index_type, **build, **search)

    def disk_bytes(self, workdir: Path) -> int | None:
        return disk_bytes(Path(workdir) / "lancedb")


#: The store modes of the study, by their name in the spec.
STORES: dict[str, StoreMode] = {
    m.name: m
    for m in (
        FaissMode(), ExactMode(), MilvusLiteMode(), MilvusServerMode(), QdrantLocalMode(),
        LanceDBMode(),
    )
}  # fmt: skip
