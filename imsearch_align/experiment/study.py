"""What the cells of a sweep share: :class:`Study` (loaded datasets, providers,
raw embeddings, loaded once) and :class:`RowGather` (rows of a split read
block by block, no copy of the split)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.experiment.components import LoadedData, load_data
from imsearch_align.experiment.config import ExperimentConfig
from imsearch_align.framework.interfaces import IdLookupProvider

__all__ = ["RowGather", "Study"]


class RowGather:
    """Rows of a split, gathered block by block when read (one copy of all of them later).

    A cell transforms a split's rows in blocks; reading them through this
    view keeps the raw copy the size of a block instead of the whole split
    (47,675 x 384 float32 = 70 MiB for Flickr30k's test captions).

    Args:
        fetch: ``fetch(slice) -> (rows, dim)`` array of those rows, in order.
        shape: ``(rows, dim)`` of the whole view.
    """

    def __init__(self, fetch: Any, shape: tuple[int, int]) -> None:
        self._fetch, self.shape = fetch, (int(shape[0]), int(shape[1]))

    @classmethod
    def of_array(cls, arr: np.ndarray, pos: np.ndarray) -> RowGather:
        """Rows ``pos`` of ``arr``."""
        return cls(lambda rows: arr[pos[rows]], (len(pos), arr.shape[1]))

    @classmethod
    def of_provider(cls, provider: Any, ids: np.ndarray) -> RowGather:
        """The vectors a lookup provider (``lookup_by_id``) holds for ``ids``."""
        ids = np.asarray(ids)
        return cls(
            lambda rows: np.asarray(provider.encode(ids[rows].tolist(), progress=False)),
            (len(ids), provider.dim),
        )

    def __getitem__(self, rows: slice) -> np.ndarray:
        if not isinstance(rows, slice):
            raise TypeError(f"rows must be a slice, got {type(rows).__name__}")
        return self._fetch(rows)

    def gather(self) -> np.ndarray:
        """Every row, as one array (a copy)."""
        return self._fetch(slice(None))


class Study:
    """Datasets, providers and raw embeddings shared by the cells of a sweep.

    Raw embeddings of a whole split are computed (or read from the disk
    cache) once and kept; a provider that serves stored vectors by id
    (precomputed embeddings) already holds them, so its rows are gathered
    on demand instead of being copied into the study.
    """

    def __init__(self) -> None:
        self._datasets: dict[str, Any] = {}
        self._splits: dict[tuple[Any, ...], np.ndarray] = {}

    def load(self, config: ExperimentConfig) -> LoadedData:
        """The datasets and providers of ``config`` (loaded once per study)."""
        return load_data(config, self._datasets)

    def embeddings(self, *args: Any, **kwargs: Any) -> np.ndarray:
        """Raw ``(len(ids), dim)`` embeddings of ``ids``: :meth:`embedding_rows` as one array."""
        rows = self.embedding_rows(*args, **kwargs)
        return rows if isinstance(rows, np.ndarray) else rows.gather()

    def embedding_rows(
        self,
        ds: Any,
        provider: Any,
        modality: str,
        ids: np.ndarray,
        *,
        split: str,
        config: ExperimentConfig,
        progress: bool,
    ) -> np.ndarray | RowGather:
        """Raw embeddings of ``ids`` (all from ``split`` of ``ds``), ``(len(ids), dim)``;
        rows that would be gathered from the split's array (or looked up by id)
        come as a :class:`RowGather` (no copy until read)."""
        from imsearch_align.embedding import embed

        if isinstance(provider, IdLookupProvider) and provider.lookup_by_id:
            return RowGather.of_provider(provider, ids)
        # The fingerprint covers paths relative to the root, not the files behind
        # them: the same layout under another root (other images) is other data.
        root = os.path.realpath(ds.root) if getattr(ds, "root", None) else None
        key = (provider.id, ds.fingerprint, root, modality, split, config.cache_dir)
        if key not in self._splits:
            self._splits[key] = embed(
                ds,
                provider,
                modality,
                ids=ds.split_ids(split, modality),
                cache_dir=config.cache_dir,
                batch_size=config.encode_batch_size,
                progress=progress,
            )
        all_ids = ds.split_ids(split, modality)
        pos = pd.Index(all_ids).get_indexer(np.asarray(ids))
        if (pos < 0).any():
            raise ValueError(f"{modality} ids outside split {split!r} of dataset {ds.name!r}")
        arr = self._splits[key]
        if len(pos) == len(all_ids) and (pos == np.arange(len(pos))).all():
            return arr
        return RowGather.of_array(arr, pos)

    def clear(self) -> None:
        """Forget everything (frees memory)."""
        self._datasets.clear()
        self._splits.clear()
