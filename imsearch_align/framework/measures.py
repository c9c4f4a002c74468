"""The one table of measures: every name, alias, definition and kernel lives here.

Ranking measures (:data:`MEASURES`) are computed by :func:`imsearch_align.evaluate`
from the ranked results and the relevance judgements. Each entry says, once:

* ``name``: our canonical name pattern (``"P@k"``; ``"Accuracy"`` has no cutoff);
* ``trec_eval``: the trec_eval / pytrec_eval name, ``clip_benchmark``: the
  CLIP_benchmark alias (``"–"`` where it has none);
* ``definition``: one line, as in the README;
* ``cutoff``: whether the name takes ``@k``; ``default``: whether the
  experiment reports it at every ``k`` of ``k_values`` (only at the largest
  with ``default_largest_k``);
* ``label``: a short display label (``{k}`` is the cutoff);
* ``kernel``: ``kernel(hits, k) -> (n_queries,) float64``, the value under
  the tie rule, a segment reduction over the sparse hit structure
  :class:`Hits` (cost grows with the number of relevant hits, not with
  ``n_queries * k``; :mod:`~imsearch_align.framework.hit_kernels`);
* ``tie_kernel``: ``tie_kernel(groups, k) -> (n,) float64``, the expected
  value over the orders of tied documents from the rows' tie groups
  :class:`TieGroups` (:mod:`~imsearch_align.framework.tie_kernels`); an entry
  without one is refused by tie-aware evaluation, which every experiment uses;
* ``same_as``: for a name without cutoff, the ``(family, k)`` it is computed as;
* ``per_extra_score``: reported again for every extra score column a store
  returns (nDCG);
* ``vector_kernel``: instead of ``kernel``, for a measure of the returned
  documents' **indexed vectors** rather than of the judgements (diversity):
  ``vector_kernel(vecs, rows, groups, k) -> (n,) float64``, its expected
  value over tie orders where ``groups`` are given
  (:mod:`~imsearch_align.framework.diversity`).
  :func:`~imsearch_align.framework.ranking.score_ranking`, which holds the
  indexed vectors, computes it; ``evaluate`` and ``tie_aware_evaluate``,
  which have judgements only, refuse it.

Adding a measure is one :class:`Measure` entry: parsing
(:func:`parse_measure`), the default list (:func:`default_measures`), kernel
dispatch (:func:`compute`, :func:`compute_tie_aware`), ``imsearch-align list
metrics`` (:func:`list_rows`) and the README table (:func:`markdown_table`)
all read the table, each time it is called (nothing outside this module
holds a copy of it).

Task-level measures (:data:`TASK_MEASURES`, their table in
:mod:`~imsearch_align.framework.task_measures`) are computed outside the
ranking kernel by the task that reports them (classification, matching,
multi-label, linear probe, captioning, ANN fidelity); :func:`list_rows`
lists them so that the CLI shows them beside the ranking measures.

This module imports numpy, its three kernel modules and the task table only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from imsearch_align.framework import hit_kernels as hk
from imsearch_align.framework import tie_kernels as tk
from imsearch_align.framework.diversity import VectorKernel, diversity
from imsearch_align.framework.hit_kernels import Hits, Kernel
from imsearch_align.framework.task_measures import (
    TASK_MEASURES,
    TaskMeasure,
    inline_code,
    task_markdown_table,
)
from imsearch_align.framework.tie_kernels import TieGroups, TieKernel

__all__ = [
    "MAX_K",
    "MEASURES",
    "TASK_MEASURES",
    "Hits",
    "Measure",
    "TaskMeasure",
    "TieGroups",
    "compute",
    "compute_tie_aware",
    "default_measures",
    "display_label",
    "list_rows",
    "lookup",
    "lookup_tie_kernel",
    "markdown_table",
    "needs_vectors",
    "parse_measure",
    "task_markdown_table",
    "tie_aware_names",
    "valid_measure_names",
]

#: Largest cutoff a measure name may carry.
MAX_K = 1_000_000


# ----------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Measure:
    """One ranking measure family (see the module docstring for each field)."""

    name: str
    trec_eval: str
    clip_benchmark: str
    definition: str
    cutoff: bool
    default: bool
    label: str
    #: The value from the judgements (None only for a measure of the vectors).
    kernel: Kernel | None = field(default=None, repr=False)
    #: The expected value over the orders of tied documents (None: no tie-aware form).
    tie_kernel: TieKernel | None = field(default=None, repr=False)
    #: For a name without cutoff (required there): the ``(family, k)`` it is computed as.
    same_as: tuple[str, int] | None = None
    #: Reported again for every extra score column a store returns (nDCG only).
    per_extra_score: bool = False
    #: Instead of ``kernel``: the value from the ranked documents' indexed vectors.
    vector_kernel: VectorKernel | None = field(default=None, repr=False)
    #: With ``default``: reported at the largest ``k`` of ``k_values`` only.
    default_largest_k: bool = False

    @property
    def needs_vectors(self) -> bool:
        """Whether it is computed from the indexed vectors, not the judgements."""
        return self.vector_kernel is not None

    @property
    def family(self) -> str:
        """The name without ``@k`` (``"nDCG"``), the key of kernel dispatch."""
        return self.name[:-2] if self.cutoff else self.name

    def at(self, k: int) -> str:
        """The canonical measure name at cutoff ``k`` (the name itself without cutoff)."""
        return f"{self.family}@{k}" if self.cutoff else self.name


#: The ranking measures, in report order.
MEASURES: tuple[Measure, ...] = (
    Measure(
        "P@k",
        "P_k",
        "–",
        "relevant in the top k, divided by k (always k, also when fewer were returned)",
        cutoff=True,
        default=True,
        label="P@{k}",
        kernel=hk.precision,
        tie_kernel=tk.expected_precision,
    ),
    Measure(
        "R@k",
        "recall_k",
        "–",
        "relevant in the top k, divided by all relevant docs of the query (IR recall)",
        cutoff=True,
        default=True,
        label="IR recall@{k}",
        kernel=hk.recall,
        tie_kernel=tk.expected_recall,
    ),
    Measure(
        "nDCG@k",
        "ndcg_cut_k",
        "–",
        "sum of gain/log2(rank+1), gain = graded relevance; divided by the same sum over "
        "the ideal ranking **from the qrels**",
        cutoff=True,
        default=True,
        label="nDCG@{k}",
        kernel=hk.ndcg,
        tie_kernel=tk.expected_ndcg,
        per_extra_score=True,
    ),
    Measure(
        "AP@k",
        "map_cut_k",
        "–",
        "sum of P@i at each relevant rank i <= k, divided by all relevant docs",
        cutoff=True,
        default=True,
        label="AP@{k}",
        kernel=hk.average_precision,
        tie_kernel=tk.expected_average_precision,
    ),
    Measure(
        "RR@k",
        "recip_rank (no cutoff)",
        "–",
        "1 / rank of the first relevant doc within k, else 0",
        cutoff=True,
        default=True,
        label="RR@{k}",
        kernel=hk.reciprocal_rank,
        tie_kernel=tk.expected_reciprocal_rank,
    ),
    Measure(
        "HitRate@k",
        "success_k",
        "image_retrieval_recall@k (text→image), text_retrieval_recall@k (image→text)",
        "1 if any relevant doc is in the top k",
        cutoff=True,
        default=True,
        label="recall@{k} (CLIP)",
        kernel=hk.hit_rate,
        tie_kernel=tk.expected_hit_rate,
    ),
    Measure(
        "Diversity@k",
        "–",
        "–",
        "1 - mean cosine over the pairs of the top k docs' **indexed vectors** "
        "(imsearch_eval's `diversity`, 1 - intra-list similarity; 0 below two docs)",
        cutoff=True,
        default=True,
        label="diversity@{k}",
        vector_kernel=diversity,
        default_largest_k=True,
    ),
    Measure(
        "Accuracy",
        "success_1",
        "acc1",
        "`HitRate@1`: the top result is relevant",
        cutoff=False,
        default=True,
        label="acc@1",
        kernel=hk.hit_rate,
        tie_kernel=tk.expected_hit_rate,
        same_as=("HitRate", 1),
    ),
)


# ----------------------------------------------------------------------------- parsing


class _Index:
    """Lookup structures derived from :data:`MEASURES` (rebuilt if the table is replaced)."""

    def __init__(self, table: tuple[Measure, ...]) -> None:
        self.table = table
        for m in table:
            if (m.kernel is None) == (m.vector_kernel is None):
                raise ValueError(
                    f"measures: entry {m.name!r} must have exactly one of kernel (from the "
                    "judgements) and vector_kernel (from the indexed vectors)"
                )
        self.by_family = {m.family: m for m in table if m.cutoff}
        self.fixed = {m.name: m for m in table if not m.cutoff}
        for m in self.fixed.values():
            if m.same_as is None or m.same_as[0] not in self.by_family:
                raise ValueError(
                    f"measures: entry {m.name!r} has no cutoff, so same_as must name the "
                    f"(family, k) it is computed as, one of {sorted(self.by_family)}; "
                    f"got {m.same_as!r}"
                )
        fams = sorted(self.by_family, key=len, reverse=True)
        self.cutoff_re = re.compile(r"^(" + "|".join(map(re.escape, fams)) + r")@([0-9]+)$")


_INDEX: _Index | None = None


def _index() -> _Index:
    global _INDEX
    if _INDEX is None or _INDEX.table is not MEASURES:
        _INDEX = _Index(MEASURES)
    return _INDEX


def valid_measure_names() -> str:
    """Human-readable list of valid measure names, for error messages."""
    cut = ", ".join(m.name for m in MEASURES if m.cutoff)
    fixed = ", ".join(m.name for m in MEASURES if not m.cutoff)
    return f"{cut} (k a positive integer), {fixed}"


def _stem(alias: str) -> str:
    """``"recip_rank (no cutoff)"`` -> ``"recip_rank"``, ``"P_k"`` -> ``"P"``, ``"x@k"`` -> ``"x"``."""
    return re.sub(r"[@_]k$", "", alias.split(" ", 1)[0])


def _alias_hint(name: str) -> str | None:
    """Our name for a trec_eval / CLIP_benchmark / common spelling, or a near miss."""
    m = re.fullmatch(r"(.*?)(?:[@_]([0-9]+))?", name)
    stem, k = (m.group(1), int(m.group(2))) if m and m.group(2) else (name, 10)
    if stem.lower() == "recall":  # ambiguous: CLIP_benchmark's recall is a hit rate
        return f"HitRate@{k} (CLIP_benchmark's recall@k) or R@{k} (IR recall)"
    aliases: dict[str, Measure] = {}
    for meas in MEASURES:
        names = [meas.family, meas.trec_eval, *meas.clip_benchmark.split(", ")]
        aliases.update({_stem(a).lower(): meas for a in names if a != "–"})
    for common, fam in (("map", "AP"), ("mrr", "RR"), ("precision", "P"), ("hit_rate", "HitRate")):
        aliases[common] = _index().by_family[fam]
    meas = aliases.get(stem.lower())
    if meas is None:
        close = difflib.get_close_matches(stem.lower(), list(aliases), n=1, cutoff=0.6)
        meas = aliases[close[0]] if close else None
    return None if meas is None else meas.at(k)


def lookup(name: str) -> tuple[Measure, int]:
    """The table entry of a canonical measure name and its cutoff.

    ``lookup("nDCG@10")`` is ``(<nDCG entry>, 10)``; a name without cutoff
    (``"Accuracy"``) returns the cutoff it is computed at. Unknown names
    raise ``ValueError`` listing the valid ones, with a "did you mean".
    """
    if isinstance(name, str):
        idx = _index()
        fixed = idx.fixed.get(name)
        if fixed is not None:
            return fixed, fixed.same_as[1]
        m = idx.cutoff_re.match(name)
        if m is not None:
            k = int(m.group(2))
            if not 1 <= k <= MAX_K:
                raise ValueError(f"measures: k in {name!r} must be in [1, {MAX_K}], got {k}")
            return idx.by_family[m.group(1)], k
    hint = _alias_hint(name) if isinstance(name, str) else None
    raise ValueError(
        f"measures: unknown measure {name!r}; expected one of {valid_measure_names()}"
        + (f"; did you mean {hint!r}?" if hint else "")
    )


def parse_measure(name: str) -> tuple[str, int]:
    """Split a canonical measure name into ``(family, k)``.

    ``"Accuracy"`` is ``("HitRate", 1)`` (the family it is computed as).
    Unknown names raise ``ValueError`` listing the valid ones.
    """
    meas, k = lookup(name)
    return (meas.same_as[0], k) if meas.same_as else (meas.family, k)


def default_measures(k_values: Iterable[int]) -> list[str]:
    """The measures an experiment reports: every default family at each ``k``,
    those reported at the largest ``k`` only, then the rest.

    ``default_measures([1, 10])`` is ``P@1, R@1, nDCG@1, AP@1, RR@1,
    HitRate@1, P@10, ..., HitRate@10, Diversity@10, Accuracy``.
    """
    ks = list(dict.fromkeys(k_values))
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int | np.integer):
            raise TypeError(f"k_values: every k must be an integer, got {type(k).__name__} {k!r}")
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k_values: every k must be in [1, {MAX_K}], got {k}")
    every = [m for m in MEASURES if m.default and m.cutoff and not m.default_largest_k]
    out = [m.at(int(k)) for k in ks for m in every]
    if ks:
        out += [m.at(int(max(ks))) for m in MEASURES if m.default and m.default_largest_k]
    return out + [m.name for m in MEASURES if m.default and not m.cutoff]


def display_label(name: str) -> str:
    """Short display label of a canonical measure name (``"HitRate@5"`` -> ``"recall@5 (CLIP)"``)."""
    meas, k = lookup(name)
    return meas.label.format(k=k)


# ----------------------------------------------------------------------------- dispatch


def _vectors_needed(name: str) -> str:
    """Why a measure of the vectors cannot be computed from judgements."""
    return (
        f"measure {name!r} is computed from the indexed vectors of the returned documents, "
        "not from relevance judgements; score the ranking with "
        "imsearch_align.framework.ranking.score_ranking (as an experiment does), "
        "which holds the indexed documents"
    )


def needs_vectors(name: str) -> bool:
    """Whether a canonical measure name is computed from the indexed vectors."""
    return lookup(name)[0].needs_vectors


def compute(hits: Hits, measures: Sequence[str]) -> dict[str, np.ndarray]:
    """Every named measure from ``hits`` (``name -> (n_queries,) float64``).

    A measure of the vectors (``Diversity@k``) raises ``ValueError``: hits hold
    judgements only.
    """
    out: dict[str, np.ndarray] = {}
    for name in measures:
        meas, k = lookup(name)
        if meas.kernel is None:
            raise ValueError(_vectors_needed(name))
        out[name] = meas.kernel(hits, k)
    return out


def tie_aware_names(k: int | str = "k") -> list[str]:
    """The measures with a tie kernel at cutoff ``k`` (``"P@k"``, ..., ``"Accuracy"``)."""
    return [f"{m.family}@{k}" if m.cutoff else m.name for m in MEASURES if m.tie_kernel]


def lookup_tie_kernel(name: str) -> tuple[TieKernel, int]:
    """The tie kernel of a canonical measure name and its cutoff.

    Unknown names raise as :func:`lookup`; a measure whose entry has no
    ``tie_kernel`` raises ``ValueError`` naming the ones that have one.
    """
    meas, k = lookup(name)
    if meas.needs_vectors:
        raise ValueError(_vectors_needed(name))
    if meas.tie_kernel is None:
        *head, last = tie_aware_names()
        raise ValueError(
            f"measure {name!r} has no tie-aware form; tie-aware mode supports "
            f"{', '.join(head)} and {last}"
        )
    return meas.tie_kernel, k


def compute_tie_aware(groups: TieGroups, measures: Sequence[str]) -> dict[str, np.ndarray]:
    """Every named measure's expected value over tie orders (``name -> (groups.n,) float64``)."""
    out: dict[str, np.ndarray] = {}
    for name in measures:
        kernel, k = lookup_tie_kernel(name)
        out[name] = kernel(groups, k)
    return out


# ----------------------------------------------------------------------------- rendering


def markdown_table() -> str:
    """The README's definition table of the ranking measures (Markdown)."""
    lines = [
        "| ours | definition | trec_eval / pytrec_eval | CLIP_benchmark |",
        "|---|---|---|---|",
    ]
    for m in MEASURES:
        clip = ", ".join(inline_code(a) for a in m.clip_benchmark.split(", "))
        lines.append(f"| `{m.name}` | {m.definition} | {inline_code(m.trec_eval)} | {clip} |")
    return "\n".join(lines) + "\n"


def list_rows() -> list[tuple[str, str, str, str]]:
    """Rows ``(name, trec_eval, CLIP_benchmark, meaning)`` for ``imsearch-align list metrics``.

    Ranking measures first, then the task-level ones (meaning prefixed by
    their task).
    """
    rows = [
        (m.name, m.trec_eval, m.clip_benchmark, m.definition.replace("**", "").replace("`", ""))
        for m in MEASURES
    ]
    rows += [
        (t.name.replace("{k}", "k"), "-", t.clip_benchmark, f"{t.task}: {t.definition}")
        for t in TASK_MEASURES
    ]
    return rows
