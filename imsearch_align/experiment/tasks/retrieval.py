"""Retrieval: text-to-image and image-to-text search of the test split.

Each direction indexes one modality in the store and searches it with the
other; P@k, R@k, nDCG@k, AP@k, RR@k and HitRate@k (CLIP_benchmark's
recall@k) follow trec_eval. Perturbations re-encode the queries (typos,
blur...) and search the same index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imsearch_align.experiment.result import TaskResult
from imsearch_align.experiment.search import index_and_evaluate
from imsearch_align.experiment.tasks.base import (
    Task,
    TaskUnsupportedError,
    require_encoder,
    require_split,
)
from imsearch_align.framework.registry import TASKS

__all__ = ["Retrieval"]

DOCS = {"t2i": ("image", "text"), "i2t": ("text", "image")}


class _LazyImages(Sequence):
    """Dataset images opened on access (paths or encoded bytes -> RGB PIL)."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: Any) -> Any:
        import io

        from PIL import Image

        item = self.items[i]
        src = io.BytesIO(item) if isinstance(item, bytes | bytearray) else item
        with Image.open(src) as im:
            return im.convert("RGB")


def perturbed_queries(ctx: Any, direction: str) -> dict[str, Any]:
    """Aligned query vectors for each configured perturbation of ``direction``'s modality."""
    cfg = ctx.config
    if not cfg.perturbations:
        return {}
    from imsearch_align.diagnostics.perturbations import PerturbedItems, get_perturbation
    from imsearch_align.embedding import items_for

    modality = DOCS[direction][1]
    provider = ctx.provider(modality)
    out: dict[str, Any] = {}
    for name in cfg.perturbations:
        pert = get_perturbation(name, **cfg.perturbation_params.get(name, {}))
        if pert.modality != modality:
            continue
        table = ctx.dataset.texts if modality == "text" else ctx.dataset.images
        col = "text_id" if modality == "text" else "image_id"
        rows = table.set_index(col).loc[ctx.ids(modality)].reset_index()
        items = items_for(ctx.dataset, modality, rows)
        if modality == "image":
            items = _LazyImages(items)
        perturbed = PerturbedItems(items, pert, seed=cfg.seed)
        with ctx.clock("embed_s"):
            E = provider.encode(perturbed, batch_size=cfg.encode_batch_size, progress=ctx.progress)
        out[name] = ctx.transform(modality, E)
    return out


@TASKS.register("retrieval")
class Retrieval(Task):
    """Text-to-image and image-to-text search (``directions``) of the test split."""

    name = "retrieval"
    measures = "P@k, R@k, nDCG@k, AP@k, RR@k, HitRate@k per direction (trec_eval definitions)"
    source = "trec_eval; HitRate@k is CLIP_benchmark's image_/text_retrieval_recall@k"

    def check(self, data: Any, config: Any) -> None:
        from imsearch_align.diagnostics.perturbations import get_perturbation

        for direction in config.directions:
            for modality in DOCS[direction]:
                require_split(data.dataset, "test", modality, self.name)
        query_modalities = {DOCS[d][1]: d for d in ("t2i", "i2t")}
        for name in config.perturbations:
            pert = get_perturbation(name, **config.perturbation_params.get(name, {}))
            needed = query_modalities[pert.modality]
            if needed not in config.directions:
                raise TaskUnsupportedError(
                    f"perturbation {name!r} changes {pert.modality}s, which are queries only in "
                    f"{needed}, and directions={list(config.directions)}: it would be dropped "
                    f"without a trace; add {needed} to directions or drop the perturbation"
                )
            require_encoder(
                data,
                pert.modality,
                self.name,
                f"perturbation {name!r} changes them before encoding",
            )

    def run(self, ctx: Any) -> TaskResult:
        cfg = ctx.config
        rankings = {}
        for i, direction in enumerate(cfg.directions):
            doc_mod, q_mod = DOCS[direction]
            variants = perturbed_queries(ctx, direction)
            docs, queries = ctx.aligned(doc_mod), ctx.aligned(q_mod)
            if i == len(cfg.directions) - 1:
                ctx.transforms_done()  # the last search runs without the method's state
            rankings.update(
                index_and_evaluate(
                    ctx,
                    direction,
                    docs,
                    ctx.ids(doc_mod),
                    queries,
                    ctx.ids(q_mod),
                    ctx.dataset.qrels(direction, "test"),
                    variants=variants,
                )
            )
        details: dict[str, Any] = {}
        if cfg.perturbations:
            details["perturbations"] = {
                name: {
                    "direction": next(d for d in cfg.directions if f"{d}[{name}]" in rankings),
                    "params": dict(cfg.perturbation_params.get(name, {})),
                    "seed": cfg.seed,
                }
                for name in cfg.perturbations
                if any(f"{d}[{name}]" in rankings for d in cfg.directions)
            }
        return TaskResult(self.name, rankings, {}, details)
