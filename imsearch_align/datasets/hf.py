"""Any Hugging Face ``datasets`` dataset, a local file of one, or a DataFrame, with image and captions.

``data`` may be:

* a folder written by ``Dataset.save_to_disk`` or ``DatasetDict.save_to_disk``
  (read with ``datasets.load_from_disk``);
* a ``.parquet``, ``.csv``, ``.tsv``, ``.json`` / ``.jsonl`` or ``.arrow``
  file, or a glob of them (``data/*.parquet``; read with
  ``datasets.load_dataset(<format>, data_files=...)``);
* any other folder: ``datasets.load_dataset(folder)`` (an ``imagefolder``
  with ``metadata.csv``/``metadata.jsonl``, or a folder of data files);
* a Hub dataset name (``owner/name``), loaded when online;
* an in-memory ``datasets.Dataset`` / ``DatasetDict`` or a pandas DataFrame.

The image column may hold PIL images, ``{"bytes", "path"}`` dicts (a
``datasets.Image`` column), encoded bytes, or file paths (relative paths are
taken relative to the data file's folder when ``data`` is a path). Caption
columns hold a string or a list of strings per row. Images are stored as
bytes or paths, never decoded at load time.

Splits: a dataset with its own ``train`` and ``test`` splits (``restval``
counts as train, ``validation``/``dev`` as val) keeps them; splits chosen
with ``splits=`` are used as named (``splits=test`` makes every row a test
row); a dataset with other splits gets a seeded ratio split over all rows
(``test_fraction``, ``seed``) with a warning saying so, a single table (a
file, a ``Dataset``, a DataFrame) gets it silently; ``split_column`` takes
the split from a column instead.

Rows that hold the same image (the same file, or the same bytes under the
same original name) are one image, with the captions of every such row: data with one row per (image,
caption) pair gives each image once, with all its captions, and never the
same image under two ids (it would tie with itself in text-to-image search,
count one caption of five as relevant in image-to-text search, and could sit
in train and test at once). The ratio split is drawn per image; an image
whose rows carry different splits (``split_column`` or the dataset's own) is
refused.

Ids: ``image_id`` is the row number of the image's first row (splits
concatenated in the dataset's order); ``text_id`` a running index in row,
column, list order.

Where the code is: source resolution in ``_hf_source`` (what ``data`` is, its
split parts), the rows in ``_hf_rows`` (images, sameness, splits, captions),
and :func:`from_hf` here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from imsearch_align.datasets._hf_rows import (
    caption_column_names,
    caption_rows,
    check_columns,
    image_rows,
    image_table,
    row_splits,
    same_image_rows,
)
from imsearch_align.datasets._hf_source import own_split_names, resolve, use_own_splits
from imsearch_align.datasets._local import Skips
from imsearch_align.datasets.base import PairedDataset
from imsearch_align.framework.registry import DATASETS

__all__ = ["from_hf"]


@DATASETS.register("hf")
def from_hf(
    data: Any,
    *,
    image_column: str = "image",
    caption_columns: str | Sequence[str] = "caption",
    split_column: str | None = None,
    splits: str | Sequence[str] | Mapping[str, str] | None = None,
    test_fraction: float = 0.3,
    seed: int = 42,
    verify_images: bool = False,
    skip_bad_images: bool = False,
    skip_bad_captions: bool = False,
    name: str | None = None,
) -> PairedDataset:
    """Build a :class:`PairedDataset` from a ``datasets`` dataset, a local file of one, or a DataFrame.

    Args:
        data: a ``save_to_disk`` folder (Dataset or DatasetDict), a
            ``.parquet``/``.csv``/``.tsv``/``.json``/``.jsonl``/``.arrow``
            file or glob, another data folder, a Hub name ``owner/name``, or
            an in-memory ``datasets.Dataset``/``DatasetDict``/pandas DataFrame.
        image_column: column holding the image (PIL image, bytes,
            ``{"bytes", "path"}`` dict or file path).
        caption_columns: caption column(s), a name, a list or a comma string;
            each cell a string or a list of strings.
        split_column: column with ``train``/``val``/``test`` per row
            (``validation``/``restval``/``dev`` are mapped); overrides the
            dataset's own splits.
        splits: which of the dataset's own splits to load, used as named: a
            list or comma string of its split names (``"train,test"``;
            ``restval`` is train, ``validation``/``dev`` val), or a mapping to
            ours (``{"validation": "test"}``). None loads every split and uses
            them when there are both train and test, else re-splits by ratio.
        test_fraction: share of rows in ``test`` when the data has no
            train and test splits of its own and no ``split_column``.
        seed: seed of that ratio split.
        verify_images: decode-check every image at load time.
        skip_bad_images: skip rows with no image, a missing image file or an
            unreadable image (skipping implies the decode check), counted in
            ``dataset.skipped`` and warned, instead of raising.
        skip_bad_captions: skip captions that are missing or empty (counted
            and warned) instead of raising with the row and column.
        name: dataset name (embedding cache key part); default the Hub name,
            ``hf-<file or folder name>`` for a path, else ``"hf"``.
    """
    wanted = own_split_names(splits)
    src = resolve(data, wanted, name)
    df, own_split = src.frame(image_column)
    use_own = split_column is None and use_own_splits(
        src, wanted, len(df), f"test_fraction={test_fraction}, seed={seed}"
    )
    cols = caption_column_names(caption_columns)
    check_columns(df, [image_column, *cols, *([split_column] if split_column else [])], src.what)
    skips = Skips(src.name)
    several = len(src.parts) > 1

    def where(i: int) -> str:
        return f" ({own_split[i]} split)" if several else ""

    cells, keep = image_rows(
        df[image_column],
        image_column,
        src.folder,
        where,
        verify=verify_images,
        skip=skip_bad_images,
        skips=skips,
    )
    image_of_row = same_image_rows(cells, keep, df[image_column])
    split = row_splits(
        df,
        split_column,
        own_split if use_own else None,
        image_of_row,
        where,
        test_fraction=test_fraction,
        seed=seed,
    )
    images = image_table(cells, keep, image_of_row, split, name=src.name)
    texts = caption_rows(
        df, cols, keep, image_of_row, src.what, where, skip=skip_bad_captions, skips=skips
    )
    ds = PairedDataset(
        name=src.name,
        images=images,
        texts=texts,
        root=str(src.folder) if src.folder is not None else None,
        skipped=skips.as_dict(),
    )
    skips.warn()
    return ds
