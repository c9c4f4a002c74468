"""``imsearch-align``: the command line.

    imsearch-align eval  --dataset shapes --method csa --store faiss --n-support 1000
    imsearch-align sweep --config base.yaml --methods csa asif procrustes --n-support 100 1000 all
    imsearch-align build results/ --output benchmark.csv --markdown leaderboard.md
    imsearch-align plot  results/ --output-dir plots
    imsearch-align report results/            # one self-contained HTML page
    imsearch-align embed --dataset shapes --image-encoder efficientnet-lite0 --text-encoder sentence-transformers
    imsearch-align eval  --task matching --dataset shapes --method csa
    imsearch-align list [datasets [NAME]|encoders|methods|stores|tasks|metrics|perturbations]
    imsearch-align doctor [--uri http://localhost:19530]

Conventions follow CLIP_benchmark: ``--output`` is a file-name template
(default ``{dataset}_{method}_{store}_{n}.json``), ``--skip-existing``
resumes a benchmark (a degraded or failed result is run again), ``build``
merges result JSONs into a CSV. ``--plugin MODULE`` (any command, repeatable)
imports a module that registers stores, methods, encoders, datasets or tasks.

Exit status: 0 success; 1 a run failed; 2 a usage error (unknown name, bad
config key, type or value, unusable config file, bad output template,
unwritable output or cache folder, a plug-in module that fails to import, a
``build`` output that is not its own to replace) found before any work; 3 a run finished **degraded** (failed queries: the numbers
are not the full measurement; ``--allow-failures`` makes it 0); 130
interrupted (Ctrl-C: finished batches are checkpointed); 143 terminated
(SIGTERM: as Ctrl-C; run the same command to resume).

One module per command group: :mod:`.run` (eval, sweep; their config flags
are made from ``ExperimentConfig``'s fields by :mod:`.config_flags`),
:mod:`.report` (build, plot), :mod:`.embed`, :mod:`.listing` (list),
:mod:`.doctor`; :mod:`.app` assembles the parser and runs ``main``;
:mod:`.common` holds what they share.
"""

from __future__ import annotations

from imsearch_align.cli.app import build_parser, main
from imsearch_align.cli.run import exit_status

__all__ = ["build_parser", "exit_status", "main"]
