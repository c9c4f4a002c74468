"""How a result reads: the leaderboard row and the console text.

The headline retrieval columns are **HitRate@k** everywhere (console,
``leaderboard.md``, ``benchmarks/flickr.py``): the share of queries with a
relevant item in the top k, which is what CLIP_benchmark calls
``image_retrieval_recall@k`` (text-to-image) and ``text_retrieval_recall@k``
(image-to-text). IR recall (relevant found / all relevant, trec_eval's
``recall_k``) stays in the CSV and the result as ``t2i/R@k`` and is shown
under the label ``IR R@k``. With five captions per image, i2t IR R@1 is at
most 0.2 while HitRate@1 can reach 1.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

__all__ = [
    "HEADLINE_LEGEND",
    "NUMBER_NEUTRAL_FIELDS",
    "SPEED_FIELDS",
    "flatten",
    "fmt",
    "headline_columns",
    "headline_metrics",
    "label",
    "summary",
    "text_table",
]

HEADLINE_LEGEND = (
    "HitRate@k = share of queries with a relevant item in the top k = CLIP_benchmark's "
    "image_retrieval_recall@k (t2i) / text_retrieval_recall@k (i2t); "
    "IR R@k = relevant found / all relevant (trec_eval recall_k)"
)

#: Identity columns of a leaderboard row, in order.
ID_COLUMNS = (
    "dataset",
    "support_dataset",
    "image_encoder",
    "text_encoder",
    "task",
    "method",
    "store",
    "n_support_pairs",
)
SECRET_KEYS = ("token", "password", "api_key", "secret")
#: Config fields that change no number of a result (where it is cached, how
#: many items an encoder pass takes), and those that change only its speed.
NUMBER_NEUTRAL_FIELDS = frozenset({"cache_dir", "encode_batch_size"})
SPEED_FIELDS = frozenset({"batch_size", "workers"})


def headline_metrics(
    k_values: Sequence[int], directions: Sequence[str] = ("t2i", "i2t")
) -> list[str]:
    """The headline retrieval columns: HitRate@k per direction, then nDCG@kmax."""
    ks = sorted(k_values)
    out = []
    for d in directions:
        out += [f"{d}/HitRate@{k}" for k in ks] + [f"{d}/nDCG@{ks[-1]}"]
    return out


def headline_columns(columns: Sequence[str]) -> list[str]:
    """The headline retrieval columns among ``columns``, as the console shows them:
    per direction every ``HitRate@k`` present by k, then ``nDCG`` at the largest k."""
    out = []
    for d in ("t2i", "i2t"):
        hits = sorted(
            (int(m.group(1)), c)
            for c in columns
            if (m := re.fullmatch(rf"{d}/HitRate@(\d+)", str(c)))
        )
        out += [c for _, c in hits]
        ndcg = [c for c in columns if re.fullmatch(rf"{d}/nDCG@(\d+)", str(c))]
        if ndcg:
            out.append(max(ndcg, key=lambda c: int(c.rsplit("@", 1)[1])))
    return out


def label(column: str) -> str:
    """The header a person reads for a flat column name (``t2i/R@10`` -> ``t2i IR R@10``)."""
    if "/" not in column:
        return {"n_support_pairs": "N"}.get(column, column)
    ranking, measure = column.split("/", 1)
    measure = re.sub(r"^R@", "IR R@", measure)
    return f"{ranking} {measure}"


# ----------------------------------------------------------------------------- flatten


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if any(s in str(k).lower() for s in SECRET_KEYS):
                v = "***"
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, list | tuple):
        out[prefix] = ",".join(str(v) for v in value)
    else:
        out[prefix] = value


def flatten(result: Any) -> dict[str, Any]:
    """One leaderboard row: identity, status, metrics (``t2i/HitRate@1``), CLIP_benchmark
    aliases, intervals (``<metric>.ci_low``), per-ranking counts and speed
    (``t2i.queries_per_s``), timings (``fit_s``), provenance (``env.numpy``)."""
    cfg = result.config.to_dict()
    row: dict[str, Any] = {}
    for k, v in cfg.items():
        if k.endswith("_params"):
            if isinstance(v, Mapping) and v:
                _flat(k, v, row)
        else:
            _flat(k, v, row)
    row["status"] = result.status.state
    row["status_reasons"] = "; ".join(result.status.reasons) or None
    row["error"] = result.status.error
    # N: the support pairs drawn; a run that failed before drawing them (a dead
    # server) shows the N it was configured with ('all': every pair), never 0.
    configured_n = "all" if result.config.n_support is None else result.config.n_support
    if result.dataset is not None:
        d = result.dataset
        drawn = d.n_support_pairs or result.status.state != "failed"
        row.update(
            n_support_pairs=d.n_support_pairs if drawn else configured_n,
            n_support_available=d.n_support_available,
            n_test_images=d.n_test_images,
            n_test_texts=d.n_test_texts,
        )
    else:
        row["n_support_pairs"] = configured_n
    if result.method is not None:
        row["method_output_dim"] = result.method.output_dim
        row["method_sparse"] = result.method.sparse
    if result.encoders is not None:
        row["image_encoder_id"], row["text_encoder_id"] = (
            result.encoders.image,
            result.encoders.text,
        )
    row.update(result.metrics)
    row.update(result.clip_benchmark())
    for r in result.rankings.values():
        for m, (lo, hi) in r.intervals.items():
            row[f"{r.name}/{m}.ci_low"], row[f"{r.name}/{m}.ci_high"] = lo, hi
        for m, v in r.tie_rule.items():
            row[f"{r.name}/{m}.tie_rule"] = v
        for m, t in (r.ties.get("measures") or {}).items():
            row[f"{r.name}/{m}.tie_low"], row[f"{r.name}/{m}.tie_high"] = t["low"], t["high"]
        if r.ties:
            row[f"{r.name}.n_tie_dependent"] = r.n_tie_dependent
            row[f"{r.name}.tie_groups"] = r.ties.get("groups")
        for k in ("n_queries", "n_failed", "n_missing"):
            row[f"{r.name}.{k}"] = getattr(r, k)
        t = r.timings
        row[f"{r.name}.queries_per_s"] = t.queries_per_s
        row[f"{r.name}.index_build_s"] = t.index_build_s
        row[f"{r.name}.search_s"] = t.search_s
        row[f"{r.name}.batch_p50_ms"] = t.batch_p50_ms
        row[f"{r.name}.n_batches_searched"] = t.n_batches_searched
    row.update(result.timings)
    prov = result.provenance
    row.update({"env.python": prov.python, "env.cpu": prov.cpu, "env.git_commit": prov.git_commit})
    row.update({f"env.{pkg}": ver for pkg, ver in prov.versions.items()})
    if prov.store.get("server_version"):
        row["env.store.server_version"] = prov.store["server_version"]
    row.update(
        key=result.key,
        created=result.created,
        path=result.path,
        per_query_file=result.per_query_file,
    )
    return row


# ----------------------------------------------------------------------------- console


def fmt(v: Any, digits: int = 4) -> str:
    """A cell: ``-`` for missing, ``digits`` decimals for floats, more where
    those would show a value that is not 0 or 1 as ``0.000`` or ``1.000``
    (a HitRate of 0.9996 reads ``0.9996``, never as perfect; 0.0004 never as 0)."""
    if v is None:
        return "-"
    if isinstance(v, float | np.floating):
        v = float(v)
        if math.isnan(v):
            return "nan"
        text = f"{v:.{digits}f}"
        d = digits
        while abs(float(text)) in (0.0, 1.0) and abs(v) not in (0.0, 1.0):
            if d == 8:  # still 0 or 1 at 8 decimals: the last digit towards v
                step = 10.0**-d
                r = (math.floor if abs(v) < 1 and abs(v) > 0.5 else math.ceil)(abs(v) / step)
                return f"{math.copysign(r * step, v):.{d}f}"
            d += 1
            text = f"{v:.{d}f}"
        return text
    return str(v)


_NUMBER = re.compile(r"^[-+]?[\d,]*\.?\d+(e[-+]?\d+)?[a-z%]*$|^-$|^nan$", re.IGNORECASE)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain aligned text table; numeric columns are right-aligned."""
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    right = [
        bool(rows) and all(_NUMBER.match(r[i] or "-") for r in rows) for i in range(len(headers))
    ]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if rt else c.ljust(w) for c, w, rt in zip(cells, widths, right)
        ).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def _ranking_table(result: Any) -> list[str]:
    ks = sorted(result.config.k_values)
    names = [
        n for n in result.rankings if result.rankings[n].metrics.get(f"HitRate@{ks[0]}") is not None
    ]
    if not names:
        return []
    cols = [f"HitRate@{k}" for k in ks] + [f"nDCG@{ks[-1]}", f"R@{ks[-1]}"]
    cols = [c for c in cols if any(c in result.rankings[n].metrics for n in names)]
    fid = sorted(
        {m for n in names for m in result.rankings[n].fidelity if m.startswith("ann_recall@")}
    )
    rows = []
    for n in names:
        r = result.rankings[n]
        qps = r.timings.queries_per_s
        rows.append(
            [
                n,
                *(fmt(r.metrics.get(c)) for c in cols),
                *(fmt(r.fidelity.get(m)) for m in fid),
                "-" if qps is None else f"{qps:,.0f}",
                str(r.n_failed),
            ]
        )
    headers = ["ranking", *(label(f"x/{c}").split(" ", 1)[1] for c in cols), *fid, "QPS", "failed"]
    return [
        "",
        text_table(headers, rows),
        HEADLINE_LEGEND,
        *_tie_lines(result, names, f"HitRate@{ks[0]}"),
    ]


def _tie_lines(result: Any, names: Sequence[str], measure: str) -> list[str]:
    """What depends on tie order: the tie rule, each ranking's groups where they
    are not all closed, counts and the bounds of the headline measure."""
    parts, tols, bounds, any_open, any_dependent = [], [], [], False, False
    for n in names:
        r = result.rankings[n]
        t = (r.ties.get("measures") or {}).get(measure)
        if not t:
            continue
        tol, bound = r.ties.get("tolerance"), r.ties.get("error_bound")
        tols += [tol] if tol is not None and tol not in tols else []
        if r.ties.get("rows_rescored") is not None and bound not in (None, *bounds):
            bounds.append(bound)
        groups = r.ties.get("groups", "")
        if groups and groups != "closed":
            parts.append(f"{n}: groups {groups}")
            any_open = True
        dep = int(t.get("n_tie_dependent", 0))  # of the headline measure, not the most of any
        if dep:
            any_dependent = True
            parts.append(
                f"{n}: {dep} queries depend on tie order, {measure} "
                f"{fmt(r.metrics.get(measure))} in [{fmt(t['low'])}, {fmt(t['high'])}] "
                f"(tie rule {fmt(r.tie_rule.get(measure))})"
            )
    if not tols:
        return []
    head = (
        f"ties (documents tie when their scores differ by at most "
        f"{' / '.join(f'{x:.2g}' for x in tols)} x max(1, |score|)"
    )
    if bounds and bounds != tols:
        head += (
            f"; store scores closer than the float32 error bound "
            f"{' / '.join(f'{x:.2g}' for x in bounds)} are rescored in float64"
        )
    head += "): values are expected over tie orders"
    if not any_open:
        head += "; groups closed"
    if not any_dependent:
        parts.append(f"no query's {measure} depends on tie order")
    return ["; ".join([head, *parts])]


def summary(result: Any) -> str:
    """The console text of a result: what ran, its status, the numbers, the time."""
    cfg, d = result.config, result.dataset
    n = "all" if cfg.n_support is None else cfg.n_support
    head = f"{cfg.dataset} · {cfg.task} · {cfg.method} · {cfg.store} · N={n}"
    if d is not None:
        sup = f" of {cfg.support_dataset}" if cfg.support_dataset else ""
        head += (
            f"  (support pairs {d.n_support_pairs}{sup} of {d.n_support_available}; "
            f"test {d.n_test_images} images, {d.n_test_texts} texts)"
        )
    lines = [head]
    if not result.status.ok:
        lines.append(
            f"STATUS {result.status.state.upper()}: "
            + (result.status.error or "; ".join(result.status.reasons))
        )
    lines += _ranking_table(result)
    if result.task is not None and result.task.metrics:
        tm = result.task.metrics
        lines += [
            "",
            text_table(["task", *tm], [[result.task.task, *(fmt(v) for v in tm.values())]]),
        ]
        proto = result.task.details.get("protocol")
        if proto:
            lines.append(f"protocol: {proto}")
    cb = result.clip_benchmark()
    if cb:
        lines.append("CLIP_benchmark: " + ", ".join(f"{k} = {fmt(v, 3)}" for k, v in cb.items()))
    t = result.timings
    parts = [
        f"{k[:-2]} {t[k]:.2f}s"
        for k in ("load_s", "embed_s", "fit_s", "transform_s", "total_s")
        if k in t
    ]
    if parts:
        lines.append("time: " + "  ".join(parts))
    return "\n".join(lines)
