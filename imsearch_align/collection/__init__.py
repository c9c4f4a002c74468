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
(:func:`cone_vectors`: encoder-shaped test data); the study's rooms
:mod:`.store_modes` (what the study knows of each store), :mod:`.settings`
(index settings), :mod:`.prepare` (a method's inputs), :mod:`.measure` (one
build's costs and speeds), :mod:`.build` (a build's job and state),
:mod:`.cell_files` (a cell's identity and file), :mod:`.study` (the cells),
:mod:`.study_report` (CSV, leaderboard, figures), :mod:`.filters`,
:mod:`.filter_kinds`, :mod:`.filtered_study` and :mod:`.under_filter`
(filtered search), :mod:`.label_filter` and :mod:`.label_cell` (search
within the dataset's own class labels), :mod:`.extras` (filtered and
concurrent search on each build's deployable setting),
:mod:`.geometry_report` (the distractors beside the split,
``distractors.md``); :mod:`.passes`, :mod:`.intervals`, :mod:`.deploy`,
:mod:`.per_query` and :mod:`.control` (timed passes, intervals, the deploy
rules, per-query tables, control queries); :mod:`.cost_model` (a Milvus
cluster for 10M and 100M vectors, with bands) on :mod:`.cost_formulas`,
:mod:`.cost_rates`, :mod:`.cost_figures`, :mod:`.cost_prices` and
:mod:`.cost_report`, its measured inputs read from a study's cells by
:mod:`.cost_inputs` and :mod:`.cost_cells`.

How to build a collection, check distractors, compute its truth and score
an ANN run by hand is in ``docs/collection-study.md`` ("The collection by
hand"); the study that does all of it is :func:`imsearch_align.study.run_study`.

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
