"""BenchmarkEvaluator: batched, parallel search of a store, scored once, never silently wrong.

The flow is: split the queries into batches, run ``store.search`` on a
small pool of worker threads that stays full (a slow batch never stalls the
others), check every answer, stitch one :class:`~imsearch_align.Run`
together, and compute every measure once with the kernels of the measure
table (:mod:`imsearch_align.framework.measures`).

What a result promises (the reference harness got these wrong, see the README):

* **Failures are counted, never hidden.** A query whose search failed
  scores 0, counts in every mean, is listed in ``result.failed_queries``
  with its error, and makes the result degraded
  (:meth:`BenchmarkResult.degraded_reasons`). A query fails when its batch
  raised, when the store answered a dense collection with fewer than
  ``min(k, collection size)`` hits (another client dropped or emptied the
  collection), when it returned an id that is not in the collection (when
  the caller gives the collection's ids), a NaN score, or a ranking that
  holds a relevant doc twice. Rankings not sorted by score are scored after
  re-sorting and reported.
* **One retry budget per call.** Transient errors are retried with
  exponential backoff, at most ``retries`` times per batch and
  ``retry_budget`` times in all. Errors that cannot heal (``LookupError``
  such as a collection that no longer exists, ``TypeError``,
  ``ValueError``...) are not retried. ``StoreUnavailableError``, or
  ``max_consecutive_failures`` failed searches in a row, declare the store
  unavailable: the remaining batches are cancelled, the finished ones kept
  (and checkpointed), and one :class:`EvaluationAborted` carries the
  partial result. Each distinct error is logged once, without a traceback.
* **Ctrl-C** (``KeyboardInterrupt``) cancels the queued batches and is
  re-raised at once; every batch finished before it is already
  checkpointed. Workers are daemon threads, so a search stuck in a dead
  server does not hold the process.
* **Checkpoints are keyed on everything that fixes the ranking**: the
  queries and their ids, ``k``, the batch size, and ``checkpoint_key``, a
  digest the caller computes of everything else (documents, method, store
  parameters). A checkpoint under another key is never read. Without a key
  nothing is checkpointed. Files are written with
  :func:`~imsearch_align.framework.atomic.atomic_write`; a batch with a
  failed query is never written. :meth:`BenchmarkEvaluator.clear_checkpoints`
  removes them once the result is safe.
* **Timings cover only what was searched in this call**: queries/s and
  batch latency percentiles come from the searched batches alone; a result
  resumed entirely from checkpoints reports NaN speed and says how many
  batches were searched (``n_batches_searched``) and loaded
  (``n_batches_resumed``).
* **A store that declares** ``thread_safe = False``
  (:class:`~imsearch_align.framework.interfaces.ThreadSafety`) has its
  ``search`` calls serialised; the other work stays parallel.

The rooms, from the top: :mod:`.evaluator` (the class: settings and
verbs), :mod:`.scoring` (the measures of a searched run), :mod:`.batches`
(the assembled run, :class:`Searched`), :mod:`.pool` (the batch loop and
the thread pool), :mod:`.attempts` (the retry budget), :mod:`.answers`
(per-answer checks), :mod:`.result` (:class:`BenchmarkResult` and the
errors carrying a partial one), :mod:`.checkpoint`, :mod:`.frame`
(imsearch_eval-style input) and :mod:`.progress`.
"""

from __future__ import annotations

from imsearch_align.framework.evaluator.attempts import NOT_RETRIED
from imsearch_align.framework.evaluator.batches import Searched
from imsearch_align.framework.evaluator.checkpoint import remove_checkpoints
from imsearch_align.framework.evaluator.evaluator import DEFAULT_MEASURES, BenchmarkEvaluator
from imsearch_align.framework.evaluator.result import (
    BenchmarkResult,
    EvaluationAborted,
    NaNScoreError,
)

__all__ = [
    "DEFAULT_MEASURES",
    "NOT_RETRIED",
    "BenchmarkEvaluator",
    "BenchmarkResult",
    "EvaluationAborted",
    "NaNScoreError",
    "Searched",
    "remove_checkpoints",
]
