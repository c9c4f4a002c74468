"""Where a result goes: file names, ``--skip-existing``, atomic writes, checkpoints.

The output template is validated and its folders created before any work;
a result file and its per-query parquet are written atomically; the run's
checkpoints are removed once a clean result is on disk (kept after a
degraded or failed run, so running it again searches only what is missing).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from imsearch_align.experiment.config import DEFAULT_OUTPUT_TEMPLATE, ExperimentConfig
from imsearch_align.experiment.result import ExperimentResult, ResultSchemaError
from imsearch_align.experiment.runs import finish_clean, folder_lock
from imsearch_align.framework.atomic import atomic_write, writable_folder_error

__all__ = ["OutputPlan", "ResultWriteError", "check_writable"]

log = logging.getLogger(__name__)

#: The per-query table beside a result ``NAME.json``: ``NAME.per_query.parquet``.
PER_QUERY_SUFFIX = ".per_query.parquet"


def check_writable(out_dir: str | os.PathLike) -> None:
    """Create ``out_dir`` if needed and prove a file can be written there."""
    exc = writable_folder_error(out_dir)
    if exc is not None:
        raise PermissionError(
            f"output folder {str(Path(out_dir))!r} cannot be written: {exc.strerror or exc}"
        )


def _obstacle(path: Path, key: str) -> str | None:
    """Why ``path`` cannot take the result of config ``key`` (None: it can).

    It can when nothing is there, or when what is there is provably this
    config's own result (a readable result with this config key), its
    per-query name free or holding a parquet. Anything else (another
    config's result, a result of a newer schema, a user's file, a torn or
    foreign file) is kept.
    """
    own = False
    if os.path.lexists(path):
        try:
            stored = ExperimentResult.load(path).key
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            reason = str(exc).replace(str(path), "it")
            return f"{path} is not a result of this config ({type(exc).__name__}: {reason})"
        if stored != key:
            return f"{path} holds another experiment (config key {stored}, this one {key})"
        own = True
    per_query = path.with_suffix(PER_QUERY_SUFFIX)
    if os.path.lexists(per_query) and not (own and _is_parquet(per_query)):
        return f"{per_query} is not the per-query table of a result of this config"
    return None


def _is_parquet(path: Path) -> bool:
    """A regular file with parquet's magic bytes at both ends."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
            f.seek(-4, os.SEEK_END)
            return path.is_file() and head == b"PAR1" and f.read(4) == b"PAR1"
    except OSError:
        return False


def _per_query_problem(path: Path) -> str | None:
    """Why the per-query parquet ``path`` is not whole (None: its footer reads)."""
    if not path.is_file():
        return "is missing"
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(path)
    except Exception as exc:  # pyarrow raises its own errors for a torn footer
        first = (str(exc).splitlines() or [""])[0]
        return f"is unreadable ({type(exc).__name__}: {first})"
    return None


class ResultWriteError(OSError):
    """A finished run's result (its JSON or per-query parquet) could not be written.

    ``path`` is the file that failed, ``result`` the finished result (its
    numbers measured, not saved); the run's checkpoints are kept, so running
    the same command again resumes.
    """

    def __init__(self, path: Path, cause: OSError, result: ExperimentResult) -> None:
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path = path
        self.result = result

    def __str__(self) -> str:
        return f"cannot write the result to {self.path}: {self.strerror}"


def _beside(named: Path, key: str) -> Iterator[Path]:
    """``NAME-<key>.json``, then ``NAME-<key>-2.json``, ``NAME-<key>-3.json``..."""
    yield named.with_name(f"{named.stem}-{key}{named.suffix}")
    for i in itertools.count(2):
        yield named.with_name(f"{named.stem}-{key}-{i}{named.suffix}")


def _choose(named: Path, key: str, *, chosen: Path | None = None) -> Path:
    """``named`` if it can take this config's result, else the first name beside it
    that can; a warning says why (none when the name is ``chosen``, already said)."""
    first = _obstacle(named, key)
    if first is None:
        return named
    path = next(p for p in _beside(named, key) if _obstacle(p, key) is None)
    if path != chosen:
        # What the template leaves out (the seed, an encoder, a parameter) differs,
        # or the name holds a file that is not this config's: both are kept.
        log.warning(
            "%s: this one is written to %s, both are kept; add {key} to the output "
            "template to name each experiment's file by its config",
            first,
            path.name,
        )
    return path


@dataclass(frozen=True)
class OutputPlan:
    """The result path, its per-query file and the checkpoint folder of one config.

    ``path`` is the name chosen when the run starts (for ``--skip-existing``);
    :meth:`write` chooses again under the folder's lock, from the templated
    name ``named``, so runs that started together never take one file.
    """

    path: Path | None = None
    checkpoint_root: Path | None = None
    named: Path | None = None
    key: str = ""

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
        named = root / name
        check_writable(named.parent)
        key = config.key()
        return cls(_choose(named, key), root / ".checkpoints" / key, named, key)

    @property
    def per_query_path(self) -> Path | None:
        """The per-query parquet beside the result file."""
        return None if self.path is None else self.path.with_suffix(PER_QUERY_SUFFIX)

    def reusable(self, config: ExperimentConfig) -> ExperimentResult | None:
        """The stored result to keep under ``--skip-existing``, or None to run.

        Kept only when it is this config's result, its status is ``ok`` and
        its per-query parquet (when it has one) is there and readable; a
        degraded or failed result, a torn file or a missing or torn per-query
        file means running again. (A file
        that is not this config's result is never this plan's path:
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
        if res.per_query_file:
            table = self.path.parent / res.per_query_file
            problem = _per_query_problem(table)
            if problem is not None:
                log.warning(
                    "the per-query file %s of %s %s: running again", table, self.path, problem
                )
                return None
        return res.with_(skipped=True, path=str(self.path))

    def write(
        self, result: ExperimentResult, per_query: Sequence[pd.DataFrame]
    ) -> ExperimentResult:
        """Write the per-query parquet and the result atomically; clean checkpoints.

        The name is chosen and both files written under the folder's lock
        (:func:`~imsearch_align.experiment.runs.folder_lock`): a file that is
        not provably this config's result is never replaced, and two runs
        writing at once never take the same name. A write that fails raises
        :class:`ResultWriteError` naming the file and carrying ``result``; a
        per-query table written for a result that could not be is removed.
        """
        if self.path is None or self.named is None or self.checkpoint_root is None:
            return result
        frame = None
        if per_query:
            frame = pd.concat(per_query, ignore_index=True)
            frame["query_id"] = frame["query_id"].astype(str)
        with folder_lock(self.checkpoint_root.parent):
            path = _choose(self.named, self.key, chosen=self.path)
            table = path.with_suffix(PER_QUERY_SUFFIX)
            fresh = frame is not None and not os.path.lexists(table)
            if frame is not None:
                _write(table, lambda f: frame.to_parquet(f, index=False), result)
                result = result.with_(per_query_file=table.name)
            try:
                _write(path, result.to_json(), result)
            except ResultWriteError:
                if fresh:  # no table without its result: it would block the name
                    table.unlink(missing_ok=True)
                raise
        if result.status.ok:
            finish_clean(self.checkpoint_root)
        return result.with_(path=str(path))


def _write(path: Path, data: Any, result: ExperimentResult) -> None:
    """:func:`atomic_write`, an :class:`OSError` raised as :class:`ResultWriteError`."""
    try:
        atomic_write(path, data)
    except OSError as exc:
        raise ResultWriteError(path, exc, result) from exc
