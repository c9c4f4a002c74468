"""A study's manifest: when and where it ran, with what, and a digest of every cell.

:func:`~imsearch_align.study.run_study` writes one manifest per run, as
``.manifests/manifest-<started>-<token>.json`` in the study folder (one file per
run: two studies writing into one folder never overwrite each other's; the
token is the run's, the one in its store collections' names). It is written
when the study starts (``status: "running"``) and again when it ends, also on
Ctrl-C or an error (``ended`` and the status it ended with). The folder is
hidden so that ``build`` and ``report`` (which read every other ``*.json``)
pass it over. Format :data:`MANIFEST_FORMAT`:

* ``started``, ``ended`` (UTC, ISO 8601 to the second), ``seconds``, ``status``
  (``running``, ``ok``, ``failed``: a cell failed or a store was unreachable,
  ``interrupted``, ``terminated``, ``error``), ``exit_code``, ``error``;
* ``git``: the package's checkout, ``commit`` and ``dirty`` (``git status
  --porcelain`` not empty, the study folder left out; None when it is not a
  checkout or git is missing);
* ``host``: CPU model, logical and usable cores, the cgroup's CPU limit,
  memory, platform; ``libraries``: package versions and BLAS;
* ``stores``: per store mode, what its cells' provenance declared (client
  packages; a server's version and deployment) and, for a store with a
  server, its settings that change speed (segment size, compaction, index
  build parallelism): :data:`NOT_READABLE`, with what the user declared in
  :data:`SETTINGS_ENV` (a JSON object, recorded as given and not checked);
* ``spec`` and ``command`` (the URI's password masked, paths as cells write
  them: :func:`~imsearch_align.experiment.study_cell.portable_paths`);
* ``cells``: every cell file in the folder when the study ended, ``file``,
  ``sha256`` and ``written`` (by this run; else reused, or another study's);
  ``outputs``: every other file (tables, figures), ``file`` and ``sha256``.

:func:`verify_manifest` checks a folder against its manifests.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imsearch_align.collection.store_modes import STORES
from imsearch_align.experiment import study_cell
from imsearch_align.experiment.provenance import blas_info, package_versions
from imsearch_align.experiment.study_cell import absolute_paths, is_cell, portable_paths
from imsearch_align.framework.atomic import atomic_write
from imsearch_align.framework.secrets import redact_text, redact_uri
from imsearch_align.study.spec import StudySpec, StudySpecError

if TYPE_CHECKING:
    from imsearch_align.study.result import StudyResult

__all__ = [
    "MANIFEST_DIR",
    "MANIFEST_FORMAT",
    "NOT_READABLE",
    "SETTINGS_ENV",
    "ManifestError",
    "StudyManifest",
    "git_state",
    "host_info",
    "verify_manifest",
]

#: The ``format`` of a study manifest.
MANIFEST_FORMAT = "study-manifest/1"
#: The folder of a study folder that holds its manifests.
MANIFEST_DIR = study_cell.MANIFEST_DIR
#: Where a user declares a server's settings (a JSON object: name -> value).
SETTINGS_ENV = "IMSEARCH_ALIGN_SERVER_SETTINGS"
#: What the manifest says of a server setting the client cannot read.
NOT_READABLE = (
    "not readable through the client API: the server's settings that change speed (segment "
    f"size, compaction, index build parallelism) are what {SETTINGS_ENV} declares, if anything"
)


class ManifestError(RuntimeError):
    """The manifest could not be written (the cells written are kept)."""


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _read_first(path: str, prefix: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith(prefix):
                    return line
    except OSError:
        pass
    return None


def host_info() -> dict[str, Any]:
    """The machine: CPU model, logical and usable cores, cgroup CPU limit, memory, platform."""
    model = _read_first("/proc/cpuinfo", "model name")
    mem = _read_first("/proc/meminfo", "MemTotal:")
    return {
        "cpu_model": model.split(":", 1)[1].strip() if model else platform.processor() or None,
        "logical_cores": os.cpu_count(),
        "usable_cores": (
            len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        ),
        "cgroup_cpus": _cgroup_cpus(),
        "memory_bytes": int(mem.split()[1]) * 1024 if mem else None,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def _cgroup_cpus() -> float | None:
    """The CPUs the cgroup (v2) allows this process, None without a limit."""
    try:
        quota, period = (_read_first("/sys/fs/cgroup/cpu.max", "") or "max").split()[:2]
        return None if quota == "max" else round(int(quota) / int(period), 3)
    except ValueError:
        return None


def _git(args: list[str], cwd: Path) -> str | None:
    """``git ARGS`` in ``cwd``: its output, None when git is missing or says no."""
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state(out: str | Path | None = None) -> dict[str, Any]:
    """``commit`` and ``dirty`` of the checkout holding this package (``dirty``: ``git
    status --porcelain`` lists a change, ``out`` left out; ``changes``: how many); None
    values when the package is not in a checkout or git is missing."""
    package = Path(__file__).resolve().parents[1]
    top = (_git(["rev-parse", "--show-toplevel"], package) or "").strip()
    tracked = top and _git(["ls-files", "--error-unmatch", "--", "__init__.py"], package)
    commit = ((tracked and _git(["rev-parse", "HEAD"], package)) or "").strip()
    if not commit:
        return {"commit": None, "dirty": None, "changes": None}
    where = ["--", "."]
    folder = Path(os.path.abspath(out)) if out is not None else None
    if folder is not None and folder.is_relative_to(top):
        where.append(f":(exclude){folder.relative_to(top).as_posix()}")
    status = _git(["status", "--porcelain", *where], Path(top))
    lines = None if status is None else [x for x in status.splitlines() if x.strip()]
    return {
        "commit": commit,
        "dirty": None if lines is None else bool(lines),
        "changes": None if lines is None else len(lines),
    }


def declared_settings() -> dict[str, Any] | None:
    """The server settings the user declared in :data:`SETTINGS_ENV` (None: none)."""
    text = os.environ.get(SETTINGS_ENV, "").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        value, why = None, f"not JSON ({exc})"
    else:
        why = f"got {type(value).__name__}"
    if not isinstance(value, dict) or any(isinstance(v, dict | list) for v in value.values()):
        raise StudySpecError(
            f"{SETTINGS_ENV}: expected a JSON object of setting names and values, e.g. "
            f"'{{\"dataCoord.segment.maxSize\": 1024}}'; {why}"
        )
    return value


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _is_cell_file(path: Path) -> bool:
    if path.suffix != ".json":
        return False
    try:
        return is_cell(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, RecursionError):
        return False


def folder_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """The cell files and the other files of ``folder`` (hidden ones left out)."""
    files = sorted(p for p in Path(folder).iterdir() if p.is_file() and p.name[0] != ".")
    cells = [p for p in files if _is_cell_file(p)]
    return cells, [p for p in files if p not in cells]


class StudyManifest:
    """The manifest of one run (see the module docstring): :meth:`begin` before the data is
    loaded, :meth:`start` when the study folder exists, :meth:`finish` at the end."""

    def __init__(self, spec: StudySpec, settings: dict[str, Any] | None) -> None:
        self.spec, self.settings = spec, settings
        self.started, self.t0 = dt.datetime.now(dt.timezone.utc), time.perf_counter()
        self.record: dict[str, Any] = {}
        self.written: set[str] = set()
        self.path: Path | None = None

    @classmethod
    def begin(cls, spec: StudySpec) -> StudyManifest:
        """The manifest of a run starting now (a bad :data:`SETTINGS_ENV` raises
        :class:`~imsearch_align.study.spec.StudySpecError` before anything runs)."""
        return cls(spec, declared_settings())

    def start(self, out: Path, runner: Any) -> Path:
        """Write the manifest (``running``) in ``out`` and note every cell ``runner`` writes."""
        out = Path(out)
        self.path = (
            out / MANIFEST_DIR / f"manifest-{self.started:%Y%m%dT%H%M%SZ}-{runner.token}.json"
        )
        write: Callable[[Path, dict[str, Any]], None] = runner.write

        def noted(path: Path, cell: dict[str, Any]) -> None:
            write(path, cell)
            self.written.add(Path(path).name)

        runner.write = noted
        spec = self.spec.to_dict()
        spec["uri"] = None if self.spec.uri is None else redact_uri(self.spec.uri)
        self.record = {
            "format": MANIFEST_FORMAT,
            "started": _stamp(self.started),
            "ended": None,
            "seconds": None,
            "status": "running",
            "exit_code": None,
            "error": None,
            "token": runner.token,
            "git": git_state(out),
            "host": host_info(),
            "libraries": {"packages": package_versions(), "blas": blas_info()},
            "stores": None,
            "spec": portable_paths(spec, out),
            "command": portable_paths(self.spec.command(), out),
            "cells": None,
            "outputs": None,
        }
        self._write()
        return self.path

    def finish(self, result: StudyResult, error: BaseException | None = None) -> Path:
        """Write the manifest as the study ended: ``result``'s status (``error``: the
        exception that ends it), the stores, and every file's digest."""
        if self.path is None:
            raise RuntimeError("StudyManifest.finish() before start()")
        out = self.path.parent.parent
        ended = dt.datetime.now(dt.timezone.utc)
        status, code = _status(result, error)
        cells, others = folder_files(out)
        text = error and redact_text(f"{type(error).__name__}: {error}", self.spec.uri)
        self.record.update(
            ended=_stamp(ended),
            seconds=round(time.perf_counter() - self.t0, 3),
            status=status,
            exit_code=code,
            error=portable_paths(text, out),
            stores=portable_paths(_stores(self.spec, result.all_cells, self.settings), out),
            libraries={"packages": package_versions(), "blas": blas_info()},  # all loaded now
            cells=[
                {"file": p.name, "sha256": _sha256(p), "written": p.name in self.written}
                for p in cells
            ],
            outputs=[{"file": p.name, "sha256": _sha256(p)} for p in others],
        )
        self._write()
        return self.path

    def _write(self) -> None:
        if self.path is None:
            raise RuntimeError("StudyManifest: written before start()")
        if bad := absolute_paths(self.record):
            raise ManifestError(f"{self.path}: field {bad[0]!r} holds an absolute path")
        try:
            atomic_write(self.path, json.dumps(self.record, indent=2) + "\n")
        except OSError as exc:
            raise ManifestError(
                f"cannot write the study manifest {str(self.path)!r}: {type(exc).__name__}: "
                f"{exc}; the cells written are kept: run the same study with --skip-existing "
                "to write it"
            ) from exc


def _status(result: StudyResult, error: BaseException | None) -> tuple[str, int | None]:
    if error is not None:
        return "error", None
    if result.interrupted:
        if type(result.stopped_by).__name__ == "Terminated":  # SIGTERM, as the CLI turns it
            return "terminated", 143
        return "interrupted", result.exit_code
    return ("ok" if result.ok else "failed"), result.exit_code


def _stores(
    spec: StudySpec, cells: list[dict[str, Any]], settings: dict[str, Any] | None
) -> dict[str, Any]:
    """Per store mode: whether it has a server, what its cells' provenance declared
    (each distinct declaration once) and, with a server, its settings."""
    out: dict[str, Any] = {}
    for name in spec.store_modes():
        seen: list[dict[str, Any]] = []
        for c in cells:
            declared = (c.get("provenance") or {}).get("store")
            if c.get("store") == name and declared and declared not in seen:
                seen.append(declared)
        server = not STORES[name].in_process if name in STORES else None
        entry: dict[str, Any] = {"server": server, "declared": seen}
        if server:
            entry["settings"] = {"read": NOT_READABLE, "declared": settings}
        out[name] = entry
    return out


def _manifests(root: Path, problems: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """``(ended, name, manifest)`` of every ended manifest of ``root``, oldest first."""
    found = []
    for p in sorted((root / MANIFEST_DIR).glob("manifest-*.json")):
        name = f"{MANIFEST_DIR}/{p.name}"
        try:
            m = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:
            problems.append(f"{name}: cannot be read ({type(exc).__name__}: {exc})")
            continue
        if not isinstance(m, dict) or m.get("format") != MANIFEST_FORMAT:
            problems.append(f"{name}: not a {MANIFEST_FORMAT} manifest")
        elif m.get("status") == "running" or not m.get("ended"):
            problems.append(f"{name}: the study has not ended (status {m.get('status')!r})")
        elif not _listing_ok(m):
            problems.append(f"{name}: 'cells' and 'outputs' must list file names and sha256")
        else:
            found.append((str(m["ended"]), p.name, m))
    return sorted(found)


def _listing_ok(m: dict[str, Any]) -> bool:
    rows = [*(m.get("cells") or ()), *(m.get("outputs") or ())]
    return isinstance(m.get("cells"), list) and all(
        isinstance(r, dict) and isinstance(r.get("file"), str) and isinstance(r.get("sha256"), str)
        and r["file"] == Path(r["file"]).name and r["file"] not in ("", ".", "..")
        for r in rows
    )  # fmt: skip


def _check(root: Path, listed: dict[str, tuple[str, str]], what: str) -> list[str]:
    problems = []
    for file, (digest, by) in sorted(listed.items()):
        p = root / file
        if not p.is_file():
            problems.append(f"{what} {file}: listed by {by}, missing")
        elif _sha256(p) != digest:
            problems.append(
                f"{what} {file}: differs from its digest in {by} (changed after the study ended)"
            )
    return problems


def verify_manifest(folder: str | Path) -> list[str]:
    """What is wrong with ``folder`` against its manifests (empty: nothing): a manifest
    unreadable or of a study still running, a cell listed but missing or with another
    digest (the newest manifest listing a file decides), a cell file no manifest lists
    or holding an absolute path, an output of the newest manifest missing or changed."""
    root = Path(folder)
    if not root.is_dir():
        return [f"{str(root)!r} is not a folder"]
    problems: list[str] = []
    manifests = _manifests(root, problems)
    if not manifests:
        return problems or [f"no study manifest in {MANIFEST_DIR}/: the study wrote none"]
    listed: dict[str, tuple[str, str]] = {}
    for _, name, m in manifests:
        listed.update({c["file"]: (c["sha256"], name) for c in m["cells"]})
    problems += _check(root, listed, "cell")
    for p in folder_files(root)[0]:
        if p.name not in listed:
            problems.append(f"cell {p.name}: not listed by any manifest")
        if bad := absolute_paths(json.loads(p.read_text(encoding="utf-8"))):
            problems.append(f"cell {p.name}: field {bad[0]!r} holds an absolute path")
    _, name, newest = manifests[-1]
    outputs = {o["file"]: (o["sha256"], name) for o in newest.get("outputs") or ()}
    return problems + _check(root, outputs, "output")
