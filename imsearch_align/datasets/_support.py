"""Loading a dataset only for its support pairs (the zero-shot protocol's fitting data)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from imsearch_align.datasets.base import EmbeddedDataset, PairedDataset
from imsearch_align.datasets.splits import SUPPORT_SPLIT

__all__ = ["load_support_dataset"]


def load_support_dataset(
    name: str, params: Mapping[str, Any] | None = None
) -> PairedDataset | EmbeddedDataset:
    """Load dataset ``name`` for its support (``train``) pairs alone.

    The loader is called with ``params``; when they do not choose splits and
    the loader takes ``splits`` (``coco``, ``flickr30k``, ``shapes``), only
    ``splits="train"`` is loaded, so the test images are neither read nor
    checked. The result keeps the ``train`` split only (for an
    ``EmbeddedDataset`` its providers come along unchanged).

    Args:
        name: a :data:`~imsearch_align.DATASETS` name.
        params: the loader's keyword arguments.

    Returns:
        What the loader returns, restricted to the support split.

    Raises:
        ValueError: the loaded data has no support pair; the message says
            which parameter gives it one.
    """
    from imsearch_align.framework.registry import DATASETS

    loader = DATASETS.get(name)
    kw = dict(params or {})
    try:
        accepted = inspect.signature(loader).parameters
    except (TypeError, ValueError):  # a loader without a signature
        accepted = {}
    if name != "hf" and "splits" in accepted and "splits" not in kw:
        kw["splits"] = SUPPORT_SPLIT
    loaded = loader(**kw)
    ds = loaded.dataset if isinstance(loaded, EmbeddedDataset) else loaded
    if not isinstance(ds, PairedDataset):
        raise TypeError(
            f"dataset loader {name!r} returned {type(loaded).__name__}, expected a PairedDataset"
        )
    sup = ds.subset([SUPPORT_SPLIT])
    if len(sup.texts) == 0:
        how = (
            "pass test_fraction=0.0 to put every pair in the support split"
            if "test_fraction" in accepted
            else "pass splits= naming a split that holds pairs"
            if "splits" in accepted
            else "use a dataset with a train split"
        )
        raise ValueError(
            f"support dataset {name!r} has no support pairs (split {SUPPORT_SPLIT!r} is empty "
            f"after loading with {sorted(kw)}); {how}"
        )
    if isinstance(loaded, EmbeddedDataset):
        return EmbeddedDataset(sup, loaded.image, loaded.text)
    return sup
