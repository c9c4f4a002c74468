"""A study reaches Milvus by URI only: the same config against two servers gives
the same numbers, and two runs sharing one server from two output folders (two
hosts, each with its own disk) at the same time use disjoint collections and
leave none behind."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from imsearch_align.testing.servers import ServerHandle

pytest.importorskip("pymilvus")


def _config(uri: str) -> Any:
    from imsearch_align.experiment import ExperimentConfig

    return ExperimentConfig(
        dataset="synthetic",
        dataset_params={"n_images": 300, "d_image": 24, "d_text": 20},
        image_encoder=None,
        text_encoder=None,
        cache_dir=None,
        method="procrustes",
        method_params={"dim": 8},
        store="milvus",
        store_params={"uri": uri},
    )


def _ours(uri: str) -> list[str]:
    from pymilvus import MilvusClient

    client = MilvusClient(uri=uri)
    try:
        return [c for c in client.list_collections() if c.startswith("ia_")]
    finally:
        client.close()


def test_one_study_two_servers_and_two_hosts_on_one_server(
    milvus_lite_server: ServerHandle,
    own_lite_server: ServerHandle,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from imsearch_align.experiment import context, run_experiment

    names: dict[str, list[str]] = {}
    original = context.TaskContext.collection_name

    def recorded(self: Any, ranking: str) -> str:
        name = original(self, ranking)
        names.setdefault(self.run_token, []).append(name)
        return name

    monkeypatch.setattr(context.TaskContext, "collection_name", recorded)
    a, b = milvus_lite_server.uri, own_lite_server.uri
    first = run_experiment(_config(a), output_dir=tmp_path / "host-a", progress=False)
    second = run_experiment(_config(b), output_dir=tmp_path / "host-b", progress=False)
    assert first.status.ok and second.status.ok
    assert first.metrics == second.metrics  # the server is a URI, nothing else

    # Two hosts, one server, at the same time: each run owns its own collections.
    results: dict[str, Any] = {}

    def run(host: str) -> None:
        results[host] = run_experiment(_config(a), output_dir=tmp_path / host, progress=False)

    threads = [threading.Thread(target=run, args=(h,)) for h in ("host-c", "host-d")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(results) == ["host-c", "host-d"]
    assert all(r.status.ok and r.metrics == first.metrics for r in results.values())
    assert len(names) == 4  # one run token a run
    for token, used in names.items():
        assert used and all(n.endswith(f"_{token}") for n in used)
    flat = [n for used in names.values() for n in used]
    assert len(flat) == len(set(flat))
    assert _ours(a) == [] and _ours(b) == []  # every run dropped what it made
