"""Ranking metrics, vectorised over an ``(n_queries, k)`` gain matrix.

The definitions are trec_eval's (``ndcg_cut``, ``P``, ``recall``,
``map_cut``), so ``evaluate`` agrees with ``pytrec_eval`` to floating-point
precision on tie-free runs. Canonical measure names:

=================  ==========================  ========================
ours               trec_eval / pytrec_eval      CLIP_benchmark
=================  ==========================  ========================
``P@k``            ``P_k``                      –
``R@k``            ``recall_k``                 –
``nDCG@k``         ``ndcg_cut_k``               –
``AP@k``           ``map_cut_k``                –
``RR@k``           ``recip_rank`` (no cutoff)   –
``HitRate@k``      ``success_k``                ``recall@k``
``Accuracy``       ``success_1``                ``acc1``
=================  ==========================  ========================

Semantics (documented in the README):

* Ranking is by score descending; ties are broken by doc id ascending
  (trec_eval breaks them by docno descending: a deliberate difference).
* A doc is relevant when its qrels relevance is ``> 0`` (or
  ``>= relevance_level`` when given); nDCG uses the graded relevance as the
  gain (only positive values count), a log2 discount and the ideal ranking
  from the qrels, as trec_eval does.
* Every query in the qrels is scored and counted in the mean. A qrels query
  absent from the run scores 0 (and is listed in ``missing_queries``); a
  query without relevant documents scores 0. A run query absent from the
  qrels is ignored (and listed in ``ignored_queries``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

__all__ = [
    "EvaluationResult",
    "Qrels",
    "Run",
    "bootstrap_ci",
    "compute_measures",
    "evaluate",
    "parse_measure",
    "valid_measure_names",
]

_MEASURE_RE = re.compile(r"^(P|R|nDCG|AP|RR|HitRate)@([0-9]+)$")
_FAMILIES = ("P", "R", "nDCG", "AP", "RR", "HitRate")
MAX_K = 1_000_000


def valid_measure_names() -> str:
    """Human-readable list of valid measure names, for error messages."""
    return "P@k, R@k, nDCG@k, AP@k, RR@k, HitRate@k (k a positive integer), Accuracy"


def parse_measure(name: str) -> tuple[str, int]:
    """Split a canonical measure name into ``(family, k)``.

    ``"Accuracy"`` is ``("HitRate", 1)``. Unknown names raise ``ValueError``
    listing the valid ones.
    """
    if name == "Accuracy":
        return "HitRate", 1
    m = _MEASURE_RE.match(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"measures: unknown measure {name!r}; expected one of {valid_measure_names()}")
    k = int(m.group(2))
    if not 1 <= k <= MAX_K:
        raise ValueError(f"measures: k in {name!r} must be in [1, {MAX_K}], got {k}")
    return m.group(1), k


def _py(x):
    """A numpy scalar as a plain Python value, so messages read ``0``, not ``np.int64(0)``."""
    return x.item() if isinstance(x, np.generic) else x


def _as_id_array(values: Iterable, what: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind in "OUS":
        return arr.astype(object)
    if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise TypeError(f"{what} must be integers or strings, got dtype {arr.dtype}")


# ----------------------------------------------------------------------------- Qrels


@dataclass(frozen=True, eq=False)
class Qrels:
    """Relevance judgements: one row per judged ``(query_id, doc_id)``.

    Attributes:
        query_ids: ``(n,)`` query id of each judgement (int64 or object).
        doc_ids: ``(n,)`` doc id of each judgement (int64 or object).
        relevance: ``(n,)`` float64 graded relevance; ``<= 0`` is not relevant.
    """

    query_ids: np.ndarray
    doc_ids: np.ndarray
    relevance: np.ndarray

    def __post_init__(self) -> None:
        q = _as_id_array(self.query_ids, "qrels query_id")
        d = _as_id_array(self.doc_ids, "qrels doc_id")
        r = np.asarray(self.relevance, dtype=np.float64)
        if not (q.ndim == d.ndim == r.ndim == 1 and len(q) == len(d) == len(r)):
            raise ValueError(
                "Qrels: query_ids, doc_ids and relevance must be 1-D of equal length, got "
                f"{np.shape(q)}, {np.shape(d)}, {np.shape(r)}"
            )
        if not np.all(np.isfinite(r)):
            bad = int(np.flatnonzero(~np.isfinite(r))[0])
            raise ValueError(f"Qrels: relevance must be finite, got {r[bad]} for query {_py(q[bad])!r}")
        dup = pd.DataFrame({"q": q, "d": d}).duplicated()
        if dup.any():
            i = int(np.flatnonzero(dup.to_numpy())[0])
            raise ValueError(f"Qrels: duplicate judgement for query {_py(q[i])!r}, doc {_py(d[i])!r}")
        for name, arr in (("query_ids", q), ("doc_ids", d), ("relevance", r)):
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)

    # -- constructors
    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        *,
        query_col: str = "query_id",
        doc_col: str = "doc_id",
        relevance_col: str = "relevance",
    ) -> Qrels:
        """Build from a DataFrame with columns ``query_id, doc_id, relevance``."""
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"Qrels.from_frame: df must be a pandas DataFrame, got {type(df).__name__}")
        missing = [c for c in (query_col, doc_col, relevance_col) if c not in df.columns]
        if missing:
            raise ValueError(
                f"Qrels.from_frame: df is missing required column(s) {missing}; expected columns "
                f"{[query_col, doc_col, relevance_col]}, got {list(df.columns)}"
            )
        return cls(df[query_col].to_numpy(), df[doc_col].to_numpy(), df[relevance_col].to_numpy())

    @classmethod
    def from_dict(cls, d: dict) -> Qrels:
        """Build from ``{query_id: {doc_id: relevance}}`` (pytrec_eval's layout)."""
        qs, ds, rs = [], [], []
        for q, docs in d.items():
            for doc, rel in docs.items():
                qs.append(q)
                ds.append(doc)
                rs.append(rel)
        return cls(np.asarray(qs), np.asarray(ds), np.asarray(rs, dtype=np.float64))

    @classmethod
    def from_pairs(cls, query_ids: Sequence, doc_ids: Sequence) -> Qrels:
        """Binary qrels: each ``(query_id, doc_id)`` pair is relevant (1)."""
        return cls(np.asarray(query_ids), np.asarray(doc_ids), np.ones(len(query_ids)))

    def to_frame(self) -> pd.DataFrame:
        """The judgements as a DataFrame ``query_id, doc_id, relevance``."""
        return pd.DataFrame(
            {"query_id": self.query_ids, "doc_id": self.doc_ids, "relevance": self.relevance}
        )

    # -- derived
    @cached_property
    def queries(self) -> np.ndarray:
        """Unique query ids in order of first appearance."""
        return pd.unique(self.query_ids)

    def __len__(self) -> int:
        return len(self.query_ids)


# ----------------------------------------------------------------------------- Run


@dataclass(frozen=True, eq=False)
class Run:
    """Ranked results: ``doc_ids`` and ``scores`` are ``(nq, k)``, one row a query.

    Rows are kept in the canonical order (score descending, doc id
    ascending, no-hit ``-1`` last). Construct through :meth:`from_arrays` or
    :meth:`from_frame`, which sort; the constructor only checks.
    """

    query_ids: np.ndarray
    doc_ids: np.ndarray
    scores: np.ndarray
    #: ``(nq, k)`` bool, True where a row has no hit (``doc_id == -1``).
    empty: np.ndarray = field(repr=False)

    @classmethod
    def from_arrays(
        cls,
        query_ids: Sequence,
        doc_ids: np.ndarray,
        scores: np.ndarray | None = None,
        *,
        assume_sorted: bool = False,
    ) -> Run:
        """Build from ``(nq,)`` query ids and ``(nq, k)`` doc ids / scores.

        ``-1`` in ``doc_ids`` marks "no hit". With ``scores=None`` the column
        order is the ranking. Rows are re-sorted into the canonical order
        unless they already are in it (checked, vectorised) or
        ``assume_sorted=True``. A NaN score raises naming the query.
        """
        q = _as_id_array(query_ids, "run query_ids")
        d = np.asarray(doc_ids)
        if d.ndim != 2:
            raise ValueError(f"Run.from_arrays: doc_ids must be 2-D (nq, k), got shape {d.shape}")
        if q.ndim != 1 or len(q) != d.shape[0]:
            raise ValueError(
                f"Run.from_arrays: query_ids has {q.size} entries, doc_ids has {d.shape[0]} rows"
            )
        if len(pd.unique(q)) != len(q):
            dup = pd.Series(q)[pd.Series(q).duplicated()].iloc[0]
            raise ValueError(f"Run.from_arrays: query id {_py(dup)!r} appears in more than one row")
        d = _as_id_array(d, "run doc_ids") if d.size else d.astype(np.int64)
        if scores is None:
            s = -np.broadcast_to(np.arange(d.shape[1], dtype=np.float64), d.shape)
            assume_sorted = True
        else:
            s = np.asarray(scores)
            if s.shape != d.shape:
                raise ValueError(
                    f"Run.from_arrays: scores has shape {s.shape}, doc_ids {d.shape}; expected equal"
                )
            if s.dtype.kind != "f":
                s = s.astype(np.float64)
        empty = _no_hit_mask(d)
        nan = np.isnan(s) & ~empty
        if nan.any():
            rows = np.flatnonzero(nan.any(axis=1))
            raise ValueError(
                f"Run: NaN score for query {_py(q[rows[0]])!r}"
                + (f" (and {len(rows) - 1} more queries)" if len(rows) > 1 else "")
            )
        if not assume_sorted and not _rows_sorted(d, s, empty):
            d, s, empty = _sort_rows(d, s, empty)
        for arr in (q, d, s, empty):
            if arr.flags.writeable:
                arr.setflags(write=False)
        return cls(q, d, s, empty)

    @classmethod
    def from_frame(
        cls,
        df: pd.DataFrame,
        *,
        query_col: str = "query_id",
        doc_col: str = "doc_id",
        score_col: str = "score",
    ) -> Run:
        """Build from a long DataFrame with columns ``query_id, doc_id, score``."""
        if not isinstance(df, pd.DataFrame):
            raise TypeError(f"Run.from_frame: df must be a pandas DataFrame, got {type(df).__name__}")
        missing = [c for c in (query_col, doc_col, score_col) if c not in df.columns]
        if missing:
            raise ValueError(
                f"Run.from_frame: df is missing required column(s) {missing}; expected columns "
                f"{[query_col, doc_col, score_col]}, got {list(df.columns)}"
            )
        q = _as_id_array(df[query_col].to_numpy(), "run query_id")
        d = _as_id_array(df[doc_col].to_numpy(), "run doc_id")
        s = df[score_col].to_numpy(dtype=np.float64)
        if np.isnan(s).any():
            raise ValueError(f"Run: NaN score for query {_py(q[np.flatnonzero(np.isnan(s))[0]])!r}")
        if pd.DataFrame({"q": q, "d": d}).duplicated().any():
            i = int(np.flatnonzero(pd.DataFrame({"q": q, "d": d}).duplicated().to_numpy())[0])
            raise ValueError(f"Run: doc {_py(d[i])!r} appears twice for query {_py(q[i])!r}")
        if len(q) == 0:
            return cls.from_arrays(np.array([], dtype=np.int64), np.zeros((0, 0), np.int64), np.zeros((0, 0)))
        qcodes, uq = pd.factorize(q)
        # Sort by query, then score descending, then doc id ascending.
        dkey = d if d.dtype != object else pd.factorize(d, sort=True)[0]
        order = np.lexsort((dkey, -s, qcodes))
        qc = qcodes[order]
        counts = np.bincount(qc, minlength=len(uq))
        width = int(counts.max())
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        col = np.arange(len(qc)) - starts[qc]
        ids = np.full((len(uq), width), -1, dtype=d.dtype if d.dtype != object else object)
        sc = np.full((len(uq), width), -np.inf)
        ids[qc, col] = d[order]
        sc[qc, col] = s[order]
        return cls.from_arrays(np.asarray(uq), ids, sc, assume_sorted=True)

    def to_frame(self) -> pd.DataFrame:
        """Long format ``query_id, doc_id, score, rank`` (no-hit cells dropped)."""
        nq, k = self.doc_ids.shape
        keep = ~self.empty.ravel()
        return pd.DataFrame(
            {
                "query_id": np.repeat(self.query_ids, k)[keep],
                "doc_id": self.doc_ids.ravel()[keep],
                "score": self.scores.ravel()[keep],
                "rank": np.tile(np.arange(1, k + 1), nq)[keep],
            }
        )

    @property
    def k(self) -> int:
        """Number of ranked columns."""
        return int(self.doc_ids.shape[1])

    def __len__(self) -> int:
        return len(self.query_ids)


def _no_hit_mask(d: np.ndarray) -> np.ndarray:
    """True where a cell holds the no-hit marker (-1, or None in object arrays)."""
    if d.dtype != object:
        return d == -1
    flat = d.ravel()
    mask = np.fromiter(
        (x is None or (isinstance(x, int | np.integer) and x == -1) for x in flat), bool, len(flat)
    )
    return mask.reshape(d.shape)


def _rows_sorted(d: np.ndarray, s: np.ndarray, empty: np.ndarray) -> bool:
    """True when every row is in canonical order (vectorised check)."""
    if d.shape[1] < 2:
        return True
    s0, s1 = s[:, :-1], s[:, 1:]
    e0, e1 = empty[:, :-1], empty[:, 1:]
    # A hit after a no-hit is out of order.
    if np.any(e0 & ~e1):
        return False
    both = ~e0 & ~e1
    if np.any(both & (s0 < s1)):
        return False
    tie = both & (s0 == s1)
    if tie.any():
        if d.dtype == object:
            a, b = d[:, :-1][tie], d[:, 1:][tie]
            return all(x < y for x, y in zip(a.tolist(), b.tolist()))
        return not np.any(d[:, :-1][tie] > d[:, 1:][tie])
    return True


def _sort_rows(d: np.ndarray, s: np.ndarray, empty: np.ndarray):
    nq, k = d.shape
    rows = np.repeat(np.arange(nq), k)
    dflat = d.ravel()
    dkey = dflat if d.dtype != object else pd.factorize(np.where(empty.ravel(), "", dflat), sort=True)[0]
    # Keys, last is primary: row, then hits before no-hits, score desc, doc asc.
    order = np.lexsort((dkey, -s.ravel(), empty.ravel(), rows)).reshape(nq, k)
    cols = order - (np.arange(nq) * k)[:, None]
    r = np.arange(nq)[:, None]
    return d[r, cols], s[r, cols], empty[r, cols]


# ----------------------------------------------------------------------------- evaluation


@dataclass(frozen=True, eq=False)
class EvaluationResult:
    """Per-query scores of a set of measures.

    Attributes:
        measures: the measure names, in the requested order.
        query_ids: every qrels query, in order of first appearance.
        values: measure -> ``(n_queries,)`` float64 per-query values.
        missing_queries: qrels queries absent from the run (scored 0, counted).
        ignored_queries: run queries absent from the qrels (not scored).
        failed_queries: queries whose search failed (scored 0, counted).
    """

    measures: tuple[str, ...]
    query_ids: np.ndarray
    values: dict[str, np.ndarray]
    missing_queries: np.ndarray
    ignored_queries: np.ndarray
    failed_queries: np.ndarray = field(default_factory=lambda: np.array([], dtype=object))

    def mean(self) -> dict[str, float]:
        """Mean of each measure over every qrels query."""
        n = len(self.query_ids)
        return {m: (float(self.values[m].mean()) if n else float("nan")) for m in self.measures}

    @cached_property
    def per_query(self) -> pd.DataFrame:
        """One row per qrels query: ``query_id`` and one column per measure."""
        df = pd.DataFrame({"query_id": self.query_ids})
        for m in self.measures:
            df[m] = self.values[m]
        df["missing"] = np.isin(self.query_ids, self.missing_queries)
        if len(self.failed_queries):
            df["failed"] = np.isin(self.query_ids, self.failed_queries)
        return df

    def confidence_intervals(
        self, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
    ) -> dict[str, tuple[float, float]]:
        """Seeded percentile bootstrap interval of each mean (queries resampled)."""
        mat = np.column_stack([self.values[m] for m in self.measures]) if self.measures else None
        if mat is None or len(mat) == 0:
            return {m: (float("nan"), float("nan")) for m in self.measures}
        lo, hi = bootstrap_ci(mat, n_resamples=n_resamples, level=level, seed=seed)
        return {m: (float(lo[i]), float(hi[i])) for i, m in enumerate(self.measures)}


def bootstrap_ci(
    values: np.ndarray, *, n_resamples: int = 1000, level: float = 0.95, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the column means of ``values`` ``(n, m)``.

    Resamples rows with replacement ``n_resamples`` times with a seeded
    generator; returns ``(low, high)`` arrays of length ``m``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 1:
        v = v[:, None]
    n = v.shape[0]
    rng = np.random.default_rng(seed)
    means = np.empty((n_resamples, v.shape[1]))
    # Chunks keep the index matrix small (<= ~8M entries).
    chunk = max(1, 8_000_000 // max(n, 1))
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n), dtype=np.int32 if n < 2**31 else np.int64)
        means[start : start + b] = v[idx].mean(axis=1)
    alpha = (1 - level) / 2
    return np.quantile(means, alpha, axis=0), np.quantile(means, 1 - alpha, axis=0)


def _gain_matrix(run: Run, qrels: Qrels, width: int):
    """Map the run onto the qrels queries; return gains and relevance counts.

    Returns ``(gain, run_row, missing, ignored)``: ``gain`` is ``(nQ, width)``
    float64 graded relevance of the ranked docs (0 = not judged / no hit),
    one row per qrels query; ``run_row[i]`` is the run row of qrels query i
    (-1 when absent).
    """
    qq = qrels.queries
    nQ = len(qq)
    qindex = pd.Index(qq)
    run_row = np.full(nQ, -1, dtype=np.int64)
    rq_pos = qindex.get_indexer(run.query_ids) if len(run) else np.array([], dtype=np.int64)
    present = rq_pos >= 0
    run_row[rq_pos[present]] = np.flatnonzero(present)
    ignored = run.query_ids[~present]
    missing = qq[run_row < 0]

    gain = np.zeros((nQ, width), dtype=np.float64)
    kk = min(width, run.k)
    pos_mask = qrels.relevance > 0
    if kk == 0 or not pos_mask.any() or not present.any():
        return gain, run_row, missing, ignored
    # Only positive judgements can contribute a gain.
    jq = qindex.get_indexer(qrels.query_ids[pos_mask])
    jd = qrels.doc_ids[pos_mask]
    jrel = qrels.relevance[pos_mask]
    dvocab = pd.Index(pd.unique(jd))
    jcode = dvocab.get_indexer(jd)
    nv = len(dvocab)
    jkey = jq.astype(np.int64) * nv + jcode
    order = np.argsort(jkey, kind="stable")
    jkey, jrel = jkey[order], jrel[order]

    rows = np.flatnonzero(run_row >= 0)
    sub = run.doc_ids[run_row[rows], :kk]
    codes = dvocab.get_indexer(sub.ravel()).reshape(sub.shape)
    hit = codes >= 0
    if not hit.any():
        return gain, run_row, missing, ignored
    r_idx, c_idx = np.nonzero(hit)
    keys = rows[r_idx].astype(np.int64) * nv + codes[r_idx, c_idx]
    pos = np.searchsorted(jkey, keys)
    pos = np.minimum(pos, len(jkey) - 1)
    found = jkey[pos] == keys
    if found.any():
        fp = pos[found]
        if len(np.unique(fp)) != len(fp):
            # The same relevant doc twice in one row would be counted twice.
            dup_key = int(np.flatnonzero(np.bincount(fp) > 1)[0])
            bad_q = qq[jkey[dup_key] // nv]
            raise ValueError(f"Run: a relevant doc appears twice in the ranking of query {_py(bad_q)!r}")
        gain[rows[r_idx[found]], c_idx[found]] = jrel[fp]
    return gain, run_row, missing, ignored


def _ideal_gains(qrels: Qrels, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Per qrels query: sorted positive gains cut at ``width``, and #relevant."""
    qq = qrels.queries
    nQ = len(qq)
    ideal = np.zeros((nQ, width), dtype=np.float64)
    pos_mask = qrels.relevance > 0
    jq = pd.Index(qq).get_indexer(qrels.query_ids[pos_mask])
    jrel = qrels.relevance[pos_mask]
    n_rel = np.bincount(jq, minlength=nQ).astype(np.float64)
    if len(jq) and width:
        order = np.lexsort((-jrel, jq))
        jq, jrel = jq[order], jrel[order]
        starts = np.concatenate([[0], np.cumsum(np.bincount(jq, minlength=nQ))[:-1]])
        rank = np.arange(len(jq)) - starts[jq]
        keep = rank < width
        ideal[jq[keep], rank[keep]] = jrel[keep]
    return ideal, n_rel


def compute_measures(
    gain: np.ndarray,
    n_relevant: np.ndarray,
    ideal: np.ndarray,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
) -> dict[str, np.ndarray]:
    """All measures from a gain matrix, vectorised (no per-row Python).

    Args:
        gain: ``(nq, K)`` graded relevance of the doc at each rank (0 = not
            relevant / no hit), ``K`` >= the largest cutoff.
        n_relevant: ``(nq,)`` number of relevant docs per query in the qrels.
        ideal: ``(nq, K)`` positive qrels gains sorted descending (zero padded).
        measures: canonical names.
        relevance_level: binary relevance threshold for P/R/AP/RR/HitRate;
            ``None`` means ``gain > 0``.

    Formulas (``rel_i`` binary relevance at rank i, ``R`` = ``n_relevant``):

    * ``P@k = sum_{i<=k} rel_i / k``
    * ``R@k = sum_{i<=k} rel_i / R`` (0 when ``R = 0``)
    * ``HitRate@k = 1[sum_{i<=k} rel_i > 0]``
    * ``RR@k = 1 / min{i <= k : rel_i}`` (0 when none)
    * ``AP@k = (1/R) sum_{i<=k} rel_i * P@i``
    * ``nDCG@k = sum_{i<=k} g_i / log2(i+1) / sum_{i<=k} g*_i / log2(i+1)``
      with ``g`` the graded gain and ``g*`` the ideal gains (0 when the
      ideal DCG is 0).
    """
    parsed = [(m, *parse_measure(m)) for m in measures]
    K = max((k for _, _, k in parsed), default=0)
    nq = gain.shape[0]
    if gain.shape[1] < K:
        gain = np.pad(gain, ((0, 0), (0, K - gain.shape[1])))
    if ideal.shape[1] < K:
        ideal = np.pad(ideal, ((0, 0), (0, K - ideal.shape[1])))
    rel = (gain > 0) if relevance_level is None else (gain >= relevance_level)
    relf = rel.astype(np.float64)
    cum = np.cumsum(relf, axis=1) if K else np.zeros((nq, 0))
    ranks = np.arange(1, K + 1, dtype=np.float64)
    out: dict[str, np.ndarray] = {}
    safe_R = np.where(n_relevant > 0, n_relevant, 1.0)
    need = {f for _, f, _ in parsed}
    if "RR" in need:
        any_rel = rel.any(axis=1)
        first = np.where(any_rel, rel.argmax(axis=1), K)  # 0-based rank of first relevant
    if "AP" in need:
        prec_at_rel = np.cumsum(relf * (cum / ranks), axis=1)
    if "nDCG" in need:
        disc = 1.0 / np.log2(ranks + 1.0)
        dcg = np.cumsum(gain[:, :K] * disc, axis=1)
        idcg = np.cumsum(ideal[:, :K] * disc, axis=1)
    for name, fam, k in parsed:
        if fam == "P":
            v = cum[:, k - 1] / k
        elif fam == "R":
            v = np.where(n_relevant > 0, cum[:, k - 1] / safe_R, 0.0)
        elif fam == "HitRate":
            v = (cum[:, k - 1] > 0).astype(np.float64)
        elif fam == "RR":
            v = np.where(first < k, 1.0 / (first + 1.0), 0.0)
        elif fam == "AP":
            v = np.where(n_relevant > 0, prec_at_rel[:, k - 1] / safe_R, 0.0)
        else:  # nDCG
            d, i = dcg[:, k - 1], idcg[:, k - 1]
            v = np.where(i > 0, d / np.where(i > 0, i, 1.0), 0.0)
        out[name] = v
    return out


def evaluate(
    run: Run,
    qrels: Qrels,
    measures: Sequence[str],
    *,
    relevance_level: float | None = None,
    failed_queries: Sequence | None = None,
) -> EvaluationResult:
    """Score ``run`` against ``qrels`` with the named measures.

    ``measures`` are canonical names (``"P@10"``, ``"nDCG@10"``, ``"AP@10"``,
    ``"RR@10"``, ``"R@10"``, ``"HitRate@5"``, ``"Accuracy"``). Every qrels
    query is scored; see the module docstring for the full semantics.
    ``failed_queries`` are queries whose search failed: they must not be in
    the run, score 0, count, and are listed in the result.
    """
    if not isinstance(run, Run):
        raise TypeError(f"evaluate: run must be a Run, got {type(run).__name__}")
    if not isinstance(qrels, Qrels):
        raise TypeError(f"evaluate: qrels must be a Qrels, got {type(qrels).__name__}")
    if isinstance(measures, str):
        measures = [measures]
    measures = list(dict.fromkeys(measures))
    if not measures:
        raise ValueError(f"evaluate: measures is empty; expected some of {valid_measure_names()}")
    K = max(parse_measure(m)[1] for m in measures)
    gain, _, missing, ignored = _gain_matrix(run, qrels, K)
    ideal, n_rel = _ideal_gains(qrels, K)
    if relevance_level is not None:
        pos = qrels.relevance >= relevance_level
        n_rel = np.bincount(
            pd.Index(qrels.queries).get_indexer(qrels.query_ids[pos]), minlength=len(qrels.queries)
        ).astype(np.float64)
    values = compute_measures(gain, n_rel, ideal, measures, relevance_level=relevance_level)
    failed = np.asarray(list(failed_queries) if failed_queries is not None else [], dtype=object)
    return EvaluationResult(
        measures=tuple(measures),
        query_ids=qrels.queries,
        values=values,
        missing_queries=missing,
        ignored_queries=ignored,
        failed_queries=failed,
    )
