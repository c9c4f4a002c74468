"""Image encoders through ``transformers`` ``AutoModel`` + ``AutoImageProcessor`` (DINOv2, ViT, ...).

Pooling of ``last_hidden_state``:

* ``"cls"``: the first token (DINOv2's and ViT's image representation);
* ``"mean"``: the mean over patch tokens, i.e. every token after the CLS
  token and any register tokens (``config.num_register_tokens``);
* ``"pooler"``: the model's own ``pooler_output``.
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

__all__ = ["POOLINGS", "HFImageEncoder"]

POOLINGS = ("cls", "mean", "pooler")


class HFImageEncoder:
    """Images -> vectors with a Hugging Face vision backbone.

    Args:
        model: Hub name (e.g. ``"facebook/dinov2-small"``) or local folder
            holding the model and its image processor.
        pooling: ``"cls"``, ``"mean"`` or ``"pooler"`` (see module docstring).
        device: None picks CUDA when present.
        normalize: L2-normalise the output rows.
        fp16: half precision (GPU only).
    """

    modality = "image"

    def __init__(
        self,
        model: str = "facebook/dinov2-small",
        *,
        pooling: str = "cls",
        device: str | None = None,
        normalize: bool = True,
        fp16: bool = False,
    ) -> None:
        self.model = model
        self.pooling = pooling
        self.device = device
        self.normalize = normalize
        self.fp16 = fp16
        self._state: tuple[Any, Any, str] | None = None
        self._id: str | None = None

    def _load(self) -> tuple[Any, Any, str]:
        if self._state is not None:
            return self._state
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {list(POOLINGS)}, got {self.pooling!r}")
        tf = import_optional("transformers", "the Hugging Face image encoder")
        torch = import_optional("torch", "the Hugging Face image encoder")
        device = resolve_device(self.device)
        fp16 = check_fp16(self.fp16, device)

        def loader(target: str) -> tuple[Any, Any]:
            return tf.AutoModel.from_pretrained(target), tf.AutoImageProcessor.from_pretrained(
                target
            )

        net, proc = load_or_explain(self.model, {}, loader)
        net = net.to(device).eval()
        if fp16:
            net = net.half()
        version = local_fingerprint(self.model) if os.path.exists(self.model) else "hub"
        self._id = (
            f"hf-image:{self.model}@{version}:{self.pooling}"
            f"{':fp16' if fp16 else ''}{':l2' if self.normalize else ''}"
        )
        self._torch = torch
        self._state = (net, proc, device)
        return self._state

    @property
    def id(self) -> str:
        """Provider, model, version and pooling (cache key)."""
        self._load()
        return str(self._id)

    @property
    def dim(self) -> int:
        """Output dimension (the backbone's hidden size)."""
        net, _, _ = self._load()
        return int(net.config.hidden_size)

    def _pool(self, out: Any, net: Any) -> Any:
        if self.pooling == "pooler":
            if getattr(out, "pooler_output", None) is None:
                raise ValueError(
                    f"pooling='pooler' but model {self.model!r} returns no pooler_output; "
                    "use pooling='cls' or 'mean'"
                )
            return out.pooler_output
        h = out.last_hidden_state
        if self.pooling == "cls":
            return h[:, 0]
        prefix = 1 + int(getattr(net.config, "num_register_tokens", 0) or 0)
        return h[:, prefix:].mean(dim=1)

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        """Encode images (paths, bytes or PIL images) into ``(len(items), dim)`` float32."""
        items = as_items(items)
        net, proc, device = self._load()
        torch = self._torch
        out = np.empty((len(items), self.dim), np.float32)
        dtype = next(net.parameters()).dtype
        for sl in batches(len(items), batch_size, progress=progress, desc=f"hf-image {self.model}"):
            imgs = [load_image(it) for it in items[sl]]
            pix = proc(images=imgs, return_tensors="pt")["pixel_values"].to(
                device=device, dtype=dtype
            )
            with torch.inference_mode():
                feats = self._pool(net(pixel_values=pix), net)
            out[sl] = feats.float().cpu().numpy()
        return l2_normalize(out) if self.normalize else out

    def __repr__(self) -> str:
        return f"HFImageEncoder(model={self.model!r}, pooling={self.pooling!r})"
