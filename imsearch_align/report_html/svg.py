"""Small charts drawn as inline SVG: lines and points on linear or log axes.

A :class:`Chart` holds its series, dashed reference lines (a ceiling, a
baseline), a Pareto frontier and marked points; :func:`render` writes its
``<svg>`` (every text escaped, every point with a tooltip) and
:func:`legend_items` what its legend shows. Colours are the plots'
colour-blind-safe palette, so a report and a PNG agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape as _html_escape

from imsearch_align.framework.secrets import redact_uris
from imsearch_align.plots._figure import palette

__all__ = [
    "Chart",
    "Figure",
    "Series",
    "legend_items",
    "nice_ticks",
    "render",
    "swatch",
    "tick_text",
]


def escape(text: str, quote: bool = True) -> str:
    """``text`` for the SVG: URI user info redacted (a store name may hold a server's URI),
    then HTML-escaped. Every text of a chart, label, title and tooltip goes through it."""
    return _html_escape(redact_uris(str(text)), quote=quote)


WIDTH, HEIGHT = 720, 400
_LEFT, _RIGHT, _TOP, _BOTTOM = 68, 20, 30, 50
_SHAPES = ("circle", "square", "triangle", "diamond")
_GREY = "#6b6b6b"


@dataclass
class Series:
    """One line: its points (in drawing order), a tooltip and an optional label per point,
    and an optional band ``(low, high)`` per point."""

    label: str
    xs: list[float]
    ys: list[float]
    tips: list[str] = field(default_factory=list)
    point_labels: list[str] = field(default_factory=list)
    band: list[tuple[float, float]] | None = None
    line: bool = True
    dashed: bool = False
    color: int | None = None


def _style(i: int, s: Series) -> tuple[str, str]:
    """The colour and marker shape of series ``i`` (its own ``color`` index if set)."""
    colors = palette()
    k = i if s.color is None else s.color
    return colors[k % len(colors)], _SHAPES[(k // len(colors) + k) % len(_SHAPES)]


@dataclass
class Chart:
    """A chart's content; ``x_format``: ``"number"`` (1k, 10k) or ``"percent"``."""

    title: str
    x_label: str
    y_label: str
    series: list[Series]
    log_x: bool = False
    x_ticks: list[float] | None = None
    x_format: str = "number"
    y_from_zero: bool = True
    ceilings: list[tuple[float, str]] = field(default_factory=list)
    frontier: list[tuple[float, float]] = field(default_factory=list)
    marks: list[tuple[float, float, str]] = field(default_factory=list)


@dataclass
class Figure:
    """A chart for the page: its caption, the commands that made its data, and notes."""

    chart: Chart
    caption: str
    commands: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def tick_text(v: float, fmt: str = "number") -> str:
    """A tick label: ``1.5k``, ``2M``, ``0.25``; ``10%`` for ``fmt="percent"``."""
    if fmt == "percent":
        return f"{v * 100:.3g}%"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:.3g}M"
    if a >= 1e3:
        return f"{v / 1e3:.3g}k"
    return f"{v:.3g}"


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round ticks covering ``[lo, hi]`` (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    if not hi > lo:
        lo, hi = (lo - 0.5, hi + 0.5) if lo == 0 else (lo - abs(lo) / 2, hi + abs(hi) / 2)
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = mag * next(s for s in (1, 2, 2.5, 5, 10) if s * mag >= raw)
    start, end = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(i * step, 12) for i in range(start, end + 1)]


def _log_range(lo: float, hi: float) -> tuple[float, float]:
    """``[lo, hi]`` widened by 6% of its decades on each side (a quarter decade if one value)."""
    a, b = math.log10(lo), math.log10(hi)
    pad = 0.06 * (b - a) if b > a else 0.25
    return 10 ** (a - pad), 10 ** (b + pad)


def _log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten in ``[lo, hi]``, with their 2 and 5 multiples over few decades."""
    a, b = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mults = (1,) if b - a > 3 else (1, 2, 5)
    ticks = [m * 10.0**e for e in range(a, b + 1) for m in mults]
    return [t for t in ticks if lo <= t * (1 + 1e-9) and t <= hi * (1 + 1e-9)]


class _Frame:
    """The mapping from data to pixels, and the ticks of both axes."""

    def __init__(self, chart: Chart) -> None:
        xs = [x for s in chart.series for x in s.xs] + [x for x, _ in chart.frontier]
        ys = [y for s in chart.series for y in s.ys] + [y for y, _ in chart.ceilings]
        ys += [v for s in chart.series for b in (s.band or ()) for v in b]
        xs = [x for x in xs if math.isfinite(x) and (x > 0 or not chart.log_x)] or [1.0]
        ys = [y for y in ys if math.isfinite(y)] or [0.0, 1.0]
        self.log = chart.log_x
        if self.log:
            self.x0, self.x1 = _log_range(min(xs), max(xs))
            self.xt = sorted(t for t in chart.x_ticks or _log_ticks(self.x0, self.x1) if t > 0)
        else:
            self.xt = sorted(chart.x_ticks or nice_ticks(min(xs), max(xs)))
            pad = 0.04 * (max(xs) - min(xs)) if chart.x_ticks else 0.0
            self.x0, self.x1 = min(self.xt + xs) - pad, max(self.xt + xs) + pad
        ylo = min(0.0, min(ys)) if chart.y_from_zero else min(ys)
        self.yt = nice_ticks(ylo, max(ys))
        self.y0, self.y1 = self.yt[0], self.yt[-1]
        self.pw, self.ph = WIDTH - _LEFT - _RIGHT, HEIGHT - _TOP - _BOTTOM

    def _t(self, x: float) -> float:
        return math.log10(x) if self.log else x

    def px(self, x: float) -> float:
        span = self._t(self.x1) - self._t(self.x0) or 1.0
        return _LEFT + (self._t(x) - self._t(self.x0)) / span * self.pw

    def py(self, y: float) -> float:
        span = self.y1 - self.y0 or 1.0
        return _TOP + (1 - (y - self.y0) / span) * self.ph


def _marker(shape: str, x: float, y: float, color: str, r: float = 4.5) -> str:
    if shape == "square":
        return f'<rect x="{x - r:.1f}" y="{y - r:.1f}" width="{2 * r:.1f}" height="{2 * r:.1f}" fill="{color}"/>'
    if shape in ("triangle", "diamond"):
        pts = (
            [(x, y - r * 1.2), (x + r * 1.1, y + r * 0.9), (x - r * 1.1, y + r * 0.9)]
            if shape == "triangle"
            else [(x, y - r * 1.3), (x + r * 1.1, y), (x, y + r * 1.3), (x - r * 1.1, y)]
        )
        return f'<polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" fill="{color}"/>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{r:.1f}" fill="{color}"/>'


def _axes(chart: Chart, f: _Frame) -> list[str]:
    out = [
        f'<rect x="{_LEFT}" y="{_TOP}" width="{f.pw}" height="{f.ph}" fill="#fff" stroke="#999"/>'
    ]
    for t in f.xt:
        x = f.px(t)
        out.append(
            f'<line x1="{x:.1f}" y1="{_TOP}" x2="{x:.1f}" y2="{_TOP + f.ph}" stroke="#e3e3e3"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{_TOP + f.ph + 16}" text-anchor="middle">{escape(tick_text(t, chart.x_format))}</text>'
        )
    for t in f.yt:
        y = f.py(t)
        out.append(
            f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + f.pw}" y2="{y:.1f}" stroke="#e3e3e3"/>'
        )
        out.append(
            f'<text x="{_LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(tick_text(t))}</text>'
        )
    xl = chart.x_label + (" (log scale)" if chart.log_x else "")
    out.append(
        f'<text x="{_LEFT + f.pw / 2:.1f}" y="{HEIGHT - 10}" text-anchor="middle" class="axis">{escape(xl)}</text>'
    )
    cy = _TOP + f.ph / 2
    out.append(
        f'<text x="16" y="{cy:.1f}" text-anchor="middle" class="axis" transform="rotate(-90 16 {cy:.1f})">{escape(chart.y_label)}</text>'
    )
    return out


def _references(chart: Chart, f: _Frame) -> list[str]:
    out = []
    for y, label in chart.ceilings:
        py = f.py(y)
        short = label.split(" (", 1)[0]
        out.append(
            f'<text x="{_LEFT + f.pw - 4}" y="{py - 4:.1f}" text-anchor="end" class="pt">{escape(short)}</text>'
        )
        out.append(
            f'<g><title>{escape(f"{label}: {y:.4g}")}</title><line x1="{_LEFT}" y1="{py:.1f}" x2="{_LEFT + f.pw}" y2="{py:.1f}" stroke="{_GREY}" stroke-width="1.5" stroke-dasharray="6 4"/></g>'
        )
    if chart.frontier:
        pts = " ".join(f"{f.px(x):.1f},{f.py(y):.1f}" for x, y in sorted(chart.frontier))
        out.append(
            f'<polyline points="{pts}" fill="none" stroke="#222" stroke-opacity="0.22" stroke-width="9" stroke-linejoin="round" stroke-linecap="round" class="frontier"/>'
        )
    return out


def _series(chart: Chart, f: _Frame) -> list[str]:
    out = []
    for i, s in enumerate(chart.series):
        color, shape = _style(i, s)
        pts = [(f.px(x), f.py(y)) for x, y in zip(s.xs, s.ys)]
        if s.band:
            poly = [(f.px(x), f.py(hi)) for x, (_, hi) in zip(s.xs, s.band)]
            poly += [(f.px(x), f.py(lo)) for x, (lo, _) in reversed(list(zip(s.xs, s.band)))]
            out.append(
                f'<polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in poly)}" fill="{color}" fill-opacity="0.16"/>'
            )
        if s.line and len(pts) > 1:
            dash = ' stroke-dasharray="5 3"' if s.dashed else ""
            out.append(
                f'<polyline points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" fill="none" stroke="{color}" stroke-width="1.8"{dash}/>'
            )
        for j, (x, y) in enumerate(pts):
            tip = s.tips[j] if j < len(s.tips) else f"{s.label}: {s.xs[j]:.4g}, {s.ys[j]:.4g}"
            out.append(f"<g><title>{escape(tip)}</title>{_marker(shape, x, y, color)}</g>")
            if j < len(s.point_labels) and s.point_labels[j]:
                out.append(
                    f'<text x="{x + 6:.1f}" y="{y - 6:.1f}" class="pt" fill="{color}">{escape(s.point_labels[j])}</text>'
                )
    return out


def render(chart: Chart) -> str:
    """The chart as one ``<svg class="plot">`` element."""
    f = _Frame(chart)
    parts = [
        f'<svg class="plot" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{escape(chart.title)}">',
        f"<title>{escape(chart.title)}</title>",
        *_axes(chart, f),
        *_references(chart, f),
        *_series(chart, f),
    ]
    for x, y, text in chart.marks:
        px, py = f.px(x), f.py(y)
        parts.append(
            f'<circle cx="{px:.1f}" cy="{py:.1f}" r="9" fill="none" stroke="#222" stroke-width="1.5"/>'
        )
        parts.append(
            f'<text x="{px:.1f}" y="{py - 13:.1f}" text-anchor="middle" class="pt">{escape(text)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def legend_items(chart: Chart) -> list[tuple[str, str, bool, str]]:
    """``(colour, shape, dashed, label)`` per legend entry: series, references, frontier."""
    items = [(*_style(i, s), s.dashed, s.label) for i, s in enumerate(chart.series)]
    items += [(_GREY, "", True, label) for _, label in chart.ceilings]
    if chart.frontier:
        items.append(("#bbbbbb", "", False, "Pareto frontier (no point is both faster and better)"))
    return items


def swatch(color: str, shape: str, dashed: bool) -> str:
    """A legend's small sample of a line and its marker."""
    dash = ' stroke-dasharray="4 2"' if dashed else ""
    mark = _marker(shape, 14, 7, color, 3.5) if shape else ""
    return (
        f'<svg class="swatch" width="28" height="14" viewBox="0 0 28 14" aria-hidden="true">'
        f'<line x1="1" y1="7" x2="27" y2="7" stroke="{color}" stroke-width="{6 if not shape and not dashed else 2}"{dash}/>{mark}</svg>'
    )
