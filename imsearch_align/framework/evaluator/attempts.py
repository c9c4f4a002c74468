"""The retry policy of one evaluation: which errors are retried, and how often.

:data:`NOT_RETRIED` lists the errors the same request cannot heal;
:class:`_Attempts` is the retry budget, the failure streak and the
store-unavailable verdict that the worker threads of one call share.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter

from imsearch_align.framework.interfaces import StoreUnavailableError

__all__ = ["NOT_RETRIED"]

log = logging.getLogger("imsearch_align.framework.evaluator")

#: Errors that the same request cannot heal: never retried.
NOT_RETRIED: tuple[type[BaseException], ...] = (
    LookupError,  # a collection that no longer exists (CollectionNotFoundError), a bad key
    TypeError,
    ValueError,
    AttributeError,
    NotImplementedError,
    MemoryError,
)


class _Attempts:
    """Retry budget, failure streak and the unavailable verdict, shared by the workers."""

    def __init__(
        self,
        retries: int,
        budget: int,
        max_consecutive: int,
        backoff_s: float,
        max_backoff_s: float,
    ) -> None:
        self.retries = retries
        self.budget = budget
        self.max_consecutive = max_consecutive
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.n_retries = 0
        self.streak = 0
        self.unavailable: BaseException | None = None
        self.seen: Counter[str] = Counter()

    def note_error(self, msg: str, collection: str) -> None:
        """Count an error; log it the first time it is seen (one line, no traceback)."""
        with self.lock:
            self.seen[msg] += 1
            first = self.seen[msg] == 1
        if first:
            log.warning("search of %s failed: %s", collection, msg)

    def may_retry(self, attempt: int) -> bool:
        """Whether attempt ``attempt`` (0-based) of a batch may be followed by another."""
        if attempt >= self.retries or self.stop.is_set():
            return False
        with self.lock:
            if self.n_retries >= self.budget:
                return False
            self.n_retries += 1
            return True

    def wait_backoff(self, attempt: int) -> None:
        delay = min(self.backoff_s * 2**attempt, self.max_backoff_s)
        if delay > 0:
            self.stop.wait(delay)  # returns at once when the run is stopped

    def failed(self, msg: str) -> None:
        with self.lock:
            self.streak += 1
            if self.streak >= self.max_consecutive and self.unavailable is None:
                self.unavailable = StoreUnavailableError(
                    f"{self.streak} searches failed in a row; last error: {msg}"
                )
                self.stop.set()

    def succeeded(self) -> None:
        with self.lock:
            self.streak = 0

    def declare_unavailable(self, exc: BaseException) -> None:
        with self.lock:
            if self.unavailable is None:
                self.unavailable = exc
            self.stop.set()
