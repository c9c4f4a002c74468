"""QdrantStore: the conformance kit in local mode, equality with ExactStore, its own errors.

Oracles: the kit's truth (each returned id's inner product recomputed from
the inserted vectors); ExactStore (brute force) compared tie-aware; a
closed port for an unreachable server. No Qdrant server runs in CI: the
server path differs from local mode only in the client it builds and the
``SearchParams`` it sends.
"""

from __future__ import annotations

import re
import socket
import threading
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from imsearch_align.testing.store_conformance import (
    StoreConformance,
    check_search,
    clustered_vectors,
    sparse_clustered,
)

pytest.importorskip("qdrant_client")

from imsearch_align.adapters.exact import ExactStore
from imsearch_align.adapters.qdrant_store import QdrantStore
from imsearch_align.framework.interfaces import StoreUnavailableError
from imsearch_align.framework.registry import STORES


class TestQdrantMemoryConformance(StoreConformance):
    exact = True
    supports_sparse = True
    persistent = False

    @pytest.fixture
    def make_store(self):
        return lambda: QdrantStore(query_batch=37)  # an odd batch exercises the batching


def _skip_slow_inserts(cls: type) -> type:
    """Path mode commits every point on its own (~20 ms each here): keep the small cases.

    The data-heavy cases run in :class:`TestQdrantMemoryConformance`, through
    the same adapter code; here run the persistence cases and the small ones.
    """
    heavy = (
        "test_recall_dense",
        "test_recall_sparse",
        "test_concurrent_search",
        "test_scores_are_true_dense",
        "test_scores_are_true_sparse",
        "test_exact_topk_dense",
        "test_exact_topk_sparse",
        "test_create_collection_without_dim",
        "test_ids_round_trip",
    )

    def skipped(self, *args, **kwargs):
        pytest.skip("path mode inserts slowly; run in TestQdrantMemoryConformance")

    for name in heavy:
        setattr(cls, name, skipped)
    return cls


@_skip_slow_inserts
class TestQdrantPathConformance(StoreConformance):
    exact = True
    supports_sparse = True
    persistent = True

    @pytest.fixture
    def make_store(self, tmp_path: Path):
        return lambda: QdrantStore(path=tmp_path / "qdrant")


def test_registered_as_qdrant_with_provenance():
    assert STORES.get("qdrant") is QdrantStore
    assert STORES.origin("qdrant") == "built-in"
    with QdrantStore() as s:
        prov = s.provenance()
    from importlib.metadata import version

    assert prov == {"packages": {"qdrant-client": version("qdrant-client")}, "mode": "memory"}
    assert QdrantStore.thread_safe is True and QdrantStore.provenance_packages == ("qdrant-client",)


@pytest.mark.parametrize("k", [1, 10, 25])
def test_dense_equals_exact_store_tie_aware(k):
    """Same vectors in both, with exact duplicates (ties at the k-th score): same rows."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((600, 24)).astype(np.float32)
    x[300:420] = x[:120]  # 120 duplicated vectors under other ids
    x[420:440] = x[0]  # 21 copies of one vector: a tie wider than the tie margin
    ids = rng.choice(10**9, size=600, replace=False).astype(np.int64)
    q = np.concatenate([x[:10], rng.standard_normal((30, 24)).astype(np.float32)])
    with QdrantStore() as qs, ExactStore(topk="numpy") as ex:
        for s in (qs, ex):
            s.create_collection("c", 24)
            s.insert("c", x, ids)
        got, want = qs.search("c", q, k), ex.search("c", q, k)
    check_search(got, q, x, ids, k, exact=True)
    check_search(want, q, x, ids, k, exact=True)
    np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-5)
    # tie-aware: where the ids differ, both are true ties (equal float64 inner products);
    # float32 GEMM may round two identical rows apart, so the stores may order ties apart
    row = {int(i): r for r, i in enumerate(ids)}
    diff = np.argwhere(got.ids != want.ids)
    for i, j in diff:
        a, b = x[row[int(got.ids[i, j])]], x[row[int(want.ids[i, j])]]
        qi = q[i].astype(np.float64)
        assert qi @ a.astype(np.float64) == qi @ b.astype(np.float64), (i, j)
    assert len(diff) < 0.05 * got.ids.size


def test_sparse_equals_exact_store_on_the_shared_rule():
    x, q = sparse_clustered(400, 60, nnz=5, n_queries=30, seed=1)
    ids = np.arange(400, dtype=np.int64) * 3
    with QdrantStore() as qs:
        qs.create_collection("s", 60, sparse=True)
        qs.insert("s", x, ids)
        got = qs.search("s", q, 15)
    rep = check_search(got, q, x, ids, 15, exact=True)
    assert rep.recall == 1.0
    # the independent count: a row holds min(k, documents with a non-zero inner product) hits
    nonzero = ((q @ x.T).toarray() != 0).sum(axis=1)
    np.testing.assert_array_equal((got.ids >= 0).sum(axis=1), np.minimum(15, nonzero))


def test_sparse_explicit_zeros_and_empty_rows():
    # doc 10 = (1, 0, 0); doc 11 stores an explicit zero at term 2; doc 12 = (0, 2, 0)
    indptr = np.array([0, 1, 2, 3])
    x = sp.csr_matrix((np.array([1.0, 0.0, 2.0]), np.array([0, 2, 1]), indptr), shape=(3, 3))
    assert x.nnz == 3
    q = sp.csr_matrix(np.array([[0, 0, 1], [0, 0, 0], [1, 1, 0]], dtype=np.float32))
    with QdrantStore() as s:
        s.create_collection("s", sparse=True)
        s.insert("s", x, np.array([10, 11, 12]))
        res = s.search("s", q, 3)
    assert (res.ids[0] == -1).all()  # term 2 exists only as an explicit zero
    assert (res.ids[1] == -1).all()  # an empty query shares no term
    assert res.ids[2].tolist() == [12, 10, -1]


def test_concurrent_searches_in_local_mode_under_load():
    """Many more threads and rounds than the kit: local mode stays thread-safe."""
    x, q = clustered_vectors(1500, 16, n_queries=96, seed=2)
    ids = np.arange(1500, dtype=np.int64)
    with QdrantStore(query_batch=5) as s:
        s.create_collection("c", 16)
        s.insert("c", x, ids)
        batches = np.array_split(q, 16)
        serial = [s.search("c", b, 7) for b in batches]
        bad: list[str] = []
        barrier = threading.Barrier(16)

        def work(t):
            barrier.wait()
            for _ in range(4):
                r = s.search("c", batches[t], 7)
                if not (r.ids == serial[t].ids).all():
                    bad.append(f"thread {t}")

        pool = [threading.Thread(target=work, args=(t,)) for t in range(16)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
    assert not bad


def test_reopened_path_store_knows_collections_ids_and_dimension(tmp_path: Path):
    x, _ = clustered_vectors(20, 4, seed=1)
    with QdrantStore(path=tmp_path / "db") as s:
        s.create_collection("keep", 4)
        s.insert("keep", x, np.arange(20))
        s.create_collection("sp", sparse=True)
        s.insert("sp", sp.csr_matrix(np.eye(6, dtype=np.float32)), np.arange(6) + 100)
    from qdrant_client import QdrantClient, models

    other = QdrantClient(path=str(tmp_path / "db"))  # a collection another tool made
    other.create_collection(
        "foreign", vectors_config=models.VectorParams(size=3, distance=models.Distance.COSINE)
    )
    other.close()
    with QdrantStore(path=tmp_path / "db") as s:
        assert s.list_collections() == ["keep", "sp"] and s.count("keep") == 20
        with pytest.raises(ValueError, match="already stored"):
            s.insert("keep", x[:1], [3])
        with pytest.raises(ValueError, match="dimension"):
            s.search("sp", sp.csr_matrix(np.ones((1, 7), dtype=np.float32)), 1)
        assert s.search("sp", sp.csr_matrix(np.eye(6, dtype=np.float32))[2], 2).ids.tolist() == [
            [102, -1]
        ]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_is_store_unavailable_and_the_key_stays_secret(caplog):
    url = f"http://127.0.0.1:{_closed_port()}"
    caplog.set_level("DEBUG")
    with (
        pytest.warns(UserWarning, match="insecure"),
        pytest.raises(StoreUnavailableError, match=f"Qdrant server at {url} is unreachable") as err,
    ):
        QdrantStore(url=url, api_key="s3cret-key", timeout=2)
    assert "s3cret-key" not in str(err.value) and "s3cret-key" not in caplog.text


def test_repr_and_provenance_never_show_the_api_key():
    s = QdrantStore.__new__(QdrantStore)  # a server store without a server
    s.mode, s.url, s.path, s.exact = "server", "https://q.example:6333", None, True
    s._server_version, s._closed = "1.15.0", True
    assert repr(s) == "QdrantStore(url='https://q.example:6333', exact=True)"
    assert s.provenance()["server_version"] == "1.15.0"
    assert s.provenance()["mode"] == "server"


def test_bad_parameters(tmp_path: Path):
    with pytest.raises(ValueError, match="give one of location, path or url, got path and url"):
        QdrantStore(path=tmp_path, url="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="location must be ':memory:'"):
        QdrantStore(location="somewhere")
    with pytest.raises(ValueError, match="url must start with http:// or https://"):
        QdrantStore(url="127.0.0.1:6333")
    with pytest.raises(ValueError, match="api_key is only used with url="):
        QdrantStore(api_key="x")
    with pytest.raises(ValueError, match=r"query_batch must be in \[1, inf\], got 0"):
        QdrantStore(query_batch=0)
    with pytest.raises(TypeError, match="exact must be a bool"):
        QdrantStore(exact="yes")


def test_approximate_settings_without_a_server_are_refused():
    """Local and in-memory modes always scan every vector: exact=False or
    hnsw_ef there would be recorded but not run."""
    with pytest.raises(ValueError, match=r"need a Qdrant server \(url=\.\.\.\)"):
        QdrantStore(exact=False)
    with pytest.raises(ValueError, match="always search exactly"):
        QdrantStore(hnsw_ef=64)


def test_path_memory_is_the_in_memory_mode_not_a_folder(tmp_path: Path, monkeypatch):
    """qdrant-client reads ``path=":memory:"`` as its in-memory mode: so does the adapter."""
    monkeypatch.chdir(tmp_path)
    x, _ = clustered_vectors(10, 4, seed=1)
    with QdrantStore(path=":memory:") as s:
        assert s.mode == "memory" and s.path is None
        assert repr(s) == "QdrantStore(location=:memory:, exact=True)"
        assert s.provenance()["mode"] == "memory"
        s.create_collection("c", 4)
        s.insert("c", x, np.arange(10))
        assert s.count("c") == 10
    assert not any(tmp_path.iterdir())  # no folder named ':memory:'
    with pytest.raises(ValueError, match=r"need a Qdrant server"):
        QdrantStore(path=":memory:", exact=False)
    with pytest.raises(
        ValueError, match="give one of location, path or url, got location and path"
    ):
        QdrantStore(location=":memory:", path=":memory:")


def test_path_that_is_a_file_is_refused_naming_the_parameter(tmp_path: Path):
    f = tmp_path / "notes.txt"
    f.write_text("mine")
    want = (
        rf"path must be a folder \(of a local Qdrant database\), got {re.escape(repr(str(f)))}, "
        r"an existing file"
    )
    with pytest.raises(ValueError, match=want):
        QdrantStore(path=f)
    with pytest.raises(ValueError, match=r"path must be a folder .*notes\.txt/db', under a file"):
        QdrantStore(path=f / "db")
    assert f.read_text() == "mine"


@pytest.mark.parametrize("path", [":memory:", "a-file"])
def test_cli_store_param_path(path: str, tmp_path: Path, capsys, monkeypatch):
    """``--store qdrant --store-param path=...``: ':memory:' runs in memory; a file exits 2
    with one line before any encoding, and writes no result."""
    from imsearch_align.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("mine")
    args = ["eval", "--dataset", "synthetic", "--dataset-param", "n_images=60",
            "--image-encoder", "none", "--text-encoder", "none", "--method", "csa",
            "--n-support", "20", "--no-progress", "--store", "qdrant",
            "--store-param", f"path={path}", "--output-dir", "out"]  # fmt: skip
    code = main(args)
    err = capsys.readouterr().err
    if path == ":memory:":
        assert code == 0, err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "out"]
        return
    assert code == 2
    lines = err.strip().splitlines()
    assert lines == [
        "error: path must be a folder (of a local Qdrant database), got 'a-file', an existing file"
    ], err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.json"))
