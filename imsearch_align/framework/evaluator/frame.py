"""imsearch_eval-style input: one row per judged ``(query, doc)``.

:func:`frame_inputs` turns such a frame into query vectors, integer query
codes and qrels keyed on them (ids hashed once: string ids cost no more
than integers); :func:`relabel` puts the caller's ids back into the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.evaluator.result import BenchmarkResult
from imsearch_align.framework.metrics import (
    EvaluationResult,
    Qrels,
    _as_id_array,
    _index_of,
    py_scalar,
)

__all__ = ["frame_inputs", "relabel"]


def frame_inputs(
    df: pd.DataFrame,
    embed: Callable[[list[str]], np.ndarray],
    *,
    query_col: str,
    query_id_col: str,
    doc_id_col: str,
    relevance_col: str,
    metadata_cols: Sequence[str] | None,
    qrels: Qrels | None,
) -> tuple[Any, Qrels, np.ndarray, pd.DataFrame | None, np.ndarray]:
    """Query vectors, qrels on query codes, the codes, per-query metadata and
    the ids behind the codes (see :meth:`BenchmarkEvaluator.evaluate_frame`)."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"df must be a pandas DataFrame, got {type(df).__name__}")
    need = [query_col, query_id_col] + ([] if qrels is not None else [doc_id_col, relevance_col])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ValueError(
            f"df is missing required column(s) {missing}; expected {need}, got {list(df.columns)}"
        )
    skip = {query_col, query_id_col, doc_id_col, relevance_col}
    cols = (
        [c for c in df.columns if c not in skip] if metadata_cols is None else list(metadata_cols)
    )
    absent = [c for c in cols if c not in df.columns]
    if absent:
        raise ValueError(f"metadata_cols {absent} are not columns of df; got {list(df.columns)}")
    qid_col = df[query_id_col]
    if qid_col.isna().any():
        row = int(np.flatnonzero(qid_col.isna().to_numpy())[0])
        raise ValueError(f"df column {query_id_col!r} has a missing query id in row {row}")
    # Factorised on the column itself: an arrow-backed string column is
    # hashed natively instead of being converted to Python objects first.
    codes, uniques = pd.factorize(qid_col)
    codes = codes.astype(np.int64, copy=False)
    uniq = np.asarray(uniques, dtype=None if uniques.dtype.kind in "iuf" else object)
    labels = _as_id_array(uniq, f"df column {query_id_col!r}")
    n_q = len(labels)
    # Codes number the ids in order of first appearance: the first row of
    # each id is where its code first occurs.
    first = np.flatnonzero(np.r_[True, codes[1:] > np.maximum.accumulate(codes)[:-1]])
    text_col = df[query_col].take(first)
    texts = text_col.tolist()
    if not pd.api.types.is_string_dtype(text_col.dtype) or (
        text_col.dtype == object and pd.api.types.infer_dtype(texts) != "string"
    ):
        texts = [str(t) for t in texts]
    vectors = embed(texts)
    if qrels is None:
        qrels_c = Qrels(codes, df[doc_id_col].to_numpy(), df[relevance_col].to_numpy())
    else:
        if not isinstance(qrels, Qrels):
            raise TypeError(f"qrels must be a Qrels, got {type(qrels).__name__}")
        qc = _index_of(labels, qrels.query_ids) if len(qrels) else np.zeros(0, np.int64)
        other = qc < 0
        if other.any():  # judged queries without a row in df: scored 0 as missing
            c2, u2 = pd.factorize(qrels.query_ids[other])
            qc[other] = n_q + c2
            labels = np.concatenate([labels.astype(object), np.asarray(u2, dtype=object)])
        qrels_c = Qrels._trusted(qc, qrels.doc_ids, qrels.relevance)
    md = None
    if cols:
        md = df[cols].take(first)
        md.index = pd.RangeIndex(n_q)
    return vectors, qrels_c, np.arange(n_q, dtype=np.int64), md, labels


def relabel(res: BenchmarkResult, labels: np.ndarray) -> BenchmarkResult:
    """The result with integer query codes replaced by the caller's ids (``labels[code]``)."""

    def lab(a: np.ndarray) -> np.ndarray:
        a = np.asarray(a)
        return labels[a.astype(np.int64)] if len(a) else labels[:0]

    ev = res.evaluation
    ev2 = EvaluationResult(
        measures=ev.measures,
        query_ids=lab(ev.query_ids),
        values=ev.values,
        missing_queries=lab(ev.missing_queries),
        ignored_queries=lab(ev.ignored_queries),
        failed_queries=lab(ev.failed_queries).astype(object),
    )
    run_q = lab(res.run.query_ids).view()
    run_q.setflags(write=False)
    run = replace(res.run, query_ids=run_q)
    md = res.metadata
    if md is not None:
        md = md.copy(deep=False)
        labs = lab(md.index.to_numpy())
        md.index = pd.Index(labs, dtype=labs.dtype)  # object stays object (no arrow copy)
    errors = {py_scalar(labels[int(k)]): v for k, v in res.errors.items()}
    return replace(res, evaluation=ev2, run=run, metadata=md, errors=errors)
