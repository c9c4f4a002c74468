"""What data a study runs on: the dataset (a Flickr30k folder or the Hub, precomputed
embeddings, or offline shape images), the encoders, and each method's parameters;
and what of the data enters a study cell's key (:func:`data_identity`: no path).

Shared by the collection study and ``benchmarks/flickr.py``: both build one
base :class:`~imsearch_align.experiment.config.ExperimentConfig` from these,
so the same flags mean the same data in both.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from imsearch_align.collection.sources import file_sha256
from imsearch_align.experiment.config import ExperimentConfig
from imsearch_align.framework.errors import ConfigError

__all__ = [
    "DEFAULT_IMAGE_ENCODER",
    "DEFAULT_TEXT_ENCODER",
    "OFFLINE_IMAGE_ENCODER",
    "OFFLINE_TEXT_ENCODER",
    "base_config",
    "data_identity",
    "dataset_spec",
    "method_params",
]

DEFAULT_IMAGE_ENCODER = ("hf-image", {"model": "facebook/dinov2-base"})
DEFAULT_TEXT_ENCODER = (
    "sentence-transformers",
    {"model": "sentence-transformers/all-MiniLM-L6-v2"},
)
OFFLINE_IMAGE_ENCODER = ("efficientnet-lite0", {})
OFFLINE_TEXT_ENCODER = ("sentence-transformers", {"model": "all-MiniLM-L6-v2"})


def method_params(method: str, n: int, dims: tuple[int, int]) -> dict[str, Any]:
    """Method parameters valid at every N of a sweep (``n`` = its smallest N), the same
    for the whole sweep so a learning curve varies N alone.

    CSA needs a ridge when N does not exceed the dimensions (ridge CCA);
    ASIF keeps at most N anchors non-zero.
    """
    if method == "csa":
        return {"eps": 1e-3} if n - 1 <= max(dims) else {}
    if method == "asif":
        return {"non_zeros": min(800, n)}
    return {}


def dataset_spec(
    *,
    data: str | None = None,
    embeddings: str | None = None,
    shapes: int | None = None,
    shapes_root: str | None = None,
    seed: int = 0,
) -> tuple[str, dict[str, Any], bool]:
    """``(DATASETS name, params, offline?)`` from the one data source given (none: the
    Hub's Flickr30k). A missing folder or file raises ``ConfigError`` naming the flag."""
    if embeddings:
        d = Path(embeddings).expanduser()
        for name in ("image.npy", "text.npy"):
            if not (d / name).is_file():
                raise ConfigError(
                    f"--embeddings {str(d)!r}: no {name} there (expected image.npy and text.npy, "
                    "rows aligned with the images and captions, and optionally text_image.npy)"
                )
        params: dict[str, Any] = {
            "image_path": str(d / "image.npy"),
            "text_path": str(d / "text.npy"),
        }
        if (d / "text_image.npy").exists():
            # By path, never inline: the 158,915-entry list would fill every result file.
            params["text_image"] = str(d / "text_image.npy")
        return "precomputed", params, True
    if shapes:
        root = Path(shapes_root or (Path(".cache") / "shapes" / f"n{shapes}-s{seed}"))
        return "shapes", {"root": str(root), "n_images": shapes, "seed": seed}, True
    if data:
        if not Path(data).expanduser().is_dir():
            raise ConfigError(f"--data {data!r} is not a folder")
        return "flickr30k", {"root": data}, False
    return "flickr30k", {"source": "hub"}, False


#: The parameters of :func:`dataset_spec` that name a folder: where the data is (or is
#: cached), never what it is.
FOLDER_PARAMS = frozenset({"root"})
#: The parameters of :func:`dataset_spec` that name a file: the data is its bytes.
FILE_PARAMS = frozenset({"image_path", "text_path", "text_image"})


def data_identity(params: Mapping[str, Any]) -> dict[str, Any]:
    """What the data of :func:`dataset_spec`'s ``params`` is, the same on every machine:
    no path, the data named by content where a path held it.

    ``params``: every value but the paths, as given (``--shapes``: ``n_images`` and
    ``seed`` fix the images; their ``root`` is only where they are cached). ``files``:
    the SHA-256 of each file named (``--embeddings``: ``image_path``, ``text_path``,
    ``text_image``), so a copy of the folder anywhere is the same data and a file
    rewritten in place is other data. A ``--data`` folder is named by nothing here:
    its loader gives no digest of a folder without loading it, so the dataset's name
    (beside this in a cell's identity) and the split parameters name it.
    """
    out: dict[str, Any] = {
        "params": {k: v for k, v in sorted(params.items()) if k not in FOLDER_PARAMS | FILE_PARAMS}
    }
    files = {k: file_sha256(Path(v).expanduser()) for k, v in params.items() if k in FILE_PARAMS}
    if files:
        out["files"] = dict(sorted(files.items()))
    return out


def base_config(
    dataset: str,
    dparams: dict[str, Any],
    *,
    offline: bool,
    precomputed: bool,
    image_encoder: str | None = None,
    image_model: str | None = None,
    text_encoder: str | None = None,
    text_model: str | None = None,
    k: tuple[int, ...] = (1, 5, 10),
    seed: int = 0,
    cache_dir: str | None = ".cache/embeddings",
    name: str = "flickr",
) -> ExperimentConfig:
    """What every cell shares: data, encoders (none for precomputed embeddings; else the
    offline or default pair, overridden by the names given), cut-offs, seed, cache."""
    if precomputed:
        ienc, tenc = [None, {}], [None, {}]
    else:
        ienc = list(OFFLINE_IMAGE_ENCODER if offline else DEFAULT_IMAGE_ENCODER)
        tenc = list(OFFLINE_TEXT_ENCODER if offline else DEFAULT_TEXT_ENCODER)
        if image_encoder:
            ienc = [image_encoder, {}]
        if image_model:
            ienc[1] = {"model": image_model}
        if text_encoder:
            tenc = [text_encoder, {}]
        if text_model:
            tenc[1] = {"model": text_model}
    return ExperimentConfig(
        dataset=dataset,
        dataset_params=dparams,
        image_encoder=ienc[0],
        image_encoder_params=ienc[1],
        text_encoder=tenc[0],
        text_encoder_params=tenc[1],
        k_values=tuple(k),
        seed=seed,
        cache_dir=None if str(cache_dir).lower() == "none" else cache_dir,
        name=name,
    )
