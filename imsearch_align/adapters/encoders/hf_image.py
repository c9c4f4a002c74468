"""Image encoders through ``transformers`` ``AutoModel`` + ``AutoImageProcessor`` (DINOv2, ViT, ...).

Pooling of ``last_hidden_state``:

* ``"cls"``: the first token (DINOv2's and ViT's image representation);
* ``"mean"``: the mean over patch tokens, i.e. every token after the CLS
  token and any register tokens (``config.num_register_tokens``);
* ``"pooler"``: the model's own ``pooler_output``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imsearch_align.adapters.encoders._base import TorchEncoder
from imsearch_align.adapters.encoders._common import load_image, load_or_explain

__all__ = ["POOLINGS", "HFImageEncoder"]

POOLINGS = ("cls", "mean", "pooler")


class HFImageEncoder(TorchEncoder):
    """Images -> vectors with a Hugging Face vision backbone.

    Args:
        model: Hub name (e.g. ``"facebook/dinov2-small"``) or local folder
            holding the model and its image processor.
        pooling: ``"cls"``, ``"mean"`` or ``"pooler"`` (see module docstring).
        device: None picks CUDA when present.
        normalize: L2-normalise the output rows.
        fp16: half precision (GPU only).
    """

    kind = "hf-image"
    requires = ("torch", "transformers")
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
        super().__init__(device=device, normalize=normalize, fp16=fp16)
        self.model = model
        self.pooling = pooling

    def _options(self) -> str:
        return f":{self.pooling}"

    def _build(self, device: str, fp16: bool) -> Any:
        if self.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {list(POOLINGS)}, got {self.pooling!r}")
        import transformers as tf

        net, proc = load_or_explain(
            self.model,
            {},
            lambda t: (tf.AutoModel.from_pretrained(t), tf.AutoImageProcessor.from_pretrained(t)),
        )
        net = net.to(device).eval()
        return (net.half() if fp16 else net), proc

    def _dim(self, state: Any) -> int:
        return int(state[0].config.hidden_size)

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

    def _encode_batch(self, state: Any, items: Sequence[Any]) -> Any:
        net, proc = state
        dtype = next(net.parameters()).dtype
        imgs = [load_image(it) for it in items]
        pix = proc(images=imgs, return_tensors="pt")["pixel_values"]
        return self._pool(net(pixel_values=pix.to(device=self._device, dtype=dtype)), net)
