"""What cross-modal (out-of-distribution) queries cost an index, against control queries (issue 38).

An index is built over one modality and searched with the other. Its
**control queries** are in-distribution queries of the indexed modality that
are not in the collection; both query sets are searched at every swept
setting of one build, giving two ANN recall@10 curves over the search
effort (``nprobe``, ``ef``...). Here, on those curves:

* :func:`ood_cost`: for each swept effort ``e`` with control recall
  ``r_c(e)``, the effort the cross-modal queries need to reach ``r_c(e)``,
  interpolated linearly in ``log2(effort)`` on the running maximum of the
  cross curve (noise cannot make it non-monotone), as a ratio to the effort
  the control queries needed for it (1: no cost; 2: twice the effort), and
  the recall gap at equal setting ``r_c(e) - r_x(e)``. The control's own
  effort is read off its running maximum the same way: it is ``e`` where
  its curve rises, and the first effort of a plateau on one (at recall 1.0
  from ``nprobe`` 8 on, ``needed / e`` would halve at each later setting
  for queries that cost nothing). Nothing is extrapolated: a target above
  the cross curve's best is **beyond the sweep** (``ratio`` None,
  ``ratio_bound`` its lower bound ``max effort / control's``), one the
  cross curve already reaches at the smallest effort is **below the sweep**
  (``ratio`` is then its upper bound ``min effort / control's``);
* :func:`cost_at`: the ratio and gap of one named effort (``nprobe`` 16, ``ef`` 64);
* :func:`effort_key`: which search-time parameter of a setting is its effort;
* :func:`control_rows`: a seeded choice of control rows that avoids given
  positions (the collection's items and the test queries);
* :func:`rank_agreement`: how well a predictor ranks the methods' measured
  costs (Spearman and Kendall).

The predictors that need no search are in
:mod:`~imsearch_align.collection.ood_predict`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

__all__ = [
    "EFFORT_PARAMS",
    "control_rows",
    "cost_at",
    "effort_key",
    "ood_cost",
    "rank_agreement",
]

#: Search-time parameters that set a search's effort, by the names the stores use:
#: ``nprobe`` (IVF lists visited: FAISS, Milvus, LanceDB), ``efSearch`` (FAISS HNSW),
#: ``ef`` (Milvus HNSW), ``ef_search``, ``hnsw_ef`` (Qdrant) and ``level`` (Milvus AUTOINDEX).
EFFORT_PARAMS = ("nprobe", "efSearch", "ef", "ef_search", "hnsw_ef", "level")


def _curve(values: Sequence[float], name: str, n: int) -> np.ndarray:
    """``values`` as a float64 array of length ``n``, each finite and in [0, 1]."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,):
        raise ValueError(f"ood_cost: {name} has shape {arr.shape}, expected ({n},) as efforts")
    if not np.isfinite(arr).all() or (arr < 0).any() or (arr > 1).any():
        raise ValueError(f"ood_cost: {name} must be recalls in [0, 1], got {arr.tolist()}")
    return arr


def _sorted_sweep(
    efforts: Sequence[float], recall_cross: Sequence[float], recall_control: Sequence[float]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The three sequences checked and sorted by effort.

    Raises:
        ValueError: no effort, an effort that is not finite and positive, a
            repeated effort, or curves of another length or out of [0, 1].
    """
    e = np.asarray(efforts, dtype=np.float64)
    if e.ndim != 1 or len(e) == 0:
        raise ValueError(f"ood_cost: efforts must be a non-empty sequence, got {efforts!r}")
    if not np.isfinite(e).all() or (e <= 0).any():
        raise ValueError(f"ood_cost: efforts must be finite and positive, got {e.tolist()}")
    order = np.argsort(e, kind="stable")
    e = e[order]
    if (np.diff(e) == 0).any():
        raise ValueError(f"ood_cost: efforts must be distinct, got {sorted(e.tolist())}")
    cross = _curve(recall_cross, "recall_cross", len(e))[order]
    control = _curve(recall_control, "recall_control", len(e))[order]
    return e, cross, control


def _needed(log_e: np.ndarray, best: np.ndarray, target: float) -> tuple[float | None, str]:
    """The effort at which the running-max curve ``best`` first reaches ``target``.

    Returns:
        ``(needed, where)``: ``where`` is ``"in"`` (interpolated), ``"below"``
        (reached at the smallest effort: ``needed`` is that effort, an upper
        bound) or ``"beyond"`` (never reached: ``needed`` None).
    """
    if target > best[-1]:
        return None, "beyond"
    j = int(np.argmax(best >= target))  # first reach; best is non-decreasing
    if j == 0:
        return float(2.0 ** log_e[0]), "below"
    lo, hi = best[j - 1], best[j]
    frac = (target - lo) / (hi - lo)  # hi >= target > lo
    return float(2.0 ** (log_e[j - 1] + frac * (log_e[j] - log_e[j - 1]))), "in"


def _num(x: float) -> float | int:
    """``x`` as an int when it is a whole number (efforts read as written), else a float."""
    return int(x) if float(x).is_integer() else float(x)


def ood_cost(
    efforts: Sequence[float], recall_cross: Sequence[float], recall_control: Sequence[float]
) -> dict[str, Any]:
    """The search effort cross-modal queries need to match the control queries, per swept effort.

    Args:
        efforts: the swept effort values of one build (``nprobe`` or ``ef``),
            distinct and positive, in any order.
        recall_cross: mean ANN recall@k of the cross-modal queries at each effort.
        recall_control: mean ANN recall@k of the control queries at each effort.

    Returns:
        A JSON-ready dict, lists in increasing effort: ``efforts``;
        ``needed`` (the effort the cross-modal queries need to reach the
        control recall at that effort, interpolated in ``log2`` effort on
        the running maximum of their curve; None beyond the sweep);
        ``control_needed`` (the same read off the control curve: the effort
        itself where that curve rises, a plateau's first effort on one);
        ``ratio`` (``needed / control_needed``; None beyond the sweep);
        ``beyond_sweep`` (the cross curve never reaches the target: the
        ratio is above ``ratio_bound``); ``below_sweep`` (the cross curve
        reaches it at the smallest effort: ``ratio`` is an upper bound);
        ``ratio_bound`` (``max effort / control_needed`` beyond,
        ``min effort / control_needed`` below, else None); ``gap``
        (``recall_control - recall_cross`` at that effort);
        ``median_ratio`` (over the finite ratios, None when there are none:
        with ``n_beyond`` > 0 it understates the cost); ``gap_at``
        (``{str(effort): gap}``); ``n_beyond``.

    Raises:
        ValueError: no effort, a repeated or non-positive effort, or a recall
            curve of another length or outside [0, 1].
    """
    e, cross, control = _sorted_sweep(efforts, recall_cross, recall_control)
    log_e = np.log2(e)
    best_cross = np.maximum.accumulate(cross)
    best_control = np.maximum.accumulate(control)
    needed: list[float | None] = []
    own: list[float] = []
    ratio: list[float | None] = []
    bound: list[float | None] = []
    beyond: list[bool] = []
    below: list[bool] = []
    for target in control:
        base = _needed(log_e, best_control, float(target))[0]
        if base is None:  # the running max of a curve reaches each of its own values
            raise RuntimeError(f"ood_cost: the control curve does not reach {target}")
        need, where = _needed(log_e, best_cross, float(target))
        needed.append(need)
        own.append(base)
        ratio.append(None if need is None else need / base)
        bound.append({"in": None, "below": e[0] / base, "beyond": e[-1] / base}[where])
        beyond.append(where == "beyond")
        below.append(where == "below")
    gap = (control - cross).tolist()
    finite = [r for r in ratio if r is not None]
    efforts_out = [_num(x) for x in e]
    return {
        "efforts": efforts_out,
        "needed": needed,
        "control_needed": own,
        "ratio": ratio,
        "beyond_sweep": beyond,
        "below_sweep": below,
        "ratio_bound": bound,
        "gap": gap,
        "median_ratio": float(np.median(finite)) if finite else None,
        "gap_at": {str(x): g for x, g in zip(efforts_out, gap)},
        "n_beyond": int(sum(beyond)),
    }


def cost_at(result: Mapping[str, Any], effort: float) -> tuple[float | None, float]:
    """The ratio and the recall gap of an :func:`ood_cost` result at one swept effort.

    Args:
        result: what :func:`ood_cost` returned (or its JSON read back).
        effort: a swept effort value (``nprobe`` 16, ``ef`` 64).

    Returns:
        ``(ratio, gap)``: ``ratio`` None when the control recall there is
        beyond the sweep of the cross curve.

    Raises:
        KeyError: ``effort`` was not swept (the message names the swept ones).
    """
    efforts = [float(x) for x in result["efforts"]]
    hits = [i for i, x in enumerate(efforts) if math.isclose(x, float(effort))]
    if not hits:
        raise KeyError(f"cost_at: effort {effort!r} was not swept; swept: {result['efforts']}")
    i = hits[0]
    return result["ratio"][i], float(result["gap"][i])


def effort_key(search_params: Mapping[str, Any]) -> tuple[str, int] | None:
    """Which search-time parameter of a setting is its search effort, and its value.

    Args:
        search_params: a setting's parameters (``{"nprobe": 16}``,
            ``{"efSearch": 64}``; build parameters beside them are ignored).

    Returns:
        ``(name, value)`` for the one parameter of :data:`EFFORT_PARAMS`
        present, None when there is none (an exact index: FLAT).

    Raises:
        ValueError: two effort parameters, or a value that is not a positive integer.
    """
    found = [name for name in EFFORT_PARAMS if name in search_params]
    if not found:
        return None
    if len(found) > 1:
        raise ValueError(f"effort_key: one effort parameter expected, got {found}")
    name = found[0]
    value = search_params[name]
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"effort_key: {name} must be a positive integer, got {value!r}")
    return name, int(value)


def control_rows(n_available: int, exclude: np.ndarray, n: int, seed: int) -> np.ndarray:
    """A seeded choice of ``n`` distinct row positions in ``0..n_available-1`` outside ``exclude``.

    Args:
        n_available: rows of the source the control queries are drawn from.
        exclude: positions no control query may take (the collection's items,
            the test queries); repeats allowed.
        n: control queries wanted.
        seed: seed of the choice (same arguments, same rows).

    Returns:
        ``(n,)`` int64 positions, ascending.

    Raises:
        ValueError: a negative count, an excluded position outside
            ``0..n_available-1``, or fewer than ``n`` rows left (the message
            names the shortfall).
    """
    for name, value in (("n_available", n_available), ("n", n)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"control_rows: {name} must be an integer >= 0, got {value!r}")
    ex = np.asarray(exclude).ravel()
    if ex.size and not np.issubdtype(ex.dtype, np.integer):
        raise ValueError(f"control_rows: exclude must hold integer positions, got {ex.dtype}")
    ex = ex.astype(np.int64, copy=False)
    if ex.size and (ex.min() < 0 or ex.max() >= n_available):
        bad = ex[(ex < 0) | (ex >= n_available)][0]
        raise ValueError(
            f"control_rows: excluded position {int(bad)} is outside 0..{n_available - 1}"
        )
    free = np.ones(int(n_available), dtype=bool)
    free[ex] = False
    allowed = np.flatnonzero(free)
    if len(allowed) < n:
        raise ValueError(
            f"control_rows: {n} control rows asked, only {len(allowed)} available "
            f"({n_available} rows less {n_available - len(allowed)} excluded): "
            f"short by {n - len(allowed)}"
        )
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(allowed, size=int(n), replace=False)).astype(np.int64)


def _coef(value: float) -> float | None:
    """A correlation as a JSON-ready float (None when undefined: NaN)."""
    return None if value is None or not np.isfinite(value) else float(value)


def rank_agreement(
    predictor_values: Mapping[str, float | None], costs: Mapping[str, float | None]
) -> dict[str, Any]:
    """How well a predictor ranks the methods' measured OOD costs.

    The correlation keeps its sign: a predictor that falls as the cost
    grows (:func:`~imsearch_align.collection.ood_predict.nn_similarity_ratio`,
    :func:`~imsearch_align.collection.ood_predict.ivf_list_share`'s ratio)
    agrees when it is near -1.

    Args:
        predictor_values: ``{method: predictor}``.
        costs: ``{method: measured cost}`` (for example the median ratio); None
            or NaN (a cost beyond the sweep) leaves the method out.

    Returns:
        ``{"n", "methods", "spearman", "spearman_p", "kendall_tau",
        "kendall_p", "left_out"}``: coefficients over the methods with both
        values finite (None with fewer than 3 methods or a constant side),
        ``left_out`` the other methods named in either mapping.
    """

    def finite(v: float | None) -> bool:
        return v is not None and bool(np.isfinite(v))

    names = sorted(set(predictor_values) | set(costs))
    kept = [m for m in names if finite(predictor_values.get(m)) and finite(costs.get(m))]
    out: dict[str, Any] = {"n": len(kept), "methods": kept,
                           "left_out": [m for m in names if m not in kept]}  # fmt: skip
    x = np.array([predictor_values[m] for m in kept], dtype=np.float64)
    y = np.array([costs[m] for m in kept], dtype=np.float64)
    if len(kept) < 3 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return {**out, "spearman": None, "spearman_p": None,
                "kendall_tau": None, "kendall_p": None}  # fmt: skip
    rho = stats.spearmanr(x, y)
    tau = stats.kendalltau(x, y)
    return {
        **out,
        "spearman": _coef(rho.statistic),
        "spearman_p": _coef(rho.pvalue),
        "kendall_tau": _coef(tau.statistic),
        "kendall_p": _coef(tau.pvalue),
    }
