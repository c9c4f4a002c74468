"""Any Hugging Face ``datasets`` dataset, or a DataFrame, with an image and caption column(s).

The image column may hold PIL images, ``{"bytes", "path"}`` dicts (a
``datasets.Image(decode=False)`` column), encoded bytes, or file paths.
Caption columns may hold a string or a list of strings per row. Images are
stored as bytes or paths, never decoded at load time.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets._local import HubUnreachableError
from imsearch_align.datasets.base import SPLITS, PairedDataset, seeded_split
from imsearch_align.framework.registry import DATASETS

__all__ = ["from_hf"]


def _image_cell(v: Any, row: int) -> tuple[bytes | None, str | None]:
    if v is None:
        raise ValueError(f"image column: row {row} has no image")
    if isinstance(v, dict):
        b, p = v.get("bytes"), v.get("path")
        if b is None and not p:
            raise ValueError(f"image column: row {row} has neither bytes nor path")
        return (bytes(b) if b is not None else None), (str(p) if b is None else None)
    if isinstance(v, bytes | bytearray):
        return bytes(v), None
    if isinstance(v, str):
        return None, v
    if hasattr(v, "save"):  # a PIL image: re-encode losslessly once
        buf = io.BytesIO()
        v.save(buf, format="PNG")
        return buf.getvalue(), None
    raise TypeError(
        f"image column: row {row} holds {type(v).__name__}; expected PIL image, bytes, dict or path"
    )


def _to_frame(data: Any, image_column: str) -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        return data
    try:
        import datasets as hfd
    except ImportError as exc:  # pragma: no cover - guarded by the hub extra
        raise ImportError(
            "Hugging Face datasets input needs: pip install 'imsearch-align[hub]'"
        ) from exc
    if isinstance(data, hfd.Dataset):
        if image_column in data.column_names and isinstance(
            data.features.get(image_column), hfd.Image
        ):
            # Keep the encoded bytes: decoding every image here would cost minutes and memory.
            data = data.cast_column(image_column, hfd.Image(decode=False))
        return data.to_pandas()
    raise TypeError(
        f"data must be a pandas DataFrame, a datasets.Dataset or a Hub name, got {type(data).__name__}"
    )


@DATASETS.register("hf")
def from_hf(
    data: Any,
    *,
    image_column: str = "image",
    caption_columns: str | Sequence[str] = "caption",
    split_column: str | None = None,
    hub_split: str = "test",
    test_fraction: float = 0.3,
    seed: int = 42,
    name: str | None = None,
) -> PairedDataset:
    """Build a :class:`PairedDataset` from a DataFrame, a ``datasets.Dataset`` or a Hub name.

    Args:
        data: DataFrame, ``datasets.Dataset``, or a Hub dataset name (loaded
            with ``datasets.load_dataset(data, split=hub_split)``).
        image_column: column holding the image.
        caption_columns: one or more caption columns (each cell a string or a list of strings).
        split_column: column with ``train``/``val``/``test`` (``validation``/``restval``
            are mapped); None: seeded ratio split (``test_fraction``, ``seed``).
        hub_split: Hub split to load when ``data`` is a name.
        test_fraction, seed: the ratio split.
        name: dataset name; default the Hub name or ``"hf"``.

    Ids: ``image_id`` = row number; ``text_id`` = running index in row, column, list order.
    """
    if isinstance(data, str):
        try:
            import datasets as hfd

            ds_name = name or data.replace("/", "__")
            data = hfd.load_dataset(data, split=hub_split)
        except ImportError:
            raise
        except Exception as exc:  # offline, DNS, missing repo
            raise HubUnreachableError(
                f"could not load Hugging Face dataset {data!r} ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0][:200] if str(exc) else ''}). The Hub is unreachable or "
                "offline (HF_HUB_OFFLINE=1?): load it yourself and pass the Dataset or a DataFrame, "
                "use a local loader with root=..., or precomputed embeddings (DATASETS.get('precomputed'))."
            ) from exc
    else:
        ds_name = name or "hf"
    df = _to_frame(data, image_column)
    cols = [caption_columns] if isinstance(caption_columns, str) else list(caption_columns)
    missing = [
        c
        for c in [image_column, *cols, *([split_column] if split_column else [])]
        if c not in df.columns
    ]
    if missing:
        raise ValueError(f"from_hf: missing column(s) {missing}; got columns {list(df.columns)}")
    cells = [_image_cell(v, i) for i, v in enumerate(df[image_column])]
    images = pd.DataFrame(
        {
            "image_id": np.arange(len(df), dtype=np.int64),
            "bytes": [b for b, _ in cells],
            "path": [p for _, p in cells],
        }
    )
    if split_column:
        sp = (
            df[split_column]
            .astype(str)
            .replace({"validation": "val", "restval": "train", "dev": "val"})
        )
        bad = ~sp.isin(SPLITS)
        if bad.any():
            raise ValueError(
                f"from_hf: split column {split_column!r} has values {sorted(sp[bad].unique())[:5]}, expected {list(SPLITS)}"
            )
        images["split"] = sp.to_numpy()
    else:
        images["split"] = seeded_split(len(df), test_fraction=test_fraction, seed=seed)
    if images["path"].isna().all():
        images = images.drop(columns=["path"])
    elif images["bytes"].isna().all():
        images = images.drop(columns=["bytes"])
    t_img, t_cap = [], []
    for i in range(len(df)):
        for c in cols:
            v = df[c].iat[i]
            caps = [v] if isinstance(v, str) else list(v) if v is not None else []
            for cap in caps:
                if not isinstance(cap, str):
                    raise TypeError(
                        f"from_hf: caption column {c!r} row {i} holds {type(cap).__name__}, expected str"
                    )
                t_img.append(i)
                t_cap.append(cap)
    texts = pd.DataFrame(
        {
            "text_id": np.arange(len(t_cap), dtype=np.int64),
            "image_id": np.asarray(t_img, np.int64),
            "caption": t_cap,
        }
    )
    return PairedDataset(name=ds_name, images=images, texts=texts)
