"""describe(): every parameter of every registered loader is documented, read from the loader."""

from __future__ import annotations

import inspect

import pytest

from imsearch_align import DATASETS
from imsearch_align.datasets import ParamDoc, describe
from imsearch_align.datasets._describe import parse_args_section


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_parameter_of_every_loader_is_documented(name: str) -> None:
    loader = DATASETS.get(name)
    docs = describe(name)
    sig = [
        p
        for p in inspect.signature(loader).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    # No **kwargs: a parameter that is not in the signature cannot be described or checked.
    assert all(
        p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)
        for p in inspect.signature(loader).parameters.values()
    ), f"{name} takes *args/**kwargs"
    assert [d.name for d in docs] == [p.name for p in sig]
    for d, p in zip(docs, sig):
        assert d.meaning, f"{name}: parameter {d.name!r} is not documented in the Args section"
        assert d.type != "any", f"{name}: parameter {d.name!r} has no type annotation"
        assert d.required == (p.default is inspect.Parameter.empty)
        if not d.required:
            assert d.default == p.default
    # The docstring documents nothing that is not a parameter (no stale entries).
    assert set(parse_args_section(inspect.getdoc(loader))) <= {p.name for p in sig}


def test_describe_reads_types_defaults_and_meanings() -> None:
    coco = {d.name: d for d in describe("coco")}
    assert coco["splits"].type == "str | Sequence[str] | None" and coco["splits"].default is None
    assert "Karpathy protocol" in coco["splits"].meaning
    assert coco["max_captions"].default == 5 and coco["max_captions"].default_text() == "5"
    pre = {d.name: d for d in describe("precomputed")}
    assert pre["image_path"].required and pre["image_path"].default_text() == "required"
    assert str(pre["allow_pickle"]).startswith("allow_pickle (bool, default False): allow ")


def test_parse_args_section_forms() -> None:
    doc = """Summary.

    Args:
        a: first
            continued.
        b (int): typed form.
        c, d: shared text.

    Returns:
        nothing: not an argument.
    """
    assert parse_args_section(doc) == {
        "a": "first continued.",
        "b": "typed form.",
        "c": "shared text.",
        "d": "shared text.",
    }

    def f(x: int, *, y: str = "q") -> None:
        """Doc.

        Args:
            x: the x.
        """

    assert describe(f) == [
        ParamDoc("x", "int", None, True, "the x."),
        ParamDoc("y", "str", "q", False, ""),
    ]
