"""Per-query outputs beside every sweep cell, so a surprising cell can be explained.

A cell holds means; ``<cell>.queries.parquet`` beside it holds, per query: its id, its
cluster (the queries judged relevant to the same documents: an image's captions), each
task measure approximate and exact (the tie-aware values whose means the cell reports),
their difference, the ANN recall@k, and the ids the store returned, in rank order. A
cell names its file in ``per_query`` (relative to the cell's folder). Read one with
:func:`read_per_query`; e.g. the queries a setting lost against exact search::

    df = read_per_query(cell_file)
    df[df["HitRate@10 diff"] < 0]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.atomic import atomic_write

__all__ = [
    "PENDING",
    "SUFFIX",
    "per_query_frame",
    "per_query_path",
    "read_per_query",
    "write_per_query",
]

#: What follows a cell's stem in its per-query file's name.
SUFFIX = ".queries.parquet"
#: The key under which a measured cell carries its per-query table until the study's
#: writer puts it beside the cell (``CellRunner.write``).
PENDING = "_per_query_frame"


def per_query_path(cell_path: Path) -> Path:
    """The per-query file beside the cell file ``cell_path``."""
    return Path(cell_path).with_name(Path(cell_path).stem + SUFFIX)


def per_query_frame(
    query_ids: np.ndarray,
    returned: np.ndarray,
    recall: np.ndarray,
    approximate: Any,
    exact: Any,
    clusters: np.ndarray,
) -> pd.DataFrame:
    """One row per scored query (the tie-aware results' order).

    Args:
        query_ids: ``(nq,)`` the searched queries, in the order of ``returned`` and
            ``recall``.
        returned: ``(nq, k)`` ids the store returned (``-1``: no hit).
        recall: ``(nq,)`` ANN recall@k of each.
        approximate, exact: the tie-aware results (``query_ids``, ``values`` per measure).
        clusters: ``(n,)`` cluster code of each of their queries.
    """
    qids = np.asarray(approximate.query_ids)
    pos = {q: i for i, q in enumerate(np.asarray(query_ids).tolist())}
    rows = np.array([pos.get(q, -1) for q in qids.tolist()], dtype=np.int64)
    if (rows < 0).any():
        raise ValueError("per_query_frame: a scored query was not searched")
    df = pd.DataFrame({"query_id": qids, "cluster": np.asarray(clusters)})
    for m in approximate.values:
        if m in exact.values:
            a, e = np.asarray(approximate.values[m]), np.asarray(exact.values[m])
            df[m], df[f"{m} exact"], df[f"{m} diff"] = a, e, a - e
    df["ann_recall"] = np.asarray(recall, dtype=np.float64)[rows]
    df["returned"] = list(np.asarray(returned, dtype=np.int64)[rows])
    return df


def write_per_query(cell_path: Path, frame: pd.DataFrame) -> str:
    """Write ``frame`` beside the cell at ``cell_path`` (atomically); its file name."""
    path = per_query_path(cell_path)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, frame.to_parquet(index=False))
    return path.name


def read_per_query(cell_path: Path) -> pd.DataFrame:
    """The per-query table of the cell at ``cell_path``."""
    return pd.read_parquet(per_query_path(cell_path))
