"""Multi-label classification: class-prompt vectors scored against every image, mAP.

Each class gets one vector in the aligned space (prompt ensemble as in
zero-shot classification). CLIP_benchmark's multi-label mean average
precision is computed from the float64 inner products of the aligned image
and class vectors: per class, rank the images by score, ``AP_c = sum over
positives of precision@i / #positives`` (torchnet's AP; a class without
positives scores 0 and counts), expected over the orders of tied images
(:func:`~imsearch_align.diagnostics.multilabel.multilabel_map`), mAP = mean
over classes. The test images also search the class vectors in the store for
all ``C`` classes, and each image's class ranking is scored (P@k, R@k,
nDCG@k... with the image's label set as its relevant classes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.result import TaskResult
from imsearch_align.experiment.search import index_and_evaluate
from imsearch_align.experiment.tasks.base import (
    Task,
    TaskUnsupportedError,
    require_encoder,
    require_labels,
    require_split,
)
from imsearch_align.experiment.tasks.classification import class_prompts, class_vectors
from imsearch_align.framework.metrics import Qrels
from imsearch_align.framework.ranking.tie_aware import tolerance_for
from imsearch_align.framework.registry import TASKS

__all__ = ["MultiLabel", "label_set_qrels", "true_scores"]


def true_scores(queries: Any, docs: Any, block: int = 4096) -> np.ndarray:
    """``(n_queries, n_docs)`` float64 inner products of the vectors (dense or
    CSR), computed in row blocks of the queries."""
    import scipy.sparse as sp

    D = docs.astype(np.float64)
    DT = D.T.tocsc() if sp.issparse(D) else np.ascontiguousarray(D.T)
    out = np.empty((queries.shape[0], docs.shape[0]), dtype=np.float64)
    for s in range(0, queries.shape[0], block):
        q = queries[s : s + block].astype(np.float64)
        prod = q @ DT
        out[s : s + block] = prod.toarray() if sp.issparse(prod) else np.asarray(prod)
    return out


def label_set_qrels(image_ids: np.ndarray, label_sets: Any) -> Qrels:
    """Qrels with each image's classes relevant (``image_id -> class index``)."""
    q = np.repeat(np.asarray(image_ids, dtype=np.int64), [len(s) for s in label_sets])
    d = np.asarray([c for s in label_sets for c in s], dtype=np.int64)
    return Qrels.from_pairs(q, d)


@TASKS.register("multilabel")
class MultiLabel(Task):
    """Multi-label mAP of class-prompt vectors (CLIP_benchmark)."""

    name = "multilabel"
    measures = "mAP (mean over classes of average precision), plus the per-image class ranking"
    source = "CLIP_benchmark multi-label classification (torchnet AP)"

    def check(self, data: Any, config: Any) -> None:
        require_labels(data.dataset, self.name, multi=True)
        require_split(data.dataset, "test", "image", self.name)
        require_encoder(data, "text", self.name, "class prompts")
        if config.ensemble != "mean":
            raise TaskUnsupportedError(
                f"task 'multilabel' scores one vector per class (the prompts averaged); "
                f"ensemble={config.ensemble!r} applies to classification only"
            )

    def run(self, ctx: Any) -> TaskResult:
        from imsearch_align.diagnostics.multilabel import multilabel_map

        ds = ctx.dataset
        names = list(ds.class_names)
        templates = list(ds.templates or ("a photo of a {c}.",))
        C, T = len(names), len(templates)
        raw = ctx.encode_texts(class_prompts(names, templates), "class prompts")
        cosine = getattr(ctx.method, "cosine_output", True)
        docs = class_vectors(ctx.transform("text", raw), C, T, cosine=cosine)
        test_ids = ctx.ids("image")
        sets = pd.Series(list(ds.label_sets), index=ds.images["image_id"].to_numpy()).loc[test_ids]
        ks = sorted({k for k in ctx.config.k_values if k <= C}) or [C]
        measures = [
            m for k in ks for m in (f"P@{k}", f"R@{k}", f"nDCG@{k}", f"AP@{k}", f"HitRate@{k}")
        ]
        ranking = index_and_evaluate(
            ctx,
            "multilabel",
            docs,
            np.arange(C),
            ctx.aligned("image"),
            test_ids,
            label_set_qrels(test_ids, sets.tolist()),
            measures=measures,
            k=C,
        )["multilabel"]
        images = ctx.aligned("image")  # rows in test_ids order
        targets = np.zeros((len(test_ids), C), dtype=np.int8)
        for i, s in enumerate(sets):
            targets[i, list(s)] = 1
        tol = tolerance_for(ctx.config.tie_tolerance, images, rescored=True)
        res = multilabel_map(true_scores(images, docs), targets, tol=tol)
        details = {
            "n_classes": C,
            "n_templates": T,
            "classes_without_positives": res.n_classes_without_positives,
            "per_class_ap": {names[c]: float(res.per_class_ap[c]) for c in range(C)},
        }
        return TaskResult(
            self.name, {"multilabel": ranking}, {"mAP": res.mean_average_precision}, details
        )
