"""What ``run_study`` returns: the cells it wrote or reused, by kind, and how it ended."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imsearch_align.study.spec import StudySpec

__all__ = ["StudyResult"]


def _ok(cell: dict[str, Any]) -> bool:
    return (cell.get("status") or {}).get("state") == "ok"


@dataclass
class StudyResult:
    """The cells of one study (each also one JSON file in ``out``) and how it ended.

    Attributes:
        spec: the study that ran.
        out: its output folder.
        cells: the sweep cells (``kind: collection_scale``), in run order.
        filtered: the filtered cells (``kind: filtered``).
        concurrency: the concurrency cells (``kind: concurrency``).
        seconds: seconds measuring the filtered and concurrency cells, and in all.
        unreachable: store modes found unreachable, with the error (their later
            cells were not run).
        interrupted: the study was stopped (Ctrl-C, or SIGTERM where the caller turns it
            into a ``KeyboardInterrupt``) before its last cell; ``stopped_by`` holds it.
        outputs: the tables and figures written (name -> path).
    """

    spec: StudySpec
    out: Path
    cells: list[dict[str, Any]] = field(default_factory=list)
    filtered: list[dict[str, Any]] = field(default_factory=list)
    concurrency: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False
    stopped_by: BaseException | None = None
    outputs: dict[str, Path] = field(default_factory=dict)

    @property
    def all_cells(self) -> list[dict[str, Any]]:
        """Every cell of every kind."""
        return self.cells + self.filtered + self.concurrency

    @property
    def failed(self) -> list[dict[str, Any]]:
        """The cells whose status is not ok."""
        return [c for c in self.all_cells if not _ok(c)]

    @property
    def ok(self) -> bool:
        """Every cell ok, every store reached, the study finished."""
        return not self.failed and not self.unreachable and not self.interrupted

    @property
    def exit_code(self) -> int:
        """0 every cell ok; 1 a cell failed or a store was unreachable; 130 interrupted."""
        if self.interrupted:
            return 130
        return 0 if self.ok else 1
