"""Where a FaissStore's dense indexes live: the CPU, or one GPU through faiss-gpu.

A faiss GPU index answers like its CPU twin for plain searches (checked on an
H200 with faiss-gpu 1.15.1: the same top-10 for flat, scores within 3e-7;
IVF within faiss's own float differences), but three things it does not
do are handled here, before faiss is called, because faiss does not refuse
them itself:

* **Filters.** A GPU index ignores the ``IDSelector`` in its search
  parameters and returns unfiltered rows, silently. A filtered search runs
  on a CPU copy of the index instead (:meth:`FaissDevice.cpu_index`),
  made once per collection and dropped when rows are added.
* **Threads.** Two threads searching one GPU index (one
  ``StandardGpuResources``) abort the whole process. Every call into a GPU
  index holds one lock (:meth:`FaissDevice.call`); CPU indexes take none.
* **Sizes.** faiss's GPU k-selection handles ``k`` and ``nprobe`` up to
  :data:`GPU_MAX_K`; an ``ivf_sq8`` search with ``k`` above
  :data:`GPU_MAX_K_SQ8` aborts the process (CUDA "invalid argument" in its
  list scan: k 512 ran, 768 and 1024 aborted, at 64, 256 and 768
  dimensions). Beyond either a search is refused here, naming the limit.
  ``ivf_pq`` on a GPU needs ``nbits=8`` and a code that fits the GPU's
  shared memory (faiss refuses ``m=64`` at 256 dimensions on an H200): both
  are refused when the index is built, naming the parameters.

``hnsw`` has no faiss GPU version and stays on the CPU (logged).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["GPU_MAX_K", "GPU_MAX_K_SQ8", "FaissDevice"]

log = logging.getLogger(__name__)

#: faiss GPU k-selection supports ``k`` (and IVF ``nprobe``) up to this value.
GPU_MAX_K = 2048
#: The largest ``k`` a faiss GPU ``ivf_sq8`` search was seen to survive (faiss-gpu 1.15.1, H200).
GPU_MAX_K_SQ8 = 512


class FaissDevice:
    """The device of one store's dense indexes, and the rules a GPU index needs.

    Args:
        faiss: the imported faiss module.
        gpu: ``"auto"`` (a GPU when faiss sees one), ``True`` (a GPU or
            ``RuntimeError``) or ``False`` (the CPU).
        index: the store's index type (``hnsw`` stays on the CPU).
    """

    def __init__(self, faiss: Any, gpu: bool | str, index: str, nbits: int | None = None) -> None:
        if gpu not in ("auto", True, False):
            raise ValueError(f"gpu must be 'auto', True or False, got {gpu!r}")
        n_gpus = faiss.get_num_gpus() if hasattr(faiss, "get_num_gpus") else 0
        if gpu is True and n_gpus == 0:
            raise RuntimeError(
                "gpu=True but faiss reports 0 GPUs (is faiss-gpu installed and a CUDA device "
                "visible?); expected gpu='auto' or gpu=False on this machine"
            )
        self._faiss = faiss
        #: Whether the store asked for, and has, a GPU.
        self.uses_gpu = n_gpus > 0 and gpu in ("auto", True)
        #: Whether the dense indexes themselves live on the GPU (not hnsw).
        self.on_gpu = self.uses_gpu and index != "hnsw"
        self._res: Any = None
        self._lock = threading.Lock() if self.on_gpu else None
        self._index = index
        #: The largest ``k`` one GPU search of this index type answers.
        self.max_k = GPU_MAX_K_SQ8 if index == "ivf_sq8" else GPU_MAX_K
        if self.on_gpu and nbits not in (None, 8):
            raise ValueError(
                f"nbits must be 8 for ivf_pq on a faiss GPU index (faiss-gpu codes 8 bits per "
                f"sub-quantizer), got {nbits}; use nbits=8 or gpu=False"
            )

    def place(self, idx: Any) -> Any:
        """``idx`` on the store's device (a new GPU index, or ``idx`` itself)."""
        if not self.uses_gpu:
            return idx
        if not self.on_gpu:
            log.info("FaissStore: faiss has no GPU HNSW; the hnsw index stays on CPU")
            return idx
        if self._res is None:
            self._res = self._faiss.StandardGpuResources()
        try:
            return self._faiss.index_cpu_to_gpu(self._res, 0, idx)
        except RuntimeError as exc:  # faiss's own refusal (PQ code size, shared memory)
            why = str(exc).strip().splitlines()[-1][:300]
            raise ValueError(
                f"faiss cannot put this {type(idx).__name__} on the GPU ({why}); "
                "use gpu=False, or other build parameters"
            ) from None

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Hold while calling into an index: one call at a time on a GPU, no lock on a CPU."""
        if self._lock is None:
            yield
            return
        with self._lock:
            yield

    def cpu_index(self, state: Any, idx: Any) -> Any:
        """``idx`` on a CPU; on a GPU its CPU copy, for what the GPU index cannot answer (a
        filter; an IVF search of every list past :data:`GPU_MAX_K` lists), kept on
        ``state.cpu_copy`` until rows are added (the caller clears it)."""
        if not self.on_gpu:
            return idx
        if state.cpu_copy is None:
            with self.call():
                state.cpu_copy = self._faiss.index_gpu_to_cpu(idx)
            log.info("FaissStore: searching a CPU copy of a GPU index (a filter, or every list)")
        return state.cpu_copy

    def check_search(self, k: int, nprobe: int | None, count: int) -> None:
        """Refuse a GPU search faiss-gpu cannot answer (``k`` above :attr:`max_k`, ``nprobe``
        above :data:`GPU_MAX_K`), naming the limit; nothing on a CPU."""
        if not self.on_gpu:
            return
        if k > self.max_k:
            raise ValueError(
                f"k must be at most {self.max_k} on a faiss GPU {self._index} index (collection "
                f"has {count} rows), got {k}; use gpu=False or ExactStore"
            )
        if nprobe is not None and nprobe > GPU_MAX_K:
            raise ValueError(
                f"nprobe must be at most {GPU_MAX_K} on a faiss GPU index, got {nprobe}; "
                "use gpu=False or a smaller nprobe"
            )
