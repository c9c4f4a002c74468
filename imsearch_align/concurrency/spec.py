"""A store named by its registry name and arguments: the picklable way to open one anywhere.

A client process (``mode="processes"``) cannot share the parent's store: a
client object holds sockets and threads that do not cross a process
boundary. It is given a :class:`StoreSpec` instead and opens its own store
with :meth:`StoreSpec.open`, so every process has its own client and
connection, as VectorDBBench's clients do.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imsearch_align.framework.registry import STORES
from imsearch_align.framework.secrets import MASK, redact_uri

__all__ = ["SECRET_PARAMS", "StoreSpec"]

#: Store arguments never shown in a repr or an error (their values are secrets).
SECRET_PARAMS = frozenset({"token", "api_key", "password", "secret"})


@dataclass(frozen=True)
class StoreSpec:
    """A registered store (``imsearch_align.STORES``) and the arguments that open it.

    Attributes:
        name: the registry name (``"milvus"``, ``"qdrant"``, ``"lancedb"``...).
        params: keyword arguments of the store's constructor; picklable
            values only (they travel to each client process).

    Example:
        ``StoreSpec("milvus", {"uri": "http://127.0.0.1:19530", "index": "HNSW",
        "search_params": {"ef": 64}})``: every client opens its own
        ``MilvusStore`` on that server.
    """

    name: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"StoreSpec: name must be a registered store name, got {self.name!r}")
        if not isinstance(self.params, Mapping):
            raise TypeError(
                f"StoreSpec: params must be a mapping of constructor arguments, "
                f"got {type(self.params).__name__}"
            )
        object.__setattr__(self, "params", dict(self.params))

    def factory(self) -> Any:
        """The registered store class (or factory) of :attr:`name`."""
        return STORES.get(self.name)

    def open(self) -> Any:
        """A new store: ``STORES.get(name)(**params)``."""
        return self.factory()(**self.params)

    def shown_params(self) -> dict[str, Any]:
        """:attr:`params` fit to show: secrets masked, URIs without their user info."""
        out: dict[str, Any] = {}
        for key, value in self.params.items():
            if key in SECRET_PARAMS and value:
                out[key] = MASK
            elif isinstance(value, str) and "://" in value:
                out[key] = redact_uri(value)
            else:
                out[key] = value
        return out

    def __repr__(self) -> str:
        return f"StoreSpec({self.name!r}, {self.shown_params()!r})"
