"""Where a result goes: file names, ``--skip-existing``, atomic writes, checkpoints.

The output template is validated and its folders created before any work;
a result file and its per-query parquet are written atomically; the run's
checkpoints are removed once a clean result is on disk (kept after a
degraded or failed run, so running it again searches only what is missing).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from imsearch_align.experiment.config import DEFAULT_OUTPUT_TEMPLATE, ExperimentConfig
from imsearch_align.experiment.result import ExperimentResult, ResultSchemaError
from imsearch_align.framework.atomic import atomic_write

__all__ = ["OutputPlan", "check_writable"]

log = logging.getLogger(__name__)


def check_writable(out_dir: str | os.PathLike) -> None:
    """Create ``out_dir`` if needed and prove a file can be written there."""
    folder = Path(out_dir)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PermissionError(
            f"output folder {str(folder)!r} cannot be written: {exc.strerror or exc}"
        ) from None


def _stored_key(path: Path) -> str | None:
    """The config key of the result stored at ``path``; None when there is none
    or it cannot be read (it is then overwritten, as a torn file is)."""
    if not path.is_file():
        return None
    try:
        return ExperimentResult.load(path).key
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):  # incl. schema errors
        return None


@dataclass(frozen=True)
class OutputPlan:
    """The result path, its per-query file and the checkpoint folder of one config."""

    path: Path | None = None
    checkpoint_root: Path | None = None

    @classmethod
    def make(
        cls,
        config: ExperimentConfig,
        output_dir: str | os.PathLike | None,
        template: str = DEFAULT_OUTPUT_TEMPLATE,
    ) -> OutputPlan:
        """Validate the template and create the result's folder (no work done yet)."""
        name = config.output_name(template)
        if output_dir is None:
            return cls()
        root = Path(output_dir)
        path = root / name
        check_writable(path.parent)
        other = _stored_key(path)
        if other is not None and other != config.key():
            # Another experiment's result has this name (the template leaves out
            # what differs: the seed, an encoder, a parameter): both are kept.
            keyed = path.with_name(f"{path.stem}-{config.key()}{path.suffix}")
            log.warning(
                "%s holds another experiment (config key %s, this one %s): this one is "
                "written to %s, both are kept; add {key} to the output template to name each "
                "experiment's file by its config",
                path,
                other,
                config.key(),
                keyed.name,
            )
            path = keyed
        return cls(path, root / ".checkpoints" / config.key())

    @property
    def per_query_path(self) -> Path | None:
        """The per-query parquet beside the result file."""
        return None if self.path is None else self.path.with_suffix(".per_query.parquet")

    def reusable(self, config: ExperimentConfig) -> ExperimentResult | None:
        """The stored result to keep under ``--skip-existing``, or None to run.

        Kept only when it is this config's result and its status is ``ok``; a
        degraded or failed result or a torn file means running again. (A file
        of another config under the same name is never this plan's path:
        :meth:`make` writes this config's result beside it.)
        """
        if self.path is None or not self.path.exists():
            return None
        try:
            res = ExperimentResult.load(self.path)
        except (OSError, UnicodeDecodeError, ResultSchemaError) as exc:
            log.warning("existing result %s is unreadable (%s): running again", self.path, exc)
            return None
        if res.key != config.key():  # written by another process since make()
            log.warning(
                "%s now holds another experiment (config key %s, this one %s): running this one",
                self.path,
                res.key,
                config.key(),
            )
            return None
        if not res.status.ok:
            log.warning("%s is %s: running it again", self.path, res.status)
            return None
        return res.with_(skipped=True, path=str(self.path))

    def write(
        self, result: ExperimentResult, per_query: Sequence[pd.DataFrame]
    ) -> ExperimentResult:
        """Write the per-query parquet and the result atomically; clean checkpoints."""
        if self.path is None:
            return result
        if per_query and self.per_query_path is not None:
            frame = pd.concat(per_query, ignore_index=True)
            frame["query_id"] = frame["query_id"].astype(str)
            atomic_write(self.per_query_path, lambda f: frame.to_parquet(f, index=False))
            result = result.with_(per_query_file=self.per_query_path.name)
        atomic_write(self.path, result.to_json())
        if result.status.ok and self.checkpoint_root is not None:
            shutil.rmtree(self.checkpoint_root, ignore_errors=True)
        return result.with_(path=str(self.path))
