"""What the study measures once per built index, on the setting one would deploy: the
filtered searches (``--filters``) and the concurrent clients (``--concurrency``).

The unfiltered cells of a build sweep its search-time settings; the setting
a search engineer deploys is one of them, chosen by :func:`deploy_index`:
the fastest (batched queries/s) whose ANN recall@k reaches
:data:`DEPLOY_RECALL`, else the one with the highest recall. The same built
index is then set to it and measured under filters (one ``kind:
"filtered"`` cell per selectivity,
:class:`~imsearch_align.collection.filtered_study.FilterPlan`) and under 1,
2, 4... concurrent clients (one ``kind: "concurrency"`` cell per level,
:class:`ConcurrencyPlan`): in threads sharing the store for an in-process
one, in processes each opening its own client
(:class:`~imsearch_align.concurrency.StoreSpec`) for a server, as
VectorDBBench's concurrent-search case does. Measuring those on every
swept setting would multiply the study's time for points nobody deploys.

Both are reused with ``--skip-existing`` when their files are clean; a build
whose every cell and extra is reused is not built.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imsearch_align.collection.build import BuildJob
from imsearch_align.collection.cell_files import DeployContext, cell_identity, read_ok
from imsearch_align.collection.passes import CpuClock
from imsearch_align.collection.prepare import Prepared
from imsearch_align.collection.settings import STORES
from imsearch_align.concurrency.limits import check_levels
from imsearch_align.experiment.deploy import DEPLOY_RECALL, deploy_index
from imsearch_align.experiment.provenance import capture
from imsearch_align.experiment.study_cell import status_record
from imsearch_align.framework.interfaces import StoreUnavailableError, TunableSearch

__all__ = ["DEPLOY_RECALL", "ConcurrencyPlan", "deploy_index", "measure_extras"]


@dataclass(frozen=True)
class ConcurrencyPlan:
    """Concurrent clients on each build's deployable setting.

    Args:
        levels: clients per level (ascending, distinct, >= 1).
        duration_s: measured seconds per level.
        warmup_s: seconds each level searches before measuring.
        at_distractors: measure only collections with this many distractors
            (the study passes its largest size); None: every size.
    """

    levels: tuple[int, ...]
    duration_s: float = 5.0
    warmup_s: float = 1.0
    at_distractors: int | None = None

    def __post_init__(self) -> None:

        object.__setattr__(self, "levels", tuple(check_levels(self.levels)))
        if not self.duration_s > 0:
            raise ValueError(f"concurrency duration must be > 0 s, got {self.duration_s}")

    def applies(self, distractors: int) -> bool:
        """Whether collections with ``distractors`` distractors are measured."""
        return self.at_distractors is None or distractors == self.at_distractors

    @staticmethod
    def path(path: Path, level: int) -> Path:
        """``concurrency-c{level}_`` + the unfiltered cell's file name."""
        return path.with_name(f"concurrency-c{level}_{path.name}")

    def reuse(self, path: Path) -> list[dict[str, Any]] | None:
        """The clean cells of every level measured before on the cell at ``path`` with this
        plan's duration and warm-up, else None (measured otherwise: measure again)."""
        found = [read_ok(self.path(path, lv)) for lv in self.levels]
        if not all(found):
            return None
        same = all(
            (c.get("run") or {}).get("duration_s") == self.duration_s
            and (c.get("run") or {}).get("warmup_s") == self.warmup_s
            for c in found
        )
        return found if same else None

    def measure(
        self, runner: Any, store: Any, name: str, prep: Prepared, ctx: DeployContext
    ) -> list[dict[str, Any]]:
        """Every level on the built collection ``name``: the cells, written, returned.

        Each level runs on its own: a level whose clients crash, hang or are refused is a
        failed cell of that level, and the levels measured before and after it are kept
        (the saturation point is read from the levels that answered)."""
        from dataclasses import replace

        from imsearch_align.concurrency import StoreSpec, run_concurrent, saturation

        s, base, cell = ctx.setting, ctx.base, ctx.cell
        search = dict((cell.get("index") or {}).get("search_params") or ctx.search)
        if STORES[s.store].in_process:
            source, mode = store, "threads"
        else:
            params = {"uri": runner.uri, "index": s.index_type, "index_params": dict(ctx.build)}
            source = StoreSpec(s.store, {**params, "search_params": search})
            mode = "processes"
        measured, cells = [], []
        for level in self.levels:
            try:
                measured.append(run_concurrent(
                    source, name, prep.queries, prep.query_ids, max(base.ks), levels=(level,),
                    duration_s=self.duration_s, warmup_s=self.warmup_s, mode=mode,
                    seed=runner.seed,
                ))  # fmt: skip
            except StoreUnavailableError:
                raise
            except Exception as exc:
                runner.say(f"    {level:>2} clients ({mode}): failed: {type(exc).__name__}: {exc}")
                cells.append(self.failed(ctx, exc, levels=(level,))[0])
        if measured:
            levels = tuple(lv for r in measured for lv in r.levels)
            curve = [(lv.concurrency, lv.queries_per_s) for lv in levels if lv.answered]
            res = replace(measured[0], levels=levels,
                          saturation=saturation(curve) if len(curve) > 1 else None)  # fmt: skip
            cells += self._cells(res, store, prep, ctx, search)
            if res.saturation:
                runner.say(f"    saturation at {res.saturation} clients")
            elif len(curve) > 1:
                runner.say(f"    no saturation up to {curve[-1][0]} clients: q/s still grew "
                           "at the last level")  # fmt: skip
        cells.sort(key=lambda c: c["concurrency"])
        for c in cells:
            runner.write(self.path(ctx.path, c["concurrency"]), c)
            if (c.get("status") or {}).get("state") != "failed":
                runner.say(
                    f"    {c['concurrency']:>2} clients ({mode}): {c['queries_per_s']:,.0f} q/s, "
                    f"p99 {(c.get('latency_ms') or {}).get('p99', float('nan')):.2f} ms"
                )
        return cells

    def _cells(
        self, res: Any, store: Any, prep: Prepared, ctx: DeployContext, search: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The cells of the levels that ran, scored on their answers."""
        from imsearch_align.concurrency import concurrency_cells, quality

        s, base, cell = ctx.setting, ctx.base, ctx.cell
        q = {lv.concurrency: quality(lv.answers, prep.qrels, base.measures) for lv in res.levels}
        cells = concurrency_cells(
            res, store=s.store, method=base.method, dataset=base.dataset,
            direction=base.direction, index_type=s.index_type, index_params=ctx.build,
            search_params=search, collection_size=(cell.get("collection") or {}).get("size"),
            quality=q, provenance=capture(store), command=list(base.command),
        )  # fmt: skip
        for c in cells:
            c["config"] = ctx.ident["config"]
        return cells

    def failed(
        self, ctx: DeployContext, exc: BaseException, levels: tuple[int, ...] | None = None
    ) -> list[dict[str, Any]]:
        """One failed cell per level of ``levels`` (default: the plan's), the error in its
        status."""
        s, base = ctx.setting, ctx.base
        return [
            {
                "kind": "concurrency",
                "store": s.store,
                "method": base.method,
                "dataset": base.dataset,
                "direction": base.direction,
                "index": {"type": s.index_type, "params": ctx.build},
                "concurrency": lv,
                "config": ctx.ident["config"],
                "status": status_record("failed", error=exc),
                "command": list(base.command),
            }
            for lv in (self.levels if levels is None else levels)
        ]


def _pending(runner: Any, base: Any, path: Path) -> list[str]:
    """The extras of the cell at ``path`` still to measure (the reused ones are recorded)."""
    todo = []
    if runner.filters is not None:
        found = runner.filters.reuse_one(path) if runner.skip_existing else None
        if found is None:
            todo.append("filtered")
        else:
            runner.filtered_cells.extend(found)
    plan = runner.concurrency
    if plan is not None and plan.applies(base.distractors):
        found = plan.reuse(path) if runner.skip_existing else None
        if found is None:
            todo.append("concurrency")
        else:
            runner.concurrency_cells.extend(found)
    return todo


def measure_extras(runner: Any, job: BuildJob, cells: list[Any], paths: list[Path]) -> None:
    """The filtered and concurrency cells of one build (``job``, its store built or not),
    on its deployable setting."""

    i = deploy_index(cells)
    if i is None:
        return
    base, s, build, search = job.base, job.setting, job.build, job.grid[i]
    todo = _pending(runner, base, paths[i])
    if not todo:
        return
    state = job.state
    tunable = isinstance(state.store, TunableSearch)
    if state.store is not None and not tunable and i != len(job.grid) - 1:
        runner.close(state)  # built for another setting, and it cannot be re-set
    store = runner.ensure_built(job, search)
    if isinstance(store, TunableSearch) and search:
        store.set_search_params(state.name, **search)
    ident = cell_identity(base, s, build, search)
    state.cpu = state.cpu or CpuClock(runner.uri, STORES[s.store].in_process)
    ctx = DeployContext(base, s, build, search, ident, paths[i], cells[i], state.cpu)
    runner.say(f"  deployable setting {search or '(none)'}: {', '.join(todo)}")
    if "filtered" in todo:
        t = time.perf_counter()
        runner.filtered_cells += runner.filters.measure(
            runner, store, state.name, job.prep, job.coll, ctx
        )
        runner.seconds["filtered"] += time.perf_counter() - t
    if "concurrency" in todo:
        t = time.perf_counter()
        plan = runner.concurrency
        try:
            runner.concurrency_cells += plan.measure(runner, store, state.name, job.prep, ctx)
        except StoreUnavailableError:
            raise
        except Exception as exc:
            runner.say(f"  failed concurrency: {type(exc).__name__}: {exc}")
            for c in plan.failed(ctx, exc):
                runner.write(plan.path(paths[i], c["concurrency"]), c)
                runner.concurrency_cells.append(c)
        runner.seconds["concurrency"] += time.perf_counter() - t
