"""Precomputed embeddings as an :class:`EmbeddingProvider` that looks vectors up by id.

Items passed to :meth:`PrecomputedEmbeddings.encode` are ids (``image_id`` or
``text_id``), not images or captions: :func:`imsearch_align.embedding.embed`
knows this from ``lookup_by_id = True``.

Vectors held in memory are data, not a model: the loaders that return them
(``precomputed``, ``synthetic``, :meth:`PairedDataset.from_arrays
<imsearch_align.datasets.base.PairedDataset.from_arrays>`) build this provider,
and the encoder registry serves it as ``precomputed``. :func:`l2_normalize` is
the one row normalisation of providers (the torch encoders use it too).
:func:`check_zero_rows` reports embedding rows that are all zeros. Nothing
here imports another module of ``imsearch_align.datasets`` but its errors.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets.errors import ZeroEmbeddingWarning
from imsearch_align.framework.validation import array_buffer, check_ids, check_matrix

__all__ = ["PrecomputedEmbeddings", "check_zero_rows", "l2_normalize"]


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm (zero rows stay zero), float32."""
    x = np.asarray(x, dtype=np.float32)
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return np.divide(x, n, out=np.zeros_like(x), where=n > 0)


class PrecomputedEmbeddings:
    """Vectors keyed by int64 id, served through the provider interface.

    Args:
        ids: ``(n,)`` unique non-negative int ids, one per row of ``vectors``.
        vectors: ``(n, d)`` embeddings.
        modality: ``"image"`` or ``"text"``.
        name: provider name; the ``id`` (cache key) is ``precomputed:<name>:<hash>``
            where the hash covers ids and vector bytes, so two different arrays
            never share a cache entry.
        normalize: L2-normalise rows on the way out.
    """

    #: embed() passes ids, not raw items, to encode().
    lookup_by_id = True

    def __init__(
        self,
        ids: Any,
        vectors: Any,
        *,
        modality: str,
        name: str = "array",
        normalize: bool = False,
    ) -> None:
        if modality not in ("image", "text"):
            raise ValueError(f"modality must be 'image' or 'text', got {modality!r}")
        self._vectors = check_matrix(vectors, "vectors", min_rows=0)
        self._ids = check_ids(ids, "ids", n=self._vectors.shape[0])
        # A hash index over the ids (numpy-backed): no Python dict of every id.
        self._row = pd.Index(self._ids)
        self.modality = modality
        self.name = name
        self.normalize = bool(normalize)
        h = hashlib.sha256(self._ids.tobytes())
        h.update(array_buffer(self._vectors))
        self.id = f"precomputed:{name}:{h.hexdigest()[:16]}{':l2' if normalize else ''}"

    @property
    def dim(self) -> int:
        """Embedding dimension."""
        return int(self._vectors.shape[1])

    @property
    def ids(self) -> np.ndarray:
        """The ids held, in row order (read-only view)."""
        v = self._ids.view()
        v.setflags(write=False)
        return v

    def __len__(self) -> int:
        return int(self._vectors.shape[0])

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        """Rows for the ids in ``items``, in that order; unknown ids raise KeyError.

        ``batch_size`` and ``progress`` exist for interface compatibility (a
        lookup needs neither).
        """
        req = np.asarray(items)
        if req.ndim != 1 or (req.size and req.dtype.kind not in "iu"):
            raise TypeError(
                f"PrecomputedEmbeddings.encode: items must be a 1-D sequence of integer ids, "
                f"got shape {req.shape} dtype {req.dtype}"
            )
        pos = self._row.get_indexer(req.astype(np.int64, copy=False)) if req.size else req
        missing = req[pos < 0].tolist() if req.size else []
        if missing:
            raise KeyError(
                f"PrecomputedEmbeddings {self.name!r}: {len(missing)} requested id(s) have no "
                f"embedding, e.g. {missing[:5]}; held ids span [{int(self._ids.min()) if len(self) else '-'}, "
                f"{int(self._ids.max()) if len(self) else '-'}]"
            )
        out = self._vectors[pos] if req.size else np.empty((0, self.dim), np.float32)
        if self.normalize:
            out = l2_normalize(out)
        return np.ascontiguousarray(out, dtype=np.float32)

    def __repr__(self) -> str:
        return f"PrecomputedEmbeddings(id={self.id!r}, modality={self.modality!r}, n={len(self)}, dim={self.dim})"


def check_zero_rows(arr: Any, ids: Any, what: str, *, stacklevel: int = 3) -> int:
    """Warn about all-zero rows of ``arr`` (count and example ids); return their count.

    A zero row has no direction: its inner product and cosine with every
    vector are 0, so the item can never be found nor find anything. A few
    (blank images, empty strings an encoder maps to 0) are reported with
    :class:`ZeroEmbeddingWarning`; when *every* row is zero the scores carry
    no information at all and ValueError is raised instead.
    """
    a = np.asarray(arr)
    if a.ndim != 2 or a.shape[0] == 0:
        return 0
    zero = ~np.any(a != 0, axis=1)
    n = int(zero.sum())
    if n == 0:
        return 0
    ex = (
        f"ids {np.asarray(ids)[zero][:5].tolist()}"
        if ids is not None
        else f"rows {np.flatnonzero(zero)[:5].tolist()}"
    )
    if n == a.shape[0]:
        raise ValueError(
            f"{what}: all {n} embedding rows are zero vectors, so every score would be 0; "
            "check the embeddings file or the encoder's input"
        )
    warnings.warn(
        f"{what}: {n} of {a.shape[0]} embedding rows are all zeros (they score 0 against "
        f"everything and cannot be retrieved), e.g. {ex}",
        ZeroEmbeddingWarning,
        stacklevel=stacklevel,
    )
    return n
