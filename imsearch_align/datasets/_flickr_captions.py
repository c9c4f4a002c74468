"""Flickr30k's caption files, each read into per-image records.

A record is ``(file name, split or None, captions)``, captions checked (a bad
one raises or is skipped through :class:`~imsearch_align.datasets._local.Skips`),
files in first-seen order: :func:`read_karpathy` (``dataset_flickr30k.json``),
:func:`read_results` (``results.csv``), :func:`read_captions_txt`
(``captions.txt``). An image whose every caption was skipped is kept with
none (a text-to-image distractor).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from imsearch_align.datasets._local import Skips, read_karpathy_json, read_text, sentence_captions

__all__ = ["Record", "read_captions_txt", "read_karpathy", "read_results"]

#: ``(file name, split or None, captions)`` of one image.
Record = tuple[str, str | None, list[str]]


def read_karpathy(
    path: Path, skips: Skips, skip_bad_captions: bool
) -> tuple[list[Record], dict[str, str]]:
    """Records of Karpathy's ``dataset_flickr30k.json`` and ``{file name: split}``."""

    def record(i: int, im: Any) -> Record:
        fname, split = str(im["filename"]), str(im["split"])
        where = f"{str(path)!r} images[{i}] ({fname})"
        return (
            fname,
            split,
            sentence_captions(im["sentences"], where, skips, skip=skip_bad_captions),
        )

    recs = read_karpathy_json(
        path,
        record,
        what="a Karpathy caption file",
        expected='{"images": [{"filename", "split", "sentences": [{"raw"}]}]}',
    )
    return recs, {f: s for f, s, _ in recs}


def _group(pairs: list[tuple[str, int, str]]) -> list[Record]:
    """(file, order, caption) rows -> per-file records, files in first-seen order."""
    by_file: dict[str, list[tuple[int, str]]] = {}
    for f, order, cap in pairs:
        by_file.setdefault(f, []).append((order, cap))
    return [
        (f, None, [c for _, c in sorted(caps, key=lambda t: t[0])]) for f, caps in by_file.items()
    ]


def read_results(path: Path, skips: Skips, skip_bad_captions: bool) -> list[Record]:
    """Records of the Kaggle copy's ``results.csv`` (``image_name| comment_number| comment``)."""
    pairs: list[tuple[str, int, str]] = []
    lines = read_text(path).splitlines()
    header = lines[0] if lines else ""
    if "image_name" not in header or "comment" not in header:
        raise ValueError(
            f"{str(path)!r} line 1: expected header 'image_name| comment_number| comment', "
            f"got {header.strip()!r}"
        )
    seen: set[str] = set()
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|", 2)]
        caption: str | None = parts[2] if len(parts) == 3 else None
        if len(parts) == 2:
            # The Kaggle copy has a row with a lost "|": "x.jpg| 4 A dog ...".
            num, _, rest = parts[1].partition(" ")
            parts = [parts[0], num, rest]
            caption = rest if rest.strip() else None
        if len(parts) != 3 or not parts[1].strip().isdigit() or not parts[0]:
            raise ValueError(
                f"{str(path)!r} line {lineno}: expected 'image_name| comment_number| comment', "
                f"got {line!r}"
            )
        seen.add(parts[0])
        c = skips.caption(caption, f"{str(path)!r} line {lineno}", skip=skip_bad_captions)
        if c is not None:
            pairs.append((parts[0], int(parts[1]), c))
    return _with_uncaptioned(_group(pairs), seen)


def _with_uncaptioned(records: list[Record], files: set[str]) -> list[Record]:
    """Keep images whose every caption was skipped, with no captions (t2i distractors)."""
    have = {r[0] for r in records}
    return records + [(f, None, []) for f in sorted(files - have)]


def read_captions_txt(path: Path, skips: Skips, skip_bad_captions: bool) -> list[Record]:
    """Records of a ``captions.txt`` (``image,caption``; unquoted captions may hold commas)."""
    pairs: list[tuple[str, int, str]] = []
    rows = csv.reader(io.StringIO(read_text(path), newline=""))
    header = next(rows, None)
    if header is None or [h.strip() for h in header[:2]] != ["image", "caption"]:
        raise ValueError(f"{str(path)!r} line 1: expected header 'image,caption', got {header!r}")
    seen: set[str] = set()
    for i, row in enumerate(rows):
        if not row or not any(c.strip() for c in row):
            continue
        where = f"{str(path)!r} line {rows.line_num}"
        if not row[0].strip():
            raise ValueError(f"{where}: expected 'image,caption', got no image name in {row!r}")
        seen.add(row[0].strip())
        # Unquoted captions may contain commas: everything after the first is caption.
        caption = ",".join(row[1:]) if len(row) > 1 else None
        c = skips.caption(caption, where, skip=skip_bad_captions)
        if c is not None:
            pairs.append((row[0].strip(), i, c))
    return _with_uncaptioned(_group(pairs), seen)
