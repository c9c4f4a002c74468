"""Run the performance study: every section, one table, one JSON.

    python benchmarks/perf.py                 # every section
    python benchmarks/perf.py --only evaluator,methods
    python benchmarks/perf.py --quick         # small sizes, for a smoke run

Sections are modules ``benchmarks/perf_<name>.py`` with ``run(quick) -> dict``
(see benchmarks/README.md). Results are merged by section into
``benchmarks/results/perf.json`` together with the machine description, so
running one section keeps the others' last numbers.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path

from imsearch_align.framework.atomic import atomic_write

HERE = Path(__file__).resolve().parent
SECTIONS = [
    "evaluator",
    "stores",
    "methods",
    "encoders",
    "diagnostics",
    "ties",
    "scale",
    "collection",
    "client",
    "filter",
]


def machine() -> dict:
    """CPU, cores, BLAS and library versions: the context every number needs."""
    info = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
    }
    import numpy as np

    from imsearch_align.experiment.provenance import blas_info

    info["numpy"] = np.__version__
    info["blas"] = blas_info()  # no library file paths: they name this machine's folders
    for name in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS"):
        if name in os.environ:
            info[name] = os.environ[name]
    return info


def main(argv: list[str] | None = None) -> int:
    """Run the chosen sections, print a table, merge into perf.json."""
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--only", default="", help=f"comma-separated sections out of {','.join(SECTIONS)}"
    )
    ap.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    ap.add_argument("--out", default=str(HERE / "results" / "perf.json"))
    ap.add_argument("--uri", default=None,
                    help="a running Milvus server for the sections that search one (client, "
                         "collection) instead of one they start")  # fmt: skip
    args = ap.parse_args(argv)
    chosen = [s for s in args.only.split(",") if s] or SECTIONS
    unknown = [s for s in chosen if s not in SECTIONS]
    if unknown:
        ap.error(f"--only: unknown section(s) {unknown}; valid: {SECTIONS}")
    sys.path.insert(0, str(HERE))
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(out_path.read_text()) if out_path.exists() else {}
    data.setdefault("sections", {})
    data["machine"] = machine()
    rows = []
    failed = []
    for name in chosen:
        try:
            mod = importlib.import_module(f"perf_{name}")
        except ImportError as exc:
            print(f"[{name}] not available: {exc}", file=sys.stderr)
            failed.append(name)
            continue
        print(f"[{name}] running...", file=sys.stderr, flush=True)
        t = time.perf_counter()
        try:
            takes_uri = "uri" in inspect.signature(mod.run).parameters
            res = mod.run(quick=args.quick, **({"uri": args.uri} if takes_uri else {}))
        except Exception:
            traceback.print_exc()
            failed.append(name)
            continue
        res["wall_s"] = time.perf_counter() - t
        res["quick"] = args.quick
        res["when"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        data["sections"][name] = res
        rows.extend(res["rows"])
        atomic_write(out_path, json.dumps(data, indent=2, default=float))
    print(format_table(rows))
    print(f"\nwritten: {out_path}")
    return 1 if failed else 0


def format_table(rows: list[dict]) -> str:
    """A plain-text table: section, item, value, unit, target, verdict."""
    head = f"{'section':<12} {'item':<72} {'value':>14} {'unit':<6} {'target':<12} ok"
    lines = [head, "-" * len(head)]
    for r in rows:
        v = r["value"]
        vs = (
            f"{v:,.4g}"
            if isinstance(v, float) and abs(v) < 1e6
            else f"{v:,.0f}"
            if isinstance(v, int | float)
            else str(v)
        )
        ok = {True: "yes", False: "NO", None: ""}[r.get("ok")]
        lines.append(
            f"{r['section']:<12} {r['item'][:72]:<72} {vs:>14} {r.get('unit') or '':<6} {r.get('target') or ''!s:<12} {ok}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
