"""CLIP through ``transformers`` for both modalities: the jointly trained baseline.

Image and text providers built for the same model, device and precision
share one loaded model (a small module-level cache), so a CLIP experiment
loads the weights once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imsearch_align.adapters.encoders._base import TorchEncoder
from imsearch_align.adapters.encoders._common import load_image, load_or_explain
from imsearch_align.framework.registry import ENCODERS

__all__ = ["DEFAULT_CLIP_MODEL", "CLIPEncoder"]

DEFAULT_CLIP_MODEL = "openai/clip-vit-base-patch32"

_LOADED: dict[tuple[str, str, bool], tuple[Any, Any]] = {}


def _features(x: Any) -> Any:
    # transformers >= 5 returns a ModelOutput whose pooler_output is the
    # projected embedding; older versions return the tensor itself.
    return x if not hasattr(x, "pooler_output") else x.pooler_output


@ENCODERS.register("clip")
class CLIPEncoder(TorchEncoder):
    """One modality of a CLIP model (``get_image_features`` / ``get_text_features``).

    Args:
        model: Hub name or local folder with the model and its processor
            (tokenizer + image processor).
        modality: ``"image"`` or ``"text"``.
        device: None picks CUDA when present.
        normalize: L2-normalise rows (CLIP's similarity is cosine).
        fp16: half precision (GPU only).
    """

    kind = "clip"
    requires = ("torch", "transformers")
    id_options = ("modality",)

    def __init__(
        self,
        model: str = DEFAULT_CLIP_MODEL,
        *,
        modality: str = "image",
        device: str | None = None,
        normalize: bool = True,
        fp16: bool = False,
    ) -> None:
        super().__init__(device=device, normalize=normalize, fp16=fp16)
        self.model = model
        self.modality = modality

    def _build(self, device: str, fp16: bool) -> Any:
        if self.modality not in ("image", "text"):
            raise ValueError(f"modality must be 'image' or 'text', got {self.modality!r}")
        key = (self.model, device, fp16)
        if key not in _LOADED:
            import transformers as tf

            net, proc = load_or_explain(
                self.model,
                {},
                lambda t: (tf.AutoModel.from_pretrained(t), tf.AutoProcessor.from_pretrained(t)),
            )
            if not hasattr(net, "get_image_features") or not hasattr(net, "get_text_features"):
                raise ValueError(
                    f"model {self.model!r} ({type(net).__name__}) is not a CLIP-style dual encoder "
                    "(no get_image_features/get_text_features); use 'hf-image' for image-only models"
                )
            net = net.to(device).eval()
            _LOADED[key] = ((net.half() if fp16 else net), proc)
        return _LOADED[key]

    def _dim(self, state: Any) -> int:
        return int(state[0].config.projection_dim)

    def _encode_batch(self, state: Any, items: Sequence[Any]) -> Any:
        net, proc = state
        if self.modality == "image":
            dtype = next(net.parameters()).dtype
            pix = proc(images=[load_image(it) for it in items], return_tensors="pt")["pixel_values"]
            return _features(
                net.get_image_features(pixel_values=pix.to(device=self._device, dtype=dtype))
            )
        tok = proc(text=list(items), return_tensors="pt", padding=True, truncation=True)
        return _features(net.get_text_features(**{k: v.to(self._device) for k, v in tok.items()}))
