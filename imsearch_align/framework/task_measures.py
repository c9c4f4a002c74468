"""The task-level measures: computed by the task that reports them, listed here.

Classification, matching, multi-label, linear probe, captioning and ANN
fidelity report measures outside the ranking kernel; :data:`TASK_MEASURES`
lists them so that ``imsearch-align list metrics``
(:func:`imsearch_align.framework.measures.list_rows`) and the README
(:func:`task_markdown_table`) show them beside the ranking measures of
:mod:`imsearch_align.framework.measures`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "TASK_MEASURES",
    "TaskMeasure",
    "default_metrics",
    "inline_code",
    "plot_metrics",
    "task_keys",
    "task_markdown_table",
]

#: What a task measure's placeholders stand for in the keys it reports.
PLACEHOLDERS = {"{space}": ("raw", "aligned")}


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
        headline: shown by default in the leaderboard (and the first of its task
            in the learning-curve plots).
    """

    name: str
    task: str
    where: str
    source: str
    definition: str
    clip_benchmark: str = "–"
    headline: bool = False

    def keys(self, ks: tuple[int, ...] = ()) -> tuple[str, ...]:
        """The keys the task reports for this measure (``{k}`` for each of ``ks``,
        ``{space}`` for each space)."""
        names = [self.name]
        for mark, values in PLACEHOLDERS.items():
            names = (
                [n.replace(mark, v) for n in names for v in values] if mark in self.name else names
            )
        if "{k}" in self.name:
            names = [n.replace("{k}", str(k)) for n in names for k in ks]
        return tuple(names)


#: Task-level measures, in report order.
TASK_MEASURES: tuple[TaskMeasure, ...] = (
    TaskMeasure(
        "acc1",
        "classification",
        "classification task (HitRate@1 of the class ranking)",
        "CLIP_benchmark zeroshot_classification",
        "top-1 accuracy: the true class ranks first among the class prompts",
        "acc1",
        headline=True,
    ),
    TaskMeasure(
        "acc5",
        "classification",
        "classification task (HitRate@5 of the class ranking)",
        "CLIP_benchmark zeroshot_classification",
        "top-5 accuracy: the true class is among the first 5 (nan with fewer than 5 classes)",
        "acc5",
        headline=True,
    ),
    TaskMeasure(
        "mean_per_class_recall",
        "classification",
        "classification task",
        "CLIP_benchmark (scikit-learn balanced_accuracy_score)",
        "mean over the classes present of the fraction of their images classified correctly",
        "mean_per_class_recall",
        headline=True,
    ),
    TaskMeasure(
        "ann_recall@{k}",
        "retrieval (--ann-fidelity)",
        "imsearch_align.framework.fidelity.ann_recall",
        "ann-benchmarks (tie-tolerant, true inner products of the returned ids)",
        "share of the exact top k found in the store's top k (ANN fidelity)",
    ),
    TaskMeasure(
        "accuracy",
        "matching",
        "matching task (scipy linear_sum_assignment; expectation over tied optima)",
        "MMA benchmark",
        "share of test images assigned their own caption, expected over the tied optimal "
        "one-to-one assignments (each max-score Hungarian assignment equally likely, scores "
        "within the tie tolerance equal)",
        headline=True,
    ),
    TaskMeasure(
        "top1_accuracy",
        "matching",
        "imsearch_align.experiment.tasks.matching.top1_accuracy",
        "HitRate@1 of each image's caption ranking",
        "share of test images whose best caption is their own, no one-to-one constraint "
        "(expected over captions tied with the best)",
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
        headline=True,
    ),
    TaskMeasure(
        "{space}_acc1",
        "linear_probe",
        "imsearch_align.diagnostics.linear_probe.linear_probe",
        "CLIP_benchmark linear_probe (procedure=clip_benchmark equals its evaluate on the same "
        "features)",
        "top-1 accuracy of a linear probe on frozen image embeddings, in each space (raw: the "
        "encoder's; aligned: the method's), by procedure: scikit-learn logistic regression "
        "(sklearn, default) or CLIP_benchmark's AdamW-trained linear layer with its weight-decay "
        "search (clip_benchmark)",
        "lp_acc1 (procedure clip_benchmark only)",
        headline=True,
    ),
    TaskMeasure(
        "{space}_acc5",
        "linear_probe",
        "imsearch_align.diagnostics.linear_probe.linear_probe",
        "CLIP_benchmark linear_probe (procedure=clip_benchmark equals its evaluate on the same "
        "features)",
        "top-5 accuracy of the same probe (nan with fewer than 5 classes for sklearn, 6 for "
        "clip_benchmark)",
        "lp_acc5 (procedure clip_benchmark only)",
    ),
    TaskMeasure(
        "{space}_mean_per_class_recall",
        "linear_probe",
        "imsearch_align.diagnostics.linear_probe.linear_probe",
        "scikit-learn balanced_accuracy_score",
        "mean over the classes present of the share of their test images the probe classifies "
        "correctly",
        "lp_mean_per_class_recall (procedure clip_benchmark only)",
    ),
    TaskMeasure(
        "bleu4",
        "captioning",
        "imsearch_align.diagnostics.captioning.retrieval_captioning_bleu",
        "sacrebleu corpus_bleu (not CLIP_benchmark's Bleu_4: see coco_bleu4)",
        "scorer sacrebleu (the default): corpus BLEU-4 (0-100; 13a tokens, case-sensitive, punctuation kept, "
        "exponential smoothing) of each image's nearest other-image caption against its "
        "reference captions",
        headline=True,
    ),
    *(
        TaskMeasure(
            f"coco_bleu{n}",
            "captioning",
            "imsearch_align.diagnostics.coco_caption.coco_bleu",
            "pycocoevalcap Bleu (tested equal)",
            f"scorer coco: corpus BLEU-{n} (0-1; PTB tokens lowercased, punctuation removed, no smoothing, "
            "closest reference length) of the same captions",
            f"Bleu_{n}",
        )
        for n in (1, 2, 3, 4)
    ),
    TaskMeasure(
        "coco_rouge_l",
        "captioning",
        "imsearch_align.diagnostics.coco_caption.coco_rouge_l",
        "pycocoevalcap Rouge (tested equal)",
        "scorer coco: mean over images of ROUGE-L F (beta 1.2; longest common subsequence, best precision "
        "and best recall over the references) on the same tokens",
        "ROUGE_L",
    ),
    TaskMeasure(
        "coco_cider_d",
        "captioning",
        "imsearch_align.diagnostics.coco_caption.coco_cider_d",
        "pycocoevalcap Cider, which is CIDEr-D (tested equal)",
        "scorer coco: CIDEr-D, 10 x mean over 1-4-grams of the clipped tf-idf similarity to each reference "
        "(idf from the images' reference sets), Gaussian length penalty (sigma 6), mean over "
        "images",
        "CIDEr",
    ),
    TaskMeasure(
        "coco_meteor",
        "captioning",
        "pycocoevalcap Meteor (its Java jar)",
        "METEOR 1.5 (pycocoevalcap)",
        "scorer coco: METEOR of the same tokens; nan, with the reason in the result, without a Java runtime "
        "and pycocoevalcap",
        "METEOR",
    ),
    TaskMeasure(
        "coco_spice",
        "captioning",
        "not implemented in this harness",
        "SPICE (pycocoevalcap)",
        "scorer coco: always nan, with the reason in the result (pycocoevalcap's SPICE needs Stanford "
        "CoreNLP models and 8 GB of Java heap)",
        "SPICE",
    ),
)


def inline_code(alias: str) -> str:
    """``"x (note)"`` -> ```x` (note)``; ``"–"`` stays."""
    if alias == "–":
        return alias
    head, _, note = alias.partition(" ")
    return f"`{head}`" + (f" {note}" if note else "")


def default_metrics() -> tuple[str, ...]:
    """``task/key`` of every headline measure, in table order: the leaderboard's default
    task columns."""
    return tuple(f"{t.task}/{key}" for t in TASK_MEASURES if t.headline for key in t.keys())


def plot_metrics() -> tuple[str, ...]:
    """The first headline measure of each task, in the aligned space where a measure has
    one per space (its last key): the learning-curve plots' defaults."""
    out: dict[str, str] = {}
    for t in TASK_MEASURES:
        if t.headline and t.task not in out:
            out[t.task] = f"{t.task}/{t.keys()[-1]}"
    return tuple(out.values())


def task_keys(task: str, ks: tuple[int, ...] = ()) -> tuple[str, ...]:
    """Every key task ``task`` reports from this table (the table is where they come from)."""
    return tuple(key for t in TASK_MEASURES if t.task == task for key in t.keys(ks))


def task_markdown_table() -> str:
    """The README's table of task-level measures (Markdown)."""
    lines = [
        "| measure | task | definition | CLIP_benchmark | source | computed by |",
        "|---|---|---|---|---|---|",
    ]
    for t in TASK_MEASURES:
        name, clip = t.name.replace("{k}", "k"), inline_code(t.clip_benchmark)
        lines.append(f"| `{name}` | {t.task} | {t.definition} | {clip} | {t.source} | {t.where} |")
    return "\n".join(lines) + "\n"
