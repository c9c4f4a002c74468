"""``list``: what each registry holds, the measures, and one dataset loader's parameters."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from imsearch_align.cli.common import UsageError

__all__ = ["add_list_command", "cmd_list"]

_LIST_KINDS = ("datasets", "encoders", "methods", "stores", "tasks", "metrics", "perturbations")


def add_list_command(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """The ``list`` sub-command."""
    ls = sub.add_parser(
        "list",
        parents=parents,
        help="registered datasets, encoders, methods, stores, tasks, metrics, perturbations",
    )
    ls.add_argument("kind", nargs="?", choices=_LIST_KINDS, help="one kind (default all)")
    ls.add_argument("name", nargs="?", help="with 'datasets': describe one loader's parameters")
    ls.add_argument(
        "--markdown",
        action="store_true",
        help="with 'metrics': the measure tables as Markdown (the tables of docs/metrics.md)",
    )
    ls.set_defaults(func=cmd_list)


def _doc_line(obj: Any) -> str:
    doc = (obj.__doc__ or "").strip().splitlines() if obj is not None else []
    return doc[0].strip() if doc else ""


def _list_metrics(markdown: bool = False) -> None:
    from imsearch_align.experiment.report import text_table
    from imsearch_align.framework.measures import list_rows, markdown_table, task_markdown_table

    if markdown:
        print(markdown_table() + "\n" + task_markdown_table(), end="")
        return

    print("metrics (reported per ranking: t2i/…, i2t/…, classification/…; k from --k):")
    print(
        text_table(
            ["name", "trec_eval", "CLIP_benchmark", "meaning"], [list(r) for r in list_rows()]
        )
    )


def _list_registry(kind: str) -> None:
    """One line per name: summary, where it comes from; broken plug-ins named, never fatal."""
    from imsearch_align.framework import registry

    rows = getattr(registry, kind.upper()).listing()
    print(f"{kind}:")
    width = max((len(r.name) for r in rows), default=0)
    for r in rows:
        where = "" if r.origin == registry.BUILTIN else f"  [{r.origin}]"
        text = f"unusable: {r.error}" if r.error else r.summary
        print(f"  {r.name.ljust(width)}  {text}{where}".rstrip())
        if kind == "tasks" and r.obj is not None and r.error is None:
            from imsearch_align.experiment.tasks import Task

            if isinstance(r.obj, type) and issubclass(r.obj, Task):
                print(f"  {''.ljust(width)}    measures: {r.obj.measures}")
                print(f"  {''.ljust(width)}    from: {r.obj.source}")
    if not rows:
        print("  (none registered)")


def _describe_dataset(name: str) -> None:
    from imsearch_align.datasets import describe
    from imsearch_align.experiment.report import text_table
    from imsearch_align.framework.registry import DATASETS

    params = describe(name)
    print(f"dataset {name!r}: {_doc_line(DATASETS.get(name))}")
    rows = [[p.name, p.type, p.default_text(), p.meaning] for p in params]
    print(text_table(["parameter", "type", "default", "meaning"], rows))
    print(f"\nuse: imsearch-align eval --dataset {name} --dataset-param KEY=VALUE ...")


def cmd_list(args: argparse.Namespace) -> int:
    """``list``: what each registry holds (``list datasets NAME``: a loader's parameters)."""
    if getattr(args, "markdown", False) and args.kind != "metrics":
        raise UsageError("list: --markdown is for 'metrics' (list metrics --markdown)")
    if args.name is not None:
        if args.kind != "datasets":
            raise UsageError("list: a NAME is only taken after 'datasets' (list datasets coco)")
        _describe_dataset(args.name)
        return 0
    from imsearch_align.framework.plugins import plugin_failures

    for i, kind in enumerate([args.kind] if args.kind else list(_LIST_KINDS)):
        if i:
            print()
        if kind == "metrics":
            _list_metrics(markdown=args.markdown)
        else:
            _list_registry(kind)
    for mod, err in plugin_failures().items():  # beside Markdown, on standard error
        print(f"(plug-in module {mod} could not be loaded: {err})",
              file=sys.stderr if args.markdown else sys.stdout)  # fmt: skip
    return 0
