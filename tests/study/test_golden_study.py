"""The study as a library call gives the cells the script gave before the redesign.

``golden_study.json`` holds the cells of a small study (exact and FAISS flat,
IVF-Flat and HNSW; 0 and 500 distractors; filters at 50 % and 10 %;
concurrency at 1 and 2 clients) made by ``benchmarks/collection.py`` at commit
80545b9, before the study moved into the package. Every exact metric must be
equal, every approximate one (all of these stores are deterministic) within
1e-9, and every cell of the old run must be there, and no other.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from imsearch_align.study import StudySpec, run_study
from imsearch_align.testing.scripts import write_cone_pairs

GOLDEN = Path(__file__).with_name("golden_study.json")


#: Filter fields added after the golden was made: the check of every returned id (a
#: measurement, not part of the cell's identity; it must find nothing outside the filter).
CHECKED = ("returned_ids", "outside_filter")


def _filter(c: dict) -> dict | None:
    f = c.get("filter")
    if f is None:
        return None
    assert f.get("outside_filter", 0) == 0, f
    return {k: v for k, v in f.items() if k not in CHECKED}


def _key(c: dict) -> str:
    idx = c.get("index") or {}
    parts = [c.get("kind"), c.get("method"), c.get("direction"), c.get("store"), idx.get("type"),
             json.dumps(idx.get("params") or {}, sort_keys=True),
             json.dumps(idx.get("search_params") or {}, sort_keys=True),
             str((c.get("collection") or {}).get("distractors")),
             json.dumps(_filter(c), sort_keys=True, default=str),
             str(c.get("clients") or c.get("concurrency"))]  # fmt: skip
    return "|".join(str(p) for p in parts)


def _close(a, b, path: str) -> None:
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), path
        for k in a:
            _close(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, float) and isinstance(b, float):
        assert math.isclose(a, b, rel_tol=0, abs_tol=1e-9), (path, a, b)
    else:
        assert a == b, (path, a, b)


@pytest.mark.slow
def test_study_reproduces_the_cells_of_the_script_before_the_redesign(tmp_path):
    (tmp_path / "emb").mkdir()
    emb = write_cone_pairs(tmp_path / "emb", 300)
    spec = StudySpec(
        embeddings=str(emb), out=str(tmp_path / "out"), truth_cache=str(tmp_path / "truth"),
        queries=80, latency_queries=5, stores=("exact", "faiss"),
        index=("exact:flat", "faiss:flat", "faiss:ivf_flat:nprobe=1,4",
               "faiss:hnsw:M=8,efConstruction=40,efSearch=32"),
        sizes=(0, 500), filters=(0.5, 0.1), concurrency=(1, 2), concurrency_duration=0.3,
        concurrency_warmup=0.05,  # quality is scored on the answers: the warm-up changes none
    )  # fmt: skip
    result = run_study(spec, progress=False)
    assert result.exit_code == 0 and not result.failed
    golden = json.loads(GOLDEN.read_text())["cells"]
    got = {_key(c): c for c in result.all_cells}
    assert sorted(got) == sorted(golden)
    for key, want in golden.items():
        c = got[key]
        assert want["status"] == (c.get("status") or {}).get("state") == "ok", key
        assert c.get("exact_metrics") == want["exact_metrics"], key  # exact: equal
        for field in ("metrics", "ann_recall", "quality"):
            _close(want[field], c.get(field), f"{key}:{field}")
