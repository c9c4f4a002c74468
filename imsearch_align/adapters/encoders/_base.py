"""The one base of the torch encoders: lazy loading, device, fp16, batching, progress, identity.

A subclass says how to build its model (:meth:`TorchEncoder._build`), how
to encode one batch (:meth:`TorchEncoder._encode_batch`), its output size
(:meth:`TorchEncoder._dim`) and what identifies it (``kind``, ``model``, ``id_options`` or
:meth:`TorchEncoder._options`, :meth:`TorchEncoder._weights_path`). The
base does the rest, in one place:

* nothing heavy is imported or loaded until the first ``dim`` or
  ``encode``; a missing package raises ImportError with the
  ``pip install 'imsearch-align[extra]'`` line (``requires``);
* ``device=None`` picks CUDA when present; ``fp16`` needs CUDA;
* ``encode`` checks the items, splits them into ``batch_size`` batches with
  a progress bar, runs them under ``torch.inference_mode``, returns float32
  rows, L2-normalised when ``normalize``;
* ``id`` (what the encoder computes: kind, model, options) and ``version``
  (which weights: a fingerprint of a local folder's files, the Hub snapshot
  revision found in the local Hub cache, else ``"hub"``) are known without
  loading anything, so a cache hit never loads a model. Together they are
  the provider part of embedding cache keys
  (:func:`imsearch_align.embedding.provider_key`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from imsearch_align.adapters.encoders._common import (
    as_items,
    batches,
    check_fp16,
    import_optional,
    l2_normalize,
    local_fingerprint,
    resolve_device,
)

__all__ = ["TorchEncoder", "hub_revision", "weights_version"]


def hub_revision(name: str, *, files: Sequence[str] = ("config.json",)) -> str | None:
    """The commit of ``name``'s snapshot in the local Hub cache, or None (offline, no network).

    Reads only the local cache (``try_to_load_from_cache``), never the network.
    """
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for f in files:
        try:
            p = try_to_load_from_cache(name, f)
        except Exception:  # an invalid repo id, a broken cache: no revision known
            return None
        if isinstance(p, str):
            return Path(p).parent.name  # .../snapshots/<commit>/<file>
    return None


def weights_version(path_or_name: str, *, hub_names: Sequence[str] = ()) -> str:
    """``"local-<fingerprint>"`` for a local file/folder, ``"rev-<commit>"`` for a
    cached Hub snapshot (``hub_names`` tried in order), else ``"hub"``."""
    if os.path.exists(path_or_name):
        return f"local-{local_fingerprint(path_or_name)}"
    for n in hub_names or (path_or_name,):
        rev = hub_revision(n)
        if rev:
            return f"rev-{rev[:12]}"
    return "hub"


class TorchEncoder:
    """Base of the torch encoders (see the module docstring for what it provides).

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``...; None picks CUDA when present.
        normalize: L2-normalise the output rows.
        fp16: half precision (GPU only).
    """

    #: Registry name, the first part of ``id``.
    kind: ClassVar[str] = "torch"
    #: Modules imported at load (each raises ImportError with its install line).
    requires: ClassVar[tuple[str, ...]] = ("torch",)
    #: ``"image"`` or ``"text"`` (CLIP sets it per instance).
    modality: str = "image"
    #: What the model is (a Hub name or a path); part of ``id``.
    model: str = ""
    #: Attributes that change the output, each appended to ``id`` as ``:<value>``.
    id_options: ClassVar[tuple[str, ...]] = ()

    def __init__(
        self, *, device: str | None = None, normalize: bool = True, fp16: bool = False
    ) -> None:
        self.device = device
        self.normalize = bool(normalize)
        self.fp16 = bool(fp16)
        self._state: Any = None
        self._device: str | None = None
        self._version: str | None = None

    # ------------------------------------------------------------ subclass hooks
    def _build(self, device: str, fp16: bool) -> Any:
        """Load the model (and processor) onto ``device``; return what encoding needs."""
        raise NotImplementedError

    def _encode_batch(self, state: Any, items: Sequence[Any]) -> Any:
        """Encode one batch into a ``(len(items), dim)`` torch tensor or array."""
        raise NotImplementedError

    def _dim(self, state: Any) -> int:
        """Output dimension of the loaded model."""
        raise NotImplementedError

    def _options(self) -> str:
        """Suffix of ``id`` for options that change the output (e.g. ``":cls"``):
        by default one ``:<value>`` per attribute named in ``id_options``."""
        return "".join(f":{getattr(self, name)}" for name in self.id_options)

    def _weights_path(self) -> str:
        """What ``version`` fingerprints: a local path, or a Hub name."""
        return self.model

    def _hub_names(self) -> tuple[str, ...]:
        """Hub names under which the weights may be cached (for ``version``)."""
        return (self.model,)

    def _encode_all(
        self, state: Any, items: Sequence[Any], batch_size: int, progress: bool
    ) -> np.ndarray:
        """All items, batch by batch; a subclass whose library batches itself overrides it."""
        torch = self._torch
        out = np.empty((len(items), self._dim(state)), np.float32)
        for sl in batches(len(items), batch_size, progress=progress, desc=f"{self.kind}"):
            with torch.inference_mode():
                feats = self._encode_batch(state, items[sl])
            out[sl] = feats.float().cpu().numpy() if hasattr(feats, "cpu") else np.asarray(feats)
        return out

    # ------------------------------------------------------------ the shared part
    def load(self) -> Any:
        """Load the model now (otherwise the first ``dim`` or ``encode`` does)."""
        if self._state is None:
            for mod in self.requires:
                import_optional(mod, f"the {self.kind} encoder")
            self._torch = import_optional("torch", f"the {self.kind} encoder")
            device = resolve_device(self.device)
            fp16 = check_fp16(self.fp16, device)
            self._state = self._build(device, fp16)
            self._device = device
        return self._state

    @property
    def id(self) -> str:
        """What this encoder computes: kind, model and output-changing options (no loading)."""
        return (
            f"{self.kind}:{self.model}{self._options()}"
            f"{':fp16' if self.fp16 else ''}{':l2' if self.normalize else ''}"
        )

    @property
    def version(self) -> str:
        """Which weights: ``local-<fingerprint>``, ``rev-<commit>`` or ``hub`` (no loading).

        Fixed at first read for the life of the instance, so one run keys
        every entry alike.
        """
        if self._version is None:
            self._version = weights_version(self._weights_path(), hub_names=self._hub_names())
        return self._version

    @property
    def dim(self) -> int:
        """Output dimension (loads the model)."""
        return int(self._dim(self.load()))

    def _check_items(self, items: Sequence[Any]) -> None:
        if self.modality == "text":
            bad = [i for i, t in enumerate(items) if not isinstance(t, str)]
            if bad:
                raise TypeError(
                    f"text items must be strings, got {type(items[bad[0]]).__name__} "
                    f"at position {bad[0]}"
                )

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        """Encode ``items`` (images: paths, bytes, PIL images; texts: strings) into
        ``(len(items), dim)`` float32 rows."""
        from imsearch_align.framework.validation import check_int

        items = as_items(items)
        batch_size = check_int(batch_size, "batch_size", low=1)
        self._check_items(items)
        state = self.load()
        if len(items) == 0:
            return np.empty((0, self._dim(state)), np.float32)
        out = np.asarray(self._encode_all(state, items, batch_size, bool(progress)), np.float32)
        return l2_normalize(out) if self.normalize else out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(id={self.id!r}, device={self.device!r})"
