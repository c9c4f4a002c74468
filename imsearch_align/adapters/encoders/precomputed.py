"""Precomputed embeddings as an :class:`EmbeddingProvider` that looks vectors up by id.

Items passed to :meth:`PrecomputedEmbeddings.encode` are ids (``image_id`` or
``text_id``), not images or captions: :func:`imsearch_align.embedding.embed`
knows this from ``lookup_by_id = True``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.validation import array_buffer, check_ids, check_matrix

__all__ = ["PrecomputedEmbeddings"]


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
            from imsearch_align.adapters.encoders._common import l2_normalize

            out = l2_normalize(out)
        return np.ascontiguousarray(out, dtype=np.float32)

    def __repr__(self) -> str:
        return f"PrecomputedEmbeddings(id={self.id!r}, modality={self.modality!r}, n={len(self)}, dim={self.dim})"
