"""In-distribution control queries: what a cross-modal query costs an index (issue 38).

An index is built over one modality (images, for text-to-image) and searched with
the other. With ``--control`` every cell's built index is also searched, at every
swept setting, with as many **control queries** as cross-modal ones: rows of the
indexed modality that are in no collection and are no test query, mapped through
the same fitted method as the documents. The cell reports both ANN recall@k values
(``control``), so the recall a setting loses to the modality gap shows beside the
recall it loses to approximation.

Where they come from (:func:`control_queries`), named in every cell:

* **held-out support rows**: the support split's rows of the indexed modality the
  method was not fitted on (``--n`` below the split's size leaves them);
* else **fresh draws of the distractor model**: rows past every row any collection
  of the study takes from the synthetic distractor source (row ``i`` of a synthetic
  source depends only on its seed and ``i``, so they are in no collection).

Neither exists (every support row fitted on, distractors from a file or a dataset):
:class:`ControlError` says what to pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from imsearch_align.collection.measure import search_batched
from imsearch_align.collection.recall import ann_recall_at_k
from imsearch_align.collection.synthetic import SyntheticSource
from imsearch_align.datasets.base import SUPPORT_SPLIT

__all__ = [
    "ControlError",
    "Controls",
    "collection_sample",
    "control_queries",
    "measure_control",
    "predict",
]


class ControlError(ValueError):
    """``--control`` cannot be served: no in-distribution rows to spare."""


@dataclass
class Controls:
    """The control queries of one fitted method and direction.

    Attributes:
        ids: their source ids (support-split ids, or the synthetic source's row ids).
        queries: ``(n, d)`` float32, mapped through the method as documents are.
        source: what they are, as the cells name it.
        predictor: how far the cross-modal queries sit from the documents, measured
            without an index (:func:`predict`), once per method.
    """

    ids: np.ndarray
    queries: np.ndarray
    source: str
    predictor: dict[str, Any] | None = None


#: Documents sampled for the predictors (uniformly over the largest collection).
PREDICTOR_SAMPLE = 20_000
#: IVF lists and probes of the predictors' own clustering (an index-free proxy).
PREDICTOR_NLIST, PREDICTOR_NPROBE = 128, 8


def collection_sample(coll: Any, n: int, seed: int) -> np.ndarray:
    """A seeded uniform sample of about ``n`` aligned rows of the collection ``coll`` (a
    :class:`~imsearch_align.collection.aligned.CollectionBlocks`, streamed once)."""
    rng = np.random.default_rng(seed)
    keep = min(1.0, n / max(int(coll.n_rows), 1))
    parts = [np.asarray(b, np.float32)[rng.random(len(b)) < keep] for _, b in coll]
    return np.concatenate(parts) if parts else np.zeros((0, coll.dim), np.float32)


def predict(queries: np.ndarray, controls: Controls, docs: np.ndarray, seed: int) -> dict:
    """The index-free predictors of the cross-modal cost (issue 38 item 3) on a sample of
    documents: the best inner product of a query to any document over that of a control
    (:func:`~imsearch_align.collection.ood_predict.nn_similarity_ratio`), and the share of
    each query's true top-10 in its nearest lists of a clustering of the sample, over the
    controls' (:func:`~imsearch_align.collection.ood_predict.ivf_list_share`)."""
    from imsearch_align.collection.ood_predict import (
        ivf_centroids,
        ivf_list_share,
        nn_similarity_ratio,
    )

    nn = nn_similarity_ratio(queries, docs, controls.queries, seed=seed)
    nlist = max(1, min(PREDICTOR_NLIST, len(docs) // 39))
    cents = ivf_centroids(docs, nlist, seed=seed)
    share = ivf_list_share(queries, docs, cents, min(PREDICTOR_NPROBE, nlist), k=10,
                           controls=controls.queries, seed=seed)  # fmt: skip
    return {
        "nn_similarity_ratio": nn["ratio"],
        "ivf_list_share_ratio": share["ratio"],
        "ivf_list_share": {
            "queries": share["queries"],
            "controls": share["controls"],
            "nlist": nlist,
            "nprobe": share["nprobe"],
        },
        "documents_sampled": len(docs),
    }


def _held_out(study: Any, config: Any, modality: str, fitted: np.ndarray, n: int, seed: int,
              progress: bool) -> tuple[np.ndarray, np.ndarray] | None:  # fmt: skip
    """``n`` seeded support rows of ``modality`` the method was not fitted on, raw."""
    data = study.load(config)
    provider = {"image": data.image_provider, "text": data.text_provider}[modality]
    spare = np.setdiff1d(data.support.split_ids(SUPPORT_SPLIT, modality), fitted)
    if len(spare) < n:
        return None
    ids = np.sort(np.random.default_rng(seed).choice(spare, n, replace=False))
    rows = study.embeddings(data.support, provider, modality, ids, split=SUPPORT_SPLIT,
                            config=config, progress=progress)  # fmt: skip
    return ids, np.asarray(rows)


def control_queries(
    study: Any,
    config: Any,
    prep: Any,
    source: Any,
    *,
    after_rows: int,
    seed: int,
    progress: bool = False,
) -> Controls:
    """As many control queries as ``prep`` has queries (the module docstring).

    Args:
        study, config: the loaded data and the method's config.
        prep: the fitted method's :class:`~imsearch_align.collection.prepare.Prepared`.
        source: the study's distractor source of the direction (its synthetic model
            gives the fallback).
        after_rows: rows of ``source`` any collection of the study takes (the largest
            size): the fallback draws past them.
        seed: seeds the choice.

    Raises:
        ControlError: neither held-out rows nor a distractor model.
    """
    n = len(prep.query_ids)
    modality = prep.doc_modality
    transform = {"image": prep.method.transform_images, "text": prep.method.transform_texts}
    held = _held_out(study, config, modality, prep.fitted_ids[modality], n, seed, progress)
    if held is not None:
        ids, raw = held
        what = f"held-out support {modality}s (not fitted on), {n}"
    elif isinstance(source, SyntheticSource):
        fresh = SyntheticSource(source.model, after_rows + n, seed=source.seed,
                                modality=modality)  # fmt: skip
        ids, raw = fresh.rows(after_rows, after_rows + n)
        what = f"draws {after_rows}..{after_rows + n - 1} of the distractor model {source.name}"
    else:
        raise ControlError(
            f"--control: the support split has fewer than {n} {modality}s the method was not "
            f"fitted on, and the distractors ({getattr(source, 'name', source)!r}) are not a "
            "synthetic model to draw more from; pass a smaller --n (leaving support rows "
            "out of the fit) or --distractors COUNT (synthetic)"
        )
    queries = np.ascontiguousarray(np.asarray(transform[modality](raw), dtype=np.float32))
    return Controls(np.asarray(ids), queries, what)


def measure_control(
    store: Any, name: str, controls: Controls, truth: Any, k: int, batch: int
) -> dict[str, Any]:
    """The control queries on the built collection at its current setting: ANN recall@k
    against their exact truth and batched queries/s (one pass)."""
    ids, _, qps = search_batched(store, name, controls.queries, k, batch)
    recall = ann_recall_at_k(ids, truth, k)
    return {
        "source": controls.source,
        "predictor": controls.predictor,
        "queries": len(controls.ids),
        "ann_recall": {"k": k, "mean": recall.mean, "uncertain": recall.n_uncertain},
        "queries_per_s": qps,
    }
