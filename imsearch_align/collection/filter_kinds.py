"""The kinds of filter the study measures, each a small class: a share of the collection
kept (:class:`ShareKept`) and the dataset's own class label (:class:`WithinLabel`).

A kind knows how the spec spells it (``--filters 0.5 0.1 label``), the file
its cell is written to, what a failed cell records of it, and how it is
measured on a built index (through the
:class:`~imsearch_align.collection.filtered_study.FilterPlan` that holds
the collection's attributes and exact filtered truths). :func:`parse_filter`
turns one spec value into a kind and refuses what no kind reads, naming
the kinds. A numeric range is one more class here, added to
:data:`FILTER_KINDS`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from imsearch_align.collection.aligned import CollectionBlocks
from imsearch_align.collection.cell_files import DeployContext
from imsearch_align.collection.filters import selectivity_filter
from imsearch_align.collection.label_cell import label_cell
from imsearch_align.collection.prepare import Prepared

__all__ = ["FILTER_KINDS", "FilterKind", "ShareKept", "WithinLabel", "parse_filter"]


class FilterKind(ABC):
    """One kind of filter (see the module docstring); a subclass implements :meth:`measure`."""

    #: How the spec names the kind (``label``); a share is written as its number.
    name: ClassVar[str]
    #: Whether the kind needs the dataset's class labels.
    needs_labels: ClassVar[bool] = False

    def text(self) -> str:
        """How the kind is written in the spec and in progress lines."""
        return self.name

    def path(self, unfiltered: Path) -> Path:
        """The kind's cell file beside the unfiltered cell's."""
        return unfiltered.with_name(f"filtered-{self.text()}_{unfiltered.name}")

    def failed_record(self) -> dict[str, Any]:
        """What a failed cell of this kind records as its ``filter``."""
        return {"kind": self.name}

    @abstractmethod
    def measure(self, plan: Any, runner: Any, store: Any, name: str, prep: Prepared, coll: CollectionBlocks,
                ctx: DeployContext) -> dict[str, Any]:  # fmt: skip
        """The kind's cell on the built collection ``name``."""


@dataclass(frozen=True)
class ShareKept(FilterKind):
    """Keep ``share`` of the collection (whole categories of a seeded attribute, the
    relevant items inside): ``filter.selectivity``."""

    share: float
    name: ClassVar[str] = "share"

    def __post_init__(self) -> None:
        selectivity_filter(self.share)  # (0, 1], a whole number of categories

    def text(self) -> str:
        return f"s{self.share:g}"

    def failed_record(self) -> dict[str, Any]:
        return {"selectivity": self.share}

    def measure(self, plan, runner, store, name, prep, coll, ctx):  # the plan's share cell
        return plan.share_cell(runner, store, name, prep, coll, ctx, self.share)


@dataclass(frozen=True)
class WithinLabel(FilterKind):
    """Search each query within the class label of its relevant item (the dataset's own
    metadata; distractors carry their mixture component's majority label)."""

    name: ClassVar[str] = "label"
    needs_labels: ClassVar[bool] = True

    def failed_record(self) -> dict[str, Any]:
        return {"field": "label"}

    def measure(self, plan, runner, store, name, prep, coll, ctx):
        return label_cell(plan, runner, store, name, prep, coll, ctx)


#: Kinds named by a word in the spec (a share is written as a number).
FILTER_KINDS: dict[str, type[FilterKind]] = {"label": WithinLabel}


def parse_filter(value: Any) -> FilterKind:
    """One spec value as a filter kind: a number (or numeric word) is the share kept, a
    word names a kind of :data:`FILTER_KINDS`; anything else raises ``ValueError``."""
    if isinstance(value, FilterKind):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return ShareKept(float(value))
    if isinstance(value, str):
        try:
            return ShareKept(float(value))
        except ValueError as exc:
            if value.strip().replace(".", "", 1).isdigit():
                raise exc from None
        if value in FILTER_KINDS:
            return FILTER_KINDS[value]()
    raise ValueError(
        f"unknown filter kind {value!r}; give a share of the collection to keep (a number in "
        f"(0, 1], e.g. 0.1) or one of: {', '.join(FILTER_KINDS)}"
    )
