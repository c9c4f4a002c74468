"""Reading result files written by imsearch-align 0.1.0 (schema 1).

Schema 1 was an untyped dict: ``tasks`` keyed by ranking name, a flat
``metrics`` mapping (``t2i/R@1``), ``timings`` with ranking-prefixed keys
(``t2i_queries_per_s``), ``environment`` for provenance, and for a failed
sweep cell only ``config`` and ``error``. :func:`upgrade_v1` maps it onto the
schema 2 layout that :class:`~imsearch_align.experiment.result.ExperimentResult`
reads; nothing measured is dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["upgrade_v1"]

_SEARCH_TIMINGS = (
    "search_s",
    "metrics_s",
    "queries_per_s",
    "batch_p50_ms",
    "batch_p95_ms",
    "batch_p99_ms",
)
_CLASSIFICATION_METRICS = ("acc1", "acc5", "mean_per_class_recall")


def _ranking(name: str, t: Mapping[str, Any], flat: Mapping[str, Any]) -> dict[str, Any]:
    prefix = f"{name}/"
    fidelity = dict(t.get("fidelity") or {})
    metrics = {
        k[len(prefix) :]: v
        for k, v in flat.items()
        if k.startswith(prefix)
        and k[len(prefix) :] not in fidelity
        and k[len(prefix) :] not in _CLASSIFICATION_METRICS
    }
    tim = t.get("timings") or {}
    n_batches = int(tim.get("n_batches", 0) or 0)
    timings = {k: tim.get(k) for k in _SEARCH_TIMINGS if k in tim}
    # 0.1.0's queries_per_s divided by the whole evaluation (search and
    # scoring); schema 2's is search throughput, 0.1.0's search_queries_per_s.
    if tim.get("search_queries_per_s") is not None:
        timings["queries_per_s"] = tim["search_queries_per_s"]
    elif tim.get("search_s") and tim.get("queries_per_s") and tim.get("total_s"):
        timings["queries_per_s"] = tim["queries_per_s"] * tim["total_s"] / tim["search_s"]
    else:
        timings.pop("queries_per_s", None)  # not the same quantity: no figure, not a wrong one
    timings.update(
        index_build_s=float(t.get("index_build_s", 0.0) or 0.0),
        n_batches=n_batches,
        n_batches_searched=n_batches,
        n_batches_resumed=0,
    )
    return {
        "name": name,
        "metrics": metrics,
        "intervals": t.get("intervals") or {},
        "n_queries": t.get("n_queries", 0),
        "n_docs": t.get("n_docs", 0),
        "n_failed": t.get("n_failed", 0),
        "n_missing": t.get("n_missing", 0),
        "n_ignored": t.get("n_ignored", 0),
        "failed_queries": t.get("failed_queries") or [],
        "errors": [],
        "timings": timings,
        "fidelity": fidelity,
    }


def upgrade_v1(d: Mapping[str, Any]) -> dict[str, Any]:
    """A schema 1 result dict in the schema 2 layout (``schema_version`` 2)."""
    cfg = dict(d["config"])
    if "error" in d and "tasks" not in d:
        return {
            "schema_version": 2,
            "status": {"state": "failed", "reasons": [], "error": str(d["error"])},
            "config": cfg,
            "key": d.get("key", ""),
        }
    flat = d.get("metrics") or {}
    tasks = d.get("tasks") or {}
    task_name = cfg.get("task", "retrieval")
    rankings = [_ranking(n, t, flat) for n, t in tasks.items()]
    task_metrics: dict[str, Any] = {}
    details: dict[str, Any] = {}
    if "classification" in tasks:
        c = tasks["classification"]
        task_metrics = {
            m: flat[f"classification/{m}"]
            for m in _CLASSIFICATION_METRICS
            if f"classification/{m}" in flat
        }
        details = {
            k: c[k] for k in ("n_classes", "n_templates", "ensemble", "prompt_embed_s") if k in c
        }
    if d.get("perturbations"):
        details["perturbations"] = {
            name: {k: p.get(k) for k in ("direction", "params", "seed")}
            for name, p in d["perturbations"].items()
        }
    n_failed = sum(int(r["n_failed"] or 0) for r in rankings)
    status = (
        {
            "state": "degraded",
            "reasons": [f"{n_failed} queries failed (read from a 0.1.0 result)"],
            "error": None,
        }
        if n_failed
        else {"state": "ok", "reasons": [], "error": None}
    )
    timings = {
        k: v
        for k, v in (d.get("timings") or {}).items()
        if k in ("load_s", "embed_s", "fit_s", "transform_s")
    }
    env = dict(d.get("environment") or {})
    ds = dict(d.get("dataset") or {})
    return {
        "schema_version": 2,
        "status": status,
        "key": d.get("key", ""),
        "config": cfg,
        "dataset": {
            k: ds[k]
            for k in (
                "name",
                "n_support_pairs",
                "n_support_available",
                "n_test_images",
                "n_test_texts",
            )
            if k in ds
        }
        or None,
        "method": d.get("method"),
        "encoders": d.get("encoders"),
        "task": {
            "task": task_name,
            "rankings": rankings,
            "metrics": task_metrics,
            "details": details,
        },
        "timings": timings,
        "provenance": env,
        "diagnostics": d.get("diagnostics"),
        "created": d.get("created", ""),
        "per_query_file": d.get("per_query_file"),
    }
