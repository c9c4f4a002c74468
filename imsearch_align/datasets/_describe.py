"""What a loader takes, and how to record what it was given.

* :func:`describe` reads a registered loader's signature and its docstring's
  ``Args:`` section into one :class:`ParamDoc` per parameter (name, type,
  default, meaning): what ``imsearch-align list datasets NAME`` prints.
* :func:`describe_param_value` turns a loader argument into a JSON-ready
  value for a result file: plain values as they are, in-memory data
  (a DataFrame, a ``datasets.Dataset`` / ``DatasetDict``, a numpy array, a
  :class:`~imsearch_align.datasets.base.PairedDataset`) as its type, shape
  and a SHA-256 of its content (:mod:`~imsearch_align.datasets._digest`), so
  two different tables never share a key.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.datasets._digest import feed_value, frame_digest, hf_dataset_digest
from imsearch_align.datasets.base import PairedDataset

__all__ = ["ParamDoc", "describe", "describe_markdown", "describe_param_value"]


def _describe_data(value: Any) -> dict[str, Any] | None:
    """The digest record of in-memory data, or None when ``value`` is not data."""
    h = hashlib.sha256()
    if isinstance(value, pd.DataFrame):
        frame_digest(value, h)
        return {
            "type": "pandas.DataFrame",
            "rows": len(value),
            "columns": [str(c) for c in value.columns],
            "sha256": h.hexdigest(),
        }
    if isinstance(value, np.ndarray):
        feed_value(h, value)
        return {
            "type": "numpy.ndarray",
            "shape": list(value.shape),
            "dtype": str(value.dtype),
            "sha256": h.hexdigest(),
        }
    if isinstance(value, PairedDataset):
        return {
            "type": "PairedDataset",
            "name": value.name,
            "images": len(value.images),
            "texts": len(value.texts),
            "sha256": value.fingerprint,
        }
    mod = type(value).__module__ or ""
    if mod.startswith("datasets"):
        import datasets as hfd

        if isinstance(value, hfd.Dataset):
            hf_dataset_digest(value, h)
            return {
                "type": "datasets.Dataset",
                "rows": value.num_rows,
                "columns": list(value.column_names),
                "sha256": h.hexdigest(),
            }
        if isinstance(value, hfd.DatasetDict):
            splits = {}
            for name in sorted(value):
                hs = hashlib.sha256()
                hf_dataset_digest(value[name], hs)
                splits[name] = {"rows": value[name].num_rows, "sha256": hs.hexdigest()}
                h.update(f"{name}:{splits[name]['sha256']};".encode())
            return {"type": "datasets.DatasetDict", "splits": splits, "sha256": h.hexdigest()}
    return None


def describe_param_value(value: Any, *, name: str = "value") -> Any:
    """A JSON-ready record of one loader argument, for result files and config keys.

    * ``None``, bools, ints, floats and strings come back as they are;
      paths (``os.PathLike``) as strings; tuples and lists as lists; sets as
      sorted lists; mappings as dicts with string keys (recursively); numpy
      scalars as Python numbers.
    * In-memory data comes back as a small dict with its ``type``, its size
      and ``sha256``, a digest of its content: a pandas ``DataFrame`` (every
      column and cell; bytes and images by their own SHA-256), a
      ``datasets.Dataset`` / ``DatasetDict`` (rows after casting image
      columns to their encoded bytes; features included), a numpy array
      (dtype, shape, bytes), a ``PairedDataset`` (:attr:`~imsearch_align.datasets.base.PairedDataset.fingerprint`).
      Equal content gives an equal record in any process; any change of a
      value changes ``sha256``.

    Anything else raises TypeError naming ``name`` and the type, so nothing
    that cannot be written or told apart reaches a result.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    data = _describe_data(value)
    if data is not None:
        return data
    if isinstance(value, list | tuple):
        return [describe_param_value(v, name=f"{name}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, set | frozenset):
        return sorted(
            (describe_param_value(v, name=f"{name} item") for v in value), key=lambda x: repr(x)
        )
    if isinstance(value, Mapping):
        return {str(k): describe_param_value(v, name=f"{name}[{k!r}]") for k, v in value.items()}
    raise TypeError(
        f"{name}: cannot record a value of type {type(value).__name__} in a result; pass plain "
        "values (str, number, bool, list, dict, path), a pandas DataFrame, a datasets.Dataset "
        "or DatasetDict, a numpy array or a PairedDataset"
    )


# ----------------------------------------------------------------------------- parameter docs


@dataclass(frozen=True)
class ParamDoc:
    """One loader parameter, as :func:`describe` reads it from the loader.

    Attributes:
        name: the keyword (``--dataset-param NAME=VALUE``).
        type: the annotation as written in the signature (e.g. ``"str | None"``).
        default: the default value (meaningless when ``required``).
        required: True when the parameter has no default.
        meaning: the docstring's description, whitespace-normalised.
    """

    name: str
    type: str
    default: Any
    required: bool
    meaning: str

    def default_text(self) -> str:
        """``"required"`` or the default's ``repr``."""
        return "required" if self.required else repr(self.default)

    def __str__(self) -> str:
        return f"{self.name} ({self.type}, default {self.default_text()}): {self.meaning}"


_ENTRY = re.compile(
    r"^(?P<names>\*{0,2}[A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_]\w*)*)\s*(\([^)]*\))?:\s?(?P<text>.*)$"
)


def parse_args_section(doc: str | None) -> dict[str, str]:
    """``{parameter: description}`` from a Google-style ``Args:`` section.

    Entries are ``name: text`` or ``name (type): text`` at one indentation,
    continued by more-indented lines; ``a, b: text`` documents both.
    """
    if not doc:
        return {}
    lines = inspect.cleandoc(doc).splitlines()
    out: dict[str, str] = {}
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() in ("Args:", "Arguments:"))
    except StopIteration:
        return {}
    indent: int | None = None
    current: list[str] = []
    for ln in lines[start + 1 :]:
        if not ln.strip():
            continue
        ind = len(ln) - len(ln.lstrip())
        if indent is None:
            indent = ind
        if ind < indent or (ind == 0):
            break  # the next section (Returns:, Raises:, prose)
        if ind == indent:
            m = _ENTRY.match(ln.strip())
            if m is None:
                break
            current = [n.strip().lstrip("*") for n in m.group("names").split(",")]
            for n in current:
                out[n] = m.group("text").strip()
        else:
            for n in current:
                out[n] = f"{out[n]} {ln.strip()}".strip()
    return out


def describe(name_or_loader: Any) -> list[ParamDoc]:
    """Every parameter of a dataset loader with its type, default and meaning.

    Args:
        name_or_loader: a :data:`~imsearch_align.DATASETS` name (``"coco"``) or
            the loader itself.

    Returns:
        One :class:`ParamDoc` per parameter, in signature order (``*args`` /
        ``**kwargs`` are left out). A parameter the docstring does not
        document gets ``meaning=""`` (the test suite forbids that for
        built-in loaders).
    """
    from imsearch_align.framework.registry import DATASETS

    loader = DATASETS.get(name_or_loader) if isinstance(name_or_loader, str) else name_or_loader
    target = loader.__init__ if inspect.isclass(loader) else loader
    docs = parse_args_section(inspect.getdoc(loader))
    out = []
    for p in inspect.signature(target).parameters.values():
        if p.name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        ann = p.annotation
        type_text = (
            "any"
            if ann is inspect.Parameter.empty
            else ann
            if isinstance(ann, str)
            else getattr(ann, "__name__", str(ann))
        )
        required = p.default is inspect.Parameter.empty
        out.append(
            ParamDoc(
                name=p.name,
                type=str(type_text),
                default=None if required else p.default,
                required=required,
                meaning=" ".join(docs.get(p.name, "").split()),
            )
        )
    return out


def describe_markdown(name: str) -> str:
    """The parameter table of loader ``name`` in Markdown (what ``docs/datasets.md`` shows).

    One row per :class:`ParamDoc`: ``| parameter | type | default | meaning |``;
    reST double backquotes become Markdown backquotes and ``|`` is escaped.
    """

    def md(text: str) -> str:
        return text.replace("``", "`").replace("|", "\\|")

    rows = [
        "| parameter | type | default | meaning |",
        "|---|---|---|---|",
        *(
            f"| `{d.name}` | `{md(d.type)}` | {md(d.default_text())} | {md(d.meaning)} |"
            for d in describe(name)
        ),
    ]
    return "\n".join(rows)
