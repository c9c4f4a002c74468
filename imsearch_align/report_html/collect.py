"""Finding what a results folder holds: experiment results, study cells, and what was skipped."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from imsearch_align.experiment.result import ExperimentResult, ResultSchemaError
from imsearch_align.experiment.study_cell import CellError, StudyCell, is_cell, read_cell
from imsearch_align.leaderboard import find_result_files

__all__ = ["Collected", "ReportError", "collect"]


class ReportError(ValueError):
    """The report cannot be made: no folder, or no result in it."""


@dataclass
class Collected:
    """What a folder holds: results, study cells by kind, and skipped files with the reason."""

    root: str
    results: list[ExperimentResult] = field(default_factory=list)
    cells: list[StudyCell] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    n_files: int = 0

    def of_kind(self, kind: str) -> list[StudyCell]:
        """The study cells of ``kind``."""
        return [c for c in self.cells if c.kind == kind]


def _read(f: Path, shown: str, out: Collected) -> None:
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        out.skipped.append((shown, f"cannot read it ({exc})"))
        return
    except json.JSONDecodeError as exc:
        out.skipped.append((shown, f"not valid JSON ({exc})"))
        return
    except RecursionError:
        out.skipped.append((shown, "JSON nested too deeply to be a result or a cell"))
        return
    if is_cell(data):
        try:
            out.cells.append(read_cell(data, shown))
        except CellError as exc:
            out.skipped.append((shown, f"a {data['kind']} cell with a bad field: {exc}"))
        return
    try:
        out.results.append(ExperimentResult.from_dict(data, path=shown))
    except ResultSchemaError as exc:
        out.skipped.append((shown, str(exc)))
    except (TypeError, ValueError, KeyError) as exc:
        out.skipped.append(
            (shown, f"not a readable result ({type(exc).__name__}: {exc})"),
        )


def collect(root: str | os.PathLike) -> Collected:
    """Every result and study cell in the JSON files under ``root`` (recursively,
    hidden folders skipped, as ``build`` reads them); raises :class:`ReportError`
    when ``root`` is not a folder or holds neither."""
    path = Path(root)
    if not path.is_dir():
        raise ReportError(f"results folder {str(path)!r} does not exist or is not a folder")
    files = find_result_files([path])
    out = Collected(root=str(path), n_files=len(files))
    for f in files:
        _read(f, str(f.relative_to(path)), out)
    if not out.results and not out.cells:
        why = f"; skipped: {out.skipped[0][0]}: {out.skipped[0][1]}" if out.skipped else ""
        raise ReportError(
            f"no result for the report in {str(path)!r} ({len(files)} JSON files read{why}); "
            "give the folder that imsearch-align eval/sweep or a study wrote"
        )
    return out
