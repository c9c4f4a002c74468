"""Test helper: an installed-looking distribution with entry points, written to a folder.

:func:`write_distribution` writes ``<name>-<version>.dist-info`` (``METADATA``,
``entry_points.txt``, ``RECORD``) and the distribution's modules into one
folder. Put that folder on ``sys.path`` (or ``PYTHONPATH`` for a subprocess)
and ``importlib.metadata`` finds the distribution and its entry points
exactly as it finds a pip-installed one: real discovery, no monkeypatched
registry. It lets a plug-in's tests (and imsearch_align's) check entry-point
loading without a build backend or a network::

    root = write_distribution(
        tmp_path, "my-stores", "1.0",
        entry_points={"imsearch_align.stores": {"mine": "my_stores:MyStore"}},
        files={"my_stores.py": "class MyStore: ..."},
    )
    monkeypatch.syspath_prepend(str(root))
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["write_distribution"]


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def write_distribution(
    root: str | Path,
    name: str,
    version: str,
    *,
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
    files: Mapping[str, str] | None = None,
) -> Path:
    """Write a distribution's metadata and modules into ``root`` (created if missing).

    Args:
        root: the folder to put on the path (several distributions may share it).
        name: distribution name (``"tiny-store-pkg"``).
        version: its version.
        entry_points: ``{group: {entry point name: "module:attr" or "module"}}``.
        files: ``{relative path: source}`` of the modules it ships.

    Returns:
        ``root`` as a :class:`~pathlib.Path`.
    """
    if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", name or ""):
        raise ValueError(f"name must be a valid distribution name, got {name!r}")
    if not version or any(c.isspace() for c in version):
        raise ValueError(f"version must be a non-empty string without spaces, got {version!r}")
    root = Path(root)
    info = root / f"{_normalise(name)}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=False)
    written: list[Path] = []

    def put(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)

    put(info / "METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    lines: list[str] = []
    for group, eps in (entry_points or {}).items():
        lines.append(f"[{group}]")
        lines.extend(f"{ep} = {value}" for ep, value in eps.items())
        lines.append("")
    put(info / "entry_points.txt", "\n".join(lines))
    for rel, source in (files or {}).items():
        put(root / rel, source)
    record = []
    for path in written:
        data = path.read_bytes()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path.relative_to(root).as_posix()},sha256={digest},{len(data)}")
    record.append(f"{(info / 'RECORD').relative_to(root).as_posix()},,")
    (info / "RECORD").write_text("\n".join(record) + "\n", encoding="utf-8")
    return root
