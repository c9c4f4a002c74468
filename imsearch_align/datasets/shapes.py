"""Offline real data: rendered coloured shapes with five varied captions each.

:func:`generate_shapes` draws ``n_images`` PNGs (PIL) of one to three
coloured shapes at named positions and writes them in the Flickr30k folder
layout, so :func:`~imsearch_align.datasets.flickr30k.load_flickr30k` reads it
unchanged::

    ROOT/flickr30k-images/000000.png ...
    ROOT/results.csv              image_name| comment_number| comment
    ROOT/dataset_flickr30k.json   Karpathy-style: filename, split, sentences[].raw
    ROOT/shapes_meta.json         class names, templates, label per file

Everything is a function of ``seed`` (same seed, byte-identical files). The
class label of an image is the type of its main (first, largest) shape, so
zero-shot classification over :data:`SHAPES` works on it;
:func:`load_shapes` (registered as ``"shapes"``) attaches those labels.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from imsearch_align.datasets.base import PairedDataset
from imsearch_align.framework.registry import DATASETS
from imsearch_align.framework.validation import check_int

__all__ = ["COLOURS", "POSITIONS", "SHAPES", "SHAPE_TEMPLATES", "generate_shapes", "load_shapes"]

#: Shape types = class names, in class-index order.
SHAPES = ("circle", "square", "triangle", "diamond", "hexagon", "star")
COLOURS = {
    "red": (220, 30, 30),
    "green": (30, 160, 50),
    "blue": (30, 60, 220),
    "yellow": (235, 205, 20),
    "purple": (140, 40, 170),
    "orange": (245, 130, 20),
    "black": (20, 20, 20),
}
#: Named positions -> (x, y) centre as a fraction of the image side.
POSITIONS = {
    "left": (0.22, 0.5),
    "right": (0.78, 0.5),
    "top": (0.5, 0.22),
    "bottom": (0.5, 0.78),
    "centre": (0.5, 0.5),
    "top left": (0.22, 0.22),
    "top right": (0.78, 0.22),
    "bottom left": (0.22, 0.78),
    "bottom right": (0.78, 0.78),
}
_WHERE = {
    "left": ["on the left", "at the left side"],
    "right": ["on the right", "at the right side"],
    "top": ["at the top", "near the top edge"],
    "bottom": ["at the bottom", "near the bottom edge"],
    "centre": ["in the centre", "in the middle"],
    "top left": ["in the top left corner", "at the upper left"],
    "top right": ["in the top right corner", "at the upper right"],
    "bottom left": ["in the bottom left corner", "at the lower left"],
    "bottom right": ["in the bottom right corner", "at the lower right"],
}
#: Zero-shot prompt templates for the shape classes.
SHAPE_TEMPLATES = ("a {c}.", "a drawing of a {c}.", "a picture of a {c} shape.", "a coloured {c}.")
_NUM = {1: "one shape", 2: "two shapes", 3: "three shapes"}

_LAYOUT_VERSION = 1


def _polygon(shape: str, cx: float, cy: float, r: float) -> list[tuple[float, float]]:
    if shape == "square":
        k = r * 0.85
        return [(cx - k, cy - k), (cx + k, cy - k), (cx + k, cy + k), (cx - k, cy + k)]
    if shape == "diamond":
        return [(cx, cy - r), (cx + r, cy), (cx, cy + r), (cx - r, cy)]
    if shape == "triangle":
        angles = [-90, 30, 150]
        radii = [r] * 3
    elif shape == "hexagon":
        angles = list(range(0, 360, 60))
        radii = [r] * 6
    elif shape == "star":
        angles = list(range(-90, 270, 36))
        radii = [r if i % 2 == 0 else r * 0.45 for i in range(10)]
    else:
        raise ValueError(f"unknown shape {shape!r}; expected one of {list(SHAPES)}")
    return [
        (cx + q * np.cos(np.radians(a)), cy + q * np.sin(np.radians(a)))
        for a, q in zip(angles, radii)
    ]


def _draw(
    draw: object, shape: str, cx: float, cy: float, r: float, fill: tuple[int, int, int]
) -> None:
    if shape == "circle":
        draw.ellipse([cx - r, cy - r, cx + r, cy + r], fill=fill)  # type: ignore[attr-defined]
    else:
        draw.polygon(_polygon(shape, cx, cy, r), fill=fill)  # type: ignore[attr-defined]


def _captions(objs: list[tuple[str, str, str]], rng: np.random.Generator) -> list[str]:
    """Five differently worded captions for objects ``(colour, shape, position)``, main first."""

    def where(pos: str) -> str:
        return _WHERE[pos][int(rng.integers(2))]

    def a(c: str, s: str) -> str:
        return f"a {c} {s}"

    (c0, s0, p0), rest = objs[0], objs[1:]
    noun = ["picture", "drawing", "rendering"][int(rng.integers(3))]
    others = [f"{a(c, s)} {where(p)}" for c, s, p in rest]
    caps = [
        (f"{a(c0, s0)} {where(p0)}" + "".join(f" and {o}" for o in others)).capitalize() + ".",
        f"There is {a(c0, s0)} {where(p0)}."
        + (f" It is accompanied by {' and '.join(a(c, s) for c, s, _ in rest)}." if rest else ""),
        f"A {noun} of {_NUM[len(objs)]}: " + ", ".join(a(c, s) for c, s, _ in objs) + ".",
        f"A large {c0} {s0} {where(p0)}"
        + "".join(f", with a small {c} {s} {where(p)}" for c, s, p in rest)
        + " on a plain background.",
        f"{s0.capitalize()} in {c0}, placed {where(p0)}"
        + ("" if not rest else "; also " + ", ".join(f"{c} {s}" for c, s, _ in rest))
        + ".",
    ]
    return caps


def generate_shapes(
    root: str | os.PathLike,
    n_images: int,
    *,
    seed: int,
    size: int = 224,
    test_fraction: float = 0.2,
    val_fraction: float = 0.1,
) -> Path:
    """Render ``n_images`` shape images with five captions each into ``root``.

    Args:
        root: output folder (created; existing files of the layout are overwritten).
        n_images: number of images (>= 1).
        seed: the only source of randomness; equal seeds give byte-identical files.
        size: image side in pixels (>= 32).
        test_fraction, val_fraction: Karpathy-style split over images.

    Returns:
        ``root`` as a Path.
    """
    from PIL import Image, ImageDraw

    from imsearch_align.datasets.splits import seeded_split

    n_images = check_int(n_images, "n_images", low=1)
    size = check_int(size, "size", low=32)
    seed = check_int(seed, "seed", low=0)
    root = Path(root)
    img_dir = root / "flickr30k-images"
    img_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    split = seeded_split(
        n_images, test_fraction=test_fraction, val_fraction=val_fraction, seed=seed
    )
    colours, pos_names = list(COLOURS), list(POSITIONS)
    karpathy, csv_lines, labels = [], ["image_name| comment_number| comment"], {}
    for i in range(n_images):
        n_obj = int(rng.integers(1, 4))
        positions = [pos_names[j] for j in rng.choice(len(pos_names), n_obj, replace=False)]
        # Objects in one image have distinct colours so captions stay unambiguous.
        cols = [colours[j] for j in rng.choice(len(colours), n_obj, replace=False)]
        shapes = [SHAPES[int(j)] for j in rng.integers(len(SHAPES), size=n_obj)]
        objs = list(zip(cols, shapes, positions))
        bg = tuple(int(v) for v in rng.integers(215, 256, size=3))
        im = Image.new("RGB", (size, size), bg)
        draw = ImageDraw.Draw(im)
        # Draw small shapes first so the main (large) one is never hidden.
        for k in [*range(1, n_obj), 0]:
            c, s, p = objs[k]
            fx, fy = POSITIONS[p]
            jx, jy = rng.uniform(-0.02, 0.02, size=2)
            r = (0.15 if k == 0 else 0.10) * size
            _draw(draw, s, (fx + jx) * size, (fy + jy) * size, r, COLOURS[c])
        fname = f"{i:06d}.png"
        im.save(img_dir / fname, format="PNG", optimize=False)
        caps = _captions(objs, rng)
        csv_lines += [f"{fname}| {k}| {c}" for k, c in enumerate(caps)]
        karpathy.append(
            {
                "filename": fname,
                "imgid": i,
                "split": str(split[i]),
                "sentences": [
                    {"raw": c, "imgid": i, "sentid": i * 5 + k} for k, c in enumerate(caps)
                ],
            }
        )
        labels[fname] = SHAPES.index(shapes[0])
    (root / "results.csv").write_text("\n".join(csv_lines) + "\n", encoding="utf-8")
    (root / "dataset_flickr30k.json").write_text(
        json.dumps({"dataset": "shapes", "images": karpathy}, indent=None), encoding="utf-8"
    )
    meta = {
        "version": _LAYOUT_VERSION,
        "n_images": n_images,
        "seed": seed,
        "size": size,
        "class_names": list(SHAPES),
        "templates": list(SHAPE_TEMPLATES),
        "labels": labels,
    }
    (root / "shapes_meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return root


def _default_root(n_images: int, seed: int, size: int) -> Path:
    base = os.environ.get("IMSEARCH_ALIGN_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "imsearch_align"
    )
    return Path(base) / f"shapes-n{n_images}-s{seed}-px{size}"


#: What ``load_shapes`` generates when a parameter is not given.
_SHAPES_DEFAULTS = {"n_images": 500, "seed": 0, "size": 224}


@DATASETS.register("shapes")
def load_shapes(
    root: str | os.PathLike | None = None,
    *,
    n_images: int | None = None,
    seed: int | None = None,
    size: int | None = None,
    layout: str = "karpathy",
    splits: str | Sequence[str] | None = None,
) -> PairedDataset:
    """The shapes dataset with labels, class names and templates; generated on first use.

    The data is read through the Flickr30k loader; its split is 70% train,
    10% val, 20% test of the images.

    Args:
        root: folder of the data; generated there when it holds no
            ``shapes_meta.json``. None: a folder under ``$IMSEARCH_ALIGN_CACHE``
            (or ``~/.cache/imsearch_align``) named after ``n_images``, ``seed``
            and ``size``.
        n_images: number of images (None: the folder's set, or 500 when
            generating). A folder holding another number is refused.
        seed: seed of the generation (equal seeds give byte-identical files;
            None: the folder's, or 0). A folder of another seed is refused.
        size: image side in pixels (None: the folder's, or 224). A folder of
            another size is refused.
        layout: caption file read by the Flickr30k loader: ``"karpathy"``,
            ``"results"`` or ``"captions"``.
        splits: splits to keep, a list or a comma string (``"train,test"``);
            None keeps all.
    """
    from imsearch_align.datasets.flickr30k import load_flickr30k

    given = {"n_images": n_images, "seed": seed, "size": size}
    gen = {k: _SHAPES_DEFAULTS[k] if v is None else v for k, v in given.items()}
    root = _default_root(**gen) if root is None else Path(root).expanduser()
    meta_path = root / "shapes_meta.json"
    if not meta_path.is_file():
        generate_shapes(root, gen["n_images"], seed=gen["seed"], size=gen["size"])
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    asked = {k: v for k, v in given.items() if v is not None}
    held = {k: meta.get(k) for k in asked}
    if held != asked:
        raise ValueError(
            f"shapes: {str(root)!r} already holds a shapes set with {held}, not the {asked} "
            "asked for; pass another root (or none: one folder per parameter set), or delete "
            "the folder to generate it again"
        )
    ds = load_flickr30k(
        root,
        layout=layout,
        name=f"shapes-n{meta['n_images']}-s{meta['seed']}",
        verify_images=False,
        splits=splits,
    )
    labels = ds.images["file_name"].map(meta["labels"])
    if labels.isna().any():
        raise ValueError(
            f"shapes: {str(meta_path)!r} has no label for some images; regenerate the folder"
        )
    images = ds.images.assign(label=labels.astype(np.int64))
    return PairedDataset(
        name=ds.name,
        images=images,
        texts=ds.texts,
        class_names=tuple(meta["class_names"]),
        templates=tuple(meta["templates"]),
        root=str(root),
        skipped=ds.skipped,
    )
