"""Distractor files of raw embeddings: ``.npy`` (memory-mapped), parquet and
safetensors (read in row blocks), with the encoder they were made with.

:func:`open_file` picks the reader by suffix. The encoder id is read from a
sidecar ``<file>.json`` (``{"encoder": "...", "modality": "image"}``), from
the parquet schema metadata or the safetensors metadata (keys ``encoder`` and
``modality``), or given as a parameter; when a file records one and the
parameter names another, the file is refused (both named).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from imsearch_align.collection.checks import DistractorError
from imsearch_align.collection.sources import DISTRACTOR_ID_BASE, ArraySource, DistractorSource

__all__ = ["NpySource", "ParquetSource", "SafetensorsSource", "open_file"]


def _sidecar(path: Path) -> dict[str, Any]:
    side = path.with_name(path.name + ".json")
    if not side.exists():
        return {}
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as e:
        raise DistractorError(
            f"sidecar {side}: expected a JSON object, could not read it: {e}"
        ) from e
    if not isinstance(meta, dict):
        raise DistractorError(f"sidecar {side}: expected a JSON object, got {type(meta).__name__}")
    return meta


def _settle(path: Path, recorded: dict[str, Any], encoder: str | None, modality: str | None):
    """``(encoder, modality)`` from the file's records and the parameters (which must agree)."""
    rec_enc = recorded.get("encoder")
    if rec_enc is not None and encoder is not None and str(rec_enc) != str(encoder):
        raise DistractorError(
            f"distractor file {path.name}: it records encoder {rec_enc!r}, but encoder="
            f"{encoder!r} was given; expected embeddings of the same encoder"
        )
    rec_mod = recorded.get("modality")
    if rec_mod is not None and modality is not None and rec_mod != modality:
        raise DistractorError(
            f"distractor file {path.name}: it records modality {rec_mod!r}, but {modality!r} "
            "was asked for"
        )
    return (encoder if encoder is not None else rec_enc), (modality or rec_mod)


class NpySource(ArraySource):
    """A ``.npy`` file of ``(n, d)`` raw embeddings, memory-mapped (never loaded whole)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        encoder: str | None = None,
        modality: str | None = None,
        id_base: int = DISTRACTOR_ID_BASE,
    ) -> None:
        p = Path(path)
        try:
            rows = np.load(p, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DistractorError(
                f"distractor file {p}: expected a .npy array, could not read it: {e}"
            ) from e
        enc, mod = _settle(p, _sidecar(p), encoder, modality)
        super().__init__(rows, id_base=id_base, modality=mod, encoder=enc, name=p.name)
        self.path = p


class ParquetSource(DistractorSource):
    """A parquet file whose ``column`` holds one embedding (a list of floats) a row.

    Read one row group at a time (``pyarrow.parquet.ParquetFile``; the last
    one is kept while blocks fall inside it, so the reader's peak is one row
    group). Without
    ``column`` the file's only list column is used.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        column: str | None = None,
        encoder: str | None = None,
        modality: str | None = None,
        id_base: int = DISTRACTOR_ID_BASE,
    ) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.path = p = Path(path)
        try:
            self._file = pq.ParquetFile(p)
        except (OSError, pa.ArrowException) as e:
            raise DistractorError(
                f"distractor file {p}: expected parquet, could not read it: {e}"
            ) from e
        schema = self._file.schema_arrow
        lists = [
            f.name
            for f in schema
            if pa.types.is_list(f.type)
            or pa.types.is_fixed_size_list(f.type)
            or pa.types.is_large_list(f.type)
        ]
        if column is None:
            if len(lists) != 1:
                raise DistractorError(
                    f"distractor file {p.name}: expected one list column of embeddings (or "
                    f"column=...), got list columns {lists}"
                )
            column = lists[0]
        elif column not in lists:
            raise DistractorError(
                f"distractor file {p.name}: expected column {column!r} to hold embedding "
                f"lists; list columns are {lists}"
            )
        self.column = column
        meta = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        recorded = {**{k: meta[k] for k in ("encoder", "modality") if k in meta}, **_sidecar(p)}
        self.encoder, self.modality = _settle(p, recorded, encoder, modality)
        self.name, self.id_base = p.name, int(id_base)
        self._cached: tuple[int, Any] | None = None
        first = (
            self._file.read_row_group(0, columns=[column]) if self._file.num_row_groups else None
        )
        self._dim = len(first.column(0)[0].as_py()) if first is not None and first.num_rows else 0

    @property
    def total_rows(self) -> int:
        return int(self._file.metadata.num_rows)

    @property
    def dim(self) -> int:
        return self._dim

    def _read(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)``, from the row groups that hold them (one at a time)."""
        out = np.empty((stop - start, self.dim), dtype=np.float32)
        md, at, filled = self._file.metadata, 0, 0
        for g in range(self._file.num_row_groups):
            n = md.row_group(g).num_rows
            if at + n > start and at < stop:
                col = self._group(g)
                a, b = max(start, at) - at, min(stop, at + n) - at
                out[filled : filled + b - a] = _list_rows(col.slice(a, b - a), self.dim, self.name)
                filled += b - a
            at += n
            if at >= stop:
                break
        return out

    def _group(self, g: int) -> Any:
        """Row group ``g``'s embedding column; the last one read is kept (a
        block smaller than a row group does not read it again)."""
        if self._cached is None or self._cached[0] != g:
            self._cached = None  # free the previous group first
            self._cached = (g, self._file.read_row_group(g, columns=[self.column]).column(0))
        return self._cached[1]


def _list_rows(col: Any, dim: int, name: str) -> np.ndarray:
    """A chunked list column as an ``(n, dim)`` float32 array (every row ``dim`` long)."""
    parts = []
    for chunk in col.chunks:
        flat = np.asarray(chunk.flatten(), dtype=np.float32)
        if flat.size != len(chunk) * dim or chunk.null_count:
            raise DistractorError(
                f"distractor file {name}: expected every row to hold {dim} values, got "
                f"{flat.size} values in {len(chunk)} rows ({chunk.null_count} null)"
            )
        parts.append(flat.reshape(len(chunk), dim))
    return np.concatenate(parts) if len(parts) != 1 else parts[0]


class SafetensorsSource(DistractorSource):
    """One 2-D tensor of a safetensors file, read by row slices (``safe_open``)."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        tensor: str | None = None,
        encoder: str | None = None,
        modality: str | None = None,
        id_base: int = DISTRACTOR_ID_BASE,
    ) -> None:
        from safetensors import safe_open

        self.path = p = Path(path)
        try:
            self._handle = safe_open(str(p), framework="numpy")
        except Exception as e:  # safetensors raises its own error types
            raise DistractorError(
                f"distractor file {p}: expected safetensors, could not read it: {e}"
            ) from e
        names = list(self._handle.keys())
        if tensor is None:
            if len(names) != 1:
                raise DistractorError(
                    f"distractor file {p.name}: expected one tensor (or tensor=...), got {names}"
                )
            tensor = names[0]
        elif tensor not in names:
            raise DistractorError(
                f"distractor file {p.name}: no tensor {tensor!r}; it holds {names}"
            )
        self.tensor = tensor
        self._slice = self._handle.get_slice(tensor)
        shape = self._slice.get_shape()
        if len(shape) != 2:
            raise DistractorError(
                f"distractor file {p.name}: tensor {tensor!r} must be 2-D (n, d), got shape {shape}"
            )
        self._shape = (int(shape[0]), int(shape[1]))
        recorded = {**(self._handle.metadata() or {}), **_sidecar(p)}
        self.encoder, self.modality = _settle(p, recorded, encoder, modality)
        self.name, self.id_base = p.name, int(id_base)

    @property
    def total_rows(self) -> int:
        return self._shape[0]

    @property
    def dim(self) -> int:
        return self._shape[1]

    def _read(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self._slice[start:stop], dtype=np.float32)


def open_file(path: str | os.PathLike, **kwargs: Any) -> DistractorSource:
    """The reader for ``path`` by its suffix: ``.npy``, ``.parquet`` or ``.safetensors``.

    ``kwargs`` go to the reader (``encoder``, ``modality``, ``id_base``;
    ``column`` for parquet, ``tensor`` for safetensors).
    """
    p = Path(path)
    readers = {".npy": NpySource, ".parquet": ParquetSource, ".safetensors": SafetensorsSource}
    reader = readers.get(p.suffix.lower())
    if reader is None:
        raise DistractorError(
            f"distractor file {p.name}: expected one of {sorted(readers)}, got suffix {p.suffix!r}"
        )
    if not p.exists():
        raise DistractorError(f"distractor file {p}: no such file")
    return reader(p, **kwargs)
