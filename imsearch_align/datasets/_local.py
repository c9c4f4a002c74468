"""Helpers shared by the loaders: layout errors, image checks, Hub access."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.adapters.encoders._common import BadImageError

__all__ = [
    "BadImageError",
    "HubUnreachableError",
    "LayoutError",
    "check_images",
    "find_first",
    "hub_download",
]


class LayoutError(FileNotFoundError):
    """A dataset folder or file is missing; the message shows the expected layout."""


class HubUnreachableError(ConnectionError):
    """The Hugging Face Hub could not be reached (offline, no network, or repo missing)."""


def layout_error(what: str, root: Path | str | None, layout: str, how: str) -> LayoutError:
    """A :class:`LayoutError` that lists the expected layout and how to get the data."""
    return LayoutError(
        f"{what} (root={str(root)!r}).\nExpected layout:\n{layout}\nHow to get it: {how}"
    )


def find_first(root: Path, candidates: Sequence[str]) -> Path | None:
    """The first ``root / c`` that exists, or None."""
    for c in candidates:
        p = root / c
        if p.exists():
            return p
    return None


def check_root(root: Any, name: str, layout: str, how: str) -> Path:
    """``root`` as an existing folder, or a :class:`LayoutError`."""
    if root is None:
        raise layout_error(
            f"{name}: root is None; pass the folder that holds the data", None, layout, how
        )
    p = Path(root).expanduser()
    if not p.is_dir():
        raise layout_error(f"{name}: folder {str(p)!r} does not exist", p, layout, how)
    return p


def _readable(path: str) -> str | None:
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.verify()
    except Exception as exc:  # PIL raises many types for a bad file
        return f"{type(exc).__name__}: {exc}"
    return None


def check_images(
    images: pd.DataFrame,
    *,
    dataset: str,
    folder: Path,
    verify: bool,
    skip_bad_images: bool,
) -> pd.DataFrame:
    """Check that every ``images.path`` exists (else: captions reference unknown images)
    and, when ``verify``, decodes (else: :class:`BadImageError`, or drop with a warning
    reporting how many when ``skip_bad_images``).
    """
    paths = images["path"].tolist()
    exists = np.fromiter((os.path.isfile(p) for p in paths), bool, len(paths))
    if not exists.all():
        bad = [os.path.basename(p) for p, e in zip(paths, exists) if not e]
        raise ValueError(
            f"{dataset}: captions reference {len(bad)} unknown image(s) not found in {str(folder)!r}, "
            f"e.g. {bad[:5]}; check the images folder, or load only the splits you have (splits=...)"
        )
    if not verify:
        return images
    from tqdm.auto import tqdm

    it = tqdm(paths, desc=f"{dataset}: verifying images", unit="img", disable=len(paths) < 2000)
    errors = [_readable(p) for p in it]
    bad = [i for i, e in enumerate(errors) if e is not None]
    if not bad:
        return images
    if not skip_bad_images:
        raise BadImageError(
            f"{dataset}: cannot read image {paths[bad[0]]!r} ({errors[bad[0]]})"
            + (f" and {len(bad) - 1} more" if len(bad) > 1 else "")
            + "; pass skip_bad_images=True to drop unreadable images and their captions"
        )
    warnings.warn(
        f"{dataset}: skipped {len(bad)} unreadable image(s) and their captions, "
        f"e.g. {[os.path.basename(paths[i]) for i in bad[:5]]}",
        UserWarning,
        stacklevel=3,
    )
    keep = np.ones(len(images), bool)
    keep[bad] = False
    return images[keep]


def hub_download(repo_id: str, filename: str, *, what: str, local_hint: str) -> str:
    """``hf_hub_download`` of a dataset file, or :class:`HubUnreachableError` with a way out."""
    try:
        from huggingface_hub import hf_hub_download
    except ImportError as exc:
        raise ImportError(
            f"{what} from the Hub needs huggingface_hub: pip install 'imsearch-align[hub]'"
        ) from exc
    try:
        return hf_hub_download(repo_id=repo_id, filename=filename, repo_type="dataset")
    except Exception as exc:  # offline mode, DNS, HTTP and missing-repo errors all end here
        raise HubUnreachableError(
            f"{what}: could not fetch {filename!r} from the Hugging Face Hub dataset {repo_id!r} "
            f"({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}). "
            f"The Hub is unreachable or offline (HF_HUB_OFFLINE=1?). Use a local copy instead: "
            f"{local_hint}; or load precomputed embeddings (DATASETS.get('precomputed'))."
        ) from exc
