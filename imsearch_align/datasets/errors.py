"""What can be wrong with data: the errors and warnings loaders raise, and why items are skipped.

Every loader (and the encoders reading an image) raises these, so a caller
catches one type whatever the source: :class:`LayoutError` (a folder or file
is missing), :class:`HubUnreachableError` (offline), :class:`BadAnnotationError`
(a caption or label row is missing or empty), :class:`BadImageError` (an
image cannot be opened or decoded), and :class:`ZeroEmbeddingWarning` (all-zero
embedding rows). :data:`SKIP_REASONS` names what a loader may leave out
(``PairedDataset.skipped``). Nothing here imports another module of the package.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "SKIP_REASONS",
    "BadAnnotationError",
    "BadImageError",
    "HubUnreachableError",
    "LayoutError",
    "ZeroEmbeddingWarning",
    "layout_error",
]

#: Why an item was left out of a dataset (keys of ``PairedDataset.skipped``).
SKIP_REASONS = {
    "missing_image": "image file does not exist",
    "unreadable_image": "image file cannot be decoded (corrupt or truncated)",
    "missing_caption": "caption row has no caption field",
    "empty_caption": "caption is empty or whitespace only",
    "missing_label": "image has no class label",
}


class LayoutError(FileNotFoundError):
    """A dataset folder or file is missing; the message shows the expected layout."""


class HubUnreachableError(ConnectionError):
    """The Hugging Face Hub could not be reached (offline, no network)."""


class BadAnnotationError(ValueError):
    """A caption or label row is missing or empty; the message names the file and line."""


class BadImageError(ValueError):
    """An image item could not be opened or decoded; the message names it."""


class ZeroEmbeddingWarning(UserWarning):
    """Some embedding rows are all zeros: those items score 0 against everything."""


def layout_error(what: str, root: Path | str | None, layout: str, how: str) -> LayoutError:
    """A :class:`LayoutError` that lists the expected layout and how to get the data."""
    return LayoutError(
        f"{what} (root={str(root)!r}).\nExpected layout:\n{layout}\nHow to get it: {how}"
    )
