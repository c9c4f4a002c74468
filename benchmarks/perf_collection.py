"""Perf section "collection": the ground truth's speed and the study harness's overhead.

1. :func:`bench_truth`: the exact, tie-aware
   truth against the blocked GEMM it is built on, same cone-shaped data
   (target: at least half the GEMM's rate).
2. The harness against plain client calls on the same collection, in the
   same run (issue 29: the harness adds at most 10% to the store's own
   insert and search time). The same blocks of cone-shaped unit vectors
   (mean pairwise cosine about 0.5, like a real encoder's) go through the
   study's path (:func:`~imsearch_align.collection.measure.insert_collection`:
   ``FaissStore`` / ``MilvusStore`` inserts with the stream digest, then
   :func:`~imsearch_align.collection.measure.search_batched`: batches of 100)
   and through the library alone (``faiss`` ``train`` / ``add`` / ``search``
   with the same parameters; ``pymilvus.MilvusClient`` insert / flush /
   load / ``count(*)`` / search on Milvus Lite, when installed: the plain
   path makes the same "every row is searchable" check the study makes).
   Milvus insert is the best of two interleaved rounds, search the best of
   three; the ratio is harness time / plain time.
3. The section's peak RSS (this process: the data, the plain indexes and the
   harness's; the study's own harness memory is in its cells, ``harness``).

With ``--uri http://HOST:PORT`` the Milvus comparison also runs on that server
(200k rows, FLAT, 10,000 queries).

Run: ``.venv/bin/python benchmarks/perf_collection.py [--quick] [--uri URI]``.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from perf_common import row_maker

from imsearch_align.collection import cone_vectors
from imsearch_align.collection.measure import insert_collection, search_batched
from imsearch_align.collection.settings import auto_nlist
from imsearch_align.collection.sources import DEFAULT_BLOCK_ROWS
from imsearch_align.collection.truth import GEMM_CELLS, exact_truth

_row = row_maker("collection")
DIM, K, BATCH, BLOCK = 256, 10, 100, 8192
OVERHEAD = 1.10


def bench_truth(
    n_docs: int = 200_000,
    n_queries: int = 2000,
    dim: int = 256,
    *,
    k: int = 10,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    seed: int = 0,
    repeat: int = 2,
    quiet: bool = False,
) -> dict[str, Any]:
    """Time the blocked GEMM alone and the ground truth over the same data; print both.

    Returns a JSON-ready dict: sizes, the best of ``repeat`` runs of each in
    seconds, their GFLOP/s (``2 n_queries n_docs dim`` per run) and
    ``ratio`` = truth rate / GEMM rate.
    """
    docs = cone_vectors(n_docs, dim, seed=seed)
    queries = cone_vectors(n_queries, dim, seed=seed + 1)
    ids = np.arange(n_docs, dtype=np.int64)
    flop = 2.0 * n_queries * n_docs * dim
    buf = np.empty(GEMM_CELLS, dtype=np.float32)

    def gemm_alone() -> None:
        """The blocked GEMM of the truth, the scores left unread."""
        for s in range(0, n_docs, block_rows):
            block = docs[s : s + block_rows]
            step = max(1, min(n_queries, GEMM_CELLS // len(block)))
            for q0 in range(0, n_queries, step):
                S = buf[: min(step, n_queries - q0) * len(block)].reshape(-1, len(block))
                np.matmul(queries[q0 : q0 + S.shape[0]], block.T, out=S)

    exact_truth(queries[:8], np.arange(8), (ids[:1000], docs[:1000]), k)  # compile the kernels
    times: dict[str, float] = {"gemm": np.inf, "truth": np.inf}
    truth = None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        gemm_alone()
        times["gemm"] = min(times["gemm"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        truth = exact_truth(queries, np.arange(n_queries), (ids, docs), k, block_rows=block_rows)
        times["truth"] = min(times["truth"], time.perf_counter() - t0)
    out = {
        "n_docs": n_docs,
        "n_queries": n_queries,
        "dim": dim,
        "k": k,
        "block_rows": block_rows,
        "gemm_s": round(times["gemm"], 3),
        "truth_s": round(times["truth"], 3),
        "gemm_gflops": round(flop / times["gemm"] / 1e9, 1),
        "truth_gflops": round(flop / times["truth"] / 1e9, 1),
        "ratio": round(times["gemm"] / times["truth"], 3),
        "open_rows": int((~truth.closed).sum()) if truth is not None else 0,
    }
    if not quiet:
        print(
            f"collection truth {n_queries} queries x {n_docs} docs x {dim}: GEMM alone "
            f"{out['gemm_s']} s ({out['gemm_gflops']} GFLOP/s), truth {out['truth_s']} s "
            f"({out['truth_gflops']} GFLOP/s), ratio {out['ratio']}"
        )
    return out


def _blocks(X: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    return [(np.arange(s, min(s + BLOCK, len(X)), dtype=np.int64), X[s : s + BLOCK])
            for s in range(0, len(X), BLOCK)]  # fmt: skip


def _best(fn: Any, rounds: int = 3) -> float:
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _faiss_plain(index: str, X: np.ndarray, Q: np.ndarray, p: dict[str, int]) -> tuple[float, Any]:
    """Plain faiss: the index FaissStore builds, trained on the first block, added block by block."""
    import faiss

    from imsearch_align.adapters.faiss_index import MIN_POINTS_PER_CENTROID

    ip = faiss.METRIC_INNER_PRODUCT
    t = time.perf_counter()
    if index == "ivf_flat":
        idx = faiss.IndexIVFFlat(faiss.IndexFlatIP(DIM), DIM, p["nlist"], ip)
        idx.train(X[: MIN_POINTS_PER_CENTROID * p["nlist"]])  # as the harness: 39 per list
        idx.nprobe = p["nprobe"]
    elif index == "hnsw":
        idx = faiss.IndexHNSWFlat(DIM, p["M"], ip)
        idx.hnsw.efConstruction = p["efConstruction"]
        idx.hnsw.efSearch = p["efSearch"]
    else:
        idx = faiss.IndexFlatIP(DIM)
    for _, block in _blocks(X):
        idx.add(block)
    return time.perf_counter() - t, idx


def _faiss_case(index: str, X: np.ndarray, Q: np.ndarray, p: dict[str, int]) -> dict[str, float]:
    from imsearch_align.adapters.faiss_store import FaissStore

    plain_insert, idx = _faiss_plain(index, X, Q, p)

    def plain_search() -> None:
        for s in range(0, len(Q), BATCH):
            idx.search(Q[s : s + BATCH], K)

    store = FaissStore(index=index, **p)
    t = time.perf_counter()
    insert_collection(store, "perf", _blocks(X), DIM)
    harness_insert = time.perf_counter() - t
    plain_search()  # warm-up
    t_plain, t_harness = float("inf"), float("inf")
    for _ in range(3):  # interleaved: both see the same machine load
        t_plain = min(t_plain, _best(plain_search, 1))
        t_harness = min(t_harness, _best(lambda: search_batched(store, "perf", Q, K, BATCH), 1))
    store.close()
    return {
        "plain_insert_s": plain_insert,
        "harness_insert_s": harness_insert,
        "plain_search_s": t_plain,
        "harness_search_s": t_harness,
    }


def _milvus_plain(client: Any, name: str, X: np.ndarray) -> float:
    """Plain pymilvus, as a careful user loads a collection: the same schema, FLAT / IP,
    insert, flush, wait until the index covers every row, load, and ``count(*)`` at
    Strong and at Bounded (the study's readiness guarantees); the seconds from the
    collection's creation (the harness's ``insert_collection`` creates it too)."""
    from pymilvus import DataType

    t = time.perf_counter()  # from the collection's creation, as the harness path is timed
    schema = client.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=DIM)
    index = client.prepare_index_params()
    index.add_index("vector", index_type="FLAT", metric_type="IP")
    client.create_collection(name, schema=schema, index_params=index)
    for ids, block in _blocks(X):
        client.insert(name, [{"id": int(i), "vector": v} for i, v in zip(ids, block.tolist())])
    client.flush(name)
    while True:  # the index covers every row (the study's guarantee; FLAT builds one too)
        d = client.describe_index(name, "vector")
        total, done = int(d.get("total_rows", 0)), int(d.get("indexed_rows", 0))
        if done >= total and int(d.get("pending_index_rows", 0)) == 0:
            break
        time.sleep(0.05)
    client.load_collection(name)
    (row,) = client.query(name, output_fields=["count(*)"], consistency_level="Strong")
    assert row["count(*)"] == len(X), row
    (row,) = client.query(name, output_fields=["count(*)"], consistency_level="Bounded")
    assert row["count(*)"] == len(X), row
    return time.perf_counter() - t


def _milvus_case(X: np.ndarray, Q: np.ndarray, plain_uri: str, uri: str) -> dict[str, float]:
    """Two interleaved rounds of insert (best of each) on fresh collections, then search
    (Milvus Lite: two database files; a server: both on it)."""
    from pymilvus import MilvusClient

    from imsearch_align.adapters.milvus import MilvusStore

    client = MilvusClient(plain_uri)
    store = MilvusStore(uri, index="FLAT", check_duplicates=False)
    tag = f"{int(time.time())}"  # a server may hold an earlier run's collections
    for r in range(2):
        if client.has_collection(f"plain{r}_{tag}"):
            client.drop_collection(f"plain{r}_{tag}")
    plain_insert = harness_insert = float("inf")
    for r in range(2):
        plain_insert = min(plain_insert, _milvus_plain(client, f"plain{r}_{tag}", X))
        t = time.perf_counter()
        insert_collection(store, f"perf{r}_{tag}", _blocks(X), DIM)
        harness_insert = min(harness_insert, time.perf_counter() - t)
        if r == 0:
            client.drop_collection(f"plain0_{tag}")
            store.drop_collection(f"perf0_{tag}")

    def plain_search() -> None:
        for s in range(0, len(Q), BATCH):
            client.search(f"plain1_{tag}", Q[s : s + BATCH].tolist(), limit=K,
                          search_params={"metric_type": "IP"}, consistency_level="Bounded")  # fmt: skip

    plain_search()
    t_plain, t_harness = float("inf"), float("inf")
    for _ in range(3):
        t_plain = min(t_plain, _best(plain_search, 1))
        t_harness = min(
            t_harness, _best(lambda: search_batched(store, f"perf1_{tag}", Q, K, BATCH), 1)
        )
    store.drop_collection(f"perf1_{tag}")
    client.drop_collection(f"plain1_{tag}")
    store.close()
    client.close()
    return {
        "plain_insert_s": plain_insert,
        "harness_insert_s": harness_insert,
        "plain_search_s": t_plain,
        "harness_search_s": t_harness,
    }


def _overhead_rows(label: str, r: dict[str, float], n: int, nq: int, insert: bool) -> list[dict]:
    rows = []
    if insert:
        ratio = r["harness_insert_s"] / r["plain_insert_s"]
        rows.append(_row(f"{label} insert {n:,} rows: harness / plain client time", ratio, "x",
                         f"<= {OVERHEAD}", bool(ratio <= OVERHEAD)))  # fmt: skip
    ratio = r["harness_search_s"] / r["plain_search_s"]
    rows.append(_row(f"{label} search {nq:,} queries (batches of {BATCH}): harness / plain", ratio,
                     "x", f"<= {OVERHEAD}", bool(ratio <= OVERHEAD)))  # fmt: skip
    rows.append(_row(f"{label} batched search, harness", nq / r["harness_search_s"], "q/s"))
    return rows


def run(quick: bool = False, uri: str | None = None) -> dict:
    """The section's rows (see the module docstring)."""
    n, nq = (50_000, 2_000) if quick else (200_000, 10_000)
    rows, details = [], {}
    truth = bench_truth(n, nq // 4 if quick else 2000, DIM, repeat=1 if quick else 2, quiet=True)
    details["truth"] = truth
    rows.append(_row(f"truth {truth['n_queries']:,} q x {n:,} docs x {DIM}", truth["truth_gflops"],
                     "GFLOP/s"))  # fmt: skip
    rows.append(_row("truth rate / GEMM-alone rate", truth["ratio"], "x", ">= 0.5",
                     bool(truth["ratio"] >= 0.5)))  # fmt: skip
    X = cone_vectors(n, DIM, seed=0)
    Q = cone_vectors(nq, DIM, seed=1)
    cases = {
        "ivf_flat": {"nlist": auto_nlist(n), "nprobe": 8},
        "flat": {},
    }
    if not quick:
        cases["hnsw"] = {"M": 16, "efConstruction": 64, "efSearch": 32}
    for index, params in cases.items():
        r = _faiss_case(index, X, Q, params)
        details[f"faiss {index}"] = {**r, "params": params}
        rows += _overhead_rows(f"faiss {index}", r, n, nq, insert=index != "flat")
    try:
        import milvus_lite  # noqa: F401
    except ImportError:
        details["milvus-lite"] = "not installed"
    else:
        m, mq = (20_000, 500) if quick else (100_000, 2_000)
        with tempfile.TemporaryDirectory() as tmp:
            r = _milvus_case(X[:m], Q[:mq], str(Path(tmp) / "plain.db"), str(Path(tmp) / "h.db"))
        details["milvus-lite FLAT"] = r
        rows += _overhead_rows("milvus-lite FLAT", r, m, mq, insert=True)
    if uri:  # a Milvus server (benchmarks/perf_collection.py --uri http://HOST:PORT)
        from imsearch_align.framework.secrets import redact_uri

        m, mq = (20_000, 500) if quick else (200_000, 10_000)
        r = _milvus_case(X[:m], Q[:mq], uri, uri)
        details["milvus server FLAT"] = {**r, "uri": redact_uri(uri)}
        rows += _overhead_rows("milvus server FLAT", r, m, mq, insert=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    # This process holds the data, the plain indexes and the harness's: not the study's
    # harness alone (a collection cell records that: harness.peak_rss_bytes).
    rows.append(_row("section peak RSS (data + plain and harness indexes)", peak, "MiB"))
    return {"rows": rows, "details": details}


if __name__ == "__main__":
    at = sys.argv.index("--uri") + 1 if "--uri" in sys.argv else 0
    out = run(quick="--quick" in sys.argv, uri=sys.argv[at] if at else None)
    for row in out["rows"]:
        print(f"{row['item']:<78} {row['value']:12.3f} {row['unit']:<7} target {row['target']}")
