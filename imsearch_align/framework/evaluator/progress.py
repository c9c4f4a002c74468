"""The search progress bar: a transient tqdm bar over batches, or nothing."""

from __future__ import annotations

from typing import Any


class _NullBar:
    """A bar that shows nothing."""

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def _progress(total: int, enabled: bool, desc: str) -> Any:
    """A transient bar over ``total`` batches; none for a single batch (a 0-of-1
    bar per search says nothing and, in a study's log, floods it)."""
    if not enabled or total < 2:
        return _NullBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="batch", leave=False)
