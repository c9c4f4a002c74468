"""Image encoders through ``transformers`` ``AutoModel`` + ``AutoImageProcessor`` (DINOv2, ViT, ...).

Pooling of ``last_hidden_state``:

* ``"cls"``: the first token (DINOv2's and ViT's image representation);
* ``"mean"``: the mean over patch tokens, i.e. every token after the CLS
  token and any register tokens (``config.num_register_tokens``);
* ``"pooler"``: the model's own ``pooler_output``.

Which tokens are special is read from the output, not assumed: with
``config.patch_size`` the patch tokens number ``(H / p) * (W / p)`` for the
processed pixels, and the tokens before them (beyond the registers) are the
CLS (and, in DeiT, distillation) tokens. A backbone without them (Swin,
whose tokens are merged patches) is refused for ``"cls"`` (its first token
is a patch) and mean-pooled over all its tokens; one that returns a feature
map (ConvNeXt, ResNet) takes ``"pooler"`` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imsearch_align.adapters.encoders._base import TorchEncoder
from imsearch_align.adapters.encoders._common import load_image, load_or_explain
from imsearch_align.framework.registry import ENCODERS

__all__ = ["POOLINGS", "HFImageEncoder"]

POOLINGS = ("cls", "mean", "pooler")


@ENCODERS.register("hf-image")
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
    id_options = ("pooling",)

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

    def _pool(self, out: Any, net: Any, pixel_shape: Sequence[int] = ()) -> Any:
        if self.pooling == "pooler":
            if getattr(out, "pooler_output", None) is None:
                raise ValueError(
                    f"pooling='pooler' but model {self.model!r} returns no pooler_output; "
                    "use pooling='cls' or 'mean'"
                )
            return out.pooler_output.reshape(out.pooler_output.shape[0], -1)
        h = out.last_hidden_state
        if h.ndim != 3:
            raise ValueError(
                f"pooling={self.pooling!r} but model {self.model!r} returns a feature map "
                f"{tuple(h.shape)}, not tokens; use pooling='pooler'"
            )
        special = _special_tokens(h.shape[1], net.config, pixel_shape)
        registers = int(getattr(net.config, "num_register_tokens", 0) or 0)
        if self.pooling == "cls":
            if not special:
                raise ValueError(
                    f"pooling='cls' but model {self.model!r} ({net.config.model_type}) has no "
                    "CLS token: its first token is a patch; use pooling='mean' or 'pooler'"
                )
            return h[:, 0]
        return h[:, special + registers if special else 0 :].mean(dim=1)

    def _encode_batch(self, state: Any, items: Sequence[Any]) -> Any:
        net, proc = state
        dtype = next(net.parameters()).dtype
        imgs = [load_image(it) for it in items]
        pix = proc(images=imgs, return_tensors="pt")["pixel_values"]
        out = net(pixel_values=pix.to(device=self._device, dtype=dtype))
        return self._pool(out, net, tuple(pix.shape))


def _special_tokens(n_tokens: int, config: Any, pixel_shape: Sequence[int]) -> int:
    """CLS-like tokens before the registers and patches (0: none, the tokens are
    patches or merged patches). Counted from the processed pixels and
    ``config.patch_size``; a layout that does not add up has none."""
    ps = getattr(config, "patch_size", None)
    if isinstance(ps, list | tuple):
        ps = ps[0]
    if not ps or len(pixel_shape) != 4:
        return 0
    patches = (int(pixel_shape[2]) // int(ps)) * (int(pixel_shape[3]) // int(ps))
    registers = int(getattr(config, "num_register_tokens", 0) or 0)
    extra = n_tokens - patches - registers
    return extra if 0 < extra <= 2 else 0
