"""Retrieval captioning: caption each test image with its nearest caption, BLEU-4.

The test captions are indexed in the store; each test image searches them
and takes the best caption that describes *another* image (its own are
excluded: the task asks whether the nearest foreign caption says what the
image shows). The hypotheses are scored against each image's own captions by
``scorer``: ``sacrebleu`` (the default) reports corpus BLEU-4 (``13a``
tokenisation, exponential smoothing, 0-100); ``coco`` reports pycocoevalcap's
BLEU-1..4, ROUGE-L, CIDEr-D and METEOR (SPICE unavailable), the numbers
CLIP_benchmark publishes. Results record the scorer and each measure's definition.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.result import TaskResult
from imsearch_align.experiment.search import index_and_evaluate
from imsearch_align.experiment.tasks.base import Task, TaskUnsupportedError, require_split
from imsearch_align.framework.registry import TASKS

__all__ = ["Captioning"]


@TASKS.register("captioning")
class Captioning(Task):
    """Nearest-other-caption retrieval scored by sacrebleu BLEU-4 or COCO-caption metrics.

    Args:
        tokenize: sacrebleu tokeniser (``13a``, ``none``, ...); scorer ``sacrebleu`` only.
        lowercase: lowercase before scoring; scorer ``sacrebleu`` only.
        scorer: ``"sacrebleu"`` or ``"coco"`` (pycocoevalcap's definitions).
    """

    name = "captioning"
    measures = (
        "bleu4 (scorer sacrebleu); coco_bleu1..4, coco_rouge_l, coco_cider_d, coco_meteor, "
        "coco_spice (scorer coco)"
    )
    source = "retrieval captioning as in the metrics notebook; sacrebleu or pycocoevalcap scores"

    def __init__(
        self, tokenize: str = "13a", lowercase: bool = False, scorer: str = "sacrebleu"
    ) -> None:
        from imsearch_align.diagnostics.captioning import check_scorer
        from imsearch_align.experiment.config import ConfigError

        try:  # refused before any data is loaded
            self.scorer = check_scorer(scorer)
        except ValueError as exc:
            raise ConfigError(f"task 'captioning' parameter {exc}") from None
        if self.scorer == "coco" and (tokenize != "13a" or lowercase):
            raise ConfigError(
                "task 'captioning' parameters tokenize and lowercase apply to scorer 'sacrebleu'; "
                "scorer 'coco' tokenises as pycocoevalcap does"
            )
        self.tokenize = str(tokenize)
        self.lowercase = bool(lowercase)

    def params(self) -> dict[str, Any]:
        return {"tokenize": self.tokenize, "lowercase": self.lowercase, "scorer": self.scorer}

    def check(self, data: Any, config: Any) -> None:
        from imsearch_align.diagnostics.captioning import _import_sacrebleu

        if self.scorer == "sacrebleu":
            _import_sacrebleu()
        require_split(data.dataset, "test", "image", self.name)
        require_split(data.dataset, "test", "text", self.name)
        caps = data.dataset.texts["caption"]
        if not caps.map(lambda c: isinstance(c, str)).all():
            raise TaskUnsupportedError(
                f"task 'captioning' scores caption text; dataset {data.dataset.name!r} has "
                "embeddings without caption text"
            )

    def run(self, ctx: Any) -> TaskResult:
        from imsearch_align.diagnostics.captioning import SCORERS, corpus_bleu
        from imsearch_align.framework.task_measures import TASK_MEASURES

        ds = ctx.dataset
        txt_ids = ctx.ids("text")
        texts = ds.texts.set_index("text_id").loc[txt_ids]
        owner = texts["image_id"].to_numpy(np.int64)
        img_ids = np.asarray(pd.unique(owner), dtype=np.int64)  # images with captions
        per_image = int(pd.Series(owner).value_counts().max())
        img_pos = pd.Index(ctx.ids("image")).get_indexer(img_ids)
        runs: dict[str, Any] = {}
        ranking = index_and_evaluate(
            ctx,
            "captioning",
            ctx.aligned("text"),
            txt_ids,
            ctx.aligned("image")[img_pos],
            img_ids,
            ds.qrels("i2t", "test"),
            k=min(per_image + 1, len(txt_ids)),
            measures=["HitRate@1"],
            runs=runs,
        )["captioning"]
        run = runs["captioning"]
        qrow = pd.Index(np.asarray(run.query_ids, dtype=np.int64)).get_indexer(img_ids)
        docs = run.doc_ids[qrow]
        pos = pd.Index(txt_ids).get_indexer(docs.ravel()).reshape(docs.shape)
        foreign = (docs >= 0) & (np.where(pos >= 0, owner[pos], -1) != img_ids[:, None])
        if not foreign.any(axis=1).all():
            bad = img_ids[~foreign.any(axis=1)][0]
            raise TaskUnsupportedError(
                f"task 'captioning': no caption of another image came back for image {bad}"
            )
        chosen = pos[np.arange(len(img_ids)), foreign.argmax(axis=1)]
        captions = texts["caption"].to_numpy()
        refs = pd.Series(captions).groupby(owner).apply(list).loc[img_ids].tolist()
        hyps = [captions[j] for j in chosen]
        if self.scorer == "coco":
            metrics, details = _coco(hyps, refs)
        else:
            res = corpus_bleu(hyps, refs, tokenize=self.tokenize, lowercase=self.lowercase)
            metrics = {"bleu4": res.bleu}
            details = {
                "signature": res.signature,
                "precisions": list(res.precisions),
                "brevity_penalty": res.brevity_penalty,
            }
        details.update(n_images=len(img_ids), **self.params())
        details["scorer_definition"] = SCORERS[self.scorer]
        details["definitions"] = {t.name: t.definition for t in TASK_MEASURES if t.name in metrics}
        return TaskResult(self.name, {"captioning": ranking}, metrics, details)


def _coco(hyps: list[str], refs: list[list[str]]) -> tuple[dict[str, float], dict[str, Any]]:
    """The ``coco`` scorer's metrics and details (what is unavailable, and why)."""
    from imsearch_align.diagnostics.coco_caption import coco_caption_scores

    res = coco_caption_scores(hyps, refs)
    return dict(res.scores), {"unavailable": dict(res.unavailable)}
