"""The built-in tasks, registered in ``TASKS`` (``imsearch-align list tasks``).

=================  ============================================================
``retrieval``      text-to-image and image-to-text search (trec_eval measures)
``classification`` zero-shot classification by class-prompt vectors (CLIP_benchmark)
``matching``       one-to-one image-caption assignment, Hungarian (MMA benchmark)
``multilabel``     multi-label mAP of class-prompt vectors (CLIP_benchmark)
``linear_probe``   logistic regression on raw and aligned image embeddings
``captioning``     nearest other-image caption, corpus BLEU-4 (sacrebleu)
=================  ============================================================

Each task class registers itself with ``@TASKS.register("name")`` in its
own module; the registry imports every public module of this package on
first use, so a new built-in task needs no list here. A task from another
package registers under the entry-point group ``imsearch_align.tasks`` (see
``docs/architecture.md``).
"""

from __future__ import annotations

from imsearch_align.experiment.tasks.base import Task, TaskUnsupportedError
from imsearch_align.experiment.tasks.captioning import Captioning
from imsearch_align.experiment.tasks.classification import (
    Classification,
    class_prompts,
    class_vectors,
)
from imsearch_align.experiment.tasks.linear_probe import LinearProbe
from imsearch_align.experiment.tasks.matching import Matching
from imsearch_align.experiment.tasks.multilabel import MultiLabel
from imsearch_align.experiment.tasks.retrieval import Retrieval
from imsearch_align.framework.registry import TASKS

__all__ = [
    "TASKS",
    "Captioning",
    "Classification",
    "LinearProbe",
    "Matching",
    "MultiLabel",
    "Retrieval",
    "Task",
    "TaskUnsupportedError",
    "class_prompts",
    "class_vectors",
]
