"""COCO-caption scores (pycocoevalcap's definitions), BLEU, ROUGE-L and CIDEr-D in Python.

CLIP_benchmark scores captions with pycocoevalcap: captions are tokenised by
Stanford's PTBTokenizer (a Java jar, ``-lowerCase -preserveLines``), the
tokens in :data:`PUNCTUATIONS` are dropped, and ``Bleu(4)``, ``Rouge()``,
``Cider()``, ``Meteor()`` and ``Spice()`` score the token strings. This module
reimplements the tokeniser (:func:`ptb_tokenize`) and the three pure-Python
scorers (:func:`coco_bleu`, :func:`coco_rouge_l`, :func:`coco_cider_d`), so
BLEU-1..4, ROUGE-L and CIDEr-D need no Java. METEOR runs pycocoevalcap's own
jar when a Java runtime and pycocoevalcap are installed; otherwise, like
SPICE (not implemented in this harness), it is reported as unavailable with
the reason, never as 0.

The tokeniser reproduces PTBTokenizer 3.4.1 on ordinary caption text (words,
numbers, contractions, quotes, brackets, the abbreviations that keep their
period); it agreed with the jar on all but 4 of 3,305 test captions (3,000 of them
random mixes of caption words, capitals, punctuation and contractions). Known
differences, all rare in captions: emoticons (``:)`` is one token in PTB),
``AT&T``-style capital acronyms with ``&`` (one token in PTB), a missing
space after an acronym (``i.e.the``, ``#e.g.``), and a decimal joined to a
hyphenated word (``3.5-inch``: the jar keeps ``3.5-inch`` whole, this
tokeniser splits it). It is a re-implementation, not the jar: scores of
captions with such tokens can differ from pycocoevalcap's in the last digits.
"""

from __future__ import annotations

import math
import re
import shutil
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "COCO_METRICS",
    "PUNCTUATIONS",
    "CocoCaptionResult",
    "coco_bleu",
    "coco_caption_scores",
    "coco_cider_d",
    "coco_rouge_l",
    "ptb_tokenize",
]

#: pycocoevalcap's ``tokenizer/ptbtokenizer.py`` drops these tokens. Its
#: brackets are upper case while the tokens are lower-cased, so ``-lrb-`` and
#: the like stay (as they do in pycocoevalcap).
PUNCTUATIONS = frozenset("'' ' `` ` -LRB- -RRB- -LCB- -RCB- . ? ! , : - -- ... ;".split())

#: The keys :func:`coco_caption_scores` reports, in order.
COCO_METRICS = (
    "coco_bleu1",
    "coco_bleu2",
    "coco_bleu3",
    "coco_bleu4",
    "coco_rouge_l",
    "coco_cider_d",
    "coco_meteor",
    "coco_spice",
)

# Words PTBTokenizer 3.4.1 keeps with their period (checked against the jar).
_ABBREVIATIONS = (
    "etc|al|seq|bldg|vs|t|mr|mrs|ms|drs?|profs?|sens?|reps?|attys?|lt|col|gen|messrs|govs?|adm|rev"
    "|maj|sgt|cpl|pvt|capt|ste?|ave|pres|lieut|hon|brig|co?mdr|pfc|spc|supts?|det|mt|ft|adj"
    "|adv|asst|assoc|ens|insp|mlle|mme|msgr|sfc|invt|elec|natl|mfg|mtg|inc|cos?|corp|ptys?"
    "|ltd|plc|rt|bancorp|dept|bhd|assn|univ|intl|sys|tel|est|ext|sq|jr|sr|bros|blvd|rd|esq"
    "|jan|feb|mar|apr|jun|jul|aug|sept?|oct|nov|dec|mon|tues?|wed|thu|thurs|fri|ala|ariz"
    "|calif|colo|conn|ct|dak|fla|ga|ind|kans?|ky|md|mich|minn|mo|mont|neb|nev|okla|penn|tenn"
    "|va|vt|wisc?|wyo"
)
_CAPITAL_ABBREVIATIONS = "Ill|Miss|Wash|Mass|La|Pa|Ore|Del|Tex|Az|Ark"  # only capitalised

_TOKEN = re.compile(
    r"""
    (?P<url>(?:https?://|www\.)[^\s"'()\[\]{}<>]*[^\s"'()\[\]{}<>.,;:!?])
  | (?P<email>[\w.+-]+@[\w-]+(?:\.[\w-]+)+)
  | (?P<tag>[#@][^\W\d]\w*)
  | (?P<acronym>[^\W\d_](?:\.[^\W\d_])+\.?(?![^\W\d_]))
  | (?P<split>(?:can(?=not)|gon(?=na)|got(?=ta)|wan(?=na)|lem(?=me)|gim(?=me))(?=\w+\b(?!'\w)))
  | (?P<negation>n't\b|\w+?(?=n't\b))
  | (?P<clitic>'(?:s|re|ve|ll|d|m)\b|'t(?=(?:is|was)\b)|'n'|y'(?=all\b)|'\d\ds\b|'\d\d(?=\s|$))
  | (?P<o>o'\w+|ma'am\b)
  | (?P<abbrev>(?:"""
    + _ABBREVIATIONS
    + r"""|(?-i:"""
    + _CAPITAL_ABBREVIATIONS
    + r"""))\.(?!\w)|no\.(?=\s*\d)|[^\W\d_]\.(?!\w))
  | (?P<number>[-+]?\d+(?:[.,:/]\d+)+|[-+]?\.\d+|[-+]\d+(?!\w))
  | (?P<word>\w+(?:[-/.]\w+)*)
  | (?P<ellipsis>\.\.\.)
  | (?P<dashes>-{2,})
  | (?P<marks>[!?]+)
  | (?P<quote>[\"“”]|``|'')
  | (?P<other>\S)
    """,
    re.VERBOSE | re.IGNORECASE,
)
_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}
_APOSTROPHES = str.maketrans({"‘": "'", "’": "'", "…": "...", "—": "--", "–": "--"})


def ptb_tokenize(caption: str) -> str:
    """A caption tokenised as pycocoevalcap does, without Java.

    Lower-cased PTB tokens (PTBTokenizer 3.4.1 rules, reimplemented) joined by
    single spaces, with the tokens in :data:`PUNCTUATIONS` removed; ``""``
    when nothing is left.
    """
    text = caption.replace("\n", " ").translate(_APOSTROPHES)
    tokens = []
    for m in _TOKEN.finditer(text):
        kind, tok = m.lastgroup, m.group()
        if kind == "quote":
            tok = "''"
        elif kind == "dashes":
            tok = "--"
        elif kind == "other":
            tok = _BRACKETS.get(tok, tok)
        tok = tok.lower()
        if tok not in PUNCTUATIONS:
            tokens.append(tok)
    return " ".join(tokens)


def _ngrams(words: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(
        tuple(words[i : i + k]) for k in range(1, n + 1) for i in range(len(words) - k + 1)
    )


def coco_bleu(
    hypotheses: Sequence[str], references: Sequence[Sequence[str]], n: int = 4
) -> list[float]:
    """Corpus BLEU-1..n of tokenised captions (pycocoevalcap ``Bleu(n)``, 0-1).

    Clipped n-gram counts and lengths summed over the corpus; per hypothesis
    the effective reference length is the closest one (the shorter on a tie);
    no smoothing, only pycocoevalcap's guards (``1e-15`` added to matches and
    the hypothesis length, ``1e-9`` to counts and the reference length).
    """
    tiny, small = 1e-15, 1e-9
    correct, guess = [0] * n, [0] * n
    hyp_len = ref_len = 0
    for hyp, refs in zip(hypotheses, references):
        words = hyp.split()
        max_ref: dict[tuple[str, ...], int] = {}
        lengths = []
        for ref in refs:
            ref_words = ref.split()
            lengths.append(len(ref_words))
            for gram, c in _ngrams(ref_words, n).items():
                max_ref[gram] = max(max_ref.get(gram, 0), c)
        hyp_len += len(words)
        ref_len += min(lengths, key=lambda m: (abs(m - len(words)), m))
        for gram, c in _ngrams(words, n).items():
            correct[len(gram) - 1] += min(c, max_ref.get(gram, 0))
        for k in range(n):
            guess[k] += max(0, len(words) - k)
    ratio = (hyp_len + tiny) / (ref_len + small)
    penalty = math.exp(1 - 1 / ratio) if ratio < 1 else 1.0
    out, product = [], 1.0
    for k in range(n):
        product *= (correct[k] + tiny) / (guess[k] + small)
        out.append(product ** (1 / (k + 1)) * penalty)
    return out


def _lcs(a: Sequence[str], b: Sequence[str]) -> int:
    row = [0] * (len(b) + 1)
    for x in a:
        prev_diag = 0
        for j, y in enumerate(b, 1):
            prev_diag, row[j] = row[j], prev_diag + 1 if x == y else max(row[j], row[j - 1])
    return row[-1]


def coco_rouge_l(
    hypotheses: Sequence[str], references: Sequence[Sequence[str]], beta: float = 1.2
) -> float:
    """Mean over images of ROUGE-L (pycocoevalcap ``Rouge``, 0-1).

    Per image: precision and recall of the longest common subsequence, each
    the maximum over the references, combined as F with ``beta`` (1.2).
    Captions are split on single spaces (an empty caption is one empty token).
    """
    scores = []
    for hyp, refs in zip(hypotheses, references):
        cand = hyp.split(" ")
        prec, rec = 0.0, 0.0
        for ref in refs:
            toks = ref.split(" ")
            lcs = _lcs(toks, cand)
            prec, rec = max(prec, lcs / len(cand)), max(rec, lcs / len(toks))
        f = (1 + beta**2) * prec * rec / (rec + beta**2 * prec) if prec and rec else 0.0
        scores.append(f)
    return math.fsum(scores) / len(scores) if scores else float("nan")


def coco_cider_d(
    hypotheses: Sequence[str],
    references: Sequence[Sequence[str]],
    n: int = 4,
    sigma: float = 6.0,
) -> float:
    """CIDEr-D of tokenised captions (pycocoevalcap ``Cider``), mean over images.

    Each caption is a tf-idf vector per n-gram order (1..n); the document
    frequency of an n-gram is the number of images whose reference set has
    it, idf ``log(n_images) - log(max(1, df))``. Per reference and order: the
    hypothesis weights clipped at the reference's, the cosine-style product,
    times the Gaussian penalty ``exp(-delta**2 / (2 sigma**2))`` where delta
    is the difference in bigram counts (pycocoevalcap's length). The image's
    score is 10 x the mean over orders of the mean over references.
    """
    refs_grams = [[_ngrams(r.split(), n) for r in refs] for refs in references]
    df: Counter[tuple[str, ...]] = Counter()
    for grams in refs_grams:
        df.update({g for counts in grams for g in counts})
    log_n = math.log(float(len(refs_grams))) if refs_grams else 0.0

    def tfidf(counts: Counter[tuple[str, ...]]) -> tuple[list[dict], list[float], int]:
        vec: list[dict[tuple[str, ...], float]] = [{} for _ in range(n)]
        for gram, tf in counts.items():
            vec[len(gram) - 1][gram] = tf * (log_n - math.log(max(1.0, df[gram])))
        norms = [math.sqrt(sum(v * v for v in order.values())) for order in vec]
        bigrams = sum(c for g, c in counts.items() if len(g) == 2)
        return vec, norms, bigrams

    scores = []
    for hyp, grams in zip(hypotheses, refs_grams):
        vh, nh, lh = tfidf(_ngrams(hyp.split(), n))
        total = [0.0] * n
        for counts in grams:
            vr, nr, lr = tfidf(counts)
            penalty = math.exp(-((lh - lr) ** 2) / (2 * sigma**2))
            for k in range(n):
                dot = sum(min(w, vr[k].get(g, 0.0)) * vr[k].get(g, 0.0) for g, w in vh[k].items())
                if nh[k] != 0 and nr[k] != 0:
                    dot /= nh[k] * nr[k]
                total[k] += dot * penalty
        scores.append(10.0 * (sum(total) / n) / len(grams))
    return math.fsum(scores) / len(scores) if scores else float("nan")


_SPICE_REASON = (
    "not implemented in this harness (pycocoevalcap's SPICE downloads Stanford CoreNLP models "
    "at first use and needs 8 GB of Java heap)"
)


def _meteor(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float | str:
    """METEOR 1.5 through pycocoevalcap's jar, or the reason it is unavailable."""
    if shutil.which("java") is None:
        return (
            "needs a Java runtime (e.g. apt-get install default-jre) and pip install pycocoevalcap"
        )
    try:
        from pycocoevalcap.meteor.meteor import Meteor
    except ImportError:
        return "needs pycocoevalcap (pip install pycocoevalcap) beside the Java runtime"
    gts = {i: list(refs) for i, refs in enumerate(references)}
    res = {i: [hyp] for i, hyp in enumerate(hypotheses)}
    try:
        scorer = Meteor()
        try:
            score, _ = scorer.compute_score(gts, res)
        finally:
            del scorer
    except Exception as exc:  # any failure of the jar is a reason, not a crash
        return f"pycocoevalcap's METEOR jar failed: {type(exc).__name__}: {exc}"
    return float(score)


@dataclass(frozen=True)
class CocoCaptionResult:
    """COCO-caption scores of one hypothesis per image.

    Attributes:
        scores: every key of :data:`COCO_METRICS`; ``nan`` where unavailable.
        unavailable: metric -> why it was not computed.
        hypotheses: the tokenised hypotheses.
        references: the tokenised references, per image.
    """

    scores: dict[str, float]
    unavailable: dict[str, str] = field(default_factory=dict)
    hypotheses: tuple[str, ...] = ()
    references: tuple[tuple[str, ...], ...] = ()


def coco_caption_scores(
    hypotheses: Sequence[str], references: Sequence[Sequence[str]], *, meteor: bool = True
) -> CocoCaptionResult:
    """pycocoevalcap's scores of raw captions: PTB-tokenised, punctuation removed.

    ``references[i]`` are image ``i``'s reference captions (at least one).
    ``meteor=False`` skips METEOR (reported unavailable, "not requested").

    Raises:
        ValueError: mismatched lengths or an image without references.
    """
    if len(references) != len(hypotheses):
        raise ValueError(f"references has {len(references)} entries, hypotheses {len(hypotheses)}")
    empty = [i for i, r in enumerate(references) if len(r) == 0]
    if empty:
        raise ValueError(f"image {empty[0]} has no reference captions")
    hyps = tuple(ptb_tokenize(h) for h in hypotheses)
    refs = tuple(tuple(ptb_tokenize(r) for r in rs) for rs in references)
    scores = dict(zip(COCO_METRICS[:4], coco_bleu(hyps, refs)))
    scores["coco_rouge_l"] = coco_rouge_l(hyps, refs)
    scores["coco_cider_d"] = coco_cider_d(hyps, refs)
    unavailable = {"coco_spice": _SPICE_REASON}
    got = _meteor(hyps, refs) if meteor else "not requested (meteor=False)"
    if isinstance(got, str):
        unavailable["coco_meteor"] = got
        got = float("nan")
    scores["coco_meteor"], scores["coco_spice"] = got, float("nan")
    return CocoCaptionResult(
        {k: scores[k] for k in COCO_METRICS}, dict(sorted(unavailable.items())), hyps, refs
    )
