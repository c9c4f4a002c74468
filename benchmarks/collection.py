"""The collection-scale study: ``imsearch-align study`` under its old name.

    python benchmarks/collection.py --embeddings DIR                # 0, 100k, 1M distractors
    python benchmarks/collection.py --shapes 120 --quick            # offline, a couple of minutes
    python benchmarks/collection.py --config benchmarks/studies/default.yaml --shapes-root DIR

Every flag is a field of :class:`imsearch_align.study.StudySpec` and means what
it means to ``imsearch-align study`` (``--help`` lists them); the study is
:func:`imsearch_align.study.run_study`. See ``docs/collection-study.md``.
"""

from __future__ import annotations

import sys

from imsearch_align.cli import main as cli_main


def main(argv: list[str] | None = None) -> int:
    """``imsearch-align study ARGV``: the study's exit status."""
    return cli_main(["study", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
