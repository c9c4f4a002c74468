"""Zero-shot classification: one vector per class in the aligned space.

Class prompts (``template`` x ``class name``) are encoded with the text
encoder and aligned; with ``ensemble="mean"`` each prompt vector is
normalised, averaged over templates and normalised again (CLIP_benchmark),
with ``best`` every prompt is indexed and a class ranks at its best prompt.
The test images search the class vectors: ``acc1``, ``acc5`` (NaN below 5
classes) and the mean per-class recall, as CLIP_benchmark defines them.

What "zero-shot" means here depends on the support pairs: fitted on the
evaluated dataset's own training split (ImageNet: training images paired
with "a photo of a {class}"), the alignment has seen labelled images of the
classes it classifies; fitted with ``support_dataset`` (COCO or Flickr30k
captions), it has not, which is the protocol of the ASIF and CSA papers.
The result says which (``details["protocol"]``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.result import TaskResult
from imsearch_align.experiment.search import index_and_evaluate
from imsearch_align.experiment.tasks.base import (
    Task,
    require_encoder,
    require_labels,
    require_split,
)
from imsearch_align.framework.interfaces import SearchResult
from imsearch_align.framework.registry import TASKS
from imsearch_align.framework.validation import is_sparse

__all__ = ["Classification", "class_prompts", "class_vectors"]

log = logging.getLogger(__name__)


def class_prompts(class_names: Sequence[str], templates: Sequence[str]) -> list[str]:
    """Every (class, template) prompt, class-major: prompt ``c * T + t``."""
    return [t.replace("{c}", c).replace("{}", c) for c in class_names for t in templates]


def class_vectors(
    prompt_vecs: Any, n_classes: int, n_templates: int, *, cosine: bool = True
) -> Any:
    """Template ensemble (dense or CSR). In a cosine space (``cosine``: the
    method's rows are unit-norm) as CLIP_benchmark does it: normalise each
    prompt's vector, average over templates, normalise. In an inner-product
    space (local CKA, whose inner product is the CKA score and whose row norms
    carry its normalisation) the plain average of the prompt vectors: a class
    scores the mean of its prompts' similarities; normalising would rescale
    each class by its own factor and rank classes by something else."""
    import scipy.sparse as sp

    if is_sparse(prompt_vecs):

        def unit(m: Any) -> Any:
            norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
            return sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ m

        m = sp.csr_matrix(prompt_vecs, dtype=np.float64)
        mean = sp.kron(sp.eye(n_classes), np.ones((1, n_templates)) / n_templates, format="csr")
        avg = mean @ (unit(m) if cosine else m)
        return sp.csr_matrix(unit(avg) if cosine else avg, dtype=np.float32)

    def unit_rows(a: np.ndarray) -> np.ndarray:
        return a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)

    v = np.asarray(prompt_vecs, dtype=np.float64)
    avg = (unit_rows(v) if cosine else v).reshape(n_classes, n_templates, -1).mean(axis=1)
    return (unit_rows(avg) if cosine else avg).astype(np.float32)


class ClassMappingStore:
    """Best-single-prompt: search prompt vectors, report each class once, at
    the rank of its best prompt (ids = class index)."""

    supports_sparse = True

    def __init__(self, store: Any, n_templates: int, n_classes: int) -> None:
        self.store, self.T, self.C = store, n_templates, n_classes

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        r = self.store.search(name, queries, min(self.C * self.T, max(k * self.T, k)))
        cls = np.where(r.ids >= 0, r.ids // self.T, -1)
        nq = cls.shape[0]
        ids = np.full((nq, k), -1, dtype=np.int64)
        sc = np.full((nq, k), -np.inf, dtype=np.float32)
        # First occurrence of each class per row, vectorised: mark repeats.
        order = np.argsort(cls, axis=1, kind="stable")
        sorted_c = np.take_along_axis(cls, order, 1)
        dup_sorted = np.zeros_like(sorted_c, dtype=bool)
        dup_sorted[:, 1:] = sorted_c[:, 1:] == sorted_c[:, :-1]
        dup = np.zeros_like(dup_sorted)
        np.put_along_axis(dup, order, dup_sorted, 1)
        keep = ~dup & (cls >= 0)
        rank = np.cumsum(keep, axis=1) - 1
        rows, cols = np.nonzero(keep & (rank < k))
        ids[rows, rank[rows, cols]] = cls[rows, cols]
        sc[rows, rank[rows, cols]] = r.scores[rows, cols]
        return SearchResult(ids, sc)

    def count(self, name: str) -> int:
        """Number of classes (what a full ranking holds)."""
        return self.C


def protocol(ctx: Any) -> str:
    """What the alignment saw before classifying (see the module docstring)."""
    cfg = ctx.config
    if ctx.data.support_is_external:
        return (
            f"zero-shot: alignment fitted on {ctx.n_support_pairs} image-caption pairs of "
            f"{cfg.support_dataset!r}, none of them labelled images of {cfg.dataset!r}"
        )
    return (
        f"not zero-shot for {cfg.dataset!r}: alignment fitted on {ctx.n_support_pairs} pairs of "
        f"its own training split (labelled images of the evaluated classes paired with their "
        "prompts); fit on another dataset with support_dataset for the ASIF/CSA protocol"
    )


@TASKS.register("classification")
class Classification(Task):
    """Zero-shot classification of the test images by class-prompt vectors."""

    name = "classification"
    measures = "acc1, acc5, mean_per_class_recall (plus HitRate@k, Accuracy of the class ranking)"
    source = "CLIP_benchmark zero-shot classification"

    def check(self, data: Any, config: Any) -> None:
        require_labels(data.dataset, self.name)
        require_split(data.dataset, "test", "image", self.name)
        require_encoder(data, "text", self.name, "class prompts")

    def run(self, ctx: Any) -> TaskResult:
        cfg, ds = ctx.config, ctx.dataset
        templates = list(ds.templates or ("a photo of a {c}.",))
        names = list(ds.class_names)
        C, T = len(names), len(templates)
        A_prompts = ctx.transform(
            "text", ctx.encode_texts(class_prompts(names, templates), "class prompts")
        )
        if cfg.ensemble == "mean":
            cosine = getattr(ctx.method, "cosine_output", True)
            docs = class_vectors(A_prompts, C, T, cosine=cosine)
            doc_ids, searcher = np.arange(C), None
        else:
            docs, doc_ids = A_prompts, np.arange(C * T)
            searcher = ClassMappingStore(ctx.store, T, C)
        # acc5 is always reported when there are 5 classes, whatever k_values says.
        ks = sorted({x for x in cfg.k_values if x <= C} | ({5} if C >= 5 else set())) or [C]
        if ks != list(cfg.k_values):  # said, not silent: HitRate@k over C classes
            log.warning("classification over %d classes reports HitRate@k for k in %s, not k_values "
                        "%s (k above the class count dropped, 5 added for acc5)", C, ks, list(cfg.k_values))  # fmt: skip
        test_ids = ctx.ids("image")
        ranking = index_and_evaluate(
            ctx,
            "classification",
            docs,
            doc_ids,
            ctx.aligned("image"),
            test_ids,
            ds.label_qrels("test"),
            measures=[*[f"HitRate@{x}" for x in ks], "Accuracy"],
            k=max(ks),
            searcher=searcher,
        )["classification"]
        pq = ctx.per_query[-1]
        metrics = {
            "acc1": ranking.metrics["Accuracy"],
            "acc5": ranking.metrics.get("HitRate@5", float("nan")) if C >= 5 else float("nan"),
            "mean_per_class_recall": _mean_per_class_recall(ds, test_ids, pq),
        }
        details = {
            "n_classes": C,
            "n_templates": T,
            "ensemble": cfg.ensemble,
            "protocol": protocol(ctx),
        }
        return TaskResult(self.name, {"classification": ranking}, metrics, details)


def _mean_per_class_recall(ds: Any, test_ids: np.ndarray, per_query: pd.DataFrame) -> float:
    """Balanced accuracy over the classes present in the test labels (CLIP_benchmark):
    the mean over classes of the mean top-1 correctness of the class's images.

    The correctness is the tie-aware per-query ``Accuracy`` (the expected top-1
    hit over the orders of tied classes, as acc1 is reported), so a class tied
    with its twin (two identical prompts) is not credited by class id. With
    0/1 hits this is sklearn's ``balanced_accuracy_score``."""
    labels = ds.images.set_index("image_id").loc[test_ids, "label"].to_numpy()
    hit = per_query.set_index("query_id")["Accuracy"].reindex(test_ids).fillna(0).to_numpy()
    if not len(labels):
        return float("nan")
    classes, inv = np.unique(labels, return_inverse=True)
    per_class = np.bincount(inv, weights=hit, minlength=len(classes)) / np.bincount(inv)
    return float(per_class.mean())
