"""Embeddings of a dataset (:func:`embed`) or of any texts (:func:`embed_texts`), cached.

``embed(dataset, provider, "image")`` feeds the provider the dataset's items
(image paths or bytes; captions) in id order, or the ids themselves for an
:class:`~imsearch_align.framework.interfaces.IdLookupProvider` (precomputed
embeddings), and caches the result when ``cache_dir`` is given.
``embed_texts(provider, prompts, namespace="imagenet-prompts")`` does the same
for a list of texts that belongs to no dataset (class prompts).

Cache keys name the provider by :func:`provider_key`: its ``id`` plus, for a
:class:`~imsearch_align.framework.interfaces.VersionedProvider`, its
``version`` (the weights' fingerprint), so new weights never reuse old vectors.

All-zero output rows are reported with
:class:`~imsearch_align.datasets.ZeroEmbeddingWarning` (count and example
ids): such an item scores 0 against everything. When every row is zero the
scores would carry no information, and ValueError is raised.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.cache import CacheKey, EmbeddingCache
from imsearch_align.datasets.base import PairedDataset
from imsearch_align.datasets.errors import ZeroEmbeddingWarning
from imsearch_align.datasets.vectors import check_zero_rows
from imsearch_align.framework.interfaces import IdLookupProvider, VersionedProvider
from imsearch_align.framework.validation import check_matrix

__all__ = [
    "ZeroEmbeddingWarning",
    "check_zero_rows",
    "embed",
    "embed_texts",
    "items_for",
    "provider_key",
    "texts_sha256",
]


def provider_key(provider: Any) -> str:
    """The provider part of a cache key: ``id``, plus ``@version`` for a VersionedProvider."""
    # Not isinstance(provider, EmbeddingProvider): on Python < 3.12 that evaluates
    # the ``dim`` property, which loads a model even when the cache would hit.
    if not all(hasattr(provider, a) for a in ("id", "modality", "encode")):
        raise TypeError(
            f"provider must be an EmbeddingProvider (id, modality, dim, encode), "
            f"got {type(provider).__name__}"
        )
    key = str(provider.id)
    if isinstance(provider, VersionedProvider) and provider.version:
        key += f"@{provider.version}"
    return key


def _by_id(provider: Any) -> bool:
    return isinstance(provider, IdLookupProvider) and bool(provider.lookup_by_id)


def _rows(dataset: PairedDataset, modality: str, ids: Any) -> pd.DataFrame:
    if modality not in ("image", "text"):
        raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
    df, col = (dataset.images, "image_id") if modality == "image" else (dataset.texts, "text_id")
    if ids is None:
        return df
    req = np.asarray(ids)
    if req.ndim != 1 or (req.size and req.dtype.kind not in "iu"):
        raise TypeError(
            f"ids must be a 1-D array of integer {col}s, got shape {req.shape} dtype {req.dtype}"
        )
    pos = pd.Index(df[col]).get_indexer(req.astype(np.int64))
    if (pos < 0).any():
        bad = req[pos < 0]
        raise KeyError(
            f"ids: {len(bad)} {col}(s) not in dataset {dataset.name!r}, e.g. {bad[:5].tolist()}"
        )
    return df.iloc[pos]


def items_for(dataset: PairedDataset, modality: str, rows: pd.DataFrame) -> list[Any]:
    """The raw items of ``rows``: captions, or image paths / bytes."""
    if modality == "text":
        caps = rows["caption"].tolist()
        bad = [i for i, c in enumerate(caps) if not isinstance(c, str)]
        if bad:
            raise ValueError(
                f"dataset {dataset.name!r} has no caption text for text_id "
                f"{int(rows['text_id'].iloc[bad[0]])} (embedding-only data?); use a precomputed provider"
            )
        return caps
    if "bytes" in rows.columns and "path" in rows.columns:
        # Mixed sources (e.g. a Hub dataset): bytes where present, else the path.
        return [
            b if isinstance(b, bytes | bytearray) else p
            for b, p in zip(rows["bytes"], rows["path"])
        ]
    for col in ("path", "bytes"):
        if col in rows.columns:
            return rows[col].tolist()
    raise ValueError(
        f"dataset {dataset.name!r} has no image path or bytes column (embedding-only data?); "
        "use a precomputed provider"
    )


def _inputs_hash(modality: str, ids: np.ndarray, items: list[Any] | None) -> str:
    h = hashlib.sha256(f"{modality};".encode())
    h.update(np.ascontiguousarray(ids, dtype=np.int64).tobytes())
    for it in items or ():
        if isinstance(it, str) and modality == "image":
            # A path is identified by name, size and modification time: a
            # replaced file invalidates its entry without hashing every image.
            try:
                st = os.stat(it)
                h.update(f"p:{it}:{st.st_size}:{st.st_mtime_ns};".encode())
            except OSError:
                h.update(f"p:{it}:missing;".encode())
        elif isinstance(it, bytes | bytearray | memoryview):
            h.update(b"b:" + hashlib.sha256(bytes(it)).digest())
        else:
            h.update(f"t:{len(str(it))}:{it};".encode())
    return h.hexdigest()


def _split_label(rows: pd.DataFrame, n_total: int) -> str:
    if len(rows) == n_total:
        return "all"
    splits = sorted(set(rows["split"].astype(str))) if "split" in rows.columns else []
    return "+".join(splits) or "none"


def _cached(
    cache_dir: str | os.PathLike | None,
    key: Callable[[], CacheKey],
    compute: Callable[[], np.ndarray],
) -> np.ndarray:
    """``compute()``, through the cache in ``cache_dir`` under ``key()`` when one is given
    (the key is only made then: it may hash every input)."""
    if cache_dir is None:
        return compute()
    return EmbeddingCache(cache_dir).get_or_compute(key(), compute)


def embed(
    dataset: PairedDataset,
    provider: Any,
    modality: str,
    *,
    ids: Any = None,
    cache_dir: str | os.PathLike | None = None,
    batch_size: int = 32,
    progress: bool = True,
) -> np.ndarray:
    """Embed one modality of ``dataset`` with ``provider``; rows follow ``ids``.

    Args:
        dataset: the data.
        provider: an ``EmbeddingProvider`` of the same ``modality``.
        modality: ``"image"`` (rows of ``dataset.images``) or ``"text"``
            (rows of ``dataset.texts``).
        ids: ``image_id`` s or ``text_id`` s to embed, in the wanted row
            order; default every row in table order.
        cache_dir: folder of the embedding cache; None disables caching.
        batch_size: items per forward pass.
        progress: show a tqdm bar on long work.

    Returns:
        ``(len(ids), provider.dim)`` float32, row ``i`` for ``ids[i]``.
    """
    if not isinstance(dataset, PairedDataset):
        raise TypeError(f"dataset must be a PairedDataset, got {type(dataset).__name__}")
    if modality not in ("image", "text"):
        raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
    pkey = provider_key(provider)
    if provider.modality != modality:
        raise ValueError(
            f"provider {provider!r} encodes {provider.modality!r}, but modality={modality!r} "
            "was asked for"
        )
    rows = _rows(dataset, modality, ids)
    col = "image_id" if modality == "image" else "text_id"
    row_ids = rows[col].to_numpy(dtype=np.int64)
    by_id = _by_id(provider)
    items: list[Any] = row_ids.tolist() if by_id else items_for(dataset, modality, rows)

    def compute() -> np.ndarray:
        out = provider.encode(items, batch_size=batch_size, progress=progress)
        out = check_matrix(out, f"{type(provider).__name__}.encode output", min_rows=len(items))
        if out.shape[0] != len(items):
            raise ValueError(f"provider returned {out.shape[0]} rows for {len(items)} items")
        return out

    def key() -> CacheKey:
        n_total = len(dataset.images) if modality == "image" else len(dataset.texts)
        return CacheKey(
            provider_id=pkey,
            dataset_id=dataset.name,
            modality=modality,
            split=_split_label(rows, n_total),
            inputs_sha256=_inputs_hash(modality, row_ids, None if by_id else items),
        )

    out = _cached(cache_dir, key, compute)
    check_zero_rows(out, row_ids, f"{modality} embeddings of dataset {dataset.name!r} by {pkey}")
    return out


def texts_sha256(texts: list[str]) -> str:
    """SHA-256 of a list of texts, in order (length-prefixed UTF-8: no two lists collide)."""
    h = hashlib.sha256(b"texts;")
    for t in texts:
        b = t.encode("utf-8", "surrogatepass")
        h.update(b"%d:" % len(b) + b)
    return h.hexdigest()


def embed_texts(
    provider: Any,
    texts: Any,
    *,
    cache_dir: str | os.PathLike | None = None,
    batch_size: int = 32,
    progress: bool = True,
    namespace: str = "texts",
) -> np.ndarray:
    """Encode arbitrary texts (class prompts, queries) with ``provider``, cached like :func:`embed`.

    Args:
        provider: a text ``EmbeddingProvider`` that encodes text (not an
            id-lookup provider of precomputed vectors).
        texts: a list of non-empty strings; row ``i`` of the result is ``texts[i]``.
        cache_dir: folder of the embedding cache; None disables caching.
        batch_size: items per forward pass.
        progress: show a tqdm bar on long work.
        namespace: names the cache entry's dataset part (e.g.
            ``"imagenet-prompts"``); the key also holds :func:`provider_key`
            and :func:`texts_sha256` of ``texts``, so other texts or other
            weights never share an entry.

    Returns:
        ``(len(texts), provider.dim)`` float32.
    """
    pkey = provider_key(provider)
    if provider.modality != "text":
        raise ValueError(f"provider {provider!r} encodes {provider.modality!r}, not text")
    if _by_id(provider):
        raise TypeError(
            f"provider {pkey} serves precomputed vectors by id and cannot encode new text; "
            "name a text encoder"
        )
    if isinstance(texts, str) or not isinstance(texts, list | tuple):
        raise TypeError(f"texts must be a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str) or not t.strip()]
    if bad:
        raise ValueError(
            f"texts must be non-empty strings; item {bad[0]} is {texts[bad[0]]!r}"
            + (f" ({len(bad) - 1} more)" if len(bad) > 1 else "")
        )
    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"namespace must be a non-empty string, got {namespace!r}")

    def compute() -> np.ndarray:
        out = provider.encode(texts, batch_size=batch_size, progress=progress)
        out = check_matrix(out, f"{type(provider).__name__}.encode output")
        if out.shape[0] != len(texts):
            raise ValueError(f"provider returned {out.shape[0]} rows for {len(texts)} texts")
        return out

    def key() -> CacheKey:
        return CacheKey(
            provider_id=pkey,
            dataset_id=namespace,
            modality="text",
            split="texts",
            inputs_sha256=texts_sha256(texts),
        )

    out = _cached(cache_dir, key, compute)
    check_zero_rows(out, None, f"text embeddings of {namespace!r} by {pkey}")
    return out
