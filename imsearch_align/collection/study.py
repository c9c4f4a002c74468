"""The collection study's cells: one store, index setting and collection size, measured.

A *cell* is one row of the study: a fitted method and direction
(:class:`~imsearch_align.collection.prepare.Prepared`), a collection (the
split's documents plus the first ``size`` distractors, a
:class:`~imsearch_align.collection.aligned.CollectionBlocks`), a store's index
built with one set of build-time parameters, and one search-time setting.
:class:`CellRunner` runs every search setting of an
:class:`~imsearch_align.collection.settings.IndexSetting` on one build when the
store is :class:`~imsearch_align.framework.interfaces.TunableSearch`, else one
build per setting (``rebuilt``); its speed from timed passes
(:mod:`~imsearch_align.collection.passes`), its quality from the returned ids
against the collection's exact truth, with intervals
(:mod:`~imsearch_align.collection.intervals`), per query beside it
(:mod:`~imsearch_align.collection.per_query`), and with ``--control`` the
control queries' recall (:mod:`~imsearch_align.collection.control`).

Each cell is one JSON file (``kind: "collection_scale"``, written through
:mod:`imsearch_align.experiment.study_cell`) named by its settings and a key
of its configuration (:func:`cell_path`); ``skip_existing`` reuses a clean
one, and a build whose every cell is reused is not built. Filtered and
concurrency cells are measured on each build's deployable setting
(:func:`~imsearch_align.collection.extras.measure_extras`).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imsearch_align.collection.build import BuildJob, BuildState
from imsearch_align.collection.cell_files import (
    CellBase,
    cell_identity,
    cell_path,
    load_clean,
)
from imsearch_align.collection.cell_records import cell_head as _cell_head
from imsearch_align.collection.cell_records import cell_label as _label
from imsearch_align.collection.control import measure_control
from imsearch_align.collection.extras import measure_extras
from imsearch_align.collection.intervals import cell_intervals, judged_clusters
from imsearch_align.collection.measure import harness_memory, insert_collection, open_store
from imsearch_align.collection.passes import (
    CpuClock,
    apply_passes,
    interleaved_order,
    repeated_passes,
    wait_settled,
)
from imsearch_align.collection.per_query import PENDING, per_query_frame, write_per_query
from imsearch_align.collection.prepare import Prepared
from imsearch_align.collection.recall import ann_recall_at_k, compare_measures
from imsearch_align.collection.settings import STORES, IndexSetting, resolve
from imsearch_align.experiment.provenance import capture
from imsearch_align.experiment.study_cell import status_record, write_cell
from imsearch_align.framework._heap import release_freed_memory
from imsearch_align.framework.interfaces import StoreUnavailableError, TunableSearch
from imsearch_align.framework.metrics import Run

__all__ = ["CellBase", "CellRunner", "cell_identity", "cell_path", "load_clean"]


class CellRunner:
    """Runs and writes the cells of index settings (see the module docstring).

    Args:
        out: the output folder (one JSON per cell).
        uri: the Milvus server of ``--stores milvus``.
        batch: queries per batched search call.
        latency_queries: single-query searches timed for the latency percentiles.
        skip_existing: reuse clean cells of the same configuration.
        seed: seeds the latency sample.
        log: where progress lines go (None: ``sys.stderr`` at the time of writing).
        filters: a :class:`~imsearch_align.collection.filtered_study.FilterPlan`
            (None: no filtered cells).
        concurrency: a :class:`~imsearch_align.collection.extras.ConcurrencyPlan`
            (None: no concurrency cells).
        repeats: counted timed passes per cell (:mod:`~imsearch_align.collection.passes`:
            above 1, after a warm-up pass, interleaved across a tunable build's settings).
    """

    def __init__(
        self,
        out: Path,
        *,
        uri: str | None = None,
        batch: int = 100,
        latency_queries: int = 1000,
        skip_existing: bool = False,
        seed: int = 0,
        log: Any = None,
        filters: Any = None,
        concurrency: Any = None,
        repeats: int = 1,
    ) -> None:
        self.out, self.uri, self.batch = Path(out), uri, int(batch)
        self.repeats = int(repeats)
        self.latency_queries, self.skip_existing = int(latency_queries), skip_existing
        self.seed, self.log = seed, log
        self.filters, self.concurrency = filters, concurrency
        #: The sweep, filtered and concurrency cells written (or reused) so far, each
        #: added as it is written: an interrupted study still lists every cell on disk.
        self.cells: list[dict[str, Any]] = []
        self.filtered_cells: list[dict[str, Any]] = []
        self.concurrency_cells: list[dict[str, Any]] = []
        #: Seconds spent measuring the extras (filtered, concurrency).
        self.seconds = {"filtered": 0.0, "concurrency": 0.0}
        #: This run's token: part of every collection's name.
        self.token = uuid.uuid4().hex[:8]
        #: Where in-process stores keep their data, this run's own folder (Milvus Lite's
        #: database, Qdrant's
        #: folder): hidden, so a report of ``out`` skips it; the caller removes it.
        self.work = self.out / ".stores" / self.token

    def say(self, text: str) -> None:
        """One progress line (to ``log``, else standard error)."""
        print(text, file=self.log or sys.stderr, flush=True)

    def run(
        self,
        prep: Prepared,
        coll: Any,
        base: CellBase,
        s: IndexSetting,
        truth_of: Callable[[str], Any],
        control_truth_of: Callable[[str], Any] | None = None,
    ) -> list[dict[str, Any]]:
        """Every search setting of ``s`` on ``coll``: the cells, written (or reused).

        ``truth_of(digest)`` gives the collection's ground truth from the
        documents' stream digest (computed once per collection by the caller).
        A failed build or search is a failed cell (the error in its status);
        :class:`~imsearch_align.framework.interfaces.StoreUnavailableError`
        propagates after the failed cells are written. Every cell is also added to
        :attr:`cells` as it is written.
        """
        build, grid = resolve(s, base.size)
        idents = [cell_identity(base, s, build, g) for g in grid]
        paths = [cell_path(self.out, i) for i in idents]
        cells: list[dict[str, Any] | None] = [
            load_clean(p) if self.skip_existing else None for p in paths
        ]
        if control_truth_of is not None:  # a cell measured without controls is measured again
            cells = [c if c is None or "control" in c else None for c in cells]
        for c in cells:
            if c is not None:
                self.say(f"  reused {_label(c)}")
                self.cells.append(c)
        job = BuildJob(
            prep, coll, base, s, build, grid, truth_of, control_truth_of=control_truth_of
        )
        state = job.state
        fresh: list[int] = []  # measured now, on the build still up at the end
        try:
            for i, search in enumerate(grid):
                if cells[i] is not None:
                    continue
                try:
                    cells[i] = self._cell(job, search)
                except StoreUnavailableError as exc:
                    for j in range(i, len(grid)):
                        if cells[j] is None:
                            cells[j] = self._failed(base, s, build, grid[j], exc, paths[j])
                    raise
                except Exception as exc:
                    cells[i] = self._failed(base, s, build, search, exc, paths[i])
                    self.close(state)
                    fresh.clear()  # the next setting is built again
                    continue
                self.write(paths[i], cells[i])
                self.cells.append(cells[i])
                fresh.append(i)
            if self.repeats > 1 and isinstance(state.store, TunableSearch) and fresh:
                self._interleave(job, cells, fresh, paths)
            if self.filters is not None or self.concurrency is not None:
                measure_extras(self, job, cells, paths)
        finally:
            self.close(state)
        return [c for c in cells if c is not None]

    def _interleave(
        self, job: BuildJob, cells: list[Any], fresh: list[int], paths: list[Path]
    ) -> None:
        """The counted passes of a tunable build's cells measured now: round by round, each
        round visiting every setting (:func:`~imsearch_align.collection.passes.
        interleaved_order`); each cell rewritten with its passes, also when a round fails
        (then degraded: fewer passes than asked)."""
        state, prep, grid = job.state, job.prep, job.grid
        store, name, k = state.store, state.name, max(job.base.ks)
        # a server can start compacting after the first wait (seen at 1M): wait again
        again = wait_settled(store, name)
        if again is not None and state.settled is not None:
            state.settled = {**state.settled, "before_counted": again}
        try:
            for r in range(self.repeats):
                for j in interleaved_order(len(fresh), r):
                    if grid[fresh[j]]:
                        store.set_search_params(name, **grid[fresh[j]])
                    cells[fresh[j]]["passes"] += self._passes(store, name, prep, k, state, 1)[0]
        except StoreUnavailableError:
            raise
        except Exception as exc:  # the cells keep the passes that ran, marked degraded
            self.say(f"  timed passes stopped: {type(exc).__name__}: {exc}")
        finally:
            for i in fresh:
                apply_passes(
                    cells[i], cells[i]["passes"], self.repeats, "interleaved", state.cpu.what
                )
                cells[i]["timing"]["settled"] = state.settled
                self.write(paths[i], cells[i])
                self.say(f"  {_label(cells[i])} ({self.repeats} passes, interleaved)")

    def ensure_built(self, job: BuildJob, search: dict[str, int]) -> Any:
        """The build of ``job`` (its ``state``): the store built now, with its collection
        inserted (with attributes when filtering) and searchable, unless it is."""
        state, s, base = job.state, job.setting, job.base
        if state.store is not None:
            return state.store
        prep, coll, build = job.prep, job.coll, job.build
        state.store = store = open_store(s, build, search, uri=self.uri, workdir=self.work)
        # the config's key and this run's token: a collection left by a killed run, or a
        # second user of the same config on a shared server, never blocks this one
        state.name = name = (
            "cs_" + cell_path(Path(), cell_identity(base, s, build, {})).stem[-10:]
            + "_" + self.token
        )  # fmt: skip
        mode = STORES[s.store]
        stats = insert_collection(
            store, name, coll, coll.dim, uri=self.uri, in_process=mode.in_process,
            attributes=self.filters and self.filters.inserts(store, prep, coll),
        )  # fmt: skip
        state.stats, state.truth = stats, job.truth_of(stats.digest)
        if job.control_truth_of is not None:
            state.control_truth = job.control_truth_of(stats.digest)
        # a server compacting or re-indexing small segments after the load: wait (bounded)
        state.settled = wait_settled(store, name)
        if state.settled is not None and not state.settled["settled"]:
            self.say(f"  warning: {name}: segments still changing after "
                     f"{state.settled['waited_s']:.0f} s; timing anyway")  # fmt: skip
        return store

    def _cell(self, job: BuildJob, search: dict[str, int]) -> dict[str, Any]:
        """One cell: build (or reuse the tunable build), search, score."""

        state = job.state
        store = state.store
        if store is None or not isinstance(store, TunableSearch):
            self.close(state)
            self.ensure_built(job, search)
        elif search:
            store.set_search_params(state.name, **search)
        return self._measure(job.prep, job.base, job.setting, job.build, search, state)

    def _measure(
        self,
        prep: Prepared,
        base: CellBase,
        s: IndexSetting,
        build: dict[str, int],
        search: dict[str, int],
        state: BuildState,
    ) -> dict[str, Any]:
        store, name, truth, stats = state.store, state.name, state.truth, state.stats
        k = max(base.ks)
        state.cpu = state.cpu or CpuClock(self.uri, STORES[s.store].in_process)
        # a setting rebuilt per setting: its passes now, back to back; a tunable build's
        # counted passes later, interleaved (_interleave)
        tunable = isinstance(store, TunableSearch)
        passes, ids, scores = self._passes(store, name, prep, k, state, self.repeats, not tunable)
        run = Run.from_arrays(prep.query_ids, ids, scores)
        scored = compare_measures(run, truth, prep.qrels, base.measures)
        means = scored["means"]
        clusters = judged_clusters(prep.qrels, scored["approximate"].query_ids)
        intervals, interval = cell_intervals(
            scored["approximate"], scored["exact"], prep.qrels, base.direction, seed=self.seed,
            clusters=clusters,
        )  # fmt: skip
        recall = ann_recall_at_k(ids, truth, k)
        frame = per_query_frame(
            prep.query_ids, ids, recall.per_query, scored["approximate"], scored["exact"],
            clusters,
        )  # fmt: skip
        d = base.direction
        metrics = {f"{d}/{m}": float(v["approximate"]) for m, v in means.items()}
        metrics[f"{d}/ann_recall@{k}"] = recall.mean
        ident = cell_identity(base, s, build, search)
        cell = {
            **_cell_head(base, s),
            "index": {
                "type": s.index_type,
                "params": build,
                "search_params": dict(store.search_params(name)) if tunable else search,
                "sweep": "set_search_params" if tunable else "rebuilt",
                "builds": store.build_count(name) if tunable else 1,
            },
            "collection": {
                "size": stats.rows,
                "documents": base.documents,
                "distractors": base.distractors,
                "source": base.config.get("distractors"),
            },
            "queries": len(prep.query_ids),
            "metrics": metrics,
            "exact_metrics": {f"{d}/{m}": float(v["exact"]) for m, v in means.items()},
            "intervals": intervals,
            "interval": interval,
            "ann_recall": {"k": k, "mean": recall.mean, "uncertain": recall.n_uncertain},
            "batch": self.batch,
            "timings": stats.to_dict(),
            "memory": {
                "kind": stats.memory_kind,
                "bytes": stats.memory_bytes,
                "rss_delta_bytes": stats.rss_delta_bytes,
            },
            "harness": harness_memory(),
            "disk_bytes": self._disk(s),
            "truth": truth.record(),
            "n_support": prep.n_support,
            "fit_s": round(prep.fit_s, 4),
            "config": ident["config"],
            "provenance": capture(store).to_dict(),
            "command": list(base.command),
            PENDING: frame,  # written beside the cell by write()
        }
        if state.control_truth is not None:
            cell["control"] = measure_control(
                store, name, prep.controls, state.control_truth, k, self.batch
            )
        order = "back to back" if self.repeats > 1 and not tunable else "interleaved"
        apply_passes(cell, passes, self.repeats, order, state.cpu.what)
        cell["timing"]["settled"] = state.settled
        self.say(f"  {_label(cell)}")
        return cell

    def _passes(self, store: Any, name: str, prep: Prepared, k: int, state: BuildState,
                repeats: int, rest: bool = True) -> tuple[list[dict], Any, Any]:  # fmt: skip
        return repeated_passes(
            store, name, prep.queries, k, repeats=repeats, batch=self.batch,
            latency_queries=self.latency_queries, seed=self.seed, cpu=state.cpu, rest=rest,
        )  # fmt: skip

    def _disk(self, s: IndexSetting) -> int | None:
        return STORES[s.store].disk_bytes(self.work)

    def _failed(
        self,
        base: CellBase,
        s: IndexSetting,
        build: dict[str, int],
        search: dict[str, int],
        exc: BaseException,
        path: Path,
    ) -> dict[str, Any]:
        error = f"{type(exc).__name__}: {exc}"
        self.say(f"  failed {s.label} {search or ''} size={base.size:,}: {error}")
        cell = {
            **_cell_head(base, s),
            "index": {"type": s.index_type, "params": build, "search_params": search},
            "collection": {"size": base.size, "distractors": base.distractors},
            "config": base.config,
            "status": status_record("failed", error=error),
            "command": list(base.command),
        }
        self.write(path, cell)
        self.cells.append(cell)
        return cell

    def write(self, path: Path, cell: dict[str, Any]) -> None:
        """Write ``cell`` at ``path`` through the one writer of study cells; its per-query
        table first, beside it (:mod:`~imsearch_align.collection.per_query`)."""
        frame = cell.pop(PENDING, None)
        if frame is not None:
            cell["per_query"] = write_per_query(path, frame)
        write_cell(path, cell)

    def close(self, state: BuildState) -> None:
        """Drop the build held in ``state`` (its collection, the store) and give back memory.
        A server gone meanwhile is said, naming the collection left on it (the cells
        already say the server is unreachable)."""
        store, state.store = state.store, None
        if store is None:
            return
        name = state.name
        try:
            if name and store.has_collection(name):
                store.drop_collection(name)
        except StoreUnavailableError as exc:
            self.say(
                f"  could not drop collection {name!r} ({exc}); drop it when the server is back"
            )
        finally:
            store.close()
            release_freed_memory()
