"""``run_study(spec)``: the collection study, cell by cell, into the spec's output folder.

For each direction, method, support size and distractor count, the split's
documents plus the first ``size`` distractors are one collection
(:class:`~imsearch_align.collection.aligned.CollectionBlocks`, aligned by the
method block by block) with one exact, tie-aware ground truth; every index
setting of every store is built on it and its search settings swept
(:class:`~imsearch_align.collection.study.CellRunner`), then filtered and
concurrency cells measured on each build's deployable setting. Each cell is
one JSON file; ``skip_existing`` reuses clean ones, so the same spec resumes
a study that stopped. The tables and figures are written at the end
(:mod:`imsearch_align.study.output`), also when interrupted.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from imsearch_align.collection import CollectionBlocks, DistractorError, exact_truth
from imsearch_align.collection.control import (
    PREDICTOR_SAMPLE,
    ControlError,
    collection_sample,
    control_queries,
    predict,
)
from imsearch_align.collection.extras import ConcurrencyPlan
from imsearch_align.collection.filtered_study import FilterPlan
from imsearch_align.collection.geometry_report import distractor_report
from imsearch_align.collection.label_filter import LabelPlan
from imsearch_align.collection.prepare import MODALITIES, distractor_source, prepare
from imsearch_align.collection.settings import SettingError, check_size
from imsearch_align.collection.study import CellBase, CellRunner
from imsearch_align.datasets.base import TEST_SPLIT
from imsearch_align.experiment import ExperimentConfig, Study
from imsearch_align.experiment.components import support_pairs
from imsearch_align.framework.atomic import atomic_write
from imsearch_align.framework.errors import ConfigError
from imsearch_align.framework.interfaces import StoreUnavailableError
from imsearch_align.study.data import base_config, dataset_spec, method_params
from imsearch_align.study.manifest import StudyManifest
from imsearch_align.study.output import write_outputs
from imsearch_align.study.result import StudyResult
from imsearch_align.study.spec import StudySpec, StudySpecError

__all__ = ["StudyDataError", "run_study"]


class StudyDataError(RuntimeError):
    """The study's data could not be loaded (exit 1 on the command line)."""


def study_config(spec: StudySpec) -> ExperimentConfig:
    """The experiment config every cell of ``spec`` starts from (data, encoders, k, seed)."""
    dataset, dparams, offline = dataset_spec(
        data=spec.data, embeddings=spec.embeddings, shapes=spec.shapes,
        shapes_root=spec.shapes_root, seed=spec.seed,
    )  # fmt: skip
    return base_config(
        dataset, dparams, offline=offline or spec.offline, precomputed=bool(spec.embeddings),
        image_encoder=spec.image_encoder, image_model=spec.image_model,
        text_encoder=spec.text_encoder, text_model=spec.text_model,
        k=spec.ks(), seed=spec.seed, cache_dir=spec.cache_dir, name="collection",
    )  # fmt: skip


def run_study(spec: StudySpec, *, progress: bool = True, log: TextIO | None = None) -> StudyResult:
    """Run every cell of ``spec`` and write its outputs (the module docstring).

    Raises :class:`~imsearch_align.study.spec.StudySpecError` for a spec the
    data cannot serve (distractors of another dimension, more rows than the
    source holds, a collection larger than a store mode serves) and
    :class:`StudyDataError` when the data cannot be loaded; both before any
    cell runs. Ctrl-C ends the study with the finished cells' outputs
    written and ``interrupted`` set on the result. The run's manifest
    (:mod:`~imsearch_align.study.manifest`) is written when the first cell is
    about to run and again at the end, however it ends; one that cannot be
    written raises :class:`~imsearch_align.study.manifest.ManifestError` (the
    cells are kept).
    """
    say = _Say(log)
    manifest = StudyManifest.begin(spec)
    base = study_config(spec)
    study = Study()
    try:
        study.load(base)
    except Exception as exc:
        raise StudyDataError(f"cannot load the data: {type(exc).__name__}: {exc}") from exc
    try:
        if spec.n:  # every support size is there, before any fit
            support_pairs(study.load(base).support, max(spec.n), spec.seed)
        sources, sizes = _sources(spec, base, study)
        runner = _runner(spec, study, base, sizes, say.log)
    except (SettingError, DistractorError, ConfigError) as exc:
        raise StudySpecError(f"--n: {exc}" if "n_support" in str(exc) else str(exc)) from None
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    result = StudyResult(spec=spec, out=out)
    manifest.start(out, runner)
    t0 = time.perf_counter()
    error: BaseException | None = None
    try:
        _run(spec, base, study, sources, sizes, runner, result, progress, say)
    except KeyboardInterrupt as exc:
        result.interrupted, result.stopped_by = True, exc
    except BaseException as exc:
        error = exc
        raise
    finally:
        # this run's Milvus Lite / Qdrant / LanceDB data only: another study writing into
        # the same folder keeps its live stores
        shutil.rmtree(runner.work, ignore_errors=True)
        with contextlib.suppress(OSError):
            runner.work.parent.rmdir()  # .stores, when no other run has one
        result.seconds["total"] = time.perf_counter() - t0
        try:
            result.outputs = write_outputs(result)
        finally:
            _finish(manifest, result, error)
    return result


def _finish(manifest: StudyManifest, result: StudyResult, error: BaseException | None) -> None:
    """The manifest as the study ended; when it cannot be written and the study is already
    ending by an exception, that one goes on, with a note naming this one."""
    try:
        manifest.finish(result, error)
    except Exception as exc:
        if error is None:
            raise
        error.add_note(f"and the study manifest was not finished: {exc}")


class _Say:
    def __init__(self, log: TextIO | None) -> None:
        self.log = log

    def __call__(self, text: str) -> None:
        print(text, file=self.log or sys.stderr, flush=True)


def _sources(spec: StudySpec, base: Any, study: Study) -> tuple[dict[str, Any], list[int]]:
    """The distractor source of each direction, the sizes, and the store-mode size checks."""
    sizes = spec.size_grid()
    text = spec.distractors or str(max(sizes or [0]))
    sources = {}
    ds = study.load(base).dataset
    for d in spec.directions:
        try:
            src = distractor_source(text, base, study, MODALITIES[d][0], seed=spec.seed)
        except (OSError, EOFError, ValueError) as exc:
            if isinstance(exc, DistractorError):
                raise
            raise StudySpecError(
                f"--distractors {text!r}: cannot be read: {type(exc).__name__}: {exc}"
            ) from None
        if sizes is None:
            sizes = [0, src.n_rows]
        if max(sizes) > src.n_rows:
            raise StudySpecError(
                f"--sizes {max(sizes)}: the distractors {src.name!r} hold {src.n_rows} rows"
            )
        if getattr(src, "path", None) is not None:  # a file: every row it gives, checked now
            src.head(max(sizes)).check(spec.block_rows)
        docs = len(ds.split_ids(TEST_SPLIT, MODALITIES[d][0]))
        for store in spec.store_modes():
            check_size(store, docs + max(sizes), what=f"the largest {d} collection")
        sources[d] = src
    return sources, sorted(sizes)


def _runner(spec: StudySpec, study: Study, base: Any, sizes: list[int], log: Any) -> CellRunner:
    filters = None
    if spec.filters:
        labels = LabelPlan.from_study(study, base)
        try:
            filters = FilterPlan(tuple(spec.filters), seed=spec.seed, labels=labels)
        except ValueError as exc:
            raise StudySpecError(f"--filters: {exc}") from None
    concurrency = None
    if spec.concurrency:
        concurrency = ConcurrencyPlan(
            tuple(spec.concurrency), spec.concurrency_duration, spec.concurrency_warmup,
            at_distractors=max(sizes),
        )  # fmt: skip
    return CellRunner(
        Path(spec.out), uri=spec.uri, batch=spec.batch, latency_queries=spec.latency_count(),
        skip_existing=spec.skip_existing, seed=spec.seed, log=log, filters=filters,
        concurrency=concurrency, repeats=spec.repeat_count(),
    )  # fmt: skip


def _run(
    spec: StudySpec,
    base: Any,
    study: Study,
    sources: dict[str, Any],
    sizes: list[int],
    runner: CellRunner,
    result: StudyResult,
    progress: bool,
    say: _Say,
) -> None:
    """Every cell: direction x method x support size x distractor count x setting."""
    runner.cells = result.cells  # the result's lists, filled as cells are written
    runner.filtered_cells = result.filtered
    runner.concurrency_cells = result.concurrency
    result.seconds = runner.seconds
    settings = spec.index_settings()
    reports: list[str] = ["# The distractors beside the split\n"]
    command = tuple(spec.command())
    for direction in spec.directions:
        src = sources[direction]
        for method in spec.methods:
            for n in spec.n or [None]:
                mp = {**_params(method, min(spec.n) if spec.n else None, base, study),
                      **spec.method_params.get(method, {})}  # fmt: skip
                cfg = base.replace(method=method, n_support=n, method_params=mp)
                say(f"fitting {method} (N={n or 'all'}) for {direction}")
                prep = prepare(cfg, study, direction, spec.query_count(), progress=progress)
                if spec.control:
                    try:
                        prep.controls = control_queries(
                            study, cfg, prep, src, after_rows=max(sizes), seed=spec.seed,
                            progress=progress,
                        )  # fmt: skip
                    except ControlError as exc:
                        raise StudySpecError(str(exc)) from None
                    say(f"  control queries: {prep.controls.source}")
                if max(sizes) > 0:
                    reports.append(_geometry(study, cfg, prep, src, method, direction, say))
                    atomic_write(Path(spec.out) / "distractors.md", "\n".join(reports))
                for size in sizes:
                    cb = CellBase(
                        study.load(cfg).dataset.name, method, direction, size,
                        len(prep.doc_ids), spec.ks(), _identity(spec, cfg, src, prep), command,
                        tuple(spec.measures or ()),
                    )  # fmt: skip
                    _collection(spec, prep, src, cb, settings, runner, result, say)


def _collection(
    spec: StudySpec,
    prep: Any,
    src: Any,
    cb: CellBase,
    settings: list[Any],
    runner: CellRunner,
    result: StudyResult,
    say: _Say,
) -> None:
    """Every index setting on one collection (the split's documents and ``cb.distractors``
    distractors)."""
    size = cb.distractors
    coll = CollectionBlocks(
        prep.doc_ids, prep.docs, src.head(size) if size else None,
        method=prep.method, modality=prep.doc_modality, block_rows=spec.block_rows,
    )  # fmt: skip
    truths: dict[str, Any] = {}
    k = max(spec.k)

    def truths_of(queries: Any, ids: Any, tag: str) -> Callable[[str], Any]:
        """The exact truth of ``queries`` on this collection, computed once per digest."""

        def of(digest: str) -> Any:
            if tag + digest not in truths:
                truths[tag + digest] = exact_truth(
                    queries, ids, coll, k, cache_dir=spec.truth_cache, docs_digest=digest,
                    block_rows=spec.block_rows,
                )  # fmt: skip
            return truths[tag + digest]

        return of

    truth_of = truths_of(prep.queries, prep.query_ids, "")
    controls = prep.controls
    control_truth_of = None
    if controls is not None:  # this collection's index-free predictors of the OOD cost
        sample = collection_sample(coll, PREDICTOR_SAMPLE, spec.seed)
        controls.predictor = predict(prep.queries, controls, sample, spec.seed)
        del sample
        control_truth_of = truths_of(controls.queries, controls.ids, "control:")

    for s in settings:
        if s.store in result.unreachable or (s.max_size is not None and size > s.max_size):
            continue
        try:
            runner.run(prep, coll, cb, s, truth_of, control_truth_of)
        except StoreUnavailableError as exc:
            result.unreachable[s.store] = str(exc)
            say(f"  {s.store} unreachable ({exc}); its other cells are not run")


def _geometry(study: Study, cfg: Any, prep: Any, src: Any, method: str, direction: str,
              say: _Say) -> str:  # fmt: skip
    """The distractors beside the split's documents (``distractors.md``; see
    :mod:`imsearch_align.collection.geometry_report`)."""
    data = study.load(cfg)
    mod = prep.doc_modality
    prov = data.image_provider if mod == "image" else data.text_provider
    rows = study.embedding_rows(data.dataset, prov, mod, prep.doc_ids, split=TEST_SPLIT,
                                config=cfg, progress=False)  # fmt: skip
    text = distractor_report(prep, np.asarray(rows[: len(prep.doc_ids)]), src,
                             title=f"{method}, {direction}: {src.name}", seed=cfg.seed)  # fmt: skip
    say(f"  {method}: the distractors beside the split in distractors.md")
    return text


def _params(method: str, n: int | None, base: Any, study: Study) -> dict[str, Any]:
    """The method's parameters for the study's smallest support size (as the Flickr study)."""
    data = study.load(base)
    dims = (int(data.image_provider.dim), int(data.text_provider.dim))
    return method_params(method, n or len(data.support.split_ids("train", "text")), dims)


def _identity(spec: StudySpec, cfg: Any, src: Any, prep: Any) -> dict[str, Any]:
    """What else defines a cell (enters its file key): the same on every machine, so a
    study folder copied elsewhere, or run again with its data moved, is reused. No path
    enters it (not the data's, not ``--out``, the caches or the truth cache): the data by
    content (:func:`~imsearch_align.study.data.data_identity`), the distractors as
    :func:`_distractors` says."""
    from imsearch_align.study.data import data_identity

    return {
        "data": data_identity(cfg.dataset_params),
        "encoders": [
            cfg.image_encoder,
            cfg.image_encoder_params,
            cfg.text_encoder,
            cfg.text_encoder_params,
        ],
        "method_params": cfg.method_params,
        "n_support": prep.n_support,
        "seed": cfg.seed,
        "queries": len(prep.query_ids),
        "batch": spec.batch,
        "distractors": _distractors(src),
    }


def _distractors(src: Any) -> dict[str, Any]:
    """The distractor source as it enters a cell's key: its record (a file by its name and
    the SHA-256 of its bytes), less what another machine computes otherwise from the same
    inputs. Synthetic rows by their count, seed and components, not by their fitted
    model's bytes (the data and encoders they are fitted to are in the key; another BLAS,
    CPU or encoder kernel fits other low bits); an encoder without the version
    of a local weights folder (``@local-...``: its files' sizes and times, other on each
    copy; a Hub revision, ``@rev-...``, is kept)."""
    from imsearch_align.collection.synthetic import SyntheticSource

    rec = dict(src.record())
    if isinstance(src, SyntheticSource):
        rec.pop("model", None)
        rec.pop("name", None)  # synthetic:<the model's fingerprint>:seed<seed>
    enc = rec.get("encoder")
    if isinstance(enc, str) and enc.rpartition("@")[2].startswith("local-"):
        rec["encoder"] = enc.rpartition("@")[0]
    return rec
