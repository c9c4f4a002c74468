"""What the perf sections (``benchmarks/perf_*.py``) share: the result row.

Every section returns ``{"rows": [...], ...}``; a row is one measured figure
with its target, and :func:`benchmarks/perf.py <perf.format_table>` prints
them. A section builds its rows with the builder :func:`row_maker` gives it::

    from perf_common import row_maker

    _row = row_maker("stores")
    _row("exact search", qps, "q/s", ">= 1,000", qps >= 1_000)

The import works both ways a section runs: as a script
(``python benchmarks/perf_stores.py``, whose folder Python puts first on
``sys.path``) and through ``benchmarks/perf.py``, which puts this folder on
``sys.path`` before importing the sections.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["row_maker"]


def row_maker(section: str, *, as_float: bool = True) -> Callable[..., dict[str, Any]]:
    """The row builder of ``section``: ``row(item, value, unit, target=None, ok=None)``.

    Args:
        section: the section's name, stored in every row.
        as_float: store ``float(value)`` (a section whose values are also
            text or counts passes False: the value is stored as given).
    """

    def row(
        item: str, value: Any, unit: str, target: str | None = None, ok: bool | None = None
    ) -> dict[str, Any]:
        return {
            "section": section,
            "item": item,
            "value": float(value) if as_float else value,
            "unit": unit,
            "target": target,
            "ok": ok,
        }

    return row
