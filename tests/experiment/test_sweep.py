"""A sweep checks every cell once: the grid is built once, each cell preflighted once."""

from __future__ import annotations

import collections
import importlib

import imsearch_align.experiment as experiment
from imsearch_align.experiment import ExperimentConfig, components, pipeline

sweep_module = importlib.import_module("imsearch_align.experiment.sweep")

SYN = ["--dataset", "synthetic", "--dataset-param", "n_images=200", "--image-encoder", "none",
       "--text-encoder", "none", "--cache-dir", "none", "--store", "exact", "--no-progress"]  # fmt: skip


def _count_checks(monkeypatch) -> collections.Counter:
    calls: collections.Counter = collections.Counter()
    preflight, grid = components.preflight, sweep_module.grid

    def counted_preflight(cfg, task):
        calls[cfg.method, cfg.n_support] += 1
        return preflight(cfg, task)

    def counted_grid(*a, **kw):
        calls["grid"] += 1
        return grid(*a, **kw)

    for module in (components, pipeline, sweep_module):
        monkeypatch.setattr(module, "preflight", counted_preflight)
    monkeypatch.setattr(sweep_module, "grid", counted_grid)
    monkeypatch.setattr(experiment, "grid", counted_grid)
    return calls


def test_a_cli_sweep_builds_the_grid_once_and_checks_each_cell_once(tmp_path, monkeypatch):
    from imsearch_align.cli import main

    calls = _count_checks(monkeypatch)
    argv = ["sweep", *SYN, "--methods", "csa", "procrustes", "--method-param", "procrustes:dim=8",
            "--n-support", "50", "100", "--output-dir", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    cells = [(m, n) for m in ("csa", "procrustes") for n in (50, 100)]
    assert calls == {"grid": 1, **dict.fromkeys(cells, 1)}
    calls.clear()
    assert main(["eval", *SYN, "--method", "csa", "--n-support", "50",
                 "--output-dir", str(tmp_path / "eval")]) == 0  # fmt: skip
    assert calls == {("csa", 50): 1}


def test_an_api_sweep_checks_each_cell_once(monkeypatch):
    calls = _count_checks(monkeypatch)
    base = ExperimentConfig(dataset="synthetic", dataset_params={"n_images": 200},
                            image_encoder=None, text_encoder=None, cache_dir=None, store="exact")  # fmt: skip
    cells = experiment.grid(base, n_values=[50, 100])
    results = experiment.sweep(cells, progress=False)
    assert [r.config for r in results] == cells and all(r.status.ok for r in results)
    assert calls == {"grid": 1, ("csa", 50): 1, ("csa", 100): 1}
    calls.clear()
    experiment.sweep(base, n_values=[50], progress=False)
    assert calls == {"grid": 1, ("csa", 50): 1}
