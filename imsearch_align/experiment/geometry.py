"""``diagnostics=True``: the geometry of the raw and aligned test spaces.

Computed on paired test rows (each test image with its first caption) with
:func:`imsearch_align.diagnostics.diagnose`: modality gap, linear
separability of the modalities, alignment and uniformity, k-NN entropy. The
raw spaces are compared only when they are one space: one model for both
modalities (CLIP) or precomputed vectors of one dimension; two separate
encoders that happen to share a dimension share no coordinates.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["space_diagnostics"]


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serialisable: {type(x).__name__}")


def space_diagnostics(ctx: Any) -> dict[str, Any]:
    """Geometry of ``ctx``'s raw and aligned test spaces (JSON-ready)."""
    from imsearch_align.diagnostics import diagnose

    ds = ctx.dataset
    img_ids, txt_ids = ctx.ids("image"), ctx.ids("text")
    if len(img_ids) == 0 or len(txt_ids) == 0:
        return {"skipped": "diagnostics need test images and captions (pairs)"}
    first = ds.texts.set_index("text_id").loc[txt_ids].reset_index().drop_duplicates("image_id")
    ti = pd.Index(txt_ids).get_indexer(first["text_id"].to_numpy())
    ii = pd.Index(img_ids).get_indexer(first["image_id"].to_numpy())
    keep = ii >= 0
    ti, ii = ti[keep], ii[keep]
    out: dict[str, Any] = {}
    spaces = {"aligned": (ctx.aligned("image"), ctx.aligned("text"))}
    E_img, E_txt = ctx.raw("image"), ctx.raw("text")
    cfg = ctx.config
    separate = cfg.image_encoder is not None and (
        cfg.image_encoder != cfg.text_encoder
        or dict(cfg.image_encoder_params) != dict(cfg.text_encoder_params)
    )
    if E_img.shape[1] != E_txt.shape[1]:
        out["raw"] = {
            "skipped": f"raw spaces differ in dimension ({E_img.shape[1]} vs {E_txt.shape[1]})"
        }
    elif separate:
        # Equal dimensions alone do not make a shared space: the gap, alignment
        # and separability of two unrelated coordinate systems mean nothing.
        out["raw"] = {
            "skipped": f"the raw spaces come from two separate models ({cfg.image_encoder} and "
            f"{cfg.text_encoder}): they share no coordinates, only a dimension"
        }
    else:
        spaces["raw"] = (E_img, E_txt)
    for name, (a, b) in spaces.items():
        try:
            with ctx.clock("diagnostics_s"):
                out[name] = diagnose(a[ii], b[ti], seed=ctx.config.seed)
        except Exception as exc:  # a geometry failure must not lose the measured result
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return json.loads(json.dumps(out, default=_jsonable))
