"""Collections at search scale: distractors, aligned blocks, and the exact ground truth.

A realistic search test puts the evaluated split's documents among many
distractors (revisited Oxford/Paris adds a million) under the same queries
and judgements: a distractor is never relevant. This package builds such a
collection block by block, so the caller's memory grows with the block, not
with the collection, and computes its exact, tie-aware top-k once, cached by
content, for every ANN setting to be scored against.

Rooms: :mod:`.sources` (the :class:`DistractorSource` interface,
:class:`ArraySource`), :mod:`.files` (npy / parquet / safetensors readers),
:mod:`.synthetic` (:class:`MixtureModel`, :class:`SyntheticSource`),
:mod:`.checks` (the refusals), :mod:`.stats` (:func:`describe`),
:mod:`.aligned` (:func:`aligned_blocks`, :class:`CollectionBlocks`,
:class:`StreamDigest`), :mod:`.truth` and :mod:`.truth_result`
(:func:`exact_truth`, :class:`CollectionTruth`), :mod:`.recall`
(:func:`ann_recall_at_k`, :func:`compare_measures`), :mod:`.cone`
(:func:`cone_vectors`: encoder-shaped test data); the study's rooms :mod:`.settings` (index settings),
:mod:`.prepare` (a method's inputs), :mod:`.measure` (one build's costs and
speeds), :mod:`.cell_files` (a cell's identity and file), :mod:`.study` (the
cells), :mod:`.study_report` (CSV, leaderboard, figures), :mod:`.filters` and
:mod:`.filtered_study` (filtered search), :mod:`.label_filter` and
:mod:`.label_cell` (search within the dataset's own class labels), :mod:`.extras` (filtered and
concurrent search on each build's deployable setting), :mod:`.geometry_report`
(the distractors beside the split, ``distractors.md``); :mod:`.cost_model` (a
Milvus cluster for 10M and 100M vectors) and :mod:`.cost_inputs` (its
measured inputs, read from a study's cells).

**Distractor sources** (raw embeddings of one modality, the dataset's
encoder; each yields ``(ids, raw_block)`` of at most ``block_rows`` rows from
``source.blocks(block_rows)``, ids in a reserved range from
:data:`DISTRACTOR_ID_BASE` = 2**40; ``source.head(n)`` is the first ``n``
rows, for a sweep over collection sizes)::

    open_file(path, *, encoder=None, modality=None, id_base=DISTRACTOR_ID_BASE,
              column=None | tensor=None) -> DistractorSource      # .npy/.parquet/.safetensors
    ArraySource(rows, *, ids=None, id_base=..., modality=None, encoder=None, name="array")
    ArraySource.from_split(dataset, split, modality, embeddings, *, encoder=None,
                           id_base=..., cache_dir=None)               # "dataset:NAME"
    MixtureModel.fit(support, *, n_components=None, rank=8, seed=0, normalize=None,
                     max_rows=50_000, encoder=None) -> MixtureModel
    SyntheticSource(model, n_rows, *, seed=0, id_base=..., modality=None)

A file's encoder comes from a sidecar ``<file>.json`` (``{"encoder": ...,
"modality": ...}``), the parquet schema or safetensors metadata, or the
``encoder`` parameter. Before building, check the source against the dataset
(each raises :class:`DistractorError`, a ``ValueError``, naming both sides)::

    check_compatible(source, dim=d_raw, encoder=provider_key(provider),
                     modality="image", dataset=dataset.name)
    check_disjoint_ids(source, dataset.split_ids(None, "image"), dataset=dataset.name)
    source.check()        # NaN / all-zero rows: counted, first ids (blocks() checks too)

**Statistics** beside the real split's::

    side_by_side({"test images": describe(raw_test), "distractors": describe(source)})

(:class:`SpaceStats`: mean pairwise cosine, spectrum shares, nearest-neighbour
cosine quantiles, on a seeded sample.)

**The collection of one method** (the split's aligned documents, then the
distractors aligned block by block by ``method.transform_images`` /
``transform_texts``)::

    aligned_blocks(source, method, modality, block_rows) -> Iterator[(ids, aligned)]
    coll = CollectionBlocks(doc_ids, aligned_docs, source, method=method,
                            modality="image", block_rows=8192)
    digest = StreamDigest()
    for ids, block in coll:           # insert into a store in batches
        digest.update(ids, block); store.insert(...)

**Ground truth** (exact top-k over the collection, float64-true order, tie
groups at k closed, cached under ``cache_dir`` by the content key)::

    truth = exact_truth(queries, query_ids, coll, k, *, margin=None,
                        tie_tolerance=None, cache_dir=DIR,
                        docs_digest=digest.hexdigest())  -> CollectionTruth
    truth.run, truth.closed, truth.evaluate(qrels, ["HitRate@10", "nDCG@10"])
    ann_recall_at_k(run_or_ids, truth, k=None) -> AnnRecall(k, per_query, mean, n_uncertain)
    compare_measures(run_ann, truth, qrels, measures)["means"]
                                      # {measure: {"exact": .., "approximate": ..}}

Limits: the truth and :func:`aligned_blocks` take dense aligned spaces
(a method whose transforms return CSR, ASIF, is refused by name).
"""

from __future__ import annotations

from imsearch_align.collection.aligned import (
    CollectionBlocks,
    StreamDigest,
    aligned_blocks,
    blocks_digest,
)
from imsearch_align.collection.checks import (
    DistractorError,
    check_compatible,
    check_disjoint_ids,
)
from imsearch_align.collection.cone import cone_vectors
from imsearch_align.collection.files import NpySource, ParquetSource, SafetensorsSource, open_file
from imsearch_align.collection.recall import AnnRecall, ann_recall_at_k, compare_measures
from imsearch_align.collection.sources import (
    DEFAULT_BLOCK_ROWS,
    DISTRACTOR_ID_BASE,
    ArraySource,
    DistractorSource,
)
from imsearch_align.collection.stats import SpaceStats, describe, side_by_side
from imsearch_align.collection.synthetic import MixtureModel, SyntheticSource
from imsearch_align.collection.truth import exact_truth
from imsearch_align.collection.truth_result import CollectionTruth, truth_key

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "DISTRACTOR_ID_BASE",
    "AnnRecall",
    "ArraySource",
    "CollectionBlocks",
    "CollectionTruth",
    "DistractorError",
    "DistractorSource",
    "MixtureModel",
    "NpySource",
    "ParquetSource",
    "SafetensorsSource",
    "SpaceStats",
    "StreamDigest",
    "SyntheticSource",
    "aligned_blocks",
    "ann_recall_at_k",
    "blocks_digest",
    "check_compatible",
    "check_disjoint_ids",
    "compare_measures",
    "cone_vectors",
    "describe",
    "exact_truth",
    "open_file",
    "side_by_side",
    "truth_key",
]
