"""What a task is: a small class with one entry point that returns a typed result.

A task is built from ``config.task_params`` (checked against its
``__init__``), says before any encoding whether the dataset can serve it
(:meth:`Task.check`), and measures in :meth:`Task.run` through the
:class:`~imsearch_align.experiment.context.TaskContext`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from imsearch_align.experiment.result import TaskResult

__all__ = ["Task", "TaskUnsupportedError"]


class TaskUnsupportedError(ValueError):
    """The dataset cannot serve the task (raised before any encoding)."""


class Task(ABC):
    """Base class of the tasks in the ``TASKS`` registry.

    Class attributes (shown by ``imsearch-align list tasks`` and the README):
        name: the registry name.
        measures: the task-level measures it reports.
        source: where the protocol and its definition come from.
    """

    name: ClassVar[str] = ""
    measures: ClassVar[str] = ""
    source: ClassVar[str] = ""

    def check(self, data: Any, config: Any) -> None:  # noqa: B027 - optional hook
        """Raise :class:`TaskUnsupportedError` if ``data`` cannot serve this task."""

    @abstractmethod
    def run(self, ctx: Any) -> TaskResult:
        """Measure, with the fitted method in ``ctx``."""

    def params(self) -> dict[str, Any]:
        """The task's parameters (as recorded in results)."""
        return {}


def require_split(ds: Any, split: str, modality: str, task: str) -> None:
    """Raise :class:`TaskUnsupportedError` when ``ds`` has no ``modality`` rows in ``split``."""
    if len(ds.split_ids(split, modality)) == 0:
        raise TaskUnsupportedError(
            f"task {task!r} needs {modality}s in the {split!r} split; dataset {ds.name!r} has none"
        )


def require_labels(ds: Any, task: str, *, multi: bool = False) -> None:
    """Raise when ``ds`` lacks class names or (multi-)labels."""
    has = ds.label_sets is not None if multi else ds.labels is not None
    kind = "label sets (several labels per image, column 'label_set')" if multi else "class labels"
    if not has or not ds.class_names:
        raise TaskUnsupportedError(
            f"task {task!r} needs {kind} and class names; dataset {ds.name!r} has "
            f"{'no class names' if not ds.class_names else 'none'}"
        )


def require_encoder(data: Any, modality: str, task: str, why: str) -> None:
    """Raise when ``modality``'s provider only serves stored vectors by id and
    cannot encode the new items the task needs (``why``)."""
    from imsearch_align.framework.interfaces import IdLookupProvider

    provider = data.image_provider if modality == "image" else data.text_provider
    if isinstance(provider, IdLookupProvider) and provider.lookup_by_id:
        raise TaskUnsupportedError(
            f"task {task!r} encodes new {modality}s ({why}), but the {modality} embeddings are "
            f"precomputed; name a {modality} encoder"
        )
