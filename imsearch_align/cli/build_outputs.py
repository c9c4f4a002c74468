"""What ``build`` reads and what it may write over.

:func:`check_outputs` refuses an ``--output`` or ``--markdown`` path that
``build`` cannot prove is its own to replace: one of the inputs, a result
file, a directory, or an existing file that is not a CSV (a Markdown
leaderboard) that ``build`` wrote. An empty file holds nothing to lose.
:func:`unique_results` counts a result found twice (the same bytes in two
places) once.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

from imsearch_align.cli.common import UsageError

__all__ = ["check_outputs", "unique_results"]

#: Columns every CSV written by ``build`` starts its header with (the config's identity).
_CSV_COLUMNS = frozenset({"dataset", "method", "store", "task"})
_MD_ALIGN = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+$")
#: Bytes of a file read to tell whether it is ours.
_SNIFF = 1 << 20


def _is_result(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return (
        isinstance(data, dict)
        and "config" in data
        and bool({"schema_version", "metrics", "status", "task"} & set(data))
    )


def _is_build_csv(text: str) -> bool:
    header = text.split("\n", 1)[0].strip().split(",")
    return _CSV_COLUMNS <= set(header)


def _is_build_markdown(text: str) -> bool:
    from imsearch_align.experiment.report import HEADLINE_LEGEND

    lines = text.splitlines()
    if lines == ["_no results_"]:
        return True
    if len(lines) < 2 or not lines[0].startswith("| ") or not _MD_ALIGN.match(lines[1]):
        return False
    return all(ln.startswith("|") or not ln.strip() or ln == HEADLINE_LEGEND for ln in lines)


def _check_one(arg: str, path: Path, inputs: set[Path], what: str) -> None:
    expected = f"expected a new file or {what} written by build"
    if path.resolve() in inputs:
        raise UsageError(f"{arg} {str(path)!r} is one of the result files build reads; {expected}")
    if path.is_dir():
        raise UsageError(f"{arg} {str(path)!r} is a directory; {expected}")
    if not path.exists():
        return
    try:
        with path.open("rb") as f:
            text = f.read(_SNIFF).decode("utf-8-sig", errors="replace")
    except OSError as exc:
        raise UsageError(f"{arg} {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    if not text.strip():
        return  # an empty file holds nothing to lose
    if _is_result(text):
        raise UsageError(f"{arg} {str(path)!r} holds an experiment result; {expected}")
    ours = _is_build_csv(text) if what == "a CSV" else _is_build_markdown(text)
    if not ours:
        raise UsageError(
            f"{arg} {str(path)!r} exists and is not {what} written by build; {expected} "
            "(move the file away to replace it)"
        )


def check_outputs(csv: Path, markdown: Path | None, inputs: Sequence[Path]) -> None:
    """Refuse outputs that ``build`` cannot prove are its own to replace (see the module)."""
    read = {p.resolve() for p in inputs}
    if markdown is not None and csv.resolve() == markdown.resolve():
        raise UsageError(
            f"--output and --markdown are both {str(csv)!r}; expected two different files"
        )
    _check_one("--output", csv, read, "a CSV")
    if markdown is not None:
        _check_one("--markdown", markdown, read, "a Markdown leaderboard")


def unique_results(files: Sequence[Path]) -> tuple[list[Path], list[tuple[Path, Path]]]:
    """``files`` with each content once (a copy of a result counts once), and
    the ``(copy, first)`` pairs left out."""
    seen: dict[str, Path] = {}
    keep, dropped = [], []
    for f in files:
        try:
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
        except OSError:
            keep.append(f)  # unreadable: load_results says so
            continue
        if digest in seen:
            dropped.append((f, seen[digest]))
        else:
            seen[digest] = f
            keep.append(f)
    return keep, dropped
