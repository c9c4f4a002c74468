"""The inputs of one method's collections: the fitted method, the split's documents, the queries.

:func:`prepare` fits a method on the config's seeded support pairs (as an
experiment does) and aligns the evaluated split's documents of a direction
(test images for text-to-image) and a seeded sample of its judged queries
(:func:`sample_queries`), with the judgements of those queries: a
:class:`Prepared`. :func:`distractor_source` turns the study's
``--distractors`` value (a file, a count of synthetic rows, or
``dataset:NAME[:SPLIT]``) into a checked
:class:`~imsearch_align.collection.sources.DistractorSource` of the
documents' modality.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from imsearch_align.collection.checks import check_compatible, check_disjoint_ids
from imsearch_align.collection.files import open_file
from imsearch_align.collection.sources import ArraySource, DistractorSource
from imsearch_align.collection.synthetic import MixtureModel, SyntheticSource
from imsearch_align.datasets.base import SUPPORT_SPLIT, TEST_SPLIT
from imsearch_align.embedding import provider_key
from imsearch_align.experiment.components import make_method, support_pairs
from imsearch_align.framework.metrics import Qrels
from imsearch_align.framework.registry import DATASETS
from imsearch_align.framework.validation import is_sparse

__all__ = ["MODALITIES", "Prepared", "distractor_source", "prepare", "sample_queries"]

#: (documents, queries) modality of each direction.
MODALITIES = {"t2i": ("image", "text"), "i2t": ("text", "image")}
#: Rows per call when the split is aligned.
BLOCK = 4096


@dataclass
class Prepared:
    """One fitted method's side of a direction: aligned documents and sampled queries."""

    direction: str
    method: Any
    doc_ids: np.ndarray
    docs: np.ndarray
    query_ids: np.ndarray
    queries: np.ndarray
    qrels: Any
    n_support: int
    fit_s: float
    #: Support ids the method was fitted on, per modality (``image``, ``text``).
    fitted_ids: dict[str, np.ndarray] = field(default_factory=dict)
    #: In-distribution control queries (``--control``;
    #: :class:`~imsearch_align.collection.control.Controls`), else None.
    controls: Any = None

    @property
    def doc_modality(self) -> str:
        """``image`` for text-to-image, ``text`` for image-to-text."""
        return MODALITIES[self.direction][0]


def sample_queries(qrels: Any, n: int | None, seed: int) -> np.ndarray:
    """A seeded sample of ``n`` judged query ids (every one when fewer), in qrels order."""
    q = np.asarray(qrels.queries)
    if n is None or n >= len(q):
        return q
    return q[np.sort(np.random.default_rng(seed).choice(len(q), n, replace=False))]


def _restrict(qrels: Any, query_ids: np.ndarray) -> Any:
    """The judgements of ``query_ids`` only."""

    keep = np.isin(qrels.query_ids, query_ids)
    return Qrels(qrels.query_ids[keep], qrels.doc_ids[keep], qrels.relevance[keep])


def _aligned(fn: Any, raw: Any) -> np.ndarray:
    """``fn`` over ``raw`` in blocks, float32 (dense methods only)."""

    parts = []
    for s in range(0, raw.shape[0], BLOCK):
        out = fn(np.asarray(raw[s : s + BLOCK]))
        if is_sparse(out):
            raise ValueError(
                "the method maps into a sparse space; the collection study takes dense aligned "
                "spaces only (ASIF is refused)"
            )
        parts.append(np.asarray(out, dtype=np.float32))
    return np.ascontiguousarray(np.concatenate(parts)) if parts else np.zeros((0, 0), np.float32)


def _providers(data: Any) -> dict[str, Any]:
    return {"image": data.image_provider, "text": data.text_provider}


def prepare(
    config: Any, study: Any, direction: str, n_queries: int | None, *, progress: bool = False
) -> Prepared:
    """Fit ``config``'s method and align the split's documents and sampled queries."""

    data = study.load(config)
    ds, prov = data.dataset, _providers(data)
    doc_mod, q_mod = MODALITIES[direction]
    txt_ids, img_ids = support_pairs(data.support, config.n_support, config.seed)
    kw = {"split": SUPPORT_SPLIT, "config": config, "progress": progress}
    X = study.embeddings(data.support, prov["image"], "image", img_ids, **kw)
    Y = study.embeddings(data.support, prov["text"], "text", txt_ids, **kw)
    method = make_method(config, progress=progress)
    t = time.perf_counter()
    method.fit(X, Y)
    fit_s = time.perf_counter() - t
    del X, Y
    qrels = ds.qrels(direction, TEST_SPLIT)
    qids = sample_queries(qrels, n_queries, config.seed)
    kw["split"] = TEST_SPLIT
    doc_ids = ds.split_ids(TEST_SPLIT, doc_mod)
    fn = {"image": method.transform_images, "text": method.transform_texts}
    docs = _aligned(fn[doc_mod], study.embedding_rows(ds, prov[doc_mod], doc_mod, doc_ids, **kw))
    queries = _aligned(fn[q_mod], study.embedding_rows(ds, prov[q_mod], q_mod, qids, **kw))
    return Prepared(
        direction, method, doc_ids, docs, qids, queries, _restrict(qrels, qids), len(txt_ids),
        fit_s, {"image": np.asarray(img_ids), "text": np.asarray(txt_ids)},
    )  # fmt: skip


def distractor_source(
    spec: str, config: Any, study: Any, modality: str, *, seed: int = 0, progress: bool = False
) -> DistractorSource:
    """The ``--distractors`` value as a checked source of raw ``modality`` rows.

    ``spec``: a count (``20000``: seeded draws of a
    :class:`~imsearch_align.collection.synthetic.MixtureModel` fitted to the
    dataset's support rows of ``modality``), ``dataset:NAME[:SPLIT]`` (that
    dataset's split, default ``test``, embedded by the same encoder), or a
    file (``.npy`` / ``.parquet`` / ``.safetensors``). The source is checked
    against the dataset (dimension, encoder, modality, id collisions).
    """

    data = study.load(config)
    ds, provider = data.dataset, _providers(data)[modality]
    encoder = provider_key(provider)
    if re.fullmatch(r"\d+", spec):
        sup = data.support
        ids = sup.split_ids(SUPPORT_SPLIT, modality)
        rows = study.embeddings(
            sup, provider, modality, ids, split=SUPPORT_SPLIT, config=config, progress=progress
        )
        model = MixtureModel.fit(rows, seed=seed, encoder=encoder)
        source: DistractorSource = SyntheticSource(model, int(spec), seed=seed, modality=modality)
    elif spec.startswith("dataset:"):
        name, _, split = spec[len("dataset:") :].partition(":")
        loaded = DATASETS.get(name)()  # a dataset, or (dataset, image provider, text provider)
        other = loaded[0] if isinstance(loaded, tuple) else loaded
        source = ArraySource.from_split(
            other, split or TEST_SPLIT, modality, provider, cache_dir=config.cache_dir
        )
    else:
        source = open_file(spec)
    check_compatible(source, dim=provider.dim, encoder=encoder, modality=modality, dataset=ds.name)
    check_disjoint_ids(source, ds.split_ids(None, modality), dataset=ds.name)
    return source
