"""The collection as a stream of aligned blocks: test documents, then distractors.

:func:`aligned_blocks` maps a source's raw blocks through a fitted method
(``transform_images`` or ``transform_texts``) one block at a time, so its
peak memory grows with the block, not with the collection.
:class:`CollectionBlocks` is the whole collection an index holds and the
ground truth is computed over: the evaluated split's aligned documents
followed by the aligned distractors, re-iterable (each iteration streams the
source again). :class:`StreamDigest` hashes such a stream as it passes, so
a caller inserting the blocks into a store gets the content key of the ground
truth (:func:`~imsearch_align.collection.truth.exact_truth`, ``docs_digest``)
without a second pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from imsearch_align.collection.checks import DistractorError, check_disjoint_ids
from imsearch_align.collection.sources import DEFAULT_BLOCK_ROWS, DistractorSource
from imsearch_align.framework.validation import array_buffer, is_sparse

__all__ = [
    "CollectionBlocks",
    "StreamDigest",
    "aligned_blocks",
    "blocks_digest",
    "collection_ids",
]

_MODALITIES = ("image", "text")


def aligned_blocks(
    source: DistractorSource,
    method: Any,
    modality: str,
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yield ``(ids, aligned)`` for each raw block of ``source``: the block mapped
    by the fitted ``method`` into its indexable space (float32, dense).

    Args:
        source: the distractors (raw embeddings of ``modality``).
        method: a fitted alignment method.
        modality: ``"image"`` (``method.transform_images``) or ``"text"``
            (``method.transform_texts``).
        block_rows: rows per block.
    """
    if modality not in _MODALITIES:
        raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
    if source.modality is not None and source.modality != modality:
        raise DistractorError(
            f"distractors {source.name!r} are {source.modality} embeddings, but {modality} "
            "distractors were asked for"
        )
    transform = method.transform_images if modality == "image" else method.transform_texts
    for ids, raw in source.blocks(block_rows):
        out = transform(raw)
        del raw
        if is_sparse(out):
            raise DistractorError(
                f"{type(method).__name__} maps {modality}s to a sparse space; the collection "
                "truth and distractor blocks take dense aligned spaces only"
            )
        yield ids, np.ascontiguousarray(out, dtype=np.float32)


class StreamDigest:
    """SHA-256 over a stream of ``(ids, block)`` pairs, in order.

    Covers the ids (int64) and the rows (float32 bytes) as two byte streams,
    then the row count and dimension: the same documents in the same order
    give the same digest whatever the block boundaries.
    """

    def __init__(self) -> None:
        self._h = hashlib.sha256(b"collection-stream/1;")
        self._ids = hashlib.sha256()
        self.rows = 0
        self.dim: int | None = None

    def update(self, ids: np.ndarray, block: np.ndarray) -> None:
        """Feed one block (ids ``(b,)``, rows ``(b, d)``)."""
        b = np.ascontiguousarray(block, dtype=np.float32)
        if self.dim is None:
            self.dim = int(b.shape[1])
        self._ids.update(array_buffer(np.asarray(ids, dtype=np.int64)))
        self._h.update(array_buffer(b))
        self.rows += int(b.shape[0])

    def hexdigest(self) -> str:
        """The digest of everything fed so far (rows, dimension, ids, vectors)."""
        h = self._h.copy()
        h.update(f"rows={self.rows};dim={self.dim};ids={self._ids.hexdigest()}".encode())
        return h.hexdigest()


def blocks_digest(blocks: Iterable[tuple[np.ndarray, np.ndarray]]) -> str:
    """:class:`StreamDigest` of a whole stream (one pass)."""
    d = StreamDigest()
    for ids, block in blocks:
        d.update(ids, block)
    return d.hexdigest()


class CollectionBlocks:
    """The documents of one collection: the evaluated split's, then the distractors.

    Args:
        doc_ids: ``(n,)`` ids of the evaluated documents (dataset ids).
        docs: ``(n, d)`` their aligned vectors (already transformed).
        distractors: a source of raw distractor rows, or None (the split alone).
        method: the fitted method that maps the distractors (None: the
            distractors are already in the docs' space).
        modality: the documents' modality (``"image"`` for text-to-image).
        block_rows: rows per block for the distractors (the documents are
            served in blocks of the same size).

    Iterating yields ``(ids, float32 rows)`` blocks; the distractor ids are
    checked against ``doc_ids`` (:func:`~imsearch_align.collection.checks.check_disjoint_ids`)
    and their dimension against ``docs``.
    """

    def __init__(
        self,
        doc_ids: Any,
        docs: Any,
        distractors: DistractorSource | None = None,
        *,
        method: Any = None,
        modality: str = "image",
        block_rows: int = DEFAULT_BLOCK_ROWS,
    ) -> None:
        if modality not in _MODALITIES:
            raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
        self.doc_ids = np.asarray(doc_ids, dtype=np.int64)
        self.docs = np.asarray(docs)
        if self.docs.ndim != 2 or self.doc_ids.shape != (self.docs.shape[0],):
            raise ValueError(
                f"CollectionBlocks: expected docs (n, d) and doc_ids (n,), got {self.docs.shape} "
                f"and {self.doc_ids.shape}"
            )
        self.distractors, self.method, self.modality = distractors, method, modality
        self.block_rows = int(block_rows)
        if distractors is not None:
            check_disjoint_ids(distractors, self.doc_ids, dataset="the evaluated documents")
            if method is None and distractors.dim != self.dim:
                raise DistractorError(
                    f"distractors {distractors.name!r} have dimension {distractors.dim}, the "
                    f"documents {self.dim}; pass the fitted method to align them"
                )

    @property
    def dim(self) -> int:
        """Dimension of the aligned documents."""
        return int(self.docs.shape[1])

    @property
    def n_rows(self) -> int:
        """Documents in the collection (evaluated + distractors)."""
        return len(self.doc_ids) + (self.distractors.n_rows if self.distractors is not None else 0)

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        step = self.block_rows
        for s in range(0, len(self.doc_ids), step):
            yield (
                self.doc_ids[s : s + step],
                np.ascontiguousarray(self.docs[s : s + step], np.float32),
            )
        if self.distractors is None:
            return
        if self.method is None:
            yield from self.distractors.blocks(step)
        else:
            for ids, block in aligned_blocks(self.distractors, self.method, self.modality, step):
                if block.shape[1] != self.dim:
                    raise DistractorError(
                        f"aligned distractors have dimension {block.shape[1]}, the aligned "
                        f"documents {self.dim}; expected the same fitted method for both"
                    )
                yield ids, block

    def digest(self) -> str:
        """:func:`blocks_digest` of the collection (one pass: transforms every distractor)."""
        return blocks_digest(self)

    def record(self) -> dict[str, Any]:
        """JSON-ready: sizes and the distractor source's record."""
        return {
            "documents": len(self.doc_ids),
            "distractors": self.distractors.record() if self.distractors is not None else None,
            "rows": self.n_rows,
            "dim": self.dim,
        }


def collection_ids(coll: Any) -> np.ndarray:
    """Every item id of a :class:`~imsearch_align.collection.aligned.CollectionBlocks`
    (documents, then distractors), without reading a vector."""
    parts = [np.asarray(coll.doc_ids, dtype=np.int64)]
    if coll.distractors is not None:
        parts.append(np.asarray(coll.distractors.ids(0, coll.distractors.n_rows), np.int64))
    return np.concatenate(parts)
