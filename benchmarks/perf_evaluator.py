"""Perf section "evaluator": the harness's overhead on precomputed search results.

25,000 queries x top-100 over 100,000 docs. The store returns precomputed
result slices, so what is timed is the evaluator itself: batching on the
thread pool, building the Run, computing every measure. pytrec_eval is
timed on the same run and qrels starting from the same arrays, so its time
includes building its dict input, as a user pays it; ours includes building
the Qrels from those arrays. The values must agree. Best of 9 for ours, one
run for pytrec_eval (its dict building alone takes most of a second).

Targets (issue 2): >= 10,000 queries/s and >= 100x pytrec_eval.

Second part, ``evaluate_frame``: the imsearch_eval-style entry point (one
row per judged query-image pair) at 25,000 queries, three judged rows per
query (two relevant images, one judged non-relevant), string query ids,
three metadata columns, k = 25 and the default measures at 1, 5, 10, 25.
The store answers instantly from precomputed results and ``embed`` returns
precomputed vectors, so what is timed is the harness: frame parsing,
de-duplication by id, qrels, metadata, batching, the checks on every
answer, the metrics and the per-query table with its metadata (bootstrap
intervals excluded, timed above). Best of 9; the means are checked against
``evaluate`` on the same run and qrels built directly.

Target (issue 12): >= 250,000 queries/s at 25,000 queries.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np
import pandas as pd
from perf_common import row_maker

from imsearch_align import Qrels, Run, SearchResult, evaluate
from imsearch_align.framework.evaluator import BenchmarkEvaluator
from imsearch_align.framework.measures import default_measures, needs_vectors

_row = row_maker("evaluator", as_float=False)

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
    """Returns slices of precomputed results; queries carry their row index.

    It says how big its collection is (a ``CollectionCatalog``, as every
    store of the package), so the evaluator checks each answer's length
    against ``min(k, count)``.
    """

    supports_sparse = False

    def __init__(self, ids: np.ndarray, scores: np.ndarray, n_docs: int | None = None) -> None:
        self.ids, self.scores = ids, scores
        self.n_docs = int(ids.max()) + 1 if n_docs is None else n_docs

    def has_collection(self, name):
        return True

    def list_collections(self):
        return ["pre"]

    def count(self, name):
        return self.n_docs

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


def make_frame(nq: int, ndoc: int, depth: int, seed: int = 1):
    """An imsearch_eval-style frame and the precomputed results its queries get."""
    rng = np.random.default_rng(seed)
    ids = (rng.integers(0, ndoc, (nq, 1)) + rng.permutation(ndoc)[:depth][None]) % ndoc
    ranks = np.arange(depth, 0, -1, dtype=np.float32)[None]
    scores = ranks + 0.5 * rng.random((nq, depth), dtype=np.float32)
    # Per query: a relevant image at a random rank, one the store misses, one judged 0.
    hit = ids[np.arange(nq), rng.integers(0, depth, nq)]
    miss = rng.integers(ndoc, 2 * ndoc, nq)
    judged0 = ids[np.arange(nq), rng.integers(0, depth, nq)]
    qid = np.array([f"q{i:07d}" for i in range(nq)], dtype=object)
    df = pd.DataFrame(
        {
            "query": np.repeat(np.array([f"a photo of thing {i}" for i in range(nq)]), 3),
            "query_id": np.repeat(qid, 3),
            "doc_id": np.column_stack([hit, miss, judged0]).ravel(),
            "relevance": np.tile([1, 1, 0], nq),
            "category": np.repeat(
                np.array(["animal", "plant", "vehicle", "sky"])[np.arange(nq) % 4], 3
            ),
            "camera": np.repeat(np.where(np.arange(nq) % 2 == 0, "north", "south"), 3),
            "hour": np.repeat(np.arange(nq) % 24, 3),
        }
    )
    # Two judgements of the same (query, image) would be a duplicate: keep the first.
    df = df.drop_duplicates(subset=["query_id", "doc_id"], keep="first").reset_index(drop=True)
    return df, ids.astype(np.int64), scores


def run_frame(quick: bool = False) -> tuple[list[dict], dict]:
    """The evaluate_frame part: rows and details."""
    nq, ndoc, depth = (2_500, 10_000, 25) if quick else (25_000, 100_000, 25)
    # the evaluator scores judgement measures; Diversity needs the vectors (score_ranking)
    measures = [m for m in default_measures((1, 5, 10, 25)) if not needs_vectors(m)]
    df, ids, scores = make_frame(nq, ndoc, depth)
    store = PrecomputedStore(ids, scores)
    vectors = np.arange(nq, dtype=np.float32)[:, None]  # row index: what the store keys on

    def embed(texts: list[str]) -> np.ndarray:
        return vectors[: len(texts)]

    ev = BenchmarkEvaluator(
        store, "pre", k=depth, measures=measures, batch_size=1024, workers=2, progress=False
    )
    ev.evaluate_frame(df.iloc[: 3 * 2048], embed)  # warm-up
    times = []
    for _ in range(9):
        t = time.perf_counter()
        res = ev.evaluate_frame(df, embed)
        means = res.mean()
        per_query = res.per_query  # the table a user reads, metadata joined
        times.append(time.perf_counter() - t)
    assert len(per_query) == nq and "category" in per_query.columns
    best = min(times)
    qps = nq / best
    # The same run and qrels built directly, scored by evaluate: the means must agree.
    qids = pd.unique(df["query_id"])
    direct = evaluate(
        Run.from_arrays(qids, ids, scores),
        Qrels(
            df["query_id"].to_numpy(dtype=object),
            df["doc_id"].to_numpy(),
            df["relevance"].to_numpy(),
        ),
        measures,
    ).mean()
    diff = max(abs(direct[m] - means[m]) for m in measures)
    rows = [
        _row(
            f"evaluate_frame queries/s ({nq:,} queries, {len(df):,} rows, top-{depth}, "
            f"{len(measures)} measures)",
            qps,
            "q/s",
            ">= 250,000",
            qps >= 250_000,
        ),
        _row("evaluate_frame wall time", best, "s"),
        _row(
            "evaluate_frame max |mean difference| vs evaluate on the same arrays",
            diff,
            "",
            "<= 1e-12",
            diff <= 1e-12,
        ),
    ]
    details = {"n_queries": nq, "n_rows": len(df), "depth": depth, "runs_s": times}
    return rows, details


def run(quick: bool = False) -> dict:
    """Both parts: the evaluator against pytrec_eval, then ``evaluate_frame``."""
    frame_rows, frame_details = run_frame(quick)
    nq, ndoc, depth = (2_500, 10_000, 100) if quick else (25_000, 100_000, 100)
    ids, scores, qrels = make_case(nq, ndoc, depth)
    res, times, t_ci = _time_evaluator(ids, scores, qrels, depth)
    trec, t_build, t_trec_eval = _time_pytrec_eval(ids, scores, qrels)
    t_trec = t_build + t_trec_eval
    max_diff = 0.0
    mean = res.mean()
    for m, key in TREC_KEYS.items():
        ref = np.mean([trec[str(r)][key] for r in range(nq)])
        max_diff = max(max_diff, abs(ref - mean[m]))
    t_ours = min(times)
    qps = nq / t_ours
    ratio = t_trec / t_ours
    rows = [
        _row(
            f"evaluator queries/s ({nq:,} x top-{depth}, {len(MEASURES)} measures)",
            qps,
            "q/s",
            ">= 10,000",
            qps >= 10_000,
        ),
        _row("pytrec_eval time / evaluator time (same arrays)", ratio, "x", ">= 100", ratio >= 100),
        _row("evaluator wall time", t_ours, "s"),
        _row("pytrec_eval: build dicts + evaluate", t_trec, "s"),
        _row("95% bootstrap intervals (1000 resamples, lazy)", t_ci, "s"),
        _row("max |mean difference| vs pytrec_eval", max_diff, "", "<= 1e-9", max_diff <= 1e-9),
    ]
    return {
        "rows": rows + frame_rows,
        "details": {
            "evaluate_frame": frame_details,
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


def _time_evaluator(
    ids: np.ndarray, scores: np.ndarray, qrels: Qrels, depth: int
) -> tuple[Any, list[float], float]:
    """The evaluator on the precomputed run, best of 9: (last result, run times, intervals time)."""
    nq = len(ids)
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
    t = time.perf_counter()
    _ = res.intervals
    t_ci = time.perf_counter() - t
    return res, times, t_ci


def _time_pytrec_eval(
    ids: np.ndarray, scores: np.ndarray, qrels: Qrels
) -> tuple[dict, float, float]:
    """pytrec_eval on the same run and qrels: (its result, dict-building s, evaluating s)."""
    import pytrec_eval

    t = time.perf_counter()
    run_d = {}
    for r in range(len(ids)):
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
    return trec, t_build, t_trec_eval


if __name__ == "__main__":
    if "--frame-only" in sys.argv:
        out = {"rows": run_frame(quick="--quick" in sys.argv)[0]}
    else:
        out = run(quick="--quick" in sys.argv)
    for r in out["rows"]:
        print(
            f"{r['item']:<70} {r['value']:>14.6g} {r['unit']:<4} target {r['target']}  ok={r['ok']}"
        )
