"""One experiment end to end, and sweeps over support size, methods and stores.

    load -> embed (cached) -> split -> fit on N support pairs -> transform
    -> index one modality -> search with the other -> score

Everything an experiment needs is in a frozen :class:`ExperimentConfig`; the
components are built from registry names, so a sweep is a grid of names.
``run_experiment`` returns the result as a JSON-ready dict and, with
``output_dir``, writes it atomically beside a per-query parquet file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from imsearch_align.framework.evaluator import BenchmarkEvaluator, BenchmarkResult
from imsearch_align.framework.metrics import Qrels
from imsearch_align.framework.registry import DATASETS, ENCODERS, METHODS, STORES
from imsearch_align.framework.validation import check_int, is_sparse

__all__ = [
    "DEFAULT_OUTPUT_TEMPLATE",
    "ExperimentConfig",
    "check_writable",
    "make_encoder",
    "run_experiment",
    "shared_encoder",
    "sweep",
]

log = logging.getLogger(__name__)

DEFAULT_OUTPUT_TEMPLATE = "{dataset}_{method}_{store}_{n}.json"
TASKS = ("retrieval", "classification")
DIRECTIONS = ("t2i", "i2t")
#: Stores that index sparse vectors natively (ASIF without densifying).
NATIVE_SPARSE_STORES = ("exact", "milvus")


def _frozen_dict(d: Mapping[str, Any] | None, name: str) -> dict[str, Any]:
    if d is None:
        return {}
    if not isinstance(d, Mapping):
        raise TypeError(f"{name} must be a mapping of keyword arguments, got {type(d).__name__}")
    return dict(d)


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything that defines one experiment.

    Attributes:
        dataset: a DATASETS name (``shapes``, ``flickr30k``, ``coco``,
            ``imagenet``, ``precomputed``, ``synthetic``...).
        dataset_params: keyword arguments of the dataset loader.
        image_encoder / text_encoder: ENCODERS names; ``None`` uses the
            providers an embedding-only dataset brings (precomputed, synthetic).
        image_encoder_params / text_encoder_params: their keyword arguments.
        method: a METHODS name (``csa``, ``asif``, ``cka``, ``procrustes``,
            ``linear``, ``identity``).
        method_params: the method's keyword arguments.
        store: a STORES name (``faiss``, ``exact``, ``milvus``...).
        store_params: the store's keyword arguments (``uri`` for Milvus).
        task: ``retrieval`` (both directions) or ``classification``.
        n_support: number of support (image, caption) pairs the method is
            fitted on; ``None`` = every pair of the support split.
        seed: seed of the support sample and the bootstrap intervals.
        k_values: cutoffs reported for every measure family.
        directions: retrieval directions, ``t2i`` and/or ``i2t``.
        ensemble: classification prompt handling: ``mean`` (normalise each
            prompt vector, average, normalise) or ``best`` (best single prompt).
        perturbations: PERTURBATIONS names applied to the queries before
            encoding (retrieval): a text perturbation (``typo``,
            ``word_dropout``, ``word_shuffle``) re-runs text->image, an image
            one (``gaussian_noise``, ``blur``, ``crop``) image->text, against
            the same index; seeded by ``seed``. Reported as ``t2i[typo]/R@1``
            and as the change from the clean run.
        perturbation_params: per-name keyword arguments (``{"typo": {"rate": 0.2}}``).
        ann_fidelity: also search an ExactStore and report recall@k of the
            store against it.
        diagnostics: compute embedding-space geometry for the raw and the
            aligned test spaces.
        cache_dir: embedding cache folder (``None`` disables it).
        batch_size: queries per store call. encode_batch_size: items per encoder pass.
        workers: concurrent search threads.
        name: a free label stored in the result.
    """

    dataset: str = "shapes"
    dataset_params: dict[str, Any] = field(default_factory=dict)
    image_encoder: str | None = "efficientnet-lite0"
    image_encoder_params: dict[str, Any] = field(default_factory=dict)
    text_encoder: str | None = "sentence-transformers"
    text_encoder_params: dict[str, Any] = field(default_factory=dict)
    method: str = "csa"
    method_params: dict[str, Any] = field(default_factory=dict)
    store: str = "faiss"
    store_params: dict[str, Any] = field(default_factory=dict)
    task: str = "retrieval"
    n_support: int | None = None
    seed: int = 0
    k_values: tuple[int, ...] = (1, 5, 10)
    directions: tuple[str, ...] = DIRECTIONS
    ensemble: str = "mean"
    perturbations: tuple[str, ...] = ()
    perturbation_params: dict[str, Any] = field(default_factory=dict)
    ann_fidelity: bool = False
    diagnostics: bool = False
    cache_dir: str | None = ".cache/embeddings"
    batch_size: int = 1024
    encode_batch_size: int = 32
    workers: int = 2
    name: str = ""

    def __post_init__(self) -> None:
        for f in (
            "perturbation_params",
            "dataset_params",
            "image_encoder_params",
            "text_encoder_params",
            "method_params",
            "store_params",
        ):
            object.__setattr__(self, f, _frozen_dict(getattr(self, f), f))
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        ks = tuple(int(k) for k in self.k_values)
        if not ks:
            raise ValueError("k_values must name at least one cutoff, got ()")
        for k in ks:
            check_int(k, "k_values entry", low=1, high=16384)
        object.__setattr__(self, "k_values", tuple(sorted(set(ks))))
        dirs = tuple(self.directions)
        bad = [d for d in dirs if d not in DIRECTIONS]
        if bad or not dirs:
            raise ValueError(f"directions must be a non-empty subset of {DIRECTIONS}, got {dirs}")
        object.__setattr__(self, "directions", dirs)
        if self.n_support is not None:
            check_int(self.n_support, "n_support", low=1)
        object.__setattr__(self, "perturbations", tuple(self.perturbations))
        if self.perturbations:
            from imsearch_align.framework.registry import PERTURBATIONS

            for name in self.perturbations:
                PERTURBATIONS.get(name)  # unknown names fail here, with "did you mean"
            if self.task != "retrieval":
                raise ValueError(
                    f"perturbations apply to the retrieval task, got task={self.task!r}"
                )
        unknown = sorted(set(self.perturbation_params) - set(self.perturbations))
        if unknown:
            raise ValueError(
                f"perturbation_params names {unknown}, which are not in perturbations {list(self.perturbations)}"
            )
        if self.ensemble not in ("mean", "best"):
            raise ValueError(f"ensemble must be 'mean' or 'best', got {self.ensemble!r}")
        check_int(self.seed, "seed", low=0)

    # -- (de)serialisation
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExperimentConfig:
        """Build from a mapping (a YAML/JSON file); an unknown key is an error."""
        if not isinstance(d, Mapping):
            raise TypeError(f"config must be a mapping, got {type(d).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            import difflib

            hints = []
            for u in unknown:
                close = difflib.get_close_matches(u, sorted(names), n=1)
                hints.append(f"{u!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
            raise ValueError(
                f"config has unknown key(s) {', '.join(hints)}; valid keys: {', '.join(sorted(names))}"
            )
        kw = dict(d)
        for key in ("k_values", "directions", "perturbations"):
            if key in kw and kw[key] is not None:
                kw[key] = tuple(kw[key])
        return cls(**kw)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> ExperimentConfig:
        """Load a ``.json`` or ``.yaml``/``.yml`` config file."""
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"config file {str(p)!r} does not exist")
        text = p.read_text()
        if p.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
        return cls.from_dict(data or {})

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping that :meth:`from_dict` reads back."""
        d = dataclasses.asdict(self)
        d["k_values"] = list(self.k_values)
        d["directions"] = list(self.directions)
        d["perturbations"] = list(self.perturbations)
        return d

    def replace(self, **changes: Any) -> ExperimentConfig:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """Short stable hash of the config (names checkpoints and collections)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def output_name(self, template: str = DEFAULT_OUTPUT_TEMPLATE) -> str:
        """Fill an output template: ``{dataset} {method} {store} {n} {seed} {task}
        {image_encoder} {text_encoder} {key}`` (slashes become ``-``)."""
        fields = {
            "dataset": self.dataset,
            "method": self.method,
            "store": self.store,
            "n": "all" if self.n_support is None else str(self.n_support),
            "seed": str(self.seed),
            "task": self.task,
            "image_encoder": self.image_encoder or "precomputed",
            "text_encoder": self.text_encoder or "precomputed",
            "key": self.key(),
            "name": self.name or "run",
        }
        try:
            out = template.format(**{k: str(v).replace("/", "-") for k, v in fields.items()})
        except KeyError as exc:
            raise ValueError(
                f"output template {template!r} uses unknown field {exc}; valid fields: {sorted(fields)}"
            ) from None
        return out


# ----------------------------------------------------------------------------- components


def measures_for(k_values: Sequence[int]) -> list[str]:
    """The measures reported at each cutoff, plus Accuracy."""
    out = []
    for k in k_values:
        out += [f"P@{k}", f"R@{k}", f"nDCG@{k}", f"AP@{k}", f"RR@{k}", f"HitRate@{k}"]
    return [*out, "Accuracy"]


def load_dataset(config: ExperimentConfig):
    """Load the dataset and the two embedding providers of ``config``."""
    loaded = DATASETS.get(config.dataset)(**config.dataset_params)
    ds, img_p, txt_p = _unpack(loaded)
    if config.image_encoder is not None:
        img_p = shared_encoder(config.image_encoder, "image", config.image_encoder_params)
    if config.text_encoder is not None:
        txt_p = shared_encoder(config.text_encoder, "text", config.text_encoder_params)
    if img_p is None or txt_p is None:
        side = "image_encoder" if img_p is None else "text_encoder"
        raise ValueError(
            f"{side} is None but dataset {config.dataset!r} brings no precomputed embeddings; "
            f"name an encoder (one of {', '.join(ENCODERS.names())})"
        )
    return ds, img_p, txt_p


def _unpack(loaded: Any):
    if isinstance(loaded, tuple) and len(loaded) == 3:
        return loaded[0], loaded[1], loaded[2]
    return loaded, None, None


_ENCODERS_IN_USE: dict[str, Any] = {}


def shared_encoder(name: str, modality: str, params: Mapping[str, Any] | None = None) -> Any:
    """Like :func:`make_encoder`, but one instance per (name, modality,
    params) in this process, so a sweep loads each model once."""
    key = json.dumps([name, modality, dict(params or {})], sort_keys=True, default=str)
    if key not in _ENCODERS_IN_USE:
        _ENCODERS_IN_USE[key] = make_encoder(name, modality, params)
    return _ENCODERS_IN_USE[key]


def make_encoder(name: str, modality: str, params: Mapping[str, Any] | None = None) -> Any:
    """Build encoder ``name`` for ``modality``: a class that serves both
    modalities (CLIP) takes ``modality`` as a keyword argument."""
    import inspect

    factory = ENCODERS.get(name)
    kw = dict(params or {})
    try:
        if "modality" in inspect.signature(factory).parameters:
            kw.setdefault("modality", modality)
    except (TypeError, ValueError):  # builtins without a signature
        pass
    return factory(**kw)


def _support_pairs(ds, n: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Sample ``n`` (text_id, image_id) pairs from the support split, seeded."""
    from imsearch_align.datasets.base import SUPPORT_SPLIT

    texts = ds.texts[ds.texts["split"] == SUPPORT_SPLIT]
    avail = len(texts)
    if avail == 0:
        raise ValueError(
            f"dataset {ds.name!r} has no support pairs (split {SUPPORT_SPLIT!r} is empty)"
        )
    if n is None:
        pick = np.arange(avail)
    else:
        if n > avail:
            raise ValueError(
                f"n_support={n} is larger than the {avail} support pairs available in split "
                f"{SUPPORT_SPLIT!r} of dataset {ds.name!r}"
            )
        pick = np.sort(np.random.default_rng(seed).choice(avail, size=n, replace=False))
    return texts["text_id"].to_numpy()[pick], texts["image_id"].to_numpy()[pick]


def _make_store(config: ExperimentConfig):
    cls = STORES.get(config.store)
    return cls(**config.store_params)


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or None
    except Exception:
        return None


#: Packages whose versions a result records (and ``imsearch-align doctor`` shows).
KEY_PACKAGES = (
    "imsearch-align",
    "numpy",
    "scipy",
    "pandas",
    "scikit-learn",
    "faiss-cpu",
    "faiss-gpu",
    "pymilvus",
    "milvus-lite",
    "milvus",
    "lancedb",
    "torch",
    "transformers",
    "sentence-transformers",
    "cca-zoo",
    "pyarrow",
    "matplotlib",
    "sacrebleu",
)


def package_versions() -> dict[str, str]:
    """Installed versions of :data:`KEY_PACKAGES` (absent ones left out)."""
    from importlib import metadata

    versions = {}
    for pkg in KEY_PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            continue
    return versions


def environment() -> dict[str, Any]:
    """Package versions, machine, BLAS and threads, GPU, git commit."""
    versions = package_versions()
    env: dict[str, Any] = {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "git_commit": _git_commit(),
    }
    try:
        from threadpoolctl import threadpool_info

        env["blas"] = [
            {k: d.get(k) for k in ("internal_api", "version", "num_threads", "architecture")}
            for d in threadpool_info()
        ]
    except Exception:
        pass
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        env["torch_threads"] = torch.get_num_threads()
        env["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return env


# ----------------------------------------------------------------------------- writing


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write JSON atomically (temp file + rename)."""
    _atomic_write_bytes(
        Path(path), json.dumps(obj, indent=2, default=_json_default, allow_nan=True).encode()
    )


def _json_default(o: Any) -> Any:
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def check_writable(out_dir: str | os.PathLike) -> None:
    """Create ``out_dir`` if needed and prove a file can be written there."""
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / f".write-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PermissionError(
            f"output_dir {str(out_dir)!r} cannot be written: {exc.strerror or exc}"
        ) from None


# ----------------------------------------------------------------------------- the experiment


def run_experiment(
    config: ExperimentConfig,
    *,
    output_dir: str | os.PathLike | None = None,
    output_template: str = DEFAULT_OUTPUT_TEMPLATE,
    skip_existing: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Run one experiment; return its result dict (and write it with ``output_dir``).

    With ``skip_existing`` an experiment whose result file exists is not
    run again (its stored result is returned). Search batches are
    checkpointed under ``output_dir/.checkpoints``, so a killed run resumes
    without redoing finished batches.
    """
    if not isinstance(config, ExperimentConfig):
        raise TypeError(f"config must be an ExperimentConfig, got {type(config).__name__}")
    out_dir = Path(output_dir) if output_dir is not None else None
    out_path = out_dir / config.output_name(output_template) if out_dir is not None else None
    if out_path is not None:
        if skip_existing and out_path.exists():
            try:
                res = json.loads(out_path.read_text())
            except (OSError, ValueError) as exc:  # a torn file is redone
                log.warning("existing result %s unreadable (%s); running again", out_path, exc)
                res = None
            if res is not None and res.get("key") == config.key():
                log.info("skipping %s: result exists", out_path)
                res["skipped"] = True
                return res
            if res is not None:
                log.warning(
                    "%s holds another experiment (key %s, this one %s); it is overwritten. "
                    "Add {key} to the output template to keep both.",
                    out_path,
                    res.get("key"),
                    config.key(),
                )
        check_writable(out_dir)
    # Fail fast on unknown names, before any loading or encoding.
    METHODS.get(config.method)
    STORES.get(config.store)
    DATASETS.get(config.dataset)

    timings: dict[str, float] = {}
    t = time.perf_counter()
    ds, img_p, txt_p = load_dataset(config)
    timings["load_s"] = time.perf_counter() - t

    from imsearch_align.datasets.base import TEST_SPLIT
    from imsearch_align.embedding import embed

    sup_txt, sup_img = _support_pairs(ds, config.n_support, config.seed)
    test_img_ids = ds.split_ids(TEST_SPLIT, "image")
    test_txt_ids = (
        ds.split_ids(TEST_SPLIT, "text") if config.task == "retrieval" else np.zeros(0, np.int64)
    )
    if len(test_img_ids) == 0:
        raise ValueError(f"dataset {ds.name!r} has no test images (split {TEST_SPLIT!r} is empty)")

    t = time.perf_counter()
    kw = {
        "cache_dir": config.cache_dir,
        "batch_size": config.encode_batch_size,
        "progress": progress,
    }
    # Embed whole splits (cached once, reused by every N of a sweep), then select.
    from imsearch_align.datasets.base import SUPPORT_SPLIT

    all_sup_img = ds.split_ids(SUPPORT_SPLIT, "image")
    all_sup_txt = ds.split_ids(SUPPORT_SPLIT, "text")
    E_sup_img = embed(ds, img_p, "image", ids=all_sup_img, **kw)
    E_sup_txt = embed(ds, txt_p, "text", ids=all_sup_txt, **kw)
    E_img = embed(ds, img_p, "image", ids=test_img_ids, **kw)
    E_txt = embed(ds, txt_p, "text", ids=test_txt_ids, **kw) if len(test_txt_ids) else None
    timings["embed_s"] = time.perf_counter() - t
    X_sup = E_sup_img[_positions(all_sup_img, sup_img)]
    Y_sup = E_sup_txt[_positions(all_sup_txt, sup_txt)]

    method = METHODS.get(config.method)(**config.method_params)
    t = time.perf_counter()
    method.fit(X_sup, Y_sup)
    timings["fit_s"] = time.perf_counter() - t

    t = time.perf_counter()
    A_img = method.transform_images(E_img)
    A_txt = method.transform_texts(E_txt) if E_txt is not None else None
    timings["transform_s"] = time.perf_counter() - t

    result: dict[str, Any] = {
        "config": config.to_dict(),
        "key": config.key(),
        "dataset": {
            "name": ds.name,
            "n_support_pairs": len(sup_txt),
            "n_support_available": len(all_sup_txt),
            "n_test_images": len(test_img_ids),
            "n_test_texts": len(test_txt_ids),
        },
        "method": {
            "name": config.method,
            "params": _jsonable_params(method),
            "output_dim": _out_dim(A_img),
            "sparse": bool(is_sparse(A_img)),
        },
        "encoders": {
            "image": getattr(img_p, "id", str(img_p)),
            "text": getattr(txt_p, "id", str(txt_p)),
        },
        "tasks": {},
        "metrics": {},
        "timings": timings,
    }
    per_query_frames = []
    ckpt_root = (out_dir / ".checkpoints" / config.key()) if out_dir is not None else None
    store = _make_store(config)
    try:
        if config.task == "retrieval":
            qrels_by_dir = {d: ds.qrels(d, TEST_SPLIT) for d in config.directions}
            for direction in config.directions:
                if direction == "t2i":
                    docs, doc_ids, queries, query_ids = A_img, test_img_ids, A_txt, test_txt_ids
                else:
                    docs, doc_ids, queries, query_ids = A_txt, test_txt_ids, A_img, test_img_ids
                variants = _perturbed_queries(
                    config,
                    ds,
                    img_p if direction == "i2t" else txt_p,
                    method,
                    direction,
                    query_ids,
                    progress,
                )
                res, info = _search_and_score(
                    config,
                    store,
                    f"{direction}_{config.key()}",
                    docs,
                    doc_ids,
                    queries,
                    query_ids,
                    qrels_by_dir[direction],
                    ckpt_root / direction if ckpt_root else None,
                    progress,
                    variants=variants,
                )
                done = info.pop("variants")
                _record(result, direction, res, info)
                pq = res.per_query.copy()
                pq.insert(0, "direction", direction)
                per_query_frames.append(pq)
                for name, vres in done.items():
                    label = f"{direction}[{name}]"
                    _record(result, label, vres, {"index_build_s": 0.0})
                    clean = res.mean()
                    result.setdefault("perturbations", {})[name] = {
                        "direction": direction,
                        "params": dict(config.perturbation_params.get(name, {})),
                        "seed": config.seed,
                        "metrics": vres.mean(),
                        "change": {m: v - clean[m] for m, v in vres.mean().items() if m in clean},
                    }
                    vpq = vres.per_query.copy()
                    vpq.insert(0, "direction", label)
                    per_query_frames.append(vpq)
            _clip_aliases(result, config.k_values)
        else:
            res, info, cls_extra = _classify(
                config, ds, txt_p, method, store, A_img, test_img_ids, ckpt_root, progress
            )
            _record(result, "classification", res, info)
            result["tasks"]["classification"].update(cls_extra)
            result["metrics"].update(
                {f"classification/{k}": v for k, v in cls_extra["metrics"].items()}
            )
            pq = res.per_query.copy()
            pq.insert(0, "direction", "classification")
            per_query_frames.append(pq)
    finally:
        try:
            store.close()
        except Exception as exc:  # closing must not hide the real error
            log.warning("closing store failed: %s", exc)

    if config.diagnostics:
        result["diagnostics"] = _diagnostics(config, E_img, E_txt, A_img, A_txt, ds, test_txt_ids)
    result["environment"] = environment()
    result["created"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    if out_path is not None:
        if per_query_frames:
            pq_path = out_path.with_suffix(".per_query.parquet")
            frame = pd.concat(per_query_frames, ignore_index=True)
            frame["query_id"] = frame["query_id"].astype(str)
            _write_parquet(frame, pq_path)
            result["per_query_file"] = pq_path.name
        write_json(out_path, result)
        result["path"] = str(out_path)
    return result


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _positions(all_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    pos = pd.Index(all_ids).get_indexer(wanted)
    if (pos < 0).any():
        raise ValueError("support pair refers to an item outside the support split")
    return pos


def _out_dim(a: Any) -> int:
    return int(a.shape[1])


def _jsonable_params(method: Any) -> dict[str, Any]:
    params = method.get_params() if hasattr(method, "get_params") else {}
    return json.loads(json.dumps(params, default=str))


def _search_and_score(
    config: ExperimentConfig,
    store: Any,
    collection: str,
    docs: Any,
    doc_ids: np.ndarray,
    queries: Any,
    query_ids: np.ndarray,
    qrels: Qrels,
    checkpoint_dir: Path | None,
    progress: bool,
    variants: Mapping[str, Any] | None = None,
    *,
    measures: Sequence[str] | None = None,
    k: int | None = None,
    searcher: Any = None,
) -> tuple[BenchmarkResult, dict[str, Any]]:
    """Index ``docs`` in a fresh collection, evaluate ``queries``, drop it.

    ``variants`` (name -> query vectors, same rows as ``queries``) are
    evaluated against the same index; their results are in
    ``info["variants"]``. ``measures`` and ``k`` default to the config's;
    ``searcher`` wraps ``store`` for searching (e.g. mapping prompts to classes).
    """
    sparse = bool(is_sparse(docs))
    k = max(config.k_values) if k is None else k
    t = time.perf_counter()
    _drop_if_exists(store, collection)
    store.create_collection(collection, int(docs.shape[1]), sparse=sparse, metric="ip")
    try:
        store.insert(collection, docs, np.asarray(doc_ids, dtype=np.int64))
        build_s = time.perf_counter() - t
        ev = BenchmarkEvaluator(
            store if searcher is None else searcher,
            collection,
            k=k,
            measures=measures_for(config.k_values) if measures is None else measures,
            batch_size=config.batch_size,
            workers=config.workers,
            progress=progress,
            seed=config.seed,
            checkpoint_dir=checkpoint_dir,
        )
        res = ev.evaluate(queries, qrels, query_ids=query_ids)
        info: dict[str, Any] = {
            "index_build_s": build_s,
            "n_docs": int(docs.shape[0]),
            "n_queries": int(queries.shape[0]),
        }
        if config.ann_fidelity:
            info["fidelity"] = _fidelity(store, collection, docs, doc_ids, queries, k, sparse)
        info["variants"] = {
            name: ev.evaluate(vq, qrels, query_ids=query_ids)
            for name, vq in (variants or {}).items()
        }
    finally:
        try:
            store.drop_collection(collection)
        except Exception as exc:
            log.warning("dropping collection %s failed: %s", collection, exc)
    return res, info


class _LazyImages(Sequence):
    """Dataset images opened on access (paths or encoded bytes -> RGB PIL)."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: Any) -> Any:
        import io

        from PIL import Image

        item = self.items[i]
        src = io.BytesIO(item) if isinstance(item, bytes | bytearray) else item
        with Image.open(src) as im:
            return im.convert("RGB")


def _perturbed_queries(
    config, ds, provider, method, direction, query_ids, progress
) -> dict[str, Any]:
    """Aligned query vectors for each perturbation that applies to ``direction``."""
    if not config.perturbations:
        return {}
    from imsearch_align.diagnostics.perturbations import PerturbedItems, get_perturbation
    from imsearch_align.embedding import items_for

    modality = "text" if direction == "t2i" else "image"
    out: dict[str, Any] = {}
    for name in config.perturbations:
        pert = get_perturbation(name, **config.perturbation_params.get(name, {}))
        if pert.modality != modality:
            continue
        if getattr(provider, "lookup_by_id", False):
            raise ValueError(
                f"perturbation {name!r} changes the {modality} queries before encoding, but the "
                f"{modality} embeddings are precomputed; name a {modality} encoder"
            )
        table = ds.texts if modality == "text" else ds.images
        col = "text_id" if modality == "text" else "image_id"
        rows = table.set_index(col).loc[query_ids].reset_index()
        items = items_for(ds, modality, rows)
        if modality == "image":
            items = _LazyImages(items)
        perturbed = PerturbedItems(items, pert, seed=config.seed)
        E = provider.encode(perturbed, batch_size=config.encode_batch_size, progress=progress)
        out[name] = method.transform_texts(E) if modality == "text" else method.transform_images(E)
    return out


def _drop_if_exists(store: Any, name: str) -> None:
    has = getattr(store, "has_collection", None)
    if has is not None and has(name):
        store.drop_collection(name)


def _fidelity(store, collection, docs, doc_ids, queries, k, sparse) -> dict[str, Any]:
    """Recall@k of the store's results against exact search on the same vectors."""
    from imsearch_align.adapters.exact import ExactStore
    from imsearch_align.framework.fidelity import ann_recall

    exact = ExactStore()
    exact.create_collection("oracle", int(docs.shape[1]), sparse=sparse)
    exact.insert("oracle", docs, np.asarray(doc_ids, dtype=np.int64))
    got = store.search(collection, queries, k)
    want = exact.search("oracle", queries, k)
    rec = ann_recall(got, want, k)
    per_query = rec[0] if isinstance(rec, tuple) else np.asarray(getattr(rec, "per_query", rec))
    return {
        f"ann_recall@{k}": float(np.mean(per_query)),
        f"ann_recall_min@{k}": float(np.min(per_query)),
    }


def _record(result: dict[str, Any], name: str, res: BenchmarkResult, info: dict[str, Any]) -> None:
    d = res.to_dict()
    d.update(info)
    result["tasks"][name] = d
    for m, v in d["metrics"].items():
        result["metrics"][f"{name}/{m}"] = v
    if "fidelity" in info:
        for m, v in info["fidelity"].items():
            result["metrics"][f"{name}/{m}"] = v
    result["timings"][f"{name}_index_build_s"] = info["index_build_s"]
    for key in ("search_s", "queries_per_s", "batch_p50_ms", "batch_p95_ms", "batch_p99_ms"):
        if key in res.timings:
            result["timings"][f"{name}_{key}"] = res.timings[key]


def _clip_aliases(result: dict[str, Any], k_values: Iterable[int]) -> None:
    """CLIP_benchmark's names: its 'recall@k' is our HitRate@k."""
    aliases = {}
    for k in k_values:
        if f"t2i/HitRate@{k}" in result["metrics"]:
            aliases[f"image_retrieval_recall@{k}"] = result["metrics"][f"t2i/HitRate@{k}"]
        if f"i2t/HitRate@{k}" in result["metrics"]:
            aliases[f"text_retrieval_recall@{k}"] = result["metrics"][f"i2t/HitRate@{k}"]
    result["clip_benchmark"] = aliases


# ----------------------------------------------------------------------------- classification


def class_prompts(class_names: Sequence[str], templates: Sequence[str]) -> list[str]:
    """Every (class, template) prompt, class-major: prompt ``c * T + t``."""
    out = []
    for c in class_names:
        for t in templates:
            out.append(t.replace("{c}", c).replace("{}", c))
    return out


def class_vectors(prompt_vecs: Any, n_classes: int, n_templates: int) -> Any:
    """Template ensemble as CLIP_benchmark does it: normalise each prompt's
    vector, average over templates, normalise (dense or CSR)."""
    import scipy.sparse as sp

    if is_sparse(prompt_vecs):
        m = sp.csr_matrix(prompt_vecs, dtype=np.float64)
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        m = sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ m
        avg = sp.kron(sp.eye(n_classes), np.ones((1, n_templates)) / n_templates, format="csr") @ m
        n2 = np.sqrt(np.asarray(avg.multiply(avg).sum(axis=1)).ravel())
        return sp.csr_matrix(sp.diags(1.0 / np.where(n2 > 0, n2, 1.0)) @ avg, dtype=np.float32)
    v = np.asarray(prompt_vecs, dtype=np.float64)
    v = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    avg = v.reshape(n_classes, n_templates, -1).mean(axis=1)
    avg /= np.maximum(np.linalg.norm(avg, axis=1, keepdims=True), 1e-12)
    return avg.astype(np.float32)


class _ClassMappingStore:
    """Best-single-prompt: search prompt vectors, report each class once, at
    the rank of its best prompt (ids = class index)."""

    supports_sparse = True

    def __init__(self, store: Any, n_templates: int, n_classes: int) -> None:
        self.store, self.T, self.C = store, n_templates, n_classes

    def search(self, name: str, queries: Any, k: int):
        from imsearch_align.framework.interfaces import SearchResult

        r = self.store.search(name, queries, min(self.C * self.T, max(k * self.T, k)))
        cls = np.where(r.ids >= 0, r.ids // self.T, -1)
        nq = cls.shape[0]
        ids = np.full((nq, k), -1, dtype=np.int64)
        sc = np.full((nq, k), -np.inf, dtype=np.float32)
        # First occurrence of each class per row, vectorised: mark repeats.
        order = np.argsort(cls, axis=1, kind="stable")
        sorted_c = np.take_along_axis(cls, order, 1)
        dup_sorted = np.zeros_like(sorted_c, dtype=bool)
        dup_sorted[:, 1:] = sorted_c[:, 1:] == sorted_c[:, :-1]
        dup = np.zeros_like(dup_sorted)
        np.put_along_axis(dup, order, dup_sorted, 1)
        keep = ~dup & (cls >= 0)
        rank = np.cumsum(keep, axis=1) - 1
        rows, cols = np.nonzero(keep & (rank < k))
        ids[rows, rank[rows, cols]] = cls[rows, cols]
        sc[rows, rank[rows, cols]] = r.scores[rows, cols]
        return SearchResult(ids, sc)


def _classify(config, ds, txt_p, method, store, A_img, test_img_ids, ckpt_root, progress):
    """Zero-shot classification: one vector per class in the aligned space."""
    from imsearch_align.datasets.base import TEST_SPLIT

    if not ds.class_names:
        raise ValueError(f"task='classification' needs class names, dataset {ds.name!r} has none")
    templates = list(ds.templates or ("a photo of a {c}.",))
    names = list(ds.class_names)
    C, T = len(names), len(templates)
    prompts = class_prompts(names, templates)
    if getattr(txt_p, "lookup_by_id", False):
        raise ValueError(
            "task='classification' encodes class prompts with the text encoder; the precomputed "
            "text provider cannot encode new text: name a text encoder"
        )
    t = time.perf_counter()
    P = txt_p.encode(prompts, batch_size=config.encode_batch_size, progress=progress)
    A_prompts = method.transform_texts(P)
    embed_s = time.perf_counter() - t
    if config.ensemble == "mean":
        docs, doc_ids, searcher = class_vectors(A_prompts, C, T), np.arange(C), None
    else:
        docs, doc_ids, searcher = A_prompts, np.arange(C * T), _ClassMappingStore(store, T, C)
    # acc5 is always reported when there are 5 classes, whatever k_values says.
    ks = sorted({x for x in config.k_values if x <= C} | ({5} if C >= 5 else set())) or [C]
    res, info = _search_and_score(
        config,
        store,
        f"cls_{config.key()}",
        docs,
        doc_ids,
        A_img,
        test_img_ids,
        ds.label_qrels(TEST_SPLIT),
        ckpt_root / "classification" if ckpt_root else None,
        progress,
        measures=[*[f"HitRate@{x}" for x in ks], "Accuracy"],
        k=max(ks),
        searcher=searcher,
    )
    info.pop("variants", None)
    labels = ds.images.set_index("image_id").loc[test_img_ids, "label"].to_numpy()
    top1 = res.run.doc_ids[:, 0] if res.run.k else np.full(len(test_img_ids), -1)
    pred = pd.Series(top1, index=res.run.query_ids).reindex(test_img_ids).fillna(-1).to_numpy()
    from sklearn.metrics import balanced_accuracy_score

    with warnings.catch_warnings():
        # Predicting a class absent from the test labels is expected (it is
        # simply wrong); the mean runs over the classes present, as in
        # CLIP_benchmark.
        warnings.filterwarnings("ignore", message="y_pred contains classes not in y_true")
        per_class = float(balanced_accuracy_score(labels, pred)) if len(labels) else float("nan")
    acc5 = res.mean().get("HitRate@5", float("nan")) if C >= 5 else float("nan")
    extra = {
        "metrics": {
            "acc1": res.mean()["Accuracy"],
            "acc5": acc5,
            "mean_per_class_recall": per_class,
        },
        "n_classes": C,
        "n_templates": T,
        "ensemble": config.ensemble,
        "prompt_embed_s": embed_s,
    }
    return res, info, extra


# ----------------------------------------------------------------------------- diagnostics


def _diagnostics(config, E_img, E_txt, A_img, A_txt, ds, test_txt_ids) -> dict[str, Any]:
    """Geometry of the raw and aligned test spaces (paired image, caption rows)."""
    try:
        from imsearch_align.diagnostics import diagnose
    except ImportError as exc:  # pragma: no cover - part of the package
        return {"error": str(exc)}
    if E_txt is None:
        return {"skipped": "diagnostics need both modalities (retrieval task)"}
    img_index = pd.Index(ds.split_ids("test", "image"))
    first = (
        ds.texts.set_index("text_id").loc[test_txt_ids].reset_index().drop_duplicates("image_id")
    )
    ti = pd.Index(test_txt_ids).get_indexer(first["text_id"].to_numpy())
    ii = img_index.get_indexer(first["image_id"].to_numpy())
    out: dict[str, Any] = {}
    spaces = {"aligned": (A_img, A_txt)}
    if E_img.shape[1] == E_txt.shape[1]:
        spaces["raw"] = (E_img, E_txt)
    else:
        out["raw"] = {
            "skipped": f"raw spaces differ in dimension ({E_img.shape[1]} vs {E_txt.shape[1]})"
        }
    for name, (a, b) in spaces.items():
        try:
            out[name] = diagnose(a[ii], b[ti], seed=config.seed)
        except Exception as exc:
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
    return json.loads(json.dumps(out, default=_json_default))


# ----------------------------------------------------------------------------- sweeps


def sweep(
    base: ExperimentConfig,
    *,
    n_values: Sequence[int | None] | None = None,
    methods: Sequence[str] | None = None,
    stores: Sequence[str] | None = None,
    method_params: Mapping[str, Mapping[str, Any]] | None = None,
    store_params: Mapping[str, Mapping[str, Any]] | None = None,
    output_dir: str | os.PathLike | None = None,
    output_template: str = DEFAULT_OUTPUT_TEMPLATE,
    skip_existing: bool = False,
    progress: bool = True,
    on_error: str = "raise",
) -> list[dict[str, Any]]:
    """Run the grid ``n_values x methods x stores`` (each defaults to ``base``'s).

    ``method_params`` / ``store_params`` give per-name keyword arguments.
    ``on_error="record"`` records a failed cell (with its error) and goes on.
    """
    if on_error not in ("raise", "record"):
        raise ValueError(f"on_error must be 'raise' or 'record', got {on_error!r}")
    ns = list(n_values) if n_values else [base.n_support]
    ms = list(methods) if methods else [base.method]
    ss = list(stores) if stores else [base.store]
    for m in ms:
        METHODS.get(m)
    for s in ss:
        STORES.get(s)
    results = []
    for m in ms:
        for s in ss:
            for n in ns:
                cfg = base.replace(
                    method=m,
                    store=s,
                    n_support=n,
                    method_params=dict(
                        (method_params or {}).get(m, base.method_params if m == base.method else {})
                    ),
                    store_params=dict(
                        (store_params or {}).get(s, base.store_params if s == base.store else {})
                    ),
                )
                try:
                    results.append(
                        run_experiment(
                            cfg,
                            output_dir=output_dir,
                            output_template=output_template,
                            skip_existing=skip_existing,
                            progress=progress,
                        )
                    )
                except Exception as exc:
                    if on_error == "raise":
                        raise
                    log.error("experiment %s/%s/n=%s failed: %s", m, s, n, exc)
                    results.append(
                        {"config": cfg.to_dict(), "error": f"{type(exc).__name__}: {exc}"}
                    )
    return results
