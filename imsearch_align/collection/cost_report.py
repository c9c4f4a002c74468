"""What the cost model shows a person: the table of ``docs/scale-out.md``
(:func:`markdown_table`, with :func:`memory_note`), and one estimate and its prices as
text (:func:`estimate_text`, :func:`prices_text`, what ``benchmarks/scale_out.py
--estimate`` prints). Every number is shown with its band, ``value [low-high]``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from imsearch_align.collection.cost_formulas import (
    DEFAULT_DIMS,
    GIB,
    ClusterSpec,
    Estimate,
    IndexSpec,
    memory_per_replica,
    query_nodes,
)
from imsearch_align.collection.cost_model import (
    INDEX_TYPES,
    MeasuredInputs,
    NotMeasuredError,
    estimate,
)
from imsearch_align.collection.cost_prices import HOURS_PER_MONTH, PriceRow
from imsearch_align.collection.cost_rates import BELOW_EXACT, BORROWED, LINEAR

__all__ = [
    "LEGEND",
    "band",
    "estimate_text",
    "markdown_table",
    "memory_note",
    "prices_text",
    "quality_text",
]

#: The notes column's codes: the words each output's notes start with.
LEGEND = {
    "L": (LINEAR, "q/s or build rate scaled to a node's cores linearly"),
    "C": (BORROWED, "q/s or build rate scaled to a node's "
          "cores by IVF_FLAT's measured 1->2-core speed-up (this type's is not measured)"),
    "X": ("extrapolated as its batched", "single-query q/s not measured: extrapolated from the "
          "type's batched q/s by IVF_FLAT's single/batched ratio"),
    "R": ("the RPC path, not the index", "q/s measured where the RPC path, not the index, "
          "bounded it"),
    "M": ("server memory ratio measured on", "the server-memory ratio measured on IVF_FLAT, "
          "applied to this type"),
    "Q": (BELOW_EXACT, "q/s measured at a setting whose task quality is below exact "
          "search's by more than 0.01 (none of the type's swept settings reached it; the "
          "figure's source gives both)"),
}  # fmt: skip


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:,.1f}" if abs(x) >= 10 else f"{x:.2f}"


def band(e: Estimate | None, scale: float = 1.0) -> str:
    """``value [low-high]`` in ``unit / scale``; one number when the band is a point;
    ``not measured`` for an output without a value."""
    if e is None or e.value is None:
        return "not measured"
    v, lo, hi = (x / scale for x in (e.value, e.low, e.high))  # type: ignore[operator]
    num = (lambda x: f"{x:,.0f}") if e.unit in ("nodes", "clients") else _num
    if num(lo) == num(hi):
        return num(v)
    return f"{num(v)} [{num(lo)}-{num(hi)}]"


def _codes(ests: Sequence[Estimate]) -> str:
    notes = " ".join(n for e in ests for n in e.notes)
    return "".join(c for c, (words, _) in LEGEND.items() if words in notes)


def _memory_only(spec: IndexSpec, n: int, d: int, m: MeasuredInputs, cl: ClusterSpec) -> dict:
    """Memory and node counts of a type whose rates are not measured (no rate needed)."""
    mem = memory_per_replica(spec, n, d, cl.segment_mb or m.segment_mb)
    r = m.memory_ratio(spec.kind)
    ends = (1.0, 1.0, 1.0) if r is None or not r.measured else (r.value, r.low, r.high)
    meas = [mem.value * x for x in ends]  # type: ignore[operator]
    nodes = [query_nodes(mem, cl, x).value for x in ends]
    return {
        "memory": mem,
        "query_nodes_formula": query_nodes(mem, cl),
        "memory_measured": Estimate("", meas[0], "bytes", "", low=min(meas), high=max(meas)),
        "query_nodes": Estimate("", nodes[0], "nodes", "", low=min(nodes), high=max(nodes)),
    }


def markdown_table(
    measured: MeasuredInputs,
    *,
    sizes: Sequence[int] = (10_000_000, 100_000_000),
    dims: Mapping[str, int] = DEFAULT_DIMS,
    cluster: ClusterSpec | None = None,
    specs: Sequence[IndexSpec] = tuple(IndexSpec(k) for k in INDEX_TYPES),
) -> str:
    """The cost table of ``docs/scale-out.md``: one row per dimension, size and index, each
    number ``value [low-high]``, its notes as codes (:data:`LEGEND`), then the legend."""
    cl = cluster or ClusterSpec()
    lines = [
        f"| method (d) | vectors | index | memory / replica, formula (GiB) | x measured server "
        f"ratio (GiB) | query nodes, formula ({cl.replicas} replicas) | query nodes, measured "
        f"ratio | q/s, single queries | q/s, batches of 100 | build, {cl.index_nodes} index "
        "nodes (min) | load (min) | insert (min) | notes |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    missing = False
    for method, d in dims.items():
        for n in sizes:
            for spec in specs:
                try:
                    e: dict = estimate(spec, n, d, measured, cl)
                    codes = _codes(list(e.values()))
                except NotMeasuredError:
                    e, codes, missing = _memory_only(spec, n, d, measured, cl), "N", True
                params = spec.label(d)
                lines.append(
                    f"| {method} ({d}) | {n / 1e6:,.0f}M | {spec.kind}"
                    f"{f' ({params})' if params else ''} | {band(e['memory'], GIB)} "
                    f"| {band(e['memory_measured'], GIB)} | {band(e['query_nodes_formula'])} "
                    f"| {band(e['query_nodes'])} | {band(e.get('qps'))} "
                    f"| {band(e.get('qps_batched'))} | {band(e.get('build'), 60)} "
                    f"| {band(e.get('load'), 60)} | {band(e.get('insert'), 60)} | {codes} |"
                )
    legend = [f"{c}: {why}" for c, (_, why) in LEGEND.items()]
    if missing:
        legend.append("N: q/s or build rate not measured (no committed cell): not estimated")
    return "\n".join(lines) + "\n\nNotes: " + "; ".join(legend) + "."


def memory_note(measured: MeasuredInputs) -> str:
    """The measured server-memory ratio and where it comes from."""
    r = measured.server_memory_ratio
    if r is None or not r.measured:
        return "No server memory was measured: node counts use the formula alone."
    own = "".join(
        f" {t}'s own builds: {f.value:.2f} [{f.low:.2f}-{f.high:.2f}] ({f.source})."
        for t, f in measured.memory_ratio_by_type.items() if f.measured and f.source != r.source
    )  # fmt: skip
    return (
        f"Server memory over the formula: {r.value:.2f} [{r.low:.2f}-{r.high:.2f}] ({r.source})."
        f"{own} The node counts of the measured column apply a type's own ratio where its "
        "builds were measured, else the first ratio above; the formula's are beside them."
    )


def estimate_text(e: Mapping[str, Estimate], head: str, quality: str) -> str:
    """One estimate as lines: each output ``value [low-high] unit``, then every note once."""
    rows = [
        ("memory / replica, formula", e["memory"], GIB, "GiB"),
        ("memory / replica, x measured server ratio", e["memory_measured"], GIB, "GiB"),
        ("query nodes, formula (memory only)", e["query_nodes_formula"], 1, "nodes"),
    ]
    for key, label in (("query_nodes", "query nodes, sized by {m} q/s"),
                       ("query_nodes_batched", "query nodes if sized by batched q/s"),
                       ("query_nodes_single", "query nodes if sized by single-query q/s"),
                       ("qps", "q/s of that cluster, {m}"), ("qps_batched", "q/s of it, batches"),
                       ("qps_single", "q/s of it, single queries"),
                       ("clients", "clients to saturate it")):  # fmt: skip
        if key in e:
            mode = e["query_nodes"].inputs.get("by", "")
            rows.append((label.format(m=mode), e[key], 1, e[key].unit))
    rows += [(f"{k} (min)", e[k], 60, "min") for k in ("build", "load", "insert")]
    width = max(len(r[0]) for r in rows)
    out = [head] + [f"  {name:<{width}}  {band(est, scale)} {unit if est.value is not None else ''}"
                    .rstrip() for name, est, scale, unit in rows]  # fmt: skip
    notes = list(dict.fromkeys(n for est in e.values() for n in est.notes))
    out += ["notes:"] + [f"  - {n}" for n in notes] if notes else []
    out.append(f"task quality: {quality}")
    return "\n".join(out)


def prices_text(rows: Sequence[PriceRow], sheet: str, about: str, quality: str = "") -> str:
    """The price table: per node type, nodes, q/s, monthly cost and cost per 1M queries, at
    the task ``quality`` the q/s was measured at."""
    mode = rows[0].qps.inputs.get("mode", "single") if rows else "single"
    head = (f"prices from {sheet}" + (f": {about}" if about else "")
            + f"\nquery nodes only; a month is {HOURS_PER_MONTH} h; the cost of 1M queries is "
            f"at {rows[0].load if rows else 'capacity'}"
            + (f", at task quality {quality}" if quality else ""))  # fmt: skip
    names = {"single": "q/s, single", "batched": "q/s, batches"}
    other = "batched" if mode == "single" else "single"
    table = [("node type", "cores", "GiB", "nodes (formula)", f"nodes (by {mode} q/s)",
              names[mode], names[other], "per month", "per 1M queries")]  # fmt: skip
    for r in rows:
        cur = r.node.currency
        money = [f"{_num(v)} [{_num(lo)}-{_num(hi)}] {cur}" if _num(lo) != _num(hi)
                 else f"{_num(v)} {cur}" for v, lo, hi in (r.monthly, r.per_million)]  # fmt: skip
        table.append((r.node.name, str(r.node.cores), f"{r.node.memory_gib:g}",
                      band(r.nodes_formula), band(r.nodes), band(r.qps), band(r.qps_other),
                      *money))  # fmt: skip
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in table]
    return head + "\n" + "\n".join(lines)


def quality_text(measured: MeasuredInputs, kind: str, mode: str, n: int) -> str:
    """The task quality the q/s of ``kind`` in ``mode`` was measured at, and at what size."""
    fig = measured.qps(kind, mode)
    if fig is None or not fig.measured:
        fig = measured.qps(kind, "batched")
    if fig is None or not fig.measured or fig.quality is None:
        return "not recorded with the q/s figure"
    at = f"measured at {fig.n:,} rows" if fig.n else "measured"
    return f"{fig.quality.text()}; {at}, not at {n:,} (quality at this size is not measured)"
