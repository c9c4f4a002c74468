"""Output file-name templates: the fields they may use, checked before any work.

A template such as ``{dataset}_{method}_{store}_{n}.json`` names a result
file inside the output folder; :func:`check_template` refuses anything that
could not name one (positional or unknown fields, attribute access,
conversions, a name that is not ``.json``, a path outside the folder).
"""

from __future__ import annotations

import difflib
import string
from pathlib import Path
from typing import Any

from imsearch_align.experiment.config_values import ConfigError

__all__ = ["DEFAULT_OUTPUT_TEMPLATE", "TEMPLATE_FIELDS", "check_template"]

DEFAULT_OUTPUT_TEMPLATE = "{dataset}_{method}_{store}_{n}.json"

TEMPLATE_FIELDS = (
    "dataset",
    "method",
    "store",
    "n",
    "seed",
    "task",
    "image_encoder",
    "text_encoder",
    "key",
    "name",
)


def _check_field(template: str, fname: str, spec: str | None, conv: str | None) -> None:
    if fname == "" or fname.isdigit():
        raise ConfigError(
            f"output template {template!r} has a positional field {{{fname}}}; use named "
            f"fields: {', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}"
        )
    if fname not in TEMPLATE_FIELDS:
        close = difflib.get_close_matches(fname, TEMPLATE_FIELDS, n=1)
        hint = f" (did you mean {{{close[0]}}}?)" if close else ""
        raise ConfigError(
            f"output template {template!r} uses unknown field {{{fname}}}{hint}; valid "
            f"fields: {', '.join(TEMPLATE_FIELDS)}"
        )
    if conv or spec:
        raise ConfigError(
            f"output template {template!r}: field {{{fname}}} takes no conversion or format spec"
        )


def check_template(template: Any) -> str:
    """Validate an output file-name template before any work.

    Named fields only (``{dataset} {method} {store} {n} {seed} {task}
    {image_encoder} {text_encoder} {key} {name}``), no positional ``{}``, no
    attribute or index access, no conversion; the name ends in ``.json``; a
    relative path (sub-folders are created).
    """
    if not isinstance(template, str) or not template:
        raise ConfigError(f"output template must be a non-empty string, got {template!r}")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ConfigError(f"output template {template!r} is malformed: {exc}") from None
    for _, fname, spec, conv in parsed:
        if fname is not None:
            _check_field(template, fname, spec, conv)
    if not template.endswith(".json"):
        raise ConfigError(
            f"output template {template!r} must end in '.json' (build and plot read *.json files)"
        )
    if Path(template).is_absolute() or ".." in Path(template).parts:
        raise ConfigError(
            f"output template {template!r} must be a relative path inside the output folder"
        )
    return template
