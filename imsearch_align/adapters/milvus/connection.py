"""One store's connection to Milvus: the client, retries through an outage, clear errors.

A :class:`MilvusConnection` opens the pymilvus client on first use (for
Milvus Lite in-process, after starting or sharing the server of the data
directory, :mod:`~imsearch_align.adapters.milvus.lite`) and runs every
request through :meth:`MilvusConnection.run`, which heals what can heal:

* a broken connection (:data:`~imsearch_align.adapters.milvus.errors.TRANSIENT`)
  is retried with backoff (pymilvus reconnects the channel) until the
  server answers or the outage outlasts ``retry_budget_s``; then
  :class:`~imsearch_align.adapters.milvus.errors.MilvusUnavailableError`,
  and every later call that fails the same way raises at once (no new
  budget) until the server answers again;
* a collection the server reports as released (it was restarted) is
  loaded again and the request repeated;
* the rest raises the error :func:`~imsearch_align.adapters.milvus.errors.refusal`
  builds, with the token scrubbed and the message on one bounded line.

One warning is logged when an outage starts and one line when it ends. The
token is kept here only, never logged or shown.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from imsearch_align.adapters.milvus.config import is_lite_uri, redact_uri
from imsearch_align.adapters.milvus.errors import (
    NOT_FOUND,
    NOT_LOADED,
    OTHER,
    TRANSIENT,
    MilvusUnavailableError,
    classify,
    error_text,
    refusal,
)
from imsearch_align.adapters.milvus.lite import lite_address, open_lite, release_lite
from imsearch_align.adapters.milvus.logs import import_pymilvus

__all__ = ["MilvusConnection"]

# One logger for the whole Milvus adapter (the package's name).
log = logging.getLogger("imsearch_align.adapters.milvus")


class MilvusConnection:
    """The pymilvus client of one store, opened lazily, with retries and error translation.

    Args:
        uri: as given to the store (a Lite path or ``http://host:port``).
        token: ``"user:password"`` or an API key ("" for none); never shown.
        db_name: Milvus database ("" = default).
        timeout: per-request timeout in seconds, or None.
        retry_budget_s: how long one outage may last before giving up.
        backoff_s: first wait between retries; doubles each time ...
        max_backoff_s: ... up to this.
        lock: the store's lock; it guards the client and the outage state
            here, and is held across connecting only, never across a request.
        check_open: raises if the store is closed (called before connecting).
        forget: drops a collection from the store's catalog cache (called
            when the server says it does not exist).
    """

    def __init__(
        self,
        uri: str,
        *,
        token: str,
        db_name: str,
        timeout: float | None,
        retry_budget_s: float,
        backoff_s: float,
        max_backoff_s: float,
        lock: Any,
        check_open: Callable[[], None],
        forget: Callable[[str], None],
    ) -> None:
        self.uri = uri
        self.__token = token
        self.db_name = db_name
        self.timeout = timeout
        self.retry_budget_s = retry_budget_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._lock = lock
        self._check_open = check_open
        self._forget = forget
        self._client: Any = None
        self._lite_path: str | None = None
        self._outage_since: float | None = None
        self._gave_up = False
        #: Outages this connection has gone through (each counted when it starts) and the
        #: seconds the healed ones lasted: a caller timing searches compares them before
        #: and after, so a timing never silently includes an outage.
        self.outages = 0
        self.outage_s = 0.0

    @property
    def has_token(self) -> bool:
        """Whether a token was given (its value is never shown)."""
        return bool(self.__token)

    @property
    def is_lite(self) -> bool:
        """Whether ``uri`` selects Milvus Lite in-process."""
        return is_lite_uri(self.uri)

    def connect(self) -> Any:
        """The client, opened on first use (a closed store raises)."""
        with self._lock:
            self._check_open()
            if self._client is not None:
                return self._client
            pymilvus = import_pymilvus()
            target = self.uri
            if self.is_lite and self._lite_path is None:
                self._lite_path = open_lite(self.uri)
            if self._lite_path is not None:
                target = lite_address(self._lite_path)
            kwargs: dict[str, Any] = {"uri": target, "db_name": self.db_name, "dedicated": True}
            if self.__token:
                kwargs["token"] = self.__token
            # Also pymilvus's wait for the channel, on connect and on reconnect.
            kwargs["timeout"] = self.timeout or max(1.0, min(10.0, self.retry_budget_s))
            self._client = pymilvus.MilvusClient(**kwargs)
            return self._client

    def scrub(self, text: str) -> str:
        """``text`` without the token or the uri's credentials, on one line of <= 300 chars."""
        if self.__token:
            text = text.replace(self.__token, "***")
        text = text.replace(self.uri, redact_uri(self.uri))
        # One line, bounded: a server's message can carry a stack of its own.
        text = " ".join(text.split())
        return text if len(text) <= 300 else text[:297] + "..."

    def call(self, op: str, collection: str | None, method: str, *args: Any, **kwargs: Any) -> Any:
        """A client method through :meth:`run` (retries, reload, clear errors)."""
        if self.timeout is not None:
            kwargs.setdefault("timeout", self.timeout)
        return self.run(op, collection, lambda client, _: getattr(client, method)(*args, **kwargs))

    def run(self, op: str, collection: str | None, fn: Callable[[Any, bool], Any]) -> Any:
        """Run ``fn(client, retried)``; heal what can heal, translate the rest.

        ``retried`` is True once an attempt failed in a way that may have
        reached the server (a broken connection), so a write can skip what
        was already applied.
        """
        wait = self.backoff_s
        retried = False
        reloaded = False
        while True:
            try:
                result = fn(self.connect(), retried)
            except Exception as exc:
                kind = classify(exc)
                if kind == NOT_LOADED and collection is not None and not reloaded:
                    reloaded = True
                    self._load(collection)
                    continue
                if kind == TRANSIENT:
                    wait = self._wait_out(op, collection, exc, wait)
                    retried = True
                    reloaded = False  # a restart in between releases it again
                    continue
                if kind == OTHER:
                    raise
                msg = self.scrub(error_text(exc))
                if kind == NOT_FOUND and collection is not None:
                    self._forget(collection)
                raise refusal(self.uri, op, collection, exc, kind, msg) from None
            self._recovered()
            return result

    def _load(self, name: str) -> None:
        """Load a collection the server reports as released (after a server restart).

        The restart is an outage even when the connection healed before any request
        failed on it (gRPC reconnects on its own): it is counted, and its reload time
        added, so a timed search that went through it is known."""
        t0 = time.monotonic()
        with self._lock:
            self.outages += 1
        self.call("load_collection", name, "load_collection", name)
        with self._lock:
            self.outage_s += time.monotonic() - t0
        log.info(
            "Milvus at %s had released collection %r (restarted?); loaded it again in %.2f s",
            redact_uri(self.uri),
            name,
            time.monotonic() - t0,
        )

    def _wait_out(self, op: str, collection: str | None, exc: BaseException, wait: float) -> float:
        """Sleep before the next attempt, or raise once the outage outlasts the budget."""
        where = f" on collection {collection!r}" if collection else ""
        cause = f"{type(exc).__name__}: {self.scrub(error_text(exc))}"
        with self._lock:
            now = time.monotonic()
            if self._outage_since is None:
                self._outage_since = now
                self.outages += 1
                if not self._gave_up:
                    log.warning(
                        "Milvus at %s is not answering (%s%s: %s); retrying for up to %.1f s",
                        redact_uri(self.uri),
                        op,
                        where,
                        cause,
                        self.retry_budget_s,
                    )
            elapsed = now - self._outage_since
            if self._gave_up or elapsed >= self.retry_budget_s:
                self._gave_up = True
                raise MilvusUnavailableError(
                    f"Milvus at {redact_uri(self.uri)} is unavailable: {op}{where} failed and "
                    f"the server did not answer for {elapsed:.1f} s (retry_budget_s="
                    f"{self.retry_budget_s:g}); last error {cause}. Is the server running and "
                    "the uri right?"
                ) from None
            pause = min(wait, self.retry_budget_s - elapsed)
        time.sleep(max(pause, 0.0))
        return min(max(wait, 1e-3) * 2, self.max_backoff_s)

    def _recovered(self) -> None:
        """After a success: end the outage (one log line) if there was one."""
        if self._outage_since is None and not self._gave_up:
            return
        with self._lock:
            if self._outage_since is not None or self._gave_up:
                since = self._outage_since
                took = "" if since is None else f" after {time.monotonic() - since:.1f} s"
                if since is not None:
                    self.outage_s += time.monotonic() - since
                log.warning("Milvus at %s answers again%s", redact_uri(self.uri), took)
                self._outage_since = None
                self._gave_up = False

    def close(self) -> None:
        """Close the client and release the Lite server of this store (idempotent)."""
        with self._lock:
            client, self._client = self._client, None
            lite_path, self._lite_path = self._lite_path, None
        if client is not None:
            try:
                client.close()
            except Exception as exc:  # closing a dead connection must not raise
                log.debug("closing the Milvus client: %s", type(exc).__name__)
        if lite_path is not None:
            release_lite(lite_path)
