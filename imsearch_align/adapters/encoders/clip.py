"""CLIP through ``transformers`` for both modalities: the jointly trained baseline.

Image and text providers built for the same model, device and precision
share one loaded model (a small module-level cache), so a CLIP experiment
loads the weights once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from imsearch_align.adapters.encoders._common import (
    as_items,
    batches,
    check_fp16,
    import_optional,
    l2_normalize,
    load_image,
    load_or_explain,
    local_fingerprint,
    resolve_device,
)

__all__ = ["DEFAULT_CLIP_MODEL", "CLIPEncoder"]

DEFAULT_CLIP_MODEL = "openai/clip-vit-base-patch32"

_LOADED: dict[tuple[str, str, bool], tuple[Any, Any]] = {}


def _features(x: Any) -> Any:
    # transformers >= 5 returns a ModelOutput whose pooler_output is the
    # projected embedding; older versions return the tensor itself.
    return x if not hasattr(x, "pooler_output") else x.pooler_output


class CLIPEncoder:
    """One modality of a CLIP model (``get_image_features`` / ``get_text_features``).

    Args:
        model: Hub name or local folder with the model and its processor
            (tokenizer + image processor).
        modality: ``"image"`` or ``"text"``.
        device: None picks CUDA when present.
        normalize: L2-normalise rows (CLIP's similarity is cosine).
        fp16: half precision (GPU only).
    """

    def __init__(
        self,
        model: str = DEFAULT_CLIP_MODEL,
        *,
        modality: str = "image",
        device: str | None = None,
        normalize: bool = True,
        fp16: bool = False,
    ) -> None:
        self.model = model
        self.modality = modality
        self.device = device
        self.normalize = normalize
        self.fp16 = fp16
        self._state: tuple[Any, Any, str] | None = None

    def _load(self) -> tuple[Any, Any, str]:
        if self._state is not None:
            return self._state
        if self.modality not in ("image", "text"):
            raise ValueError(f"modality must be 'image' or 'text', got {self.modality!r}")
        tf = import_optional("transformers", "the CLIP encoder")
        self._torch = import_optional("torch", "the CLIP encoder")
        device = resolve_device(self.device)
        fp16 = check_fp16(self.fp16, device)
        key = (self.model, device, fp16)
        if key not in _LOADED:

            def loader(target: str) -> tuple[Any, Any]:
                return tf.AutoModel.from_pretrained(target), tf.AutoProcessor.from_pretrained(
                    target
                )

            net, proc = load_or_explain(self.model, {}, loader)
            if not hasattr(net, "get_image_features") or not hasattr(net, "get_text_features"):
                raise ValueError(
                    f"model {self.model!r} ({type(net).__name__}) is not a CLIP-style dual encoder "
                    "(no get_image_features/get_text_features); use 'hf-image' for image-only models"
                )
            net = net.to(device).eval()
            if fp16:
                net = net.half()
            _LOADED[key] = (net, proc)
        net, proc = _LOADED[key]
        self._state = (net, proc, device)
        return self._state

    @property
    def id(self) -> str:
        """Provider, model, version and modality (cache key)."""
        version = local_fingerprint(self.model) if os.path.exists(self.model) else "hub"
        return (
            f"clip:{self.model}@{version}:{self.modality}"
            f"{':fp16' if self.fp16 else ''}{':l2' if self.normalize else ''}"
        )

    @property
    def dim(self) -> int:
        """Output dimension (the shared projection size)."""
        net, _, _ = self._load()
        return int(net.config.projection_dim)

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        """Encode images (paths/bytes/PIL) or captions into ``(len(items), dim)`` float32."""
        items = as_items(items)
        net, proc, device = self._load()
        torch = self._torch
        if self.modality == "text":
            bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
            if bad:
                raise TypeError(
                    f"text items must be strings, got {type(items[bad[0]]).__name__} at position {bad[0]}"
                )
        out = np.empty((len(items), self.dim), np.float32)
        dtype = next(net.parameters()).dtype
        for sl in batches(len(items), batch_size, progress=progress, desc=f"clip {self.modality}"):
            with torch.inference_mode():
                if self.modality == "image":
                    imgs = [load_image(it) for it in items[sl]]
                    pix = proc(images=imgs, return_tensors="pt")["pixel_values"]
                    feats = _features(
                        net.get_image_features(pixel_values=pix.to(device=device, dtype=dtype))
                    )
                else:
                    tok = proc(
                        text=list(items[sl]), return_tensors="pt", padding=True, truncation=True
                    )
                    tok = {k: v.to(device) for k, v in tok.items()}
                    feats = _features(net.get_text_features(**tok))
            out[sl] = feats.float().cpu().numpy()
        return l2_normalize(out) if self.normalize else out

    def __repr__(self) -> str:
        return f"CLIPEncoder(model={self.model!r}, modality={self.modality!r})"
