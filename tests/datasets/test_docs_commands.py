"""docs/datasets.md cannot rot: its parameter tables are describe()'s, and every command's
dataset part loads a fixture built in that layout's published format.

Each command is parsed by the real CLI parser; its ``--dataset``/``--dataset-param`` (and
``--support-dataset``/``--support-dataset-param``) are then passed, exactly as written, to
the registered loader. Paths ``~/data/X`` and ``~/emb/X`` are mapped to a temporary folder in
which ``BUILDERS[X]`` has written the layout. Commands that need the Hub are parsed only.
"""

from __future__ import annotations

import re
import shlex
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from imsearch_align import DATASETS
from imsearch_align.datasets import describe_markdown

DOC = Path(__file__).resolve().parents[2] / "docs" / "datasets.md"
TEXT = DOC.read_text(encoding="utf-8")
COMMANDS = re.findall(r"`(imsearch-align eval [^`]+)`", TEXT)
ONLINE = ("source=hub", "data=nlphuji/")

FLICKR_SPLITS = ("train", "train", "train", "val", "test", "test")


def _hf_dict(published):
    import datasets as hfd

    return hfd.DatasetDict(
        {
            "train": published.hf_table(6),
            "validation": published.hf_table(2, offset=6),
            "test": published.hf_table(3, offset=8),
        }
    )


def _csv(root: Path, published) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(6):
        published.jpeg(root / "img" / f"{i}.jpg", i)
    pd.DataFrame(
        {"file": [f"img/{i}.jpg" for i in range(6)], "text": [f"t{i}" for i in range(6)]}
    ).to_csv(root / "pairs.csv", index=False)


def _npy(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    img, txt = rng.normal(size=(10, 6)), rng.normal(size=(20, 5))
    np.save(root / "image.npy", img.astype(np.float32))
    np.save(root / "text.npy", txt.astype(np.float32))
    np.save(root / "text_image.npy", np.repeat(np.arange(10), 2)[::-1].copy())
    pd.DataFrame({"id": np.arange(10), "embedding": list(img)}).to_parquet(root / "image.parquet")
    pd.DataFrame({"embedding": list(txt)}).to_parquet(root / "text.parquet")


def _flickr_results_with_split(root: Path, published) -> None:
    published.flickr_results(root, published.flickr_caption_lines(6), 6)
    published.flickr_karpathy(root, FLICKR_SPLITS, write_images=False)


def _flickr_captions_txt(root: Path, published) -> None:
    for i in range(6):
        published.jpeg(root / "Images" / f"{1000 + i}.jpg", i)
    lines = ["image,caption"] + [
        f"{1000 + i}.jpg,Image {i}, caption {k}." for i in range(6) for k in range(5)
    ]
    (root / "captions.txt").write_text("\n".join(lines) + "\n")


# Folder (or file) name in the docs -> how to write it in its published format.
BUILDERS: dict[str, Callable[[Path, object], None]] = {
    "coco": lambda p, pub: pub.coco(p),
    "coco-images": lambda p, pub: pub.coco(p, layout="under_images"),
    "coco-flat": lambda p, pub: pub.coco(p, layout="flat"),
    "flickr30k": lambda p, pub: pub.flickr_karpathy(p, FLICKR_SPLITS),
    "flickr30k-kaggle": lambda p, pub: pub.flickr_results(p, pub.flickr_caption_lines(6), 6),
    "flickr30k-kaggle-split": _flickr_results_with_split,
    "flickr30k-captions": _flickr_captions_txt,
    "imagenet": lambda p, pub: pub.imagenet_kaggle(p, pub.REAL_WNIDS, 10),
    "imagenet-val": lambda p, pub: pub.imagenet_valprep(p, pub.REAL_WNIDS, 10),
    "pairs_dataset": lambda p, pub: pub.hf_table(8).save_to_disk(str(p)),
    "pairs_dict": lambda p, pub: _hf_dict(pub).save_to_disk(str(p)),
    "pairs.parquet": lambda p, pub: pub.hf_table(8).to_parquet(str(p)),
    "shards": lambda p, pub: [
        pub.hf_table(4, offset=4 * k).to_parquet(str(p / f"part-{k}.parquet")) for k in range(2)
    ],
    "pairs.csv": lambda p, pub: _csv(p.parent, pub),
    "shapes": lambda p, pub: None,  # the loader generates it
    "emb": lambda p, pub: _npy(p),
}


def test_every_loader_has_its_generated_parameter_table() -> None:
    names = re.findall(r"<!-- params:(\S+) -->", TEXT)
    assert sorted(names) == DATASETS.names()
    for name in names:
        table = TEXT.split(f"<!-- params:{name} -->\n", 1)[1].split("\n\n", 1)[0].strip()
        assert table == describe_markdown(name), (
            f"docs/datasets.md's table for {name!r} is stale; regenerate it with "
            f"imsearch_align.datasets.describe_markdown({name!r})"
        )


def test_every_loader_has_a_command_and_online_ones_are_few() -> None:
    used = {re.search(r"--dataset (\S+)", c).group(1) for c in COMMANDS}
    assert used == set(DATASETS.names())
    assert sum(any(o in c for o in ONLINE) for c in COMMANDS) == 3


def _paths_in(cmd: str) -> set[str]:
    return set(re.findall(r"~/data/([^/\s'\"*]+)", cmd)) | ({"emb"} if "~/emb/" in cmd else set())


@pytest.mark.parametrize(
    "cmd",
    COMMANDS,
    ids=[f"{i}-{c.split('--dataset ')[1].split()[0]}" for i, c in enumerate(COMMANDS)],
)
def test_documented_command_loads_its_dataset(
    cmd: str, tmp_path: Path, published, hf_cache
) -> None:
    from imsearch_align.cli import build_parser

    home = tmp_path / "home"
    for name in _paths_in(cmd):
        if name == "emb":
            BUILDERS["emb"](home / "emb", published)
            continue
        assert name in BUILDERS, f"docs/datasets.md names ~/data/{name}, which no test builds"
        target = home / "data" / name
        if not name.endswith((".parquet", ".csv")):
            target.mkdir(parents=True, exist_ok=True)
        BUILDERS[name](target, published)
    argv = shlex.split(cmd.replace("~/data/", f"{home}/data/").replace("~/emb/", f"{home}/emb/"))
    ns = build_parser().parse_args(argv[1:])  # the real CLI accepts the command as written
    if any(o in cmd for o in ONLINE):
        return  # needs the Hub: parsed, not loaded
    loaded = DATASETS.get(ns.dataset)(**dict(ns.dataset_param or []))
    ds = loaded[0] if isinstance(loaded, tuple) else loaded
    assert len(ds.split_ids("test")) > 0, "the command has nothing to evaluate"
    if ns.support_dataset is None:
        assert len(ds.split_ids("train", "text")) > 0, "the command has no support pairs"
    else:
        sup = DATASETS.get(ns.support_dataset)(**dict(ns.support_dataset_param or []))
        sup = sup[0] if isinstance(sup, tuple) else sup
        assert len(sup.split_ids("train", "text")) > 0
    if ns.task == "classification":
        assert ds.class_names and ds.labels is not None
    assert not ds.skipped  # well-formed fixtures: nothing left out
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.qrels("t2i")
