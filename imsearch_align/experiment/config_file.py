"""Config files: YAML or JSON, read within limits, each key once.

:func:`read_config_file` returns the data a ``--config`` file holds, or
raises :class:`ConfigFileError` saying what is wrong with the file: it is a
directory, it is empty, it is larger than :data:`MAX_CONFIG_BYTES`, it names
a key twice in one mapping (the last would silently win), its YAML aliases
expand to more than :data:`MAX_ALIAS_NODES` extra values (a "billion laughs"
file of 1 KB that would take minutes), or it cannot be parsed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from imsearch_align.experiment.config_values import ConfigError

__all__ = ["MAX_ALIAS_NODES", "MAX_CONFIG_BYTES", "ConfigFileError", "read_config_file"]

#: A config file is at most this large (large data is named by its path).
MAX_CONFIG_BYTES = 1 << 20
#: YAML aliases may add at most this many values to what the file spells out.
MAX_ALIAS_NODES = 10_000


class ConfigFileError(ConfigError):
    """A config file that cannot be used; ``path``, ``reason`` (the parser's error,
    or what is wrong) and ``problem`` (a sentence about the file, or None when
    it could not be parsed)."""

    def __init__(self, path: Path, reason: Exception | str, problem: str | None = None) -> None:
        if problem is None:
            super().__init__(f"cannot parse config file {str(path)!r}: {reason}")
        else:
            super().__init__(f"config file {str(path)!r} {problem}")
        self.path = path
        self.reason = reason
        self.problem = problem


class _Refused(Exception):
    """What is wrong with a file that parses: the sentence for :class:`ConfigFileError`."""


def _unique_json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Refused(f"has the key {key!r} twice in one mapping; each key may appear once")
        seen.add(key)
    return dict(pairs)


def _check_keys(node: Any) -> None:
    """Refuse a YAML mapping that spells one key twice (merges ``<<`` may override)."""
    seen: dict[tuple[str, str], int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node.value, str):
            continue
        line = key_node.start_mark.line + 1
        first = seen.setdefault((key_node.tag, key_node.value), line)
        if first != line:
            raise _Refused(
                f"has the key {key_node.value!r} twice in one mapping (lines {first} and "
                f"{line}); each key may appear once"
            )


def _check_nodes(root: Any) -> None:
    """Each mapping's keys once, and aliases adding at most :data:`MAX_ALIAS_NODES` values."""
    import yaml

    unique: dict[int, Any] = {}
    stack = [root]
    while stack:  # every node once (an alias is the node it names)
        node = stack.pop()
        if id(node) in unique:
            continue
        unique[id(node)] = node
        if isinstance(node, yaml.MappingNode):
            _check_keys(node)
            stack += [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            stack += node.value
    cap = len(unique) + MAX_ALIAS_NODES
    sizes: dict[int, int] = {}

    def size(node: Any, active: set[int]) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in active:
            raise _Refused("has a YAML alias that contains itself; write the values out")
        active.add(id(node))
        children = node.value if isinstance(node.value, list) else []
        flat = [n for c in children for n in (c if isinstance(c, tuple) else (c,))]
        total = 1 + sum(size(c, active) for c in flat)
        active.discard(id(node))
        if total > cap:
            raise _Refused(
                f"expands its YAML aliases to more than {MAX_ALIAS_NODES} values beyond the "
                f"{len(unique)} it spells out; write the values out instead of nesting aliases"
            )
        sizes[id(node)] = total
        return total

    size(root, set())


def _load_yaml(text: str) -> Any:
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_config_file(path: str | os.PathLike) -> Any:
    """The data a config file holds: YAML for ``.yaml``/``.yml``, else JSON.

    A missing file raises ``FileNotFoundError``; a directory, an empty file, a
    file over :data:`MAX_CONFIG_BYTES`, a key given twice in one mapping,
    YAML aliases expanding past :data:`MAX_ALIAS_NODES` values, or a file
    that cannot be parsed raise :class:`ConfigFileError`.
    """
    p = Path(path)
    if p.is_dir():
        raise ConfigFileError(p, "a directory", "is a directory; expected a YAML or JSON file")
    if not p.is_file():
        raise FileNotFoundError(f"config file {str(p)!r} does not exist")
    n_bytes = p.stat().st_size
    if n_bytes > MAX_CONFIG_BYTES:
        raise ConfigFileError(
            p,
            "too large",
            f"is {n_bytes} bytes; expected at most {MAX_CONFIG_BYTES} (name large data by its "
            "path in a parameter instead)",
        )
    text = p.read_text(encoding="utf-8-sig")
    try:
        if p.suffix.lower() in (".yaml", ".yml"):
            data = _load_yaml(text)
        else:
            data = json.loads(text, object_pairs_hook=_unique_json_pairs) if text.strip() else None
    except _Refused as exc:
        raise ConfigFileError(p, str(exc), str(exc)) from None
    except Exception as exc:
        raise ConfigFileError(p, exc) from None
    if data is None:
        raise ConfigFileError(p, "empty", "is empty; expected a mapping of config fields")
    return data
