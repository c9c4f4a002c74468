"""Code shape: no function under imsearch_align/experiment/ or in cli.py is over 100 lines.

Issue 10 split a 1,091-line module whose ``run_experiment`` alone was 199
lines; this keeps the parts small enough to read. Every ``def`` counts,
nested ones and methods included, from its ``def`` line (decorators
excluded) to its last line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "imsearch_align"
MAX_LINES = 100


def _checked_files() -> list[Path]:
    files = [*sorted((PACKAGE / "experiment").rglob("*.py")), PACKAGE / "cli.py"]
    return [f for f in files if "__pycache__" not in f.parts]


def function_lengths(path: Path) -> list[tuple[str, int, int]]:
    """``(qualified name, first line, length in lines)`` of every function in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[tuple[str, int, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                out.append((name, child.lineno, child.end_lineno - child.lineno + 1))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def test_the_checked_files_exist():
    files = _checked_files()
    assert (PACKAGE / "cli.py").is_file()
    assert any(f.name == "pipeline.py" for f in files), files
    assert len(files) >= 10  # the package, its tasks/ and cli.py


def test_the_counter_counts_every_kind_of_function(tmp_path):
    src = tmp_path / "m.py"
    src.write_text(
        "def a():\n    pass\n\n"
        "class C:\n    @staticmethod\n    def b():\n        x = 1\n        return x\n\n"
        "    async def c(self):\n        def inner():\n            return 1\n        return inner\n"
    )
    got = {name: n for name, _, n in function_lengths(src)}
    assert got == {"a": 2, "C.b": 3, "C.c": 4, "C.c.inner": 2}


@pytest.mark.parametrize("path", _checked_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_function_is_longer_than_100_lines(path):
    long = [
        f"{name} (line {line}: {n} lines)"
        for name, line, n in function_lengths(path)
        if n > MAX_LINES
    ]
    assert not long, f"{path.relative_to(PACKAGE)}: over {MAX_LINES} lines: {', '.join(long)}"
