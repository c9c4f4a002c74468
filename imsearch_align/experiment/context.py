"""What a task works with: embeddings, the fitted method, the store, timing.

:class:`TaskContext` is one cell: it fits the method on the support pairs,
builds aligned spaces on demand (and lets a task release them), owns the
store, the clock, the run token (:mod:`.runs`) and what the cell measured (``done``,
``per_query``, ``notes``). It is the
:class:`~imsearch_align.experiment.search.SearchContext` that tasks pass to
:func:`~imsearch_align.experiment.search.index_and_evaluate`. What the
cells of a sweep share (:class:`Study`, :class:`RowGather`) is in
:mod:`imsearch_align.experiment.study`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.components import (
    LoadedData,
    make_method,
    make_store,
    support_pairs,
)
from imsearch_align.experiment.config import ExperimentConfig
from imsearch_align.experiment.runs import claim_run_token, release_run_token
from imsearch_align.experiment.study import RowGather, Study
from imsearch_align.framework._heap import release_freed_memory
from imsearch_align.framework.interfaces import IdLookupProvider
from imsearch_align.framework.ranking import RankingResult

__all__ = ["Clock", "RowGather", "Study", "TaskContext"]

SUPPORT, TEST = "train", "test"
#: Rows per call when a dense method transforms a split.
TRANSFORM_BLOCK = 4096


class Clock:
    """Accumulates wall time per named phase (``with clock("fit_s"): ...``)."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    @contextmanager
    def __call__(self, key: str) -> Iterator[None]:
        t = time.perf_counter()
        try:
            yield
        finally:
            self.timings[key] = self.timings.get(key, 0.0) + time.perf_counter() - t


#: Cosine distance within which two raw image embeddings are taken as one image.
LEAK_TOL = 1e-4


def near_identical_rows(A: np.ndarray, B: Any, threshold: float, block: int = 2048) -> np.ndarray:
    """Rows of ``A`` whose cosine with some row of ``B`` (an array or a
    :class:`RowGather`) is at least ``threshold``: float32 products in
    ``block x block`` tiles (16 MiB each); all-zero rows match nothing."""

    def unit(M: np.ndarray) -> np.ndarray:
        M = np.asarray(M, dtype=np.float32)
        n = np.sqrt(np.einsum("ij,ij->i", M, M, dtype=np.float64))
        return (M / np.where(n > 0, n, np.inf)[:, None]).astype(np.float32)

    hit = np.zeros(A.shape[0], dtype=bool)
    for t in range(0, B.shape[0], block):
        b = unit(B[t : t + block]).T
        for s in range(0, A.shape[0], block):
            hit[s : s + block] |= (unit(A[s : s + block]) @ b).max(axis=1) >= threshold
    return hit


class TaskContext:
    """One experiment cell: data, fitted method, aligned spaces, store, clock."""

    def __init__(
        self,
        config: ExperimentConfig,
        data: LoadedData,
        study: Study,
        clock: Clock,
        *,
        checkpoint_root: Path | None,
        progress: bool,
    ) -> None:
        self.config = config
        self.data = data
        self.dataset = data.dataset
        self.study = study
        self.clock = clock
        self.checkpoint_root = checkpoint_root
        self.progress = progress
        #: This run's token: it names the run's collections and keys its
        #: checkpoints (see :mod:`imsearch_align.experiment.runs`).
        self.run_token = claim_run_token(checkpoint_root)
        self.method: Any = None
        self.space: tuple[int, bool] | None = None  # aligned (dimension, sparse)
        self.n_support_pairs = 0
        self.n_support_available = 0
        self.notes: list[str] = []
        self.per_query: list[pd.DataFrame] = []
        #: Every ranking measured so far (kept in a failed run's result).
        self.done: dict[str, RankingResult] = {}
        self._aligned: dict[tuple[str, str], Any] = {}
        self._store: Any = None

    # -- data ------------------------------------------------------------------
    def provider(self, modality: str) -> Any:
        """The image or text provider."""
        return self.data.image_provider if modality == "image" else self.data.text_provider

    def ids(self, modality: str, split: str = TEST) -> np.ndarray:
        """Ids of ``modality`` in ``split`` of the evaluated dataset."""
        return self.dataset.split_ids(split, modality)

    def raw(self, modality: str, split: str = TEST) -> np.ndarray:
        """Raw embeddings of a split of the evaluated dataset.

        Not kept by the cell: the study holds a split's embeddings once (or
        the provider holds them, for precomputed vectors), so each call is a
        cheap lookup and the cell's memory holds only what it uses now.
        """
        rows = self._rows(modality, split)
        return rows if isinstance(rows, np.ndarray) else rows.gather()

    def _rows(self, modality: str, split: str) -> np.ndarray | RowGather:
        """The split's raw rows, as the study serves them (timed as embedding)."""
        with self.clock("embed_s"):
            return self.study.embedding_rows(
                self.dataset,
                self.provider(modality),
                modality,
                self.ids(modality, split),
                split=split,
                config=self.config,
                progress=self.progress,
            )

    def fit(self) -> Any:
        """Fit the method on the seeded support sample (of ``support_dataset`` when set)."""
        sup = self.data.support
        txt_ids, img_ids = support_pairs(sup, self.config.n_support, self.config.seed)
        self.n_support_pairs = len(txt_ids)
        self.n_support_available = int((sup.texts["split"] == SUPPORT).sum())
        with self.clock("embed_s"):
            X = self._support_rows(sup, "image", img_ids)
            Y = self._support_rows(sup, "text", txt_ids)
        if self.config.support_dataset is not None:
            self._check_support_leak(X)
        method = make_method(self.config, progress=self.progress)
        with self.clock("fit_s"):
            method.fit(X, Y)
        self.method = method
        del X, Y
        release_freed_memory()  # the support sample and the fit's temporaries
        return method

    def _check_support_leak(self, X: np.ndarray) -> None:
        """A support pair whose image is one of the evaluated test images leaks the
        test set into the fit (a ``support_dataset`` that overlaps the evaluated
        split, e.g. the same data with another seed or ``test_fraction``): the
        count is a reason the run is degraded. The same image: raw embeddings at
        cosine >= 1 - LEAK_TOL (encoders need not give bit-identical vectors
        for one image in two batches)."""
        test = self._rows("image", TEST)
        hit = near_identical_rows(X, test, 1.0 - LEAK_TOL)
        if hit.any():
            self.note(
                f"{int(hit.sum()):,} of {len(hit):,} support pairs have an image that is also a "
                f"test image of {self.dataset.name!r} (cosine >= {1 - LEAK_TOL:g} of the raw "
                "embeddings): the support set overlaps the evaluated split, so every metric is "
                "inflated; expected a support_dataset disjoint from the test split"
            )

    def _support_rows(self, ds: Any, modality: str, ids: np.ndarray) -> np.ndarray:
        return self.study.embeddings(
            ds,
            self.provider(modality),
            modality,
            ids,
            split=SUPPORT,
            config=self.config,
            progress=self.progress,
        )

    def transform(self, modality: str, raw: Any) -> Any:
        """Map raw vectors of ``modality`` into the aligned space (timed)."""
        from imsearch_align.framework.validation import is_sparse

        fn = self.method.transform_images if modality == "image" else self.method.transform_texts
        with self.clock("transform_s"):
            whole = lambda: fn(raw.gather() if isinstance(raw, RowGather) else raw)  # noqa: E731
            if getattr(self.method, "sparse_output", False) or raw.shape[0] <= TRANSFORM_BLOCK:
                # A sparse method streams its own blocks (ASIF): one call, no stacking copy.
                out = whole()
            elif is_sparse(first := fn(raw[:TRANSFORM_BLOCK])):  # sparse, undeclared
                out = whole()
            else:
                # Dense: row blocks into one preallocated output, so the method's
                # float64 temporaries stay the size of a block.
                out = np.empty((raw.shape[0], first.shape[1]), dtype=first.dtype)
                out[: first.shape[0]] = first
                for s in range(TRANSFORM_BLOCK, raw.shape[0], TRANSFORM_BLOCK):
                    out[s : s + TRANSFORM_BLOCK] = fn(raw[s : s + TRANSFORM_BLOCK])
        self.space = (int(out.shape[1]), bool(is_sparse(out)))
        return out

    def aligned(self, modality: str, split: str = TEST) -> Any:
        """Aligned vectors of a split (built once; :meth:`release` frees them)."""
        key = (modality, split)
        if key not in self._aligned:
            self._aligned[key] = self.transform(modality, self._rows(modality, split))
        return self._aligned[key]

    def transforms_done(self) -> None:
        """The task will transform nothing more in this cell: the method frees
        its transform state (ASIF's anchors, 127 MiB at 29,000 Flickr30k pairs)
        before the last search. Not when the geometry diagnostics follow the
        task (they may transform again)."""
        release = getattr(self.method, "release_transform_state", None)
        if release is not None and not self.config.diagnostics:
            release()

    def release(self, modality: str | None = None) -> None:
        """Drop cached aligned arrays (of one modality, or all)."""
        for key in [k for k in self._aligned if modality is None or k[0] == modality]:
            del self._aligned[key]

    def encode_texts(self, texts: Sequence[str], namespace: str) -> np.ndarray:
        """Raw vectors of new texts (class prompts), through the embedding cache."""
        from imsearch_align.embedding import embed_texts

        provider = self.provider("text")
        if isinstance(provider, IdLookupProvider) and provider.lookup_by_id:
            raise ValueError(
                f"task {self.config.task!r} encodes new text ({namespace}), but the text "
                "embeddings are precomputed and cannot encode it: name a text encoder"
            )
        with self.clock("embed_s"):
            return embed_texts(
                provider,
                list(texts),
                cache_dir=self.config.cache_dir,
                batch_size=self.config.encode_batch_size,
                progress=self.progress,
                namespace=namespace,
            )

    # -- store and search ----------------------------------------------------------
    @property
    def open_store(self) -> Any:
        """The store if this cell created one, else None (never creates it)."""
        return self._store

    @property
    def store(self) -> Any:
        """The store of this cell (created on first use, closed by :meth:`close`)."""
        if self._store is None:
            self._store = make_store(self.config, owner=self.run_token)
        return self._store

    def collection_name(self, ranking: str) -> str:
        """A collection name owned by this run (a unique suffix: runs never collide)."""
        from imsearch_align.adapters.base import unique_collection_name

        return unique_collection_name(f"ia_{ranking}_{self.config.key()}", self.run_token)

    def note(self, reason: str) -> None:
        """Record a reason the run is degraded."""
        self.notes.append(reason)

    def close(self) -> None:
        """Close the store, free the cell's arrays and end the run's hold on its token."""
        self.release()
        release_run_token(self.checkpoint_root, self.run_token)
        if self._store is not None:
            try:
                self._store.close()
            finally:
                self._store = None
