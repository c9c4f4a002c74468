"""The one table of measures: every name, alias, definition and kernel lives here.

Ranking measures (:data:`MEASURES`) are computed by :func:`imsearch_align.evaluate`
from the ranked results and the relevance judgements. Each entry says, once:

* ``name``: our canonical name pattern (``"P@k"``; ``"Accuracy"`` has no cutoff);
* ``trec_eval``: the trec_eval / pytrec_eval name, ``clip_benchmark``: the
  CLIP_benchmark alias (``"–"`` where it has none);
* ``definition``: one line, as in the README;
* ``cutoff``: whether the name takes ``@k``; ``default``: whether the
  experiment reports it at every ``k`` of ``k_values``;
* ``label``: a short display label (``{k}`` is the cutoff);
* ``kernel``: ``kernel(hits, k) -> (n_queries,) float64``, a segment reduction
  over the sparse hit structure :class:`Hits` (cost grows with the number of
  relevant hits, not with ``n_queries * k``).

Adding a measure is one :class:`Measure` entry: parsing
(:func:`parse_measure`), the default list (:func:`default_measures`), kernel
dispatch (:func:`compute`), ``imsearch-align list metrics``
(:func:`list_rows`) and the README table (:func:`markdown_table`) all read
the table.

Task-level measures (:data:`TASK_MEASURES`) are computed outside the
ranking kernel by the task that reports them (classification, matching,
multi-label, linear probe, captioning, ANN fidelity); they are listed here so
that the CLI and the README show them beside the ranking measures.

This module imports numpy only.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

__all__ = [
    "MAX_K",
    "MEASURES",
    "TASK_MEASURES",
    "Hits",
    "Measure",
    "TaskMeasure",
    "compute",
    "default_measures",
    "display_label",
    "list_rows",
    "lookup",
    "markdown_table",
    "parse_measure",
    "task_markdown_table",
    "valid_measure_names",
]

#: Largest cutoff a measure name may carry.
MAX_K = 1_000_000


# ----------------------------------------------------------------------------- hit structure


class Hits:
    """The non-zero cells of a ``(n_queries, K)`` gain matrix, and what kernels share.

    ``rows`` index the queries, ``cols`` are 0-based ranks, ``gains`` the
    graded relevance (> 0), sorted by ``(row, col)``. ``n_relevant`` is the
    number of relevant judgements per query (at ``relevance_level``) and
    ``ideal_dcg(k)`` the ideal DCG@k per query from the qrels. Derived arrays
    (the binary hits, the first relevant rank, counts within ``k``) are
    computed once and shared by every kernel that needs them.
    """

    def __init__(
        self,
        rows: np.ndarray,
        cols: np.ndarray,
        gains: np.ndarray,
        *,
        n_queries: int,
        n_relevant: np.ndarray,
        ideal_dcg: Callable[[int], np.ndarray],
        relevance_level: float | None = None,
    ) -> None:
        self.rows = rows
        self.cols = cols
        self.gains = gains
        self.n_queries = int(n_queries)
        self.n_relevant = np.asarray(n_relevant, dtype=np.float64)
        self.relevance_level = relevance_level
        self._ideal_dcg = ideal_dcg
        self._ideal: dict[int, np.ndarray] = {}
        self._count: dict[int, np.ndarray] = {}

    @cached_property
    def binary(self) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, cols)`` of the hits that are relevant at ``relevance_level``."""
        if self.relevance_level is None:
            return self.rows, self.cols  # gains are > 0 by construction
        keep = self.gains >= self.relevance_level
        return self.rows[keep], self.cols[keep]

    @cached_property
    def _row_start(self) -> np.ndarray:
        br, _ = self.binary
        new = np.ones(len(br), dtype=bool)
        if len(br):
            new[1:] = br[1:] != br[:-1]
        return new

    @cached_property
    def rank_among_relevant(self) -> np.ndarray:
        """1-based position of each binary hit among its query's binary hits."""
        new = self._row_start
        n = len(new)
        return np.arange(n) - np.maximum.accumulate(np.where(new, np.arange(n), 0)) + 1

    @cached_property
    def first_rank(self) -> np.ndarray:
        """0-based rank of each query's first relevant hit (int64 max where none)."""
        br, bc = self.binary
        first = np.full(self.n_queries, np.iinfo(np.int64).max, dtype=np.int64)
        new = self._row_start
        first[br[new]] = bc[new]
        return first

    @cached_property
    def discounted_gains(self) -> np.ndarray:
        """``gain / log2(rank + 1)`` of every hit (1-based rank), shared by every nDCG cutoff."""
        return self.gains / np.log2(self.cols + 2.0)

    def count_within(self, k: int) -> np.ndarray:
        """Relevant hits in the top ``k`` per query (float64)."""
        if k not in self._count:
            br, bc = self.binary
            self._count[k] = np.bincount(br[bc < k], minlength=self.n_queries).astype(np.float64)
        return self._count[k]

    def ideal_dcg(self, k: int) -> np.ndarray:
        """Ideal DCG@k per query (from the judgements, trec_eval)."""
        if k not in self._ideal:
            self._ideal[k] = np.asarray(self._ideal_dcg(k), dtype=np.float64)
        return self._ideal[k]

    def per_relevant(self, values: np.ndarray) -> np.ndarray:
        """``values / n_relevant``, 0 for queries without relevant judgements."""
        R = self.n_relevant
        return np.where(R > 0, values / np.where(R > 0, R, 1.0), 0.0)


# ----------------------------------------------------------------------------- kernels


def _precision(h: Hits, k: int) -> np.ndarray:
    return h.count_within(k) / k


def _recall(h: Hits, k: int) -> np.ndarray:
    return h.per_relevant(h.count_within(k))


def _hit_rate(h: Hits, k: int) -> np.ndarray:
    return (h.count_within(k) > 0).astype(np.float64)


def _reciprocal_rank(h: Hits, k: int) -> np.ndarray:
    first = h.first_rank
    return np.where(first < k, 1.0 / (first + 1.0), 0.0)


def _average_precision(h: Hits, k: int) -> np.ndarray:
    br, bc = h.binary
    within = bc < k
    s = np.bincount(
        br[within],
        weights=h.rank_among_relevant[within] / (bc[within] + 1.0),
        minlength=h.n_queries,
    )
    return h.per_relevant(s)


def _ndcg(h: Hits, k: int) -> np.ndarray:
    # Graded gains: every positive judgement counts, whatever relevance_level.
    w = h.cols < k
    dcg = np.bincount(h.rows[w], weights=h.discounted_gains[w], minlength=h.n_queries)
    idcg = h.ideal_dcg(k)
    return np.where(idcg > 0, dcg / np.where(idcg > 0, idcg, 1.0), 0.0)


Kernel = Callable[[Hits, int], np.ndarray]


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
    kernel: Kernel = field(repr=False)
    #: For a name without cutoff (required there): the ``(family, k)`` it is computed as.
    same_as: tuple[str, int] | None = None

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
        kernel=_precision,
    ),
    Measure(
        "R@k",
        "recall_k",
        "–",
        "relevant in the top k, divided by all relevant docs of the query (IR recall)",
        cutoff=True,
        default=True,
        label="IR recall@{k}",
        kernel=_recall,
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
        kernel=_ndcg,
    ),
    Measure(
        "AP@k",
        "map_cut_k",
        "–",
        "sum of P@i at each relevant rank i <= k, divided by all relevant docs",
        cutoff=True,
        default=True,
        label="AP@{k}",
        kernel=_average_precision,
    ),
    Measure(
        "RR@k",
        "recip_rank (no cutoff)",
        "–",
        "1 / rank of the first relevant doc within k, else 0",
        cutoff=True,
        default=True,
        label="RR@{k}",
        kernel=_reciprocal_rank,
    ),
    Measure(
        "HitRate@k",
        "success_k",
        "image_retrieval_recall@k (text→image), text_retrieval_recall@k (image→text)",
        "1 if any relevant doc is in the top k",
        cutoff=True,
        default=True,
        label="recall@{k} (CLIP)",
        kernel=_hit_rate,
    ),
    Measure(
        "Accuracy",
        "success_1",
        "acc1",
        "`HitRate@1`: the top result is relevant",
        cutoff=False,
        default=True,
        label="acc@1",
        kernel=_hit_rate,
        same_as=("HitRate", 1),
    ),
)


@dataclass(frozen=True)
class TaskMeasure:
    """A measure computed by a task outside the ranking kernel.

    Attributes:
        name: the key the task reports (``{k}`` marks a cutoff).
        task: the task that reports it.
        where: the function that computes it.
        source: whose definition it follows.
        definition: one line.
        clip_benchmark: CLIP_benchmark's key for it, ``"–"`` where it has none.
    """

    name: str
    task: str
    where: str
    source: str
    definition: str
    clip_benchmark: str = "–"


#: Task-level measures, in report order.
TASK_MEASURES: tuple[TaskMeasure, ...] = (
    TaskMeasure(
        "acc1",
        "classification",
        "classification task (HitRate@1 of the class ranking)",
        "CLIP_benchmark zeroshot_classification",
        "top-1 accuracy: the true class ranks first among the class prompts",
        "acc1",
    ),
    TaskMeasure(
        "acc5",
        "classification",
        "classification task (HitRate@5 of the class ranking)",
        "CLIP_benchmark zeroshot_classification",
        "top-5 accuracy: the true class is among the first 5 (nan with fewer than 5 classes)",
        "acc5",
    ),
    TaskMeasure(
        "mean_per_class_recall",
        "classification",
        "classification task",
        "CLIP_benchmark (scikit-learn balanced_accuracy_score)",
        "mean over the classes present of the fraction of their images classified correctly",
        "mean_per_class_recall",
    ),
    TaskMeasure(
        "ann_recall@{k}",
        "retrieval (--ann-fidelity)",
        "imsearch_align.framework.fidelity.ann_recall",
        "ann-benchmarks (tie-tolerant, true inner products of the returned ids)",
        "share of the exact top k found in the store's top k (ANN fidelity)",
    ),
    TaskMeasure(
        "matching_accuracy",
        "matching",
        "matching task (scipy linear_sum_assignment)",
        "MMA benchmark",
        "share of test images assigned to their own caption by a one-to-one Hungarian "
        "assignment on the aligned scores",
    ),
    TaskMeasure(
        "mAP",
        "multilabel",
        "imsearch_align.diagnostics.multilabel.multilabel_map",
        "CLIP_benchmark mean_average_precision (torchnet AP)",
        "mean over classes of the average precision of the images ranked by class score "
        "(float64 inner products; expected over the orders of tied images); a class without "
        "positives scores 0 and counts",
        "mean_average_precision",
    ),
    TaskMeasure(
        "lp_acc1",
        "linear_probe",
        "imsearch_align.diagnostics.linear_probe.linear_probe",
        "CLIP_benchmark linear_probe",
        "top-1 accuracy of a logistic regression on frozen image embeddings",
        "lp_acc1",
    ),
    TaskMeasure(
        "lp_acc5",
        "linear_probe",
        "imsearch_align.diagnostics.linear_probe.linear_probe",
        "CLIP_benchmark linear_probe",
        "top-5 accuracy of the same probe (nan with fewer than 5 classes)",
        "lp_acc5",
    ),
    TaskMeasure(
        "bleu4",
        "captioning",
        "imsearch_align.diagnostics.captioning.retrieval_captioning_bleu",
        "sacrebleu corpus_bleu (CLIP_benchmark's captioning Bleu_4, x 100)",
        "corpus BLEU-4 (0-100) of each image's nearest other-image caption against its "
        "reference captions",
        "Bleu_4 (x 100)",
    ),
)


# ----------------------------------------------------------------------------- parsing


class _Index:
    """Lookup structures derived from :data:`MEASURES` (rebuilt if the table is replaced)."""

    def __init__(self, table: tuple[Measure, ...]) -> None:
        self.table = table
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
    """The measures an experiment reports: every default family at each ``k``, then the rest.

    ``default_measures([1, 10])`` is ``P@1, R@1, nDCG@1, AP@1, RR@1,
    HitRate@1, P@10, ..., HitRate@10, Accuracy``.
    """
    ks = list(dict.fromkeys(k_values))
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, int | np.integer):
            raise TypeError(f"k_values: every k must be an integer, got {type(k).__name__} {k!r}")
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k_values: every k must be in [1, {MAX_K}], got {k}")
    out = [m.at(int(k)) for k in ks for m in MEASURES if m.default and m.cutoff]
    return out + [m.name for m in MEASURES if m.default and not m.cutoff]


def display_label(name: str) -> str:
    """Short display label of a canonical measure name (``"HitRate@5"`` -> ``"recall@5 (CLIP)"``)."""
    meas, k = lookup(name)
    return meas.label.format(k=k)


# ----------------------------------------------------------------------------- dispatch


def compute(hits: Hits, measures: Sequence[str]) -> dict[str, np.ndarray]:
    """Every named measure from ``hits`` (``name -> (n_queries,) float64``)."""
    out: dict[str, np.ndarray] = {}
    for name in measures:
        meas, k = lookup(name)
        out[name] = meas.kernel(hits, k)
    return out


# ----------------------------------------------------------------------------- rendering


def _code(alias: str) -> str:
    """``"x (note)"`` -> ```x` (note)``; ``"–"`` stays."""
    if alias == "–":
        return alias
    head, _, note = alias.partition(" ")
    return f"`{head}`" + (f" {note}" if note else "")


def markdown_table() -> str:
    """The README's definition table of the ranking measures (Markdown)."""
    lines = [
        "| ours | definition | trec_eval / pytrec_eval | CLIP_benchmark |",
        "|---|---|---|---|",
    ]
    for m in MEASURES:
        clip = ", ".join(_code(a) for a in m.clip_benchmark.split(", "))
        lines.append(f"| `{m.name}` | {m.definition} | {_code(m.trec_eval)} | {clip} |")
    return "\n".join(lines) + "\n"


def task_markdown_table() -> str:
    """The README's table of task-level measures (Markdown)."""
    lines = [
        "| measure | task | definition | CLIP_benchmark | source | computed by |",
        "|---|---|---|---|---|---|",
    ]
    for t in TASK_MEASURES:
        name = t.name.replace("{k}", "k")
        lines.append(
            f"| `{name}` | {t.task} | {t.definition} | {_code(t.clip_benchmark)} | {t.source} "
            f"| {t.where} |"
        )
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
