"""The collection study as a library call: a typed spec in, cells and tables out.

    from imsearch_align.study import StudySpec, run_study

    spec = StudySpec(embeddings="emb/", stores=("faiss",), sizes=(0, 100_000),
                     index=("faiss:hnsw:M=16,efConstruction=100,efSearch=16,64",))
    result = run_study(spec)            # one JSON per cell in spec.out, tables, figures
    print(result.exit_code, len(result.cells))

``imsearch-align study`` is the same call with every field a flag
(:mod:`.flags`) and ``--config study.yaml``; ``benchmarks/studies/*.yaml``
are the committed studies. Rooms: :mod:`.spec` (the spec and its checks),
:mod:`.defaults` (size grids, each store's index grid), :mod:`.data` (data,
encoders, method parameters; shared with ``benchmarks/flickr.py``),
:mod:`.run` (the loop over collections), :mod:`.result`, :mod:`.output`
(CSV, leaderboard, figures, the printed table), :mod:`.manifest` (each run's
manifest in ``out/.manifests/``; :func:`verify_manifest` checks a folder).
"""

from __future__ import annotations

from imsearch_align.study.manifest import ManifestError, StudyManifest, verify_manifest
from imsearch_align.study.output import summary, write_outputs
from imsearch_align.study.result import StudyResult
from imsearch_align.study.run import StudyDataError, run_study, study_config
from imsearch_align.study.spec import StudySpec, StudySpecError

__all__ = [
    "ManifestError",
    "StudyDataError",
    "StudyManifest",
    "StudyResult",
    "StudySpec",
    "StudySpecError",
    "run_study",
    "study_config",
    "summary",
    "verify_manifest",
    "write_outputs",
]
