"""Expected accuracy of a max-score one-to-one assignment when scores tie.

With tied scores many assignments reach the maximum total score, and a
solver returns one of them by its input order. :func:`expected_accuracy`
(dense scores) and :func:`expected_accuracy_sparse` (a bipartite graph of
scored edges) report instead the **expected accuracy under the uniform
distribution over all optimal assignments** (the true pairs are the
diagonal; scores within the tie tolerance count as equal):

1. **Tight edges.** Take one optimal assignment ``sigma`` (scipy's solver).
   Node ``i`` stands for row ``i`` with its column ``sigma(i)``; giving row
   ``i`` the column of node ``i'`` costs ``w(i, i') = s[i', sigma(i')] -
   s[i, sigma(i')]``, and any other assignment loses the sum of ``w`` over
   its cycles. Bellman-Ford potentials ``p`` (from a virtual source joined
   to every node) make every reduced cost ``rc = w(i, i') + p_i - p_i'``
   non-negative, and an assignment's loss is the sum of its edges' ``rc``:
   the optimal assignments are exactly the perfect matchings of the edges
   with ``rc <= tol * max(1, |s[i, sigma(i')]|, |s[i', sigma(i')]|)``
   (``tol`` at least a few float64 ulps), the **tight** edges.
2. **Components.** A tight edge lies in some optimal assignment iff its two
   nodes share a strongly connected component of the tight graph
   (Dulmage-Mendelsohn); the components are independent, so a uniform
   optimal assignment is a uniform perfect matching in each. A row alone in
   its component is **untied** and scores 1 or 0 as ``sigma`` does: without
   ties the value is the solver's, bit for bit.
3. **Per component** of ``m > 1`` rows, the chance that row ``r`` gets its
   own column is ``#matchings with (r, r) / #matchings`` of the component's
   tight graph: ``1/m`` where that graph is complete (a collapsed space),
   counted exactly over column subsets: every subset up to
   :data:`EXACT_LIMIT` rows; above that only the subsets a prefix of the
   rows can fill (rows and columns first put in reverse Cuthill-McKee
   order, so a banded or clustered component keeps few), while no layer
   holds more than :data:`SPARSE_STATES` subsets. Past that the share is
   **estimated** as the mean over ``replicates`` seeded solver orders, which
   is not uniform over the matchings (a 22-row case: 0.308 against an exact
   0.297), so ``exact`` is False and the interval is not a confidence
   interval but hard bounds: the fewest and most own columns any perfect
   matching of the component gives, which the expectation cannot leave.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "EXACT_LIMIT",
    "SPARSE_STATES",
    "ExpectedAccuracy",
    "expected_accuracy",
    "expected_accuracy_sparse",
]

#: Largest irregular tied component counted over every column subset (``2**m``).
EXACT_LIMIT = 20
#: Most column subsets one layer of the reachable-subset count may hold.
SPARSE_STATES = 1_000_000

#: Float64 rounding allowance of the reduced costs (relative, in ulps): ties
#: closer than this count even with ``tol = 0``.
_ULPS = 8 * np.finfo(np.float64).eps

#: ``outside(row_price, col_price)`` -> ``(rows, cols, scores)``: edges not in
#: the graph that may be tight, i.e. whose score may reach
#: ``row_price[i] + col_price[j]`` (less the tolerance); see :func:`expected_accuracy_sparse`.
Outside = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class ExpectedAccuracy:
    """Matching accuracy as an expected value over the tied optimal assignments.

    Attributes:
        accuracy: the expected share of rows assigned their own column.
        seeded: the share in the one assignment the solver returned.
        assigned: that assignment (column per row).
        tied_rows: rows in a tied component (more than one row).
        components: number of tied components; ``largest`` their largest size.
        exact: False when a component was estimated (too many reachable subsets).
        interval: when estimated, bounds the expectation cannot leave (each
            estimated component between its fewest and most own columns over
            its perfect matchings), else None.
        estimated_rows: rows in estimated components.
    """

    accuracy: float
    seeded: float
    assigned: np.ndarray
    tied_rows: int
    components: int
    largest: int
    exact: bool
    interval: tuple[float, float] | None
    estimated_rows: int

    def details(self) -> dict:
        """The tie report for a task result (JSON-ready)."""
        return {
            "tied_rows": self.tied_rows,
            "tie_components": self.components,
            "largest_tie_component": self.largest,
            "accuracy_exact": self.exact,
            "accuracy_interval": None if self.interval is None else list(self.interval),
            "accuracy_seeded": self.seeded,
        }


def expected_accuracy(
    scores: np.ndarray,
    tol: float = 0.0,
    *,
    assigned: np.ndarray | None = None,
    seed: int = 0,
    replicates: int = 100,
) -> ExpectedAccuracy:
    """Expected accuracy over the optimal assignments of a square ``scores``
    whose diagonal holds the true pairs (see the module docstring).

    ``assigned`` (column per row) is an optimal assignment when the caller has
    one; otherwise scipy's ``linear_sum_assignment`` finds it."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2 or s.shape[0] != s.shape[1]:
        raise ValueError(f"scores must be a square matrix, got shape {s.shape}")
    n = len(s)
    if assigned is None:
        from scipy.optimize import linear_sum_assignment

        rows, cols = linear_sum_assignment(s, maximize=True)
        assigned = np.empty(n, dtype=np.int64)
        assigned[rows] = cols
    sigma = np.asarray(assigned, dtype=np.int64)
    owner = np.empty(n, dtype=np.int64)
    owner[sigma] = np.arange(n)
    own = s[owner, np.arange(n)]  # by column
    scale = max(1.0, float(np.abs(s).max())) if n else 1.0
    eps = max(float(tol), _ULPS)
    # Potentials on the negative edges (a row scoring a column above its
    # owner) first, then every edge checked in one pass over the matrix;
    # violated edges join and the potentials are redone.
    src, col = np.nonzero(s > own[None, :])
    p = np.zeros(n)
    while True:
        p = _potentials(n, src, owner[col], own[col] - s[src, col], scale, p)
        tight, more = _check_dense(s, own, owner, sigma, p, eps, scale)
        if more is None:
            break
        src, col = np.r_[src, more[0]], np.r_[col, more[1]]
    return _expected(n, sigma, owner, tight[0], owner[tight[1]], seed, replicates)


def _check_dense(
    s: np.ndarray,
    own: np.ndarray,
    owner: np.ndarray,
    sigma: np.ndarray,
    p: np.ndarray,
    eps: float,
    scale: float,
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray] | None]:
    """One pass over ``s`` in row blocks: the tight edges ``(rows, cols)`` and,
    where some reduced cost is negative beyond float64 rounding, the edges
    to add to the potentials' graph (else None)."""
    n = len(s)
    base = (own - p[owner])[None, :]
    slack, loose = 2 * _ULPS * scale, eps * scale
    tight_r, tight_c, bad_r, bad_c = [], [], [], []
    # where an edge is violated, the edges within the potentials' spread of
    # it join too: they would be the next rounds' violations
    near = max(-float(p.min()), 0.0) - slack
    violated = False
    step = max(1, (1 << 16) // max(n, 1))  # blocks that stay in cache
    buf = np.empty((min(step, n), n))
    for a in range(0, n, step):
        blk = s[a : a + step]
        rc = np.subtract(base, blk, out=buf[: len(blk)])
        rc += p[a : a + step, None]
        rows = np.arange(len(blk))
        rc[rows, sigma[a + rows]] = np.inf  # the assignment's own edges (rc 0)
        low = rc.min()
        violated = violated or low < -slack
        if low < near:
            i, j = np.nonzero(rc < near)
            bad_r.append(a + i)
            bad_c.append(j)
        if low > loose:
            continue
        i, j = np.nonzero(rc <= loose)
        keep = rc[i, j] <= eps * np.maximum(np.maximum(np.abs(blk[i, j]), np.abs(own[j])), 1.0)
        i, j = i[keep], j[keep]
        tight_r.append(a + i)
        tight_c.append(j)
    bad = (np.concatenate(bad_r), np.concatenate(bad_c)) if violated else None
    empty = np.zeros(0, np.int64)
    tight = (np.concatenate(tight_r), np.concatenate(tight_c)) if tight_r else (empty, empty)
    return tight, bad


def _potentials(
    n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, scale: float, p0: np.ndarray
) -> np.ndarray:
    """Bellman-Ford distances on the node graph ``src -> dst`` (weights ``w``)
    from a virtual source joined to every node at 0, starting from the upper
    bounds ``p0``; changes below float64 rounding end the passes."""
    order = np.argsort(dst, kind="stable")
    d_s, w_s, src_s = dst[order], w[order], src[order]
    if not len(d_s):
        return p0
    starts = np.flatnonzero(np.r_[True, d_s[1:] != d_s[:-1]])
    heads = d_s[starts]
    p = p0.copy()
    for _ in range(n + 1):
        best = np.minimum.reduceat(p[src_s] + w_s, starts)
        moved = best < p[heads] - 2 * _ULPS * scale
        if not moved.any():
            return p
        p[heads[moved]] = best[moved]
    raise RuntimeError("expected accuracy: the assignment is not optimal (a negative cycle)")


def expected_accuracy_sparse(
    n: int,
    rows: np.ndarray,
    cols: np.ndarray,
    scores: np.ndarray,
    assigned: np.ndarray,
    tol: float = 0.0,
    *,
    outside: Outside | None = None,
    seed: int = 0,
    replicates: int = 100,
) -> ExpectedAccuracy:
    """Expected accuracy over the optimal assignments of a bipartite graph of
    ``n`` rows and columns with scored edges ``(rows, cols, scores)`` (each
    edge once) and an optimal perfect matching ``assigned`` of it.

    ``outside``, when given, names edges missing from the graph that could be
    tight (a tie group cut by the candidate lists): it gets the prices
    ``(a, b)`` and returns edges whose score may reach ``a[i] + b[j]``; those
    that do (within the tolerance) join the tight graph."""
    r = np.asarray(rows, dtype=np.int64)
    c = np.asarray(cols, dtype=np.int64)
    v = np.asarray(scores, dtype=np.float64)
    sigma = np.asarray(assigned, dtype=np.int64)
    owner = np.empty(n, dtype=np.int64)
    owner[sigma] = np.arange(n)
    own = np.full(n, np.nan)
    mine = sigma[r] == c
    own[c[mine]] = v[mine]
    if np.isnan(own).any():
        raise ValueError("expected_accuracy_sparse: the assignment uses an edge not in the graph")
    scale = max(1.0, float(np.abs(v).max())) if len(v) else 1.0
    p = _potentials(n, r, owner[c], own[c] - v, scale, np.zeros(n))
    eps = max(float(tol), _ULPS)
    if outside is not None:
        # rc(i, j) = own[j] - s + p[i] - p[owner[j]]: tight iff s >= a[i] + b[j] - eps
        xr, xc, xv = outside(p.copy(), own - p[owner])
        r, c, v = np.r_[r, xr], np.r_[c, xc], np.r_[v, np.asarray(xv, dtype=np.float64)]
    rc = own[c] - v + p[r] - p[owner[c]]
    tight = rc <= eps * np.maximum(np.maximum(np.abs(v), np.abs(own[c])), 1.0)
    tight &= sigma[r] != c
    return _expected(n, sigma, owner, r[tight], owner[c[tight]], seed, replicates)


def _expected(
    n: int,
    sigma: np.ndarray,
    owner: np.ndarray,
    src: np.ndarray,
    dst: np.ndarray,
    seed: int,
    replicates: int,
) -> ExpectedAccuracy:
    """The expectation from the tight node graph ``src -> dst`` (module docstring, 2-3)."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import connected_components

    hit = sigma == np.arange(n)
    seeded = float(np.mean(hit)) if n else 0.0
    share = 0.0  # the tied rows' expected hits, summed per component
    untied = np.ones(n, dtype=bool)
    sizes: list[int] = []
    est = 0
    bounds: list[tuple[int, int]] = []
    estimated = 0.0  # the estimated components' expected hits
    if len(src):
        g = sp.csr_matrix((np.ones(len(src)), (src, dst)), shape=(n, n))
        _, label = connected_components(g, directed=True, connection="strong")
        size = np.bincount(label)
        untied = size[label] == 1
        inside = (label[src] == label[dst]) & ~untied[src]
        src, dst = src[inside], dst[inside]
        by_edge = np.argsort(label[src], kind="stable")
        src, dst = src[by_edge], dst[by_edge]
        edge_at = np.searchsorted(label[src], np.arange(len(size) + 1))
        by_node = np.argsort(label, kind="stable")
        node_at = np.r_[0, np.cumsum(size)]
        local = np.full(n, -1, dtype=np.int64)
        rng = np.random.default_rng(seed)
        for comp in np.flatnonzero(size > 1):
            nodes = by_node[node_at[comp] : node_at[comp + 1]]
            m = len(nodes)
            sizes.append(m)
            local[nodes] = np.arange(m)
            B = np.eye(m, dtype=bool)
            e0, e1 = edge_at[comp], edge_at[comp + 1]
            B[local[src[e0:e1]], local[dst[e0:e1]]] = True
            # row nodes[a] is right when it takes node b's column, b = owner[nodes[a]]
            target = np.where(label[owner[nodes]] == comp, local[owner[nodes]], -1)
            part, bound = _component_share(B, target, replicates, rng)
            share += part
            if bound is not None:
                bounds.append(bound)
                estimated += part
                est += m
    acc = float((np.sum(hit[untied]) + share) / n) if n else 0.0
    interval = None
    if bounds:
        known = float(np.sum(hit[untied]) + share - estimated)
        interval = (
            (known + sum(b[0] for b in bounds)) / n,
            (known + sum(b[1] for b in bounds)) / n,
        )
    largest = max(sizes, default=0)
    return ExpectedAccuracy(
        acc, seeded, sigma, sum(sizes), len(sizes), largest, not bounds, interval, est
    )


def _component_share(
    B: np.ndarray, target: np.ndarray, replicates: int, rng: np.random.Generator
) -> tuple[float, tuple[int, int] | None]:
    """Expected hits of one tied component (its tight graph ``B``, each row's
    own column ``target``, -1 outside); when estimated, the fewest and most
    hits of any of its perfect matchings (else None)."""
    m = len(B)
    if B.all():
        return int(np.sum(target >= 0)) / m, None
    if m <= EXACT_LIMIT:
        return _exact_probabilities(B, target)[1], None
    counted = _reachable_share(B, target, SPARSE_STATES)
    if counted is not None:
        return counted, None
    draws = _sampled(B, target, replicates, rng).sum(axis=1)
    return float(np.mean(draws)), _hit_bounds(B, target)


def _layers(adj: list[np.ndarray], cap: int) -> list[dict[int, int]] | None:
    """``out[k][S]``: perfect matchings of the first ``k`` rows (neighbour lists
    ``adj``) onto the column set ``S`` (a bit mask), for the reachable ``S``
    only; None when a layer would hold more than ``cap`` sets."""
    out: list[dict[int, int]] = [{0: 1}]
    for cols in adj:
        nxt: dict[int, int] = {}
        bits = [1 << int(b) for b in cols]
        for S, c in out[-1].items():
            for bit in bits:
                if not S & bit:
                    nxt[S | bit] = nxt.get(S | bit, 0) + c
        if len(nxt) > cap:
            return None
        out.append(nxt)
    return out


def _reachable_share(B: np.ndarray, target: np.ndarray, cap: int) -> float | None:
    """:func:`_exact_probabilities`'s sum, counted over the reachable column sets
    only (rows and columns in reverse Cuthill-McKee order); None past ``cap``."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    m = len(B)
    both = sp.bmat([[None, sp.csr_matrix(B)], [sp.csr_matrix(B.T), None]]).tocsr()
    order = reverse_cuthill_mckee(both, symmetric_mode=True)
    rows = order[order < m]
    cols = order[order >= m] - m
    pos = np.empty(m, dtype=np.int64)
    pos[cols] = np.arange(m)  # column -> its bit
    adj = [pos[np.flatnonzero(B[r])] for r in rows]
    fwd = _layers(adj, cap)
    bwd = None if fwd is None else _layers(adj[::-1], cap)
    if fwd is None or bwd is None:
        return None
    full = (1 << m) - 1
    total = fwd[m][full]
    hits = 0
    for a, r in enumerate(rows):  # row r is the a-th: a rows before it, m - a - 1 after
        b = int(target[r])
        if b < 0 or not B[r, b]:
            continue
        bit = 1 << int(pos[b])
        after = bwd[m - a - 1]
        hits += sum(c * after.get(full ^ S ^ bit, 0) for S, c in fwd[a].items() if not S & bit)
    return hits / total


def _hit_bounds(B: np.ndarray, target: np.ndarray) -> tuple[int, int]:
    """The fewest and most rows given their own column over the perfect matchings of ``B``."""
    from scipy.optimize import linear_sum_assignment

    m = len(B)
    own = np.zeros((m, m))
    rows = np.flatnonzero(target >= 0)
    own[rows, target[rows]] = 1.0
    own[~B] = np.nan
    out = []
    for sign in (1.0, -1.0):  # most, then fewest
        w = np.where(B, sign * own, -(m + 1.0))
        r, c = linear_sum_assignment(w, maximize=True)
        out.append(int(own[r, c].sum()))
    return out[1], out[0]


def _exact_probabilities(B: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, float]:
    """``P(row a matched to column target[a])`` over the uniform perfect
    matchings of the 0/1 matrix ``B`` (0 where ``target < 0``) and their sum
    (rounded once), by counting
    over column subsets: ``F[S]`` matchings of the first ``|S|`` rows onto
    ``S``, ``H[S]`` of the last ``|S|`` rows onto ``S``."""
    m = len(B)
    full = (1 << m) - 1
    F = _subset_counts(B)
    H = _subset_counts(B[::-1])
    total = int(F[full])
    masks = np.arange(1 << m, dtype=np.int64)
    pop = np.zeros(1 << m, dtype=np.int64)
    for b in range(m):
        pop += (masks >> b) & 1
    out = np.zeros(m)
    hits = 0
    for a in range(m):
        b = int(target[a])
        if b < 0 or not B[a, b]:
            continue
        S = masks[(pop == a) & ((masks >> b) & 1 == 0)]
        count = int(np.sum(F[S] * H[full ^ S ^ (1 << b)]))
        out[a] = count / total
        hits += count
    return out, hits / total


def _subset_counts(B: np.ndarray) -> np.ndarray:
    """``F[S]``: perfect matchings of rows ``0..|S|-1`` of ``B`` onto columns ``S``."""
    m = len(B)
    F = np.zeros(1 << m, dtype=np.int64)
    F[0] = 1
    prev = F.copy()
    masks = np.arange(1 << m, dtype=np.int64)
    for k in range(m):
        cur = np.zeros_like(F)
        for b in np.flatnonzero(B[k]):
            with_b = masks[(masks >> b) & 1 == 1]
            cur[with_b] += prev[with_b ^ (1 << int(b))]
        F += cur
        prev = cur
    return F


def _sampled(B: np.ndarray, target: np.ndarray, replicates: int, rng) -> np.ndarray:
    """``(replicates, m)`` 0/1: row ``a`` got ``target[a]`` in a perfect
    matching of ``B`` found with rows and columns in a seeded random order."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import maximum_bipartite_matching

    m = len(B)
    out = np.zeros((max(int(replicates), 1), m))
    for t in range(len(out)):
        pr, pc = rng.permutation(m), rng.permutation(m)
        g = sp.csr_matrix(B[np.ix_(pr, pc)].astype(np.int8))
        match = maximum_bipartite_matching(g, perm_type="column")  # column per row
        got = np.empty(m, dtype=np.int64)
        got[pr] = pc[match]
        out[t] = (got == target) & (target >= 0)
    return out
