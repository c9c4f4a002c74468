"""docker/milvus-compose.yml is valid and complete (no Docker here: the YAML is checked)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")

COMPOSE = Path(__file__).resolve().parents[2] / "docker" / "milvus-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_services_pinned_and_healthchecked(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"etcd", "minio", "standalone"}
    for name, svc in services.items():
        image = svc["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name} image not pinned: {image}"
        hc = svc["healthcheck"]
        assert hc["test"][0] == "CMD" and hc["retries"] >= 1, name
    tag = services["standalone"]["image"].split(":v")[1]
    major, minor = (int(p) for p in tag.split(".")[:2])
    assert (major, minor) in {(2, 5), (2, 6)}, f"expected a current 2.5/2.6 release, got {tag}"
    assert "healthz" in " ".join(services["standalone"]["healthcheck"]["test"])


def test_ports_19530_and_9091(compose: dict) -> None:
    ports = compose["services"]["standalone"]["ports"]
    published = {re.split(r":", p)[-1] for p in ports}
    assert published == {"19530", "9091"}
    assert all(p.startswith("127.0.0.1:") for p in ports), "publish on loopback by default"
    assert (
        "ports" not in compose["services"]["etcd"] and "ports" not in compose["services"]["minio"]
    )


def test_named_volumes_not_bind_mounts(compose: dict) -> None:
    declared = set(compose["volumes"])
    for name, svc in compose["services"].items():
        for vol in svc["volumes"]:
            source = vol.split(":")[0]
            assert not source.startswith((".", "/", "~")), f"{name} uses a bind mount: {vol}"
            assert source in declared, f"{name} volume {source!r} is not declared"
    assert declared == {"etcd_data", "minio_data", "milvus_data"}


def test_standalone_waits_for_healthy_dependencies(compose: dict) -> None:
    svc = compose["services"]["standalone"]
    assert svc["depends_on"] == {
        "etcd": {"condition": "service_healthy"},
        "minio": {"condition": "service_healthy"},
    }
    assert svc["environment"]["ETCD_ENDPOINTS"] == "etcd:2379"
    assert svc["environment"]["MINIO_ADDRESS"] == "minio:9000"
