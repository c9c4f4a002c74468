"""What each kind of plug-in must provide, and the checks a registry runs on first use.

A store must have the methods :data:`STORE_METHODS` and the attributes
:data:`STORE_ATTRIBUTES` (:func:`store_protocol_problems`, :func:`check_store`);
a method :data:`METHOD_METHODS` (:func:`method_problems`); an encoder
:data:`ENCODER_METHODS` (:func:`encoder_problems`). Each check returns the
list of problems (empty: nothing missing); the registry turns a non-empty
list into a :class:`~imsearch_align.framework.plugins.PluginProtocolError`.
"""

from __future__ import annotations

import inspect
from typing import Any

from imsearch_align.framework.plugins import PluginProtocolError

__all__ = [
    "ENCODER_METHODS",
    "METHOD_METHODS",
    "STORE_ATTRIBUTES",
    "STORE_METHODS",
    "check_store",
    "encoder_problems",
    "method_problems",
    "protocol_problems",
    "store_protocol_problems",
]

#: Methods of :class:`~imsearch_align.framework.interfaces.VectorStoreAdapter`, with signatures.
STORE_METHODS = {
    "create_collection": "create_collection(name, dim=None, *, sparse=False, metric='ip')",
    "insert": "insert(name, vectors, ids)",
    "search": "search(name, queries, k)",
    "drop_collection": "drop_collection(name)",
    "close": "close()",
}
#: Attributes of the store protocol: name -> meaning.
STORE_ATTRIBUTES = {"supports_sparse": "bool: whether sparse (CSR) collections are accepted"}

#: Methods of an alignment method, with signatures.
METHOD_METHODS = {
    "fit": "fit(image_emb, text_emb) -> self",
    "transform_images": "transform_images(X)",
    "transform_texts": "transform_texts(Y)",
}
#: Methods of an encoder (embedding provider), with signatures.
ENCODER_METHODS = {"encode": "encode(items, *, batch_size=32, progress=True)"}


def protocol_problems(
    obj: Any, methods: dict[str, str], attributes: dict[str, str] | None = None
) -> list[str]:
    """Missing methods and attributes of a class or instance (a plain factory function passes)."""
    if not isinstance(obj, type) and (inspect.isfunction(obj) or inspect.ismethod(obj)):
        return []  # a factory: its product is checked where it is built
    problems = [
        f"missing method {sig}" for m, sig in methods.items() if not callable(getattr(obj, m, None))
    ]
    for attr, meaning in (attributes or {}).items():
        if not hasattr(obj, attr):
            problems.append(f"missing attribute {attr} ({meaning})")
    if isinstance(obj, type) and inspect.isabstract(obj):
        names = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        problems.append(f"abstract methods not implemented: {names}")
    return problems


def store_protocol_problems(obj: Any) -> list[str]:
    """What a store class or instance lacks of the VectorStoreAdapter protocol (empty: nothing).

    Methods :data:`STORE_METHODS`, attributes :data:`STORE_ATTRIBUTES`, a
    ``thread_safe`` that is a bool when declared, no unimplemented abstract
    method. A plain factory function passes (check what it builds).
    """
    problems = protocol_problems(obj, STORE_METHODS, STORE_ATTRIBUTES)
    ts = inspect.getattr_static(obj, "thread_safe", None)
    if ts is not None and not isinstance(ts, bool | property):
        problems.append(f"thread_safe must be a bool, got {type(ts).__name__} {ts!r}")
    return problems


def check_store(obj: Any) -> None:
    """Raise :class:`PluginProtocolError` when a store class or instance lacks a protocol member.

    The registry checks classes when a name is first used; a factory
    function's product is checked by calling this on the instance.
    """
    problems = store_protocol_problems(obj)
    if problems:
        what = obj.__name__ if isinstance(obj, type) else type(obj).__name__
        raise PluginProtocolError(
            f"{what} does not satisfy the VectorStoreAdapter protocol: {'; '.join(problems)}"
        )


def method_problems(obj: Any) -> list[str]:
    """What an alignment method class lacks of :data:`METHOD_METHODS` (empty: nothing)."""
    return protocol_problems(obj, METHOD_METHODS)


def encoder_problems(obj: Any) -> list[str]:
    """What an encoder class lacks of :data:`ENCODER_METHODS` (empty: nothing)."""
    return protocol_problems(obj, ENCODER_METHODS)
