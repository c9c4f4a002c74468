"""A study cell's identity and file: what its cells share (:class:`CellBase`), what defines it, where it is written, whether a
clean one is there to reuse (``--skip-existing``)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imsearch_align.experiment.study_cell import CELL_FORMAT, CellError, load_cell

if TYPE_CHECKING:
    from imsearch_align.collection.settings import IndexSetting

__all__ = [
    "FORMAT",
    "CellBase",
    "DeployContext",
    "cell_identity",
    "cell_path",
    "load_clean",
    "read_ok",
]

#: The ``format`` of a study cell (:data:`~imsearch_align.experiment.study_cell.CELL_FORMAT`).
FORMAT = CELL_FORMAT


@dataclass(frozen=True)
class CellBase:
    """What the cells of one method, direction and collection size share.

    ``config`` is what else defines them (data, encoders, seed, the query
    sample, the distractor source): it enters the cells' key.
    """

    dataset: str
    method: str
    direction: str
    distractors: int
    documents: int
    ks: tuple[int, ...]
    config: dict[str, Any] = field(default_factory=dict)
    command: tuple[str, ...] = ()
    measure_names: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        """Items searched: the split's documents plus the distractors."""
        return self.documents + self.distractors

    @property
    def measures(self) -> list[str]:
        """``measure_names``, else HitRate at every cut-off and nDCG at the largest."""
        if self.measure_names:
            return list(self.measure_names)
        return [f"HitRate@{k}" for k in self.ks] + [f"nDCG@{max(self.ks)}"]


@dataclass(frozen=True)
class DeployContext:
    """A build's deployable cell, which its filtered and concurrency cells start from.

    Attributes:
        base: what the build's cells share.
        setting: its index setting.
        build: its build-time parameters.
        search: the deployable search-time setting.
        ident: the deployable cell's identity (:func:`cell_identity`).
        path: the deployable cell's file (the extras' files sit beside it).
        cell: the deployable cell itself (its shared fields).
        cpu: what counts the searcher's CPU seconds per timed pass
            (:class:`~imsearch_align.collection.passes.CpuClock`; None: nothing).
    """

    base: CellBase
    setting: IndexSetting | None
    build: dict[str, int]
    search: dict[str, int]
    ident: dict[str, Any]
    path: Path
    cell: dict[str, Any]
    cpu: Any = None


def cell_identity(
    base: CellBase, s: IndexSetting, build: dict[str, int], search: dict[str, int]
) -> dict[str, Any]:
    """Everything that defines a cell (its key is the hash of this)."""
    return {
        "dataset": base.dataset,
        "method": base.method,
        "direction": base.direction,
        "store": s.store,
        "index": s.index_type,
        "build": dict(sorted(build.items())),
        "search": dict(sorted(search.items())),
        "distractors": base.distractors,
        "documents": base.documents,
        "ks": list(base.ks),
        "config": base.config,
        # only when chosen: the cells of the default measures keep their keys
        **({"measures": list(base.measure_names)} if base.measure_names else {}),
    }


def cell_path(out: Path, ident: dict[str, Any]) -> Path:
    """``{dataset}_{direction}_{method}_{store}_{index}_{params}_{size}_{key}.json``."""
    text = json.dumps(ident, sort_keys=True, default=str)
    key = hashlib.sha256(text.encode()).hexdigest()[:10]
    params = "-".join(f"{k}{v}" for k, v in {**ident["build"], **ident["search"]}.items())
    parts = [ident["dataset"], ident["direction"], ident["method"], ident["store"], ident["index"]]
    parts += [params or "default", f"d{ident['distractors']}", key]
    return Path(out) / (re.sub(r"[^A-Za-z0-9._=+-]+", "-", "_".join(parts)) + ".json")


def read_ok(path: Path) -> dict[str, Any] | None:
    """The record of the study cell stored at ``path`` when it finished ok (else None:
    missing, unreadable, not a cell, failed), read by the one reader
    (:func:`~imsearch_align.experiment.study_cell.load_cell`)."""
    if not Path(path).is_file():
        return None
    try:
        cell = load_cell(path)
    except CellError:
        return None
    return dict(cell.record) if cell.ok else None


def load_clean(path: Path) -> dict[str, Any] | None:
    """The sweep cell (``kind: collection_scale``) stored at ``path`` when it finished ok
    (else None: run it again)."""
    data = read_ok(path)
    if data is None or data.get("kind") != "collection_scale" or data.get("format") != FORMAT:
        return None  # reused only as the study wrote it
    return data
