"""The rates of the cost model at one side of their bands: which q/s figure a mode uses
(measured, or extrapolated with the rule said), and how a rate scales to a node's cores
(Amdahl's law fitted to a measured 1->2-core speed-up: the type's own, else IVF_FLAT's,
said; linear, said "not measured", where neither is measured).

A :class:`Corner` says at which end of its band each input figure is read for one
evaluation of the model; an output's band is the least and the most it takes over every
corner of the figures it reads (:func:`~imsearch_align.collection.cost_model.estimate`).
"""

from __future__ import annotations

from collections.abc import Mapping

from imsearch_align.collection.cost_figures import (
    INDEX_TYPES,
    REFERENCE_TYPE,
    Figure,
    InputsError,
    MeasuredInputs,
    NotMeasuredError,
)
from imsearch_align.experiment.deploy import DEFAULT_DELTA

__all__ = ["Corner", "amdahl", "search_rate", "serial_share", "speed"]

#: The figure types whose single/batched ratio extrapolates another's single-query q/s.
_REFERENCE = (REFERENCE_TYPE, *INDEX_TYPES)
#: Said of every output whose rate was scaled to a node's cores without a measurement.
LINEAR = "assumed linear (not measured)"
#: Said of every output scaled by the reference type's core scaling.
BORROWED = f"core scaling measured on {REFERENCE_TYPE}, not on"
#: Said of every output whose q/s was measured at a task quality below exact search's.
BELOW_EXACT = "measured below exact search's task quality"


class Corner:
    """Which end of its band each input figure is read at in one evaluation of the model:
    ``ends[key]`` is ``"low"`` or ``"high"``, a key not there its ``value``. ``seen``
    collects the keys read whose band is not a single point (the corners worth visiting)."""

    def __init__(self, ends: Mapping[str, str] | None = None, seen: set[str] | None = None):
        self.ends = dict(ends or {})
        self.seen = seen

    def at(self, key: str, fig: Figure) -> float:
        """``fig`` at this corner's end for ``key``."""
        if self.seen is not None and fig.measured and fig.low != fig.high:
            self.seen.add(key)
        return fig.at(self.ends.get(key, "value"))


def serial_share(ratio: float) -> float:
    """Amdahl's serial share from a 1->2-core speed-up ``ratio``: ``clip(2 / r - 1, 0, 1)``
    (a speed-up of 2 or more is fully parallel, 1 or less fully serial)."""
    return min(1.0, max(0.0, 2.0 / ratio - 1.0))


def amdahl(cores: float, ratio: float) -> float:
    """Speed-up at ``cores`` of Amdahl's law fitted to the 1->2-core ``ratio``."""
    s = serial_share(ratio)
    return 1.0 / (s + (1.0 - s) / cores)


def _pinned(measured: MeasuredInputs, kind: str, what: str) -> tuple[Figure, Figure] | None:
    one, two = measured.cores(kind, what)
    if one is None or two is None or not (one.measured and two.measured):
        return None
    return one, two


def _rpc_note(fig: Figure) -> tuple[str, ...]:
    if fig.bound != "rpc":
        return ()
    why = fig.extra.get("bound_why", "q/s did not fall as the search did more work")
    return (f"measured where the RPC path, not the index, bounded q/s ({why}): scaled by the "
            "index's work anyway; measure where the index bounds q/s",)  # fmt: skip


def _quality_note(fig: Figure) -> tuple[str, ...]:
    """A note where ``fig``'s task quality (the top of its interval) is below exact search's
    by more than :data:`~imsearch_align.experiment.deploy.DEFAULT_DELTA`: what it buys is
    not what the other types' q/s buy."""
    q = fig.quality
    if q is None or q.exact is None:
        return ()
    top = q.value if q.high is None else q.high
    if top >= q.exact - DEFAULT_DELTA:
        return ()
    return (f"q/s {BELOW_EXACT} by more than {DEFAULT_DELTA:g}: {q.text()}",)


def search_rate(
    measured: MeasuredInputs, kind: str, mode: str, corner: Corner
) -> tuple[float, Figure, tuple[str, ...]]:
    """``(q/s at the corner, the figure it rests on, notes)`` of ``kind`` in ``mode``.

    A single-query figure not measured is extrapolated: the type's batched q/s times the
    single/batched ratio of a type with both measured (IVF_FLAT first), each of the three
    figures read at its own end. A batched figure not measured, or a single one with
    nothing to extrapolate from, raises NotMeasuredError with the figure's source (which
    says what to measure)."""
    fig = measured.qps(kind, mode)
    pinned = _pinned(measured, kind, mode)
    if pinned is not None and not (fig is not None and fig.measured):
        return corner.at(f"cores.{kind}.{mode}.2", pinned[1]), pinned[1], ()
    if fig is not None and fig.measured:
        return corner.at(f"qps.{kind}.{mode}", fig), fig, _rpc_note(fig) + _quality_note(fig)
    why = fig.source if fig is not None else f"no {mode} q/s of {kind} in the inputs"
    batched = measured.qps(kind, "batched")
    if mode != "single" or batched is None or not batched.measured:
        raise NotMeasuredError(f"{kind} {mode} q/s: {why}")
    for ref in _REFERENCE:
        s, b = measured.qps(ref, "single"), measured.qps(ref, "batched")
        if s is not None and b is not None and s.measured and b.measured:
            break
    else:
        raise NotMeasuredError(
            f"{kind} single q/s: {why}; and no index type has both a single-query and a "
            "batched q/s to extrapolate from"
        )
    ratio = corner.at(f"qps.{ref}.single", s) / corner.at(f"qps.{ref}.batched", b)
    note = (
        f"single-query q/s of {kind} not measured: extrapolated as its batched q/s x "
        f"{ref}'s single/batched ratio {s.value:,.0f}/{b.value:,.0f} = {s.value / b.value:.2f} "
        f"[{s.low / b.high:.2f}-{s.high / b.low:.2f}]"
    )
    more = _rpc_note(batched) + _quality_note(batched)
    return corner.at(f"qps.{kind}.batched", batched) * ratio, batched, (note, *more)


def speed(
    measured: MeasuredInputs,
    kind: str,
    what: str,
    fig: Figure,
    cores: int,
    corner: Corner,
    *,
    value: float | None = None,
) -> tuple[float, int, int, tuple[str, ...]]:
    """``(rate of one node of cores, n, dim it was measured at, notes)`` of ``what``
    (``single``, ``batched``, ``build``) for ``kind``.

    With ``core_scaling[kind][what]`` measured at 1 and 2 cores, only its speed-up is used:
    ``value`` (default: ``fig`` at the corner, measured on ``fig.cores`` cores at its own
    size) times ``amdahl(cores, r) / amdahl(fig.cores, r)``, ``r = q2 / q1`` (each read at
    the corner's end). The pinned rates themselves are not the base: they are measured on
    another collection (and host), and a rate does not move with the index's work where
    the RPC path bounds it. A type without its own uses :data:`REFERENCE_TYPE`'s
    speed-up on its own figure, noted. Without either: ``value`` times
    ``cores / fig.cores``, noted as assumed linear."""
    ref, pinned = kind, _pinned(measured, kind, what)
    if pinned is None and kind != REFERENCE_TYPE and fig.measured and fig.cores:
        # another type's speed-up, on this type's own figure (never the other's rates)
        ref, pinned = REFERENCE_TYPE, _pinned(measured, REFERENCE_TYPE, what)
    if pinned is not None:
        one, two = pinned
        q1 = corner.at(f"cores.{ref}.{what}.1", one)
        q2 = corner.at(f"cores.{ref}.{what}.2", two)
        r, r0 = q2 / q1, two.value / one.value  # type: ignore[operator]
        base = fig if fig.measured and fig.cores else two
        q = corner.at(f"{what}.{kind}", base) if value is None else value
        n, dim = base.n or two.n, base.dim or two.dim
        if n is None or dim is None or not base.cores:
            raise InputsError(f"core_scaling[{kind}].{what} names no n, dim or cores")
        whose = "the" if ref == kind else f"{ref}'s"
        note = (f"{what} rate to {cores} cores: the {base.cores}-core figure scaled by "
                f"Amdahl's law fitted to {whose} measured 1->2-core speed-up {r0:.2f} (serial "
                f"share {serial_share(r0):.2f})")  # fmt: skip
        if ref != kind:
            note += f"; {BORROWED} {kind}"
        return q * amdahl(cores, r) / amdahl(base.cores, r), int(n), int(dim), (note,)
    if not fig.cores or fig.n is None or fig.dim is None:
        raise InputsError(f"the {what} figure of {kind} names no cores, n or dim: {fig.source}")
    q = corner.at(f"{what}.{kind}", fig) if value is None else value
    note = f"{what} rate to {cores} cores: {LINEAR}, from {fig.cores} cores"
    return q * cores / fig.cores, int(fig.n), int(fig.dim), (note,)
