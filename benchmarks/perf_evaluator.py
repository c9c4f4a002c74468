"""Perf section "evaluator": the harness's overhead on precomputed search results.

25,000 queries x top-100 over 100,000 docs. The store returns precomputed
result slices, so what is timed is the evaluator itself: batching on the
thread pool, building the Run, computing every measure. pytrec_eval is
timed on the same run and qrels starting from the same arrays, so its time
includes building its dict input, as a user pays it; ours includes building
the Qrels from those arrays. The values must agree. Best of 9 for ours, one
run for pytrec_eval (its dict building alone takes most of a second).

Targets (issue 2): >= 10,000 queries/s and >= 100x pytrec_eval.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from imsearch_align import Qrels, SearchResult
from imsearch_align.framework.evaluator import BenchmarkEvaluator

MEASURES = ["P@10", "R@10", "nDCG@10", "AP@100", "RR@10", "HitRate@5", "Accuracy"]
TREC_KEYS = {
    "P@10": "P_10",
    "R@10": "recall_10",
    "nDCG@10": "ndcg_cut_10",
    "AP@100": "map_cut_100",
    "HitRate@5": "success_5",
    "Accuracy": "success_1",
}


class PrecomputedStore:
    """Returns slices of precomputed results; queries carry their row index."""

    supports_sparse = False

    def __init__(self, ids: np.ndarray, scores: np.ndarray) -> None:
        self.ids, self.scores = ids, scores

    def search(self, name, queries, k):
        rows = queries[:, 0].astype(np.int64)
        lo, hi = int(rows[0]), int(rows[-1]) + 1
        return SearchResult(self.ids[lo:hi, :k], self.scores[lo:hi, :k])


def make_case(nq: int, ndoc: int, depth: int, seed: int = 0):
    """Random tie-free run; 1-5 graded relevant docs per query, most retrieved."""
    rng = np.random.default_rng(seed)
    # Distinct docs per row: one random permutation prefix, shifted per row.
    ids = (rng.integers(0, ndoc, (nq, 1)) + rng.permutation(ndoc)[:depth][None]) % ndoc
    # Strictly decreasing per row (rank gaps of 1, jitter below 0.5): tie-free.
    ranks = np.arange(depth, 0, -1, dtype=np.float32)[None]
    scores = ranks + 0.5 * rng.random((nq, depth), dtype=np.float32)
    nrel = rng.integers(1, 6, nq)
    qq, dd, rr = [], [], []
    for r in range(nq):
        inside = ids[r, rng.choice(depth, size=nrel[r] - 1, replace=False)] if nrel[r] > 1 else []
        outside = rng.integers(ndoc, 2 * ndoc)  # a relevant doc the run missed
        for d in [*inside, outside]:
            qq.append(r)
            dd.append(int(d))
            rr.append(int(rng.integers(1, 4)))
    return (
        ids.astype(np.int64),
        scores,
        Qrels(np.array(qq), np.array(dd), np.array(rr, dtype=np.float64)),
    )


def run(quick: bool = False) -> dict:
    nq, ndoc, depth = (2_500, 10_000, 100) if quick else (25_000, 100_000, 100)
    ids, scores, qrels = make_case(nq, ndoc, depth)
    store = PrecomputedStore(ids, scores)
    queries = np.arange(nq, dtype=np.float32)[:, None]
    ev = BenchmarkEvaluator(
        store, "pre", k=depth, measures=MEASURES, batch_size=1024, workers=2, progress=False
    )
    qq, dd, rr = (np.array(a) for a in (qrels.query_ids, qrels.doc_ids, qrels.relevance))
    ev.evaluate(queries[:2048], Qrels(qq, dd, rr))  # warm-up (imports, thread pools)
    times = []
    for _ in range(9):
        # Timed from the same arrays pytrec_eval starts from: building the
        # Qrels (validation included) is part of it.
        t = time.perf_counter()
        res = ev.evaluate(queries, Qrels(qq, dd, rr))
        times.append(time.perf_counter() - t)
    t_ours = min(times)
    t = time.perf_counter()
    _ = res.intervals
    t_ci = time.perf_counter() - t

    import pytrec_eval

    t = time.perf_counter()
    run_d = {}
    for r in range(nq):
        run_d[str(r)] = dict(zip(map(str, ids[r].tolist()), scores[r].tolist()))
    qrels_d: dict[str, dict[str, int]] = {}
    for q, d, rel in zip(
        qrels.query_ids.tolist(), qrels.doc_ids.tolist(), qrels.relevance.tolist()
    ):
        qrels_d.setdefault(str(q), {})[str(d)] = int(rel)
    t_build = time.perf_counter() - t
    t = time.perf_counter()
    trec = pytrec_eval.RelevanceEvaluator(
        qrels_d, {"P.10", "recall.10", "ndcg_cut.10", "map_cut.100", "success.1,5"}
    ).evaluate(run_d)
    t_trec_eval = time.perf_counter() - t
    t_trec = t_build + t_trec_eval
    max_diff = 0.0
    mean = res.mean()
    for m, key in TREC_KEYS.items():
        ref = np.mean([trec[str(r)][key] for r in range(nq)])
        max_diff = max(max_diff, abs(ref - mean[m]))
    qps = nq / t_ours
    ratio = t_trec / t_ours
    rows = [
        {
            "section": "evaluator",
            "item": f"evaluator queries/s ({nq:,} x top-{depth}, {len(MEASURES)} measures)",
            "value": qps,
            "unit": "q/s",
            "target": ">= 10,000",
            "ok": qps >= 10_000,
        },
        {
            "section": "evaluator",
            "item": "pytrec_eval time / evaluator time (same arrays)",
            "value": ratio,
            "unit": "x",
            "target": ">= 100",
            "ok": ratio >= 100,
        },
        {
            "section": "evaluator",
            "item": "evaluator wall time",
            "value": t_ours,
            "unit": "s",
            "target": None,
            "ok": None,
        },
        {
            "section": "evaluator",
            "item": "pytrec_eval: build dicts + evaluate",
            "value": t_trec,
            "unit": "s",
            "target": None,
            "ok": None,
        },
        {
            "section": "evaluator",
            "item": "95% bootstrap intervals (1000 resamples, lazy)",
            "value": t_ci,
            "unit": "s",
            "target": None,
            "ok": None,
        },
        {
            "section": "evaluator",
            "item": "max |mean difference| vs pytrec_eval",
            "value": max_diff,
            "unit": "",
            "target": "<= 1e-9",
            "ok": max_diff <= 1e-9,
        },
    ]
    return {
        "rows": rows,
        "details": {
            "n_queries": nq,
            "n_docs": ndoc,
            "depth": depth,
            "measures": MEASURES,
            "evaluator_runs_s": times,
            "timings": res.timings,
            "pytrec_build_s": t_build,
            "pytrec_evaluate_s": t_trec_eval,
        },
    }


if __name__ == "__main__":
    out = run(quick="--quick" in sys.argv)
    for r in out["rows"]:
        print(
            f"{r['item']:<70} {r['value']:>14.6g} {r['unit']:<4} target {r['target']}  ok={r['ok']}"
        )
