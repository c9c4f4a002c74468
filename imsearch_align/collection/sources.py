"""Distractor sources: raw embedding rows served in blocks under reserved ids.

A :class:`DistractorSource` knows its row count, dimension, modality and
(where recorded) encoder, and yields ``(ids, raw_block)`` pairs of at most
``block_rows`` float32 rows (:meth:`DistractorSource.blocks`): a caller never
holds more than one block. Ids are ``id_base + row`` in a reserved range
(default :data:`DISTRACTOR_ID_BASE`, far above any dataset id) unless the
source was given explicit ids; :func:`~imsearch_align.collection.checks.check_disjoint_ids`
refuses a collision. Every block is checked as it is read: a NaN or all-zero
row raises with the source's counts and first row ids (:meth:`DistractorSource.check`
runs that scan up front).

This room holds the interface and :class:`ArraySource` (an in-memory or
memory-mapped array; :meth:`ArraySource.from_split` takes another dataset's
split). File readers are in :mod:`.files`, the synthetic mixture in
:mod:`.synthetic`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import numpy as np

from imsearch_align.collection.checks import DistractorError, bad_rows, raise_bad_rows
from imsearch_align.embedding import embed, provider_key

__all__ = [
    "DEFAULT_BLOCK_ROWS",
    "DISTRACTOR_ID_BASE",
    "ArraySource",
    "DistractorSource",
]

#: First distractor id: 2**40, far above dataset ids, exact in float64 and JSON.
DISTRACTOR_ID_BASE = 1 << 40
#: Rows per block unless the caller says otherwise (8 MiB of float32 at d = 256).
DEFAULT_BLOCK_ROWS = 8192


class DistractorSource(ABC):
    """Raw embedding rows that are never relevant, served block by block.

    Subclasses set ``name``, ``modality`` (``"image"``, ``"text"`` or None),
    ``encoder`` (an encoder id or None), ``id_base`` and implement
    :attr:`total_rows`, :attr:`dim` and :meth:`_read` (rows ``[start, stop)``
    as float32). A source is re-iterable: each :meth:`blocks` call streams it
    again from the start, with the same rows.
    """

    name: str = "distractors"
    modality: str | None = None
    encoder: str | None = None
    id_base: int = DISTRACTOR_ID_BASE
    #: Explicit ids (``(total_rows,)`` int64), or None for ``id_base + row``.
    explicit_ids: np.ndarray | None = None
    #: The rows' own ids where they came from a dataset (provenance, never served).
    source_ids: np.ndarray | None = None
    _limit: int | None = None
    _checked: bool = False

    @property
    @abstractmethod
    def total_rows(self) -> int:
        """Rows the source holds (before :meth:`head`)."""

    @property
    @abstractmethod
    def dim(self) -> int:
        """Dimension of the raw rows."""

    @abstractmethod
    def _read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as a float32 ``(stop - start, dim)`` array."""

    # ----------------------------------------------------------------- public
    @property
    def n_rows(self) -> int:
        """Rows served: :attr:`total_rows`, or fewer after :meth:`head`."""
        n = int(self.total_rows)
        return n if self._limit is None else min(n, self._limit)

    @property
    def id_range(self) -> tuple[int, int]:
        """``[lo, hi)`` holding every id this source serves."""
        if self.explicit_ids is not None:
            ids = self.explicit_ids[: self.n_rows]
            return (int(ids.min()), int(ids.max()) + 1) if ids.size else (0, 0)
        return int(self.id_base), int(self.id_base) + self.n_rows

    def ids(self, start: int, stop: int) -> np.ndarray:
        """The ids of rows ``[start, stop)``."""
        if self.explicit_ids is not None:
            return self.explicit_ids[start:stop]
        return np.arange(self.id_base + start, self.id_base + stop, dtype=np.int64)

    def head(self, n: int) -> DistractorSource:
        """The same source limited to its first ``n`` rows (a collection size of a sweep)."""
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise ValueError(f"head: n must be an integer >= 0, got {n!r}")
        if n > self.n_rows:
            raise DistractorError(
                f"{self.name!r} holds {self.n_rows} distractor rows, {int(n)} were asked for"
            )
        out = copy.copy(self)
        out._limit = int(n)
        return out

    def blocks(
        self, block_rows: int = DEFAULT_BLOCK_ROWS
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yield ``(ids, rows)``: ``(b,)`` int64 and ``(b, dim)`` float32, ``b <= block_rows``.

        Each block is checked as it comes; a NaN or all-zero row raises
        :class:`~imsearch_align.collection.checks.DistractorError` with the
        source's counts and first ids (the rest of the source is scanned for them).
        """
        step = _check_block_rows(block_rows)
        for start in range(0, self.n_rows, step):
            stop = min(self.n_rows, start + step)
            block = self._checked_block(start, stop)
            yield self.ids(start, stop), block

    def check(self, block_rows: int = DEFAULT_BLOCK_ROWS) -> None:
        """Scan every row once; raise on NaN or all-zero rows (counted, first ids)."""
        counts, first = [0, 0], ([], [])
        step = _check_block_rows(block_rows)
        for start in range(0, self.n_rows, step):
            stop = min(self.n_rows, start + step)
            nan, zero = bad_rows(self._read_float32(start, stop))
            for i, mask in enumerate((nan, zero)):
                if mask.any():
                    counts[i] += int(mask.sum())
                    room = 5 - len(first[i])
                    if room > 0:
                        first[i].extend(self.ids(start, stop)[mask][:room].tolist())
        raise_bad_rows(f"distractors {self.name!r}", (counts[0], counts[1]), first)
        self._checked = True

    def record(self) -> dict[str, Any]:
        """JSON-ready description (kind, name, rows, dim, modality, encoder, id range; a
        file source also the SHA-256 of its bytes, so two files of one name, or a file
        regenerated in place, never share a cell's key)."""
        lo, hi = self.id_range
        out = {
            "kind": type(self).__name__,
            "name": self.name,
            "rows": self.n_rows,
            "dim": int(self.dim),
            "modality": self.modality,
            "encoder": self.encoder,
            "id_range": [lo, hi],
        }
        path = getattr(self, "path", None)
        if path is not None:
            out["sha256"] = file_sha256(path)
        return out

    def __len__(self) -> int:
        return self.n_rows

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(name={self.name!r}, rows={self.n_rows}, dim={self.dim}, "
            f"modality={self.modality!r}, encoder={self.encoder!r})"
        )

    # ---------------------------------------------------------------- helpers
    def _read_float32(self, start: int, stop: int) -> np.ndarray:
        block = np.asarray(self._read(start, stop))
        if block.shape != (stop - start, self.dim):
            raise DistractorError(
                f"distractors {self.name!r}: rows [{start}, {stop}) came with shape "
                f"{block.shape}, expected {(stop - start, self.dim)}"
            )
        return np.ascontiguousarray(block, dtype=np.float32)

    def rows(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, rows)`` of rows ``[start, stop)``, checked as :meth:`blocks` checks them."""
        if not 0 <= start <= stop <= self.n_rows:
            raise ValueError(f"rows: [{start}, {stop}) is outside [0, {self.n_rows})")
        return self.ids(start, stop), self._checked_block(start, stop)

    def _checked_block(self, start: int, stop: int) -> np.ndarray:
        block = self._read_float32(start, stop)
        if not self._checked:
            nan, zero = bad_rows(block)
            if nan.any() or zero.any():
                self.check()  # counts over the whole source, then raises
        return block


def _check_block_rows(block_rows: Any) -> int:
    if isinstance(block_rows, bool) or not isinstance(block_rows, int | np.integer):
        raise TypeError(f"block_rows must be an integer >= 1, got {block_rows!r}")
    if block_rows < 1:
        raise ValueError(f"block_rows must be an integer >= 1, got {block_rows}")
    return int(block_rows)


class ArraySource(DistractorSource):
    """Distractors held in an array: in memory, or a ``np.memmap`` read block by block.

    Args:
        rows: ``(n, d)`` raw embeddings (any float dtype; converted per block).
        ids: optional explicit ``(n,)`` int64 ids (unique); default
            ``id_base + row``.
        id_base: first id of the reserved range.
        modality: ``"image"`` or ``"text"``, if known.
        encoder: the encoder id the rows come from, if known.
        name: a label for messages and records.
    """

    def __init__(
        self,
        rows: Any,
        *,
        ids: Any = None,
        id_base: int = DISTRACTOR_ID_BASE,
        modality: str | None = None,
        encoder: str | None = None,
        name: str = "array",
    ) -> None:
        if not hasattr(rows, "shape") or len(rows.shape) != 2:
            rows = np.asarray(rows)
        if rows.ndim != 2 or rows.dtype.kind not in "fiu":
            raise DistractorError(
                f"distractors {name!r}: expected a 2-D numeric array (n, d), got shape "
                f"{rows.shape} dtype {rows.dtype}"
            )
        self._rows = rows
        self.name, self.modality, self.encoder = name, modality, encoder
        self.id_base = int(id_base)
        if ids is not None:
            ids = np.asarray(ids)
            if ids.shape != (rows.shape[0],) or (ids.size and ids.dtype.kind not in "iu"):
                raise DistractorError(
                    f"distractors {name!r}: ids must be ({rows.shape[0]},) integers, got shape "
                    f"{ids.shape} dtype {ids.dtype}"
                )
            ids = ids.astype(np.int64)
            u, c = np.unique(ids, return_counts=True)
            if (c > 1).any():
                raise DistractorError(
                    f"distractors {name!r}: ids must be unique, id {int(u[c > 1][0])} repeats"
                )
            self.explicit_ids = ids

    @property
    def total_rows(self) -> int:
        return int(self._rows.shape[0])

    @property
    def dim(self) -> int:
        return int(self._rows.shape[1])

    def _read(self, start: int, stop: int) -> np.ndarray:
        return self._rows[start:stop]

    @classmethod
    def from_split(
        cls,
        dataset: Any,
        split: str,
        modality: str,
        embeddings: Any,
        *,
        encoder: str | None = None,
        id_base: int = DISTRACTOR_ID_BASE,
        cache_dir: Any = None,
    ) -> ArraySource:
        """Another dataset's split as distractors (COCO images for Flickr30k).

        Args:
            dataset: a :class:`~imsearch_align.datasets.PairedDataset`.
            split: its split (``"test"``, ``"train"``, ...).
            modality: ``"image"`` or ``"text"``.
            embeddings: an ``EmbeddingProvider`` of that modality (the split
                is embedded through :func:`~imsearch_align.embedding.embed`,
                cached under ``cache_dir``; the encoder id is its
                :func:`~imsearch_align.embedding.provider_key`), or the raw
                ``(n, d)`` array of the split's rows in
                ``dataset.split_ids(split, modality)`` order.
            encoder: the encoder id, when ``embeddings`` is an array.
            id_base: first id of the reserved range (the split's own ids are
                dataset ids, kept in :attr:`source_ids`, never served).
            cache_dir: embedding cache folder (with a provider).
        """

        sids = dataset.split_ids(split, modality)
        if hasattr(embeddings, "encode"):
            rows = embed(
                dataset, embeddings, modality, ids=sids, cache_dir=cache_dir, progress=False
            )
            encoder = provider_key(embeddings)
        else:
            rows = np.asarray(embeddings)
            if rows.ndim != 2 or rows.shape[0] != len(sids):
                raise DistractorError(
                    f"{dataset.name}:{split} {modality} embeddings: expected ({len(sids)}, d) "
                    f"rows (one per id of the split), got shape {rows.shape}"
                )
        src = cls(
            rows,
            id_base=id_base,
            modality=modality,
            encoder=encoder,
            name=f"dataset:{dataset.name}:{split}:{modality}",
        )
        src.source_ids = sids
        return src


_DIGESTS: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Any) -> str:
    """SHA-256 of a file's bytes (remembered per path, size and modification time)."""
    import hashlib
    import os

    st = os.stat(path)
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 22), b""):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]
