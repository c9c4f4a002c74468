"""One build of one index setting on one collection, as the study runs it: what it is built
from (:class:`BuildJob`) and what it holds while it is up (:class:`BuildState`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from imsearch_align.collection.aligned import CollectionBlocks
from imsearch_align.collection.cell_files import CellBase
from imsearch_align.collection.measure import BuildStats
from imsearch_align.collection.prepare import Prepared
from imsearch_align.collection.settings import IndexSetting

__all__ = ["BuildJob", "BuildState"]


@dataclass
class BuildState:
    """The build while it is up: the store, its collection's name, the insert's costs and
    the collection's exact truth (all None until built, again after it is dropped)."""

    store: Any = None
    name: str | None = None
    stats: BuildStats | None = None
    truth: Any = None
    #: CPU seconds of what searches this build (:class:`~imsearch_align.collection.passes.
    #: CpuClock`), found once per build.
    cpu: Any = None
    #: The wait for the segment count to settle after the build (None: the store does not
    #: tell its segments; :func:`~imsearch_align.collection.passes.wait_settled`).
    settled: dict[str, Any] | None = None
    #: The control queries' exact truth on this build's collection (None: no controls).
    control_truth: Any = None


@dataclass(frozen=True)
class BuildJob:
    """What one build is made from and swept over.

    Attributes:
        prep: the fitted method's queries, documents and judgements.
        coll: the collection (documents plus distractors, aligned block by block).
        base: what the build's cells share.
        setting: the index setting.
        build: its build-time parameters for this collection's size.
        grid: the search-time settings swept on it.
        truth_of: the collection's exact truth from its documents' stream digest.
        state: the build while it is up.
        control_truth_of: the control queries' exact truth, likewise (``--control``).
    """

    prep: Prepared
    coll: CollectionBlocks
    base: CellBase
    setting: IndexSetting
    build: dict[str, int]
    grid: list[dict[str, int]]
    truth_of: Callable[[str], Any]
    state: BuildState = field(default_factory=BuildState)
    #: The control queries' exact truth from the documents' digest (None: no controls).
    control_truth_of: Callable[[str], Any] | None = None
