"""What a search-based task's cell offers the search: :class:`SearchContext`.

:func:`~imsearch_align.experiment.search.index_and_evaluate` and the truth
check of the store's answers (:mod:`.truth`) take it; a
:class:`~imsearch_align.experiment.context.TaskContext` is one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import pandas as pd

from imsearch_align.experiment.config import ExperimentConfig
from imsearch_align.framework.interfaces import VectorStoreAdapter
from imsearch_align.framework.ranking import RankingResult

__all__ = ["SearchContext"]


class SearchContext(Protocol):
    """What :func:`index_and_evaluate` needs of an experiment cell."""

    #: The cell's config (k values, batch size, workers, seed, tie tolerance, truth check).
    config: ExperimentConfig
    #: Show progress bars.
    progress: bool
    #: Where search batches are checkpointed (None: nowhere).
    checkpoint_root: Path | None
    #: This run's token: its checkpoints are its own (a live run's are never resumed).
    run_token: str
    #: Per-query tables of the rankings measured so far (one frame a ranking).
    per_query: list[pd.DataFrame]
    #: Every ranking measured so far, by name (kept in a failed run's result).
    done: dict[str, RankingResult]

    @property
    def store(self) -> VectorStoreAdapter:
        """The cell's store."""
        ...

    def collection_name(self, ranking: str) -> str:
        """A collection name owned by this run."""
        ...

    def note(self, reason: str) -> None:
        """Record a reason the run is degraded."""
        ...
