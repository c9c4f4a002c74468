"""Retrieval captioning scored with corpus BLEU-4 (sacrebleu).

This is **retrieval captioning, not a generative captioner**: each image is
"captioned" with the nearest caption (largest inner product in the aligned
space) from a pool that excludes the image's own captions, and the chosen
captions are scored against the image's reference captions. It says how well
the aligned space ranks captions written for other images.

Two scorers (:data:`SCORERS`). ``sacrebleu`` (the default): sacrebleu's
corpus BLEU-4, 0-100, effective reference length "closest", with sacrebleu's
defaults (``tokenize="13a"``, ``smooth_method="exp"``, case-sensitive,
punctuation kept as tokens). This is **not** CLIP_benchmark's captioning
number: CLIP_benchmark reports pycocoevalcap's ``Bleu_4`` (0-1, PTB tokens
lowercased, punctuation removed, no smoothing) beside METEOR, ROUGE-L and
CIDEr, which the ``coco`` scorer computes
(:mod:`imsearch_align.diagnostics.coco_caption`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.framework.optional import require
from imsearch_align.framework.validation import check_matrix, is_sparse

__all__ = [
    "SCORERS",
    "CaptioningResult",
    "check_scorer",
    "corpus_bleu",
    "nearest_other_caption",
    "retrieval_captioning_bleu",
]

#: The captioning scorers, each with its definition (recorded in results).
SCORERS = {
    "sacrebleu": "sacrebleu corpus BLEU-4, 0-100 (tokenize 13a, case-sensitive, punctuation kept, "
    "exponential smoothing, closest reference length); not CLIP_benchmark's number",
    "coco": "pycocoevalcap's definitions (CLIP_benchmark's captioning metrics): PTB tokens "
    "lowercased, punctuation removed; BLEU-1..4 (0-1, no smoothing), ROUGE-L, CIDEr-D; METEOR with "
    "a Java runtime and pycocoevalcap; SPICE not implemented",
}


def check_scorer(scorer: Any) -> str:
    """``scorer`` if it names one of :data:`SCORERS`, else ValueError with the list."""
    if not isinstance(scorer, str) or scorer not in SCORERS:
        raise ValueError(f"scorer must be one of {', '.join(map(repr, SCORERS))}, got {scorer!r}")
    return scorer


@dataclass(frozen=True)
class CaptioningResult:
    """Corpus BLEU-4 of retrieval captioning.

    Attributes:
        bleu: corpus BLEU-4 in [0, 100].
        precisions: modified 1..4-gram precisions (percent).
        brevity_penalty: BLEU's brevity penalty.
        sys_len: hypothesis length in tokens.
        ref_len: effective reference length in tokens.
        tokenize: sacrebleu tokeniser used (e.g. ``"13a"``, ``"none"``).
        signature: sacrebleu's signature string (for reproducibility).
        chosen: ``(n_images,)`` pool index of the caption chosen per image.
    """

    bleu: float
    precisions: tuple[float, ...]
    brevity_penalty: float
    sys_len: int
    ref_len: int
    tokenize: str
    signature: str
    chosen: np.ndarray


def _import_sacrebleu() -> Any:
    return require("sacrebleu", "diagnostics", "retrieval captioning BLEU")


def nearest_other_caption(
    image_vecs: Any,
    caption_vecs: Any,
    image_ids: Any,
    caption_image_ids: Any,
    *,
    chunk_size: int = 1024,
) -> np.ndarray:
    """Index of the highest inner-product caption that is not the image's own.

    Captions whose ``caption_image_ids`` equals the image's id are excluded.
    Ties go to the smallest pool index (the package's ascending-id rule).
    Dense or sparse CSR vectors; ``-1`` where every caption is excluded.
    """
    X = check_matrix(image_vecs, "image_vecs", allow_sparse=True, min_rows=1)
    Y = check_matrix(caption_vecs, "caption_vecs", allow_sparse=True, dim=X.shape[1], min_rows=1)
    img_ids = np.asarray(image_ids)
    cap_ids = np.asarray(caption_image_ids)
    if img_ids.shape != (X.shape[0],):
        raise ValueError(f"image_ids must have shape ({X.shape[0]},), got {img_ids.shape}")
    if cap_ids.shape != (Y.shape[0],):
        raise ValueError(f"caption_image_ids must have shape ({Y.shape[0]},), got {cap_ids.shape}")
    out = np.empty(X.shape[0], np.int64)
    for a in range(0, X.shape[0], chunk_size):
        S = X[a : a + chunk_size] @ Y.T
        S = np.asarray(S.toarray() if is_sparse(S) else S, dtype=np.float64)
        S[img_ids[a : a + chunk_size, None] == cap_ids[None, :]] = -np.inf
        best = np.argmax(S, axis=1)  # first maximum = smallest index on ties
        best[np.isneginf(S[np.arange(len(best)), best])] = -1
        out[a : a + chunk_size] = best
    return out


def retrieval_captioning_bleu(
    image_vecs: Any,
    caption_vecs: Any,
    captions: Sequence[str],
    image_ids: Any,
    caption_image_ids: Any,
    *,
    references: Sequence[Sequence[str]] | None = None,
    tokenize: str = "13a",
    smooth_method: str = "exp",
    lowercase: bool = False,
) -> CaptioningResult:
    """Caption each image with its nearest other-image caption; corpus BLEU-4.

    Args:
        image_vecs: ``(n_images, D)`` aligned image vectors (dense or CSR).
        caption_vecs: ``(n_captions, D)`` aligned vectors of the caption pool.
        captions: the pool's ``n_captions`` strings.
        image_ids: ``(n_images,)`` id of each image.
        caption_image_ids: ``(n_captions,)`` id of the image each pool caption
            describes; an image never receives one of its own captions.
        references: per image, its reference captions; by default the pool
            captions whose ``caption_image_ids`` equals the image's id.
        tokenize, smooth_method, lowercase: passed to ``sacrebleu.corpus_bleu``.

    Raises:
        ValueError: mismatched lengths, an image without references, or no
            caption left in the pool for some image.
    """
    _import_sacrebleu()  # fail before the search when the extra is missing
    n_pool = np.shape(caption_vecs)[0]
    if len(captions) != n_pool:
        raise ValueError(f"captions has {len(captions)} entries, caption_vecs {n_pool} rows")
    chosen = nearest_other_caption(image_vecs, caption_vecs, image_ids, caption_image_ids)
    if (chosen < 0).any():
        raise ValueError(
            f"image {int(np.flatnonzero(chosen < 0)[0])} has no caption of another image in the pool"
        )
    img_ids = np.asarray(image_ids)
    if references is None:
        cap_ids = np.asarray(caption_image_ids)
        order = np.argsort(cap_ids, kind="stable")
        sorted_ids = cap_ids[order]
        lo = np.searchsorted(sorted_ids, img_ids, "left")
        hi = np.searchsorted(sorted_ids, img_ids, "right")
        refs = [[captions[j] for j in order[a:b]] for a, b in zip(lo, hi)]
    else:
        if len(references) != len(img_ids):
            raise ValueError(
                f"references has {len(references)} entries, image_vecs {len(img_ids)} rows"
            )
        refs = [list(r) for r in references]
    hyps = [captions[j] for j in chosen]
    return corpus_bleu(
        hyps,
        refs,
        tokenize=tokenize,
        smooth_method=smooth_method,
        lowercase=lowercase,
        chosen=chosen,
    )


def corpus_bleu(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    *,
    tokenize: str = "13a",
    smooth_method: str = "exp",
    lowercase: bool = False,
    chosen: np.ndarray | None = None,
) -> CaptioningResult:
    """sacrebleu corpus BLEU-4 of one hypothesis per image against its references.

    ``references[i]`` are image ``i``'s reference captions (at least one);
    images may have different numbers of references.
    """
    sacrebleu = _import_sacrebleu()
    refs = [list(r) for r in references]
    if len(refs) != len(hypotheses):
        raise ValueError(f"references has {len(refs)} entries, hypotheses {len(hypotheses)}")
    empty = [i for i, r in enumerate(refs) if not r]
    if empty:
        raise ValueError(f"image {empty[0]} has no reference captions")
    # sacrebleu takes reference *streams*; None pads images with fewer references.
    n_streams = max((len(r) for r in refs), default=0)
    streams = [[r[s] if s < len(r) else None for r in refs] for s in range(n_streams)]
    metric = sacrebleu.BLEU(tokenize=tokenize, smooth_method=smooth_method, lowercase=lowercase)
    score = metric.corpus_score(list(hypotheses), streams)
    return CaptioningResult(
        bleu=float(score.score),
        precisions=tuple(float(p) for p in score.precisions),
        brevity_penalty=float(score.bp),
        sys_len=int(score.sys_len),
        ref_len=int(score.ref_len),
        tokenize=tokenize,
        signature=str(metric.get_signature()),
        chosen=np.asarray(chosen if chosen is not None else np.arange(len(refs)), dtype=np.int64),
    )
