"""Retrieval captioning: caption each test image with its nearest caption, BLEU-4.

The test captions are indexed in the store; each test image searches them
and takes the best caption that describes *another* image (its own are
excluded: the task asks whether the nearest foreign caption says what the
image shows). Corpus BLEU-4 (sacrebleu, ``13a`` tokenisation, exponential
smoothing) of those hypotheses against each image's own captions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.result import TaskResult
from imsearch_align.experiment.tasks.base import Task, TaskUnsupportedError, require_split

__all__ = ["Captioning"]


class Captioning(Task):
    """Nearest-other-caption retrieval scored with corpus BLEU-4 (sacrebleu).

    Args:
        tokenize: sacrebleu tokeniser (``13a``, ``none``, ...).
        lowercase: lowercase before scoring.
    """

    name = "captioning"
    measures = "bleu4 (corpus BLEU-4 of the nearest other-image caption)"
    source = "retrieval captioning as in the metrics notebook; BLEU by sacrebleu"

    def __init__(self, tokenize: str = "13a", lowercase: bool = False) -> None:
        self.tokenize = str(tokenize)
        self.lowercase = bool(lowercase)

    def params(self) -> dict[str, Any]:
        return {"tokenize": self.tokenize, "lowercase": self.lowercase}

    def check(self, data: Any, config: Any) -> None:
        from imsearch_align.diagnostics.captioning import _import_sacrebleu

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
        from imsearch_align.diagnostics.captioning import corpus_bleu

        ds = ctx.dataset
        txt_ids = ctx.ids("text")
        texts = ds.texts.set_index("text_id").loc[txt_ids]
        owner = texts["image_id"].to_numpy(np.int64)
        img_ids = np.asarray(pd.unique(owner), dtype=np.int64)  # images with captions
        per_image = int(pd.Series(owner).value_counts().max())
        img_pos = pd.Index(ctx.ids("image")).get_indexer(img_ids)
        runs: dict[str, Any] = {}
        ranking = ctx.search(
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
        res = corpus_bleu(
            [captions[j] for j in chosen], refs, tokenize=self.tokenize, lowercase=self.lowercase
        )
        details = {
            "signature": res.signature,
            "precisions": list(res.precisions),
            "brevity_penalty": res.brevity_penalty,
            "n_images": len(img_ids),
            **self.params(),
        }
        return TaskResult(self.name, {"captioning": ranking}, {"bleu4": res.bleu}, details)
