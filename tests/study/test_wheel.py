"""The package stands alone: a wheel built from the checkout, installed into a fresh
virtual environment outside it, runs a small study, reports on its folder and loads
the cost model's inputs, from another working directory with no checkout on the path.

The fresh environment gets the wheel alone (``--no-deps``); its dependencies come
from this environment's site-packages through a path file, which adds the folder
to ``sys.path`` without running that folder's own path files: the editable install
of the checkout there stays inactive, so only the wheel's copy can be imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from imsearch_align.testing.scripts import write_cone_pairs

ROOT = Path(__file__).resolve().parents[2]


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (
        f"{cmd}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc.stdout


@pytest.mark.slow
def test_a_wheel_installed_outside_the_checkout_runs_a_study(tmp_path):
    dist = tmp_path / "dist"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(dist), str(ROOT)], tmp_path, env)  # fmt: skip
    (wheel,) = dist.glob("imsearch_align-*.whl")
    env_dir = tmp_path / "fresh"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    purelib = Path(
        subprocess.check_output([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    )  # fmt: skip
    (purelib / "_deps_from_the_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
          str(wheel)], tmp_path, env)  # fmt: skip
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = _run(
        [str(py), "-c", "import imsearch_align; print(imsearch_align.__file__)"], work, env
    )
    assert Path(where.strip()).is_relative_to(env_dir), where
    emb = write_cone_pairs(work, 120)
    cli = str(env_dir / "bin" / "imsearch-align")
    _run([cli, "study", "--embeddings", str(emb), "--stores", "exact", "faiss",
          "--index", "exact:flat", "faiss:ivf_flat:nprobe=1,4", "--sizes", "0", "300",
          "--queries", "40", "--latency-queries", "5", "--out", "study", "--no-progress"],
         work, env)  # fmt: skip
    cells = [json.loads(p.read_text()) for p in (work / "study").glob("*.json")]
    assert cells and all(c["status"]["state"] == "ok" for c in cells)
    combos = {(c["method"], c["store"], c["collection"]["distractors"]) for c in cells}
    assert combos == {(m, s, d) for m in ("csa", "procrustes") for s in ("exact", "faiss")
                      for d in (0, 300)}  # fmt: skip
    assert (work / ".cache" / "collection_truth").is_dir()  # relative to where it ran
    _run([cli, "report", "study", "--output", "study/report.html"], work, env)
    assert "<html" in (work / "study" / "report.html").read_text(encoding="utf-8").lower()
    out = _run([str(py), "-c", "from imsearch_align.collection.cost_model import load_inputs; "
                "print(type(load_inputs()).__name__)"], work, env)  # fmt: skip
    assert out.strip() == "MeasuredInputs"
