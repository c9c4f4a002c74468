"""A figure's canvas: made without pyplot, the shared colours, saved atomically as PNG."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def new_figure(figsize: tuple[float, float] = (7.5, 4.8)):
    """A new :class:`~matplotlib.figure.Figure` (150 dpi, constrained layout) and its axes."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=150, layout="constrained")
    return fig, fig.add_subplot()


def save(fig: Any, out_path: str | os.PathLike) -> Path:
    """Write ``fig`` as a PNG to ``out_path`` (atomically; folders are created)."""
    from imsearch_align.framework.atomic import atomic_write

    return atomic_write(Path(out_path), lambda f: fig.savefig(f, format="png"))


def palette() -> list[str]:
    """Line colours: colour-blind-safe (Okabe-Ito), black last."""
    return ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]


def grid(ax: Any) -> None:
    """The grid every figure draws: major lines, fainter minor ones."""
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)
