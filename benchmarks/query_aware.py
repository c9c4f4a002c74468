"""What the support set buys back (issue 38, item 4): query-aware IVF against the
document-only index, per dense method, at 100k and 1M documents.

    python benchmarks/query_aware.py --embeddings .cache/query_aware/cone \
        --write-cone 20000 --sizes 100000 1000000 --out benchmarks/results/query_aware

Text-to-image: the documents are the split's test images plus synthetic image
distractors (the package's mixture model of the support images) up to each size;
2,000 sampled test captions are the queries. Per method (csa, procrustes, cka,
linear; identity needs a jointly trained space, which cone pairs are not and
``--joint-gap G`` writes, with a planted modality gap): a
FAISS IVF-Flat of ``auto_nlist(size)`` lists searched at each nprobe by

* ``document_only``: centroids on the documents, lists chosen by the query;
* ``shifted`` (A): the same index, lists chosen by the query plus the support
  set's mean query-to-document offset, candidates scored by the query itself;
* ``neighbour_weighted`` (B): centroids on the documents weighted by the support
  queries' true top-``m`` documents (the support queries never trained on);
* ``both``: A's list choice on B's index.

Recall@10 against the exact tie-aware truth (``exact_truth``, ``ann_recall_at_k``)
and the median of ``--repeats`` timed passes. A ``QueryGuard`` over the test queries
(raw and aligned) watches every training and offset computation and stops the run if
a test query reaches one. Writes ``results.json`` and ``README.md`` under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.collection.aligned import aligned_blocks
from imsearch_align.collection.control import control_queries
from imsearch_align.collection.prepare import distractor_source, prepare
from imsearch_align.collection.query_aware import (
    QueryGuard,
    candidates_scanned,
    document_only_index,
    neighbour_weighted_index,
    shifted_search,
    support_offset,
)
from imsearch_align.collection.query_aware_report import FIGURE, VARIANTS, draw, readme
from imsearch_align.collection.recall import ann_recall_at_k
from imsearch_align.collection.settings import auto_nlist
from imsearch_align.collection.truth import exact_truth
from imsearch_align.datasets.base import SUPPORT_SPLIT, TEST_SPLIT
from imsearch_align.experiment.components import support_pairs
from imsearch_align.experiment.study import Study
from imsearch_align.study.data import base_config, dataset_spec, method_params
from imsearch_align.testing.scripts import write_cone_pairs

METHODS = ("csa", "procrustes", "cka", "linear")
K = 10


def _args(argv: list[str] | None) -> argparse.Namespace:
    # fmt: off
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--embeddings", required=True, help="an --embeddings folder")
    p.add_argument("--write-cone", type=int, default=0, metavar="N_IMAGES",
                   help="first write cone pairs of N images there (write_cone_pairs)")
    p.add_argument("--joint-gap", type=float, default=None, metavar="G",
                   help="with --write-cone: write a joint space instead (images and captions "
                   "through one projection, captions moved by G along a fixed direction, "
                   "renormalised: a CLIP-like modality gap; identity is measured there)")
    p.add_argument("--image-dim", type=int, default=48)
    p.add_argument("--text-dim", type=int, default=32)
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    p.add_argument("--methods", nargs="+", default=list(METHODS))
    p.add_argument("--n-support", type=int, default=10_000)
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--nprobe", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    p.add_argument("--m", type=int, default=10, help="B: true neighbours per support query")
    p.add_argument("--share", type=float, default=0.2, help="B: the neighbours' weight share")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="benchmarks/results/query_aware")
    p.add_argument("--merge", action="store_true",
                   help="add these methods to --out's results.json (same data and settings)")
    p.add_argument("--readme-only", action="store_true",
                   help="rewrite README.md from --out's results.json and stop")
    # fmt: on
    return p.parse_args(argv)


def write_joint_gap(folder: Path, n_images: int, dim: int, gap: float, seed: int) -> None:
    """Images and two captions each in one space (one projection of a cone-shaped latent),
    the captions moved by ``gap`` along a fixed direction orthogonal to the images' mean
    and renormalised: a jointly trained space with a modality gap."""
    from imsearch_align.collection.cone import cone_vectors

    rng = np.random.default_rng(seed)
    z = cone_vectors(n_images, 12, seed=seed + 1).astype(np.float64)
    proj = rng.standard_normal((12, dim))
    ti = np.repeat(np.arange(n_images), 2)
    X = z @ proj + 0.05 * rng.standard_normal((n_images, dim))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    axis = X.mean(axis=0) / np.linalg.norm(X.mean(axis=0))
    d = rng.standard_normal(dim)
    d -= (d @ axis) * axis
    d /= np.linalg.norm(d)
    Y = z[ti] @ proj + 0.05 * rng.standard_normal((2 * n_images, dim))
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    Y += gap * d
    Y /= np.linalg.norm(Y, axis=1, keepdims=True)
    np.save(folder / "image.npy", X.astype(np.float32))
    np.save(folder / "text.npy", Y.astype(np.float32))
    np.save(folder / "text_image.npy", ti.astype(np.int64))


def _support_rows(study: Study, cfg: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The raw support pairs the method is fitted on (as ``prepare`` takes them)."""
    data = study.load(cfg)
    txt_ids, img_ids = support_pairs(data.support, cfg.n_support, cfg.seed)
    kw = {"split": SUPPORT_SPLIT, "config": cfg, "progress": False}
    X = study.embeddings(data.support, data.image_provider, "image", img_ids, **kw)
    Y = study.embeddings(data.support, data.text_provider, "text", txt_ids, **kw)
    return X, Y, np.asarray(txt_ids)


def _timed(fn: Any, repeats: int) -> tuple[Any, list[float]]:
    out, passes = None, []
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        passes.append(time.perf_counter() - t)
    return out, passes


def _sweep(indexes: dict[str, Any], queries: np.ndarray, offset: np.ndarray, truth: Any,
           ids: np.ndarray, a: argparse.Namespace) -> list[dict[str, Any]]:  # fmt: skip
    """Recall@10 and timings of every variant at every nprobe."""
    rows = []
    for variant in VARIANTS:
        idx = indexes["neighbour_weighted" if variant in ("neighbour_weighted", "both") else "doc"]
        for p in a.nprobe:
            p = min(p, idx.nlist)
            if variant in ("shifted", "both"):

                def run(idx=idx, p=p):
                    return shifted_search(idx, queries, K, p, offset)
            else:

                def run(idx=idx, p=p):
                    idx.nprobe = p
                    return idx.search(queries, K)

            (_, pos), passes = _timed(run, a.repeats)
            got = np.where(pos >= 0, ids[np.maximum(pos, 0)], -1)
            rec = ann_recall_at_k(got, truth, K)
            shift = offset if variant in ("shifted", "both") else None
            cand = candidates_scanned(idx, queries, p, shift)
            med = statistics.median(passes)
            rows.append({"variant": variant, "nprobe": p, "recall": rec.mean,
                         "n_uncertain": rec.n_uncertain, "seconds_median": med,
                         "candidates_mean": float(cand.mean()),
                         "seconds_passes": passes, "qps": len(queries) / med})  # fmt: skip
    return rows


def _controls(index: Any, controls: Any, ids: np.ndarray, docs: np.ndarray,
              nprobes: list[int]) -> list[dict[str, Any]]:  # fmt: skip
    """Recall@10 of in-distribution control queries (image rows) on the document-only index:
    how much a cross-modal query loses to the gap, i.e. how much there is to buy back."""
    truth = exact_truth(controls.queries, controls.ids, (ids, docs), K)
    rows = []
    for p in nprobes:
        p = min(p, index.nlist)
        index.nprobe = p
        _, pos = index.search(controls.queries, K)
        got = np.where(pos >= 0, ids[np.maximum(pos, 0)], -1)
        rows.append({"variant": "control", "nprobe": p,
                     "recall": ann_recall_at_k(got, truth, K).mean,
                     "candidates_mean": float(candidates_scanned(index, controls.queries, p).mean())})  # fmt: skip
    return rows


def _score_check(index: Any, docs: np.ndarray, queries: np.ndarray, offset: np.ndarray) -> float:
    """Max |returned score - q . x| of variant A at nprobe 16 (the scores are true)."""
    scores, pos = shifted_search(index, queries[:200], K, 16, offset)
    ok = pos >= 0
    true = np.einsum("qd,qkd->qk", queries[:200].astype(np.float64), docs[np.maximum(pos, 0)])
    return float(np.abs(scores - true)[ok].max())


def _one_method(method: str, study: Study, base: Any, a: argparse.Namespace) -> dict[str, Any]:
    dims = (a.image_dim, a.text_dim)
    cfg = base.replace(method=method, n_support=a.n_support,
                       method_params=method_params(method, a.n_support, dims))  # fmt: skip
    prep = prepare(cfg, study, "t2i", a.queries)
    X, Y, txt_ids = _support_rows(study, cfg)
    data = study.load(cfg)
    raw_q = study.embeddings(data.dataset, data.text_provider, "text", prep.query_ids,
                             split=TEST_SPLIT, config=cfg, progress=False)  # fmt: skip
    # The test queries are for evaluation only: disjoint ids, and a guard on every training.
    assert not np.intersect1d(txt_ids, prep.query_ids).size
    guard = QueryGuard(raw_q, prep.queries)
    offset = support_offset(prep.method, X, Y, direction="t2i", observe=guard)
    support_q = np.asarray(prep.method.transform_texts(Y), dtype=np.float32)
    n_dist = max(a.sizes) - len(prep.doc_ids)
    src = distractor_source(str(n_dist), cfg, study, "image", seed=a.seed)
    blocks = list(aligned_blocks(src, prep.method, "image", 65536))
    dist_ids = np.concatenate([b[0] for b in blocks])
    dist = np.concatenate([b[1] for b in blocks])
    del blocks
    controls = control_queries(study, cfg, prep, src, after_rows=n_dist, seed=a.seed)
    out: dict[str, Any] = {"method": method, "n_support": prep.n_support, "fit_s": prep.fit_s,
                           "dim": int(prep.docs.shape[1]), "offset_norm": float(np.linalg.norm(offset)),
                           "query_norm_mean": float(np.linalg.norm(prep.queries, axis=1).mean()),
                           "sizes": []}  # fmt: skip
    for size in a.sizes:
        ids = np.concatenate([prep.doc_ids, dist_ids[: size - len(prep.doc_ids)]])
        docs = np.ascontiguousarray(np.concatenate([prep.docs, dist[: size - len(prep.doc_ids)]]))
        t = time.perf_counter()
        truth = exact_truth(prep.queries, prep.query_ids, (ids, docs), K)
        truth_s = time.perf_counter() - t
        nlist = auto_nlist(size)
        t = time.perf_counter()
        doc = document_only_index(docs, nlist, observe=guard)
        doc_s = time.perf_counter() - t
        t = time.perf_counter()
        nw, info = neighbour_weighted_index(docs, support_q, nlist, m=a.m, share=a.share,
                                            observe=guard)  # fmt: skip
        nw_s = time.perf_counter() - t
        rows = _sweep({"doc": doc, "neighbour_weighted": nw}, prep.queries, offset, truth, ids, a)
        out["sizes"].append({
            "size": size, "nlist": nlist, "truth_s": truth_s, "build_s":
            {"document_only": doc_s, "neighbour_weighted": nw_s}, "neighbour_weighted": info,
            "shifted_max_score_error": _score_check(doc, docs, prep.queries, offset),
            "rows": rows, "control": {"source": controls.source,
                                      "rows": _controls(doc, controls, ids, docs, a.nprobe)},
        })  # fmt: skip
        print(f"{method} {size}: " + " ".join(
            f"{r['variant'][:4]}@{r['nprobe']}={r['recall']:.3f}" for r in rows if r["nprobe"] == 16
        ), flush=True)  # fmt: skip
    out["guard_saw"] = sorted({w for w, _ in guard.seen})
    return out


def _describe(a: argparse.Namespace) -> str:
    if a.joint_gap is None:
        data = (f"Cone-shaped paired embeddings (`write_cone_pairs`, {a.write_cone or '?'} "
                f"images, two captions each, image dim {a.image_dim}, text dim {a.text_dim}, "
                f"seed {a.seed})")  # fmt: skip
        joint = "Identity is not measured: cone pairs have no jointly trained space."
    else:
        data = (f"A joint space with a planted modality gap (`write_joint_gap`, "
                f"{a.write_cone or '?'} images, two captions each, dim {a.image_dim}, captions "
                f"moved by {a.joint_gap} along a fixed direction and renormalised, seed {a.seed})")  # fmt: skip
        joint = "Identity is measured: images and captions share one space."
    return (f"{data}; precomputed split: 70% support, 30% test; text-to-image, {a.n_support} "
            f"support pairs, {a.queries} test captions as queries; documents: the test images "
            "plus synthetic image distractors (the mixture model of the support images, seed "
            f"{a.seed}) up to each size; B with m = {a.m}, share = {a.share}. {joint}")  # fmt: skip


def _result(a: argparse.Namespace, argv: list[str] | None, methods: list[dict[str, Any]],
            seconds: float, old: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    command = "python benchmarks/query_aware.py " + " ".join(sys.argv[1:] if argv is None else argv)
    return {
        "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command if old is None else old["command"],
        "commands_merged": [] if old is None else [*old.get("commands_merged", []), command],
        "config": vars(a), "seconds": seconds,
        "machine": {"python": platform.python_version(), "cpu": platform.processor() or "",
                    "faiss": __import__("faiss").__version__},
        "data": {
            "description": _describe(a),
            "trained": {
                "method": "the support pairs (seeded sample of the support split)",
                "offset (A)": "the same support pairs, mapped through the fitted method",
                "centroids (document_only, A)": "the documents (k-means, 10 iterations)",
                "centroids (B)": "the documents, weighted by how often each is among the "
                "support queries' true top-m documents; no query vector trained on",
                "test queries": "searched only (QueryGuard over raw and aligned rows)",
            },
        },
        "methods": methods,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    if a.readme_only:
        result = json.loads((Path(a.out) / "results.json").read_text())
        (Path(a.out) / "README.md").write_text(readme(result))
        draw(result, Path(a.out) / FIGURE)
        return 0
    emb = Path(a.embeddings)
    if a.write_cone:
        emb.mkdir(parents=True, exist_ok=True)
        if a.joint_gap is None:
            write_cone_pairs(emb, a.write_cone, image_dim=a.image_dim, text_dim=a.text_dim,
                             seed=a.seed)  # fmt: skip
        else:
            write_joint_gap(emb, a.write_cone, a.image_dim, a.joint_gap, a.seed)
    name, params, offline = dataset_spec(embeddings=str(emb))
    base = base_config(name, params, offline=offline, precomputed=True, cache_dir="none",
                       seed=a.seed)  # fmt: skip
    study = Study()
    t0 = time.perf_counter()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    old = json.loads((out / "results.json").read_text()) if a.merge else None
    methods = [] if old is None else [m for m in old["methods"] if m["method"] not in a.methods]
    for m in a.methods:  # written after each method: a stopped run keeps what it measured
        methods.append(_one_method(m, study, base, a))
        result = _result(a, argv, methods, time.perf_counter() - t0, old)
        (out / "results.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
        (out / "README.md").write_text(readme(result))
    draw(result, out / FIGURE)
    print(f"wrote {out}/results.json, README.md and {FIGURE} in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
