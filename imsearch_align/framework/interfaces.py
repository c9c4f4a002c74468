"""The four plug-in points of imsearch_align, as small ``typing.Protocol`` s.

Nothing here imports anything else from the package. Every other module
depends on these names, never the other way round.

Conventions every implementation keeps (see ``docs/architecture.md``):

* Search returns :class:`SearchResult`: ``ids`` ``(nq, k) int64`` and
  ``scores`` ``(nq, k) float32``, higher is better, ``-1`` marks "no hit"
  (its score is ``-inf``).
* A dense collection answers every query with ``min(k, count)`` hits. A
  sparse collection answers with the documents whose inner product with the
  query is non-zero (what an inverted index finds), at most ``k``, and pads
  the row with no-hits: a document that shares no term with the query is
  never returned.
* Vectors are a dense ``float32`` ndarray ``(n, d)`` or a ``scipy.sparse``
  CSR matrix ``(n, d)`` (sparse spaces such as ASIF).
* Ties are broken by ascending doc id.
* Filtered search (:class:`FilteredSearch`) keeps the same conventions over
  the documents a :class:`Filter` keeps.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ATTRIBUTE_NAME_RE",
    "NO_HIT",
    "AlignmentMethod",
    "BenchmarkDataset",
    "CollectionCatalog",
    "EmbeddingProvider",
    "EstimatorParams",
    "ExactSearch",
    "Filter",
    "FilteredSearch",
    "IdLookupProvider",
    "ParallelSearch",
    "SearchResult",
    "StoreProvenance",
    "StoreUnavailableError",
    "ThreadSafety",
    "TunableSearch",
    "VectorStoreAdapter",
    "VersionedProvider",
    "is_thread_safe",
]

#: The rule of an attribute name (and of ``Filter.field``): a letter or underscore,
#: then letters, digits, underscores, at most 64 characters (valid in every store).
ATTRIBUTE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")

#: Id used in ``SearchResult.ids`` for "no hit" (a k larger than the collection,
#: or a sparse query that shares terms with fewer than k documents).
NO_HIT = -1

_INT64, _FLOAT32 = np.dtype(np.int64), np.dtype(np.float32)


class StoreUnavailableError(ConnectionError):
    """The store cannot serve requests and retrying within this run will not help.

    A store raises it after its own short, bounded reconnect attempts have
    failed (a dead server, a refused connection). The evaluator does not
    retry it: it stops the remaining batches, keeps (and checkpoints) the
    finished ones and reports the run as failed with this message.
    """


@dataclass(frozen=True)
class SearchResult:
    """Top-k results of a batch of queries.

    Attributes:
        ids: ``(nq, k)`` int64 doc ids, ``-1`` where there is no hit.
        scores: ``(nq, k)`` float32 similarities, higher is better; ``-inf``
            where there is no hit.
        extra_scores: optional further score columns the store returned
            (name -> ``(nq, k)`` float array), e.g. a re-ranker's score.
    """

    ids: np.ndarray
    scores: np.ndarray
    extra_scores: dict[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self) -> None:
        ids = np.asarray(self.ids)
        scores = np.asarray(self.scores)
        if ids.ndim != 2 or scores.shape != ids.shape:
            raise ValueError(
                "SearchResult: ids and scores must both be 2-D (nq, k) of the same shape, "
                f"got ids {ids.shape} and scores {scores.shape}"
            )
        object.__setattr__(self, "ids", ids.astype(np.int64, copy=False))
        object.__setattr__(self, "scores", scores.astype(np.float32, copy=False))
        for name, arr in self.extra_scores.items():
            if np.shape(arr) != ids.shape:
                raise ValueError(
                    f"SearchResult: extra score {name!r} has shape {np.shape(arr)}, "
                    f"expected {ids.shape}"
                )

    @classmethod
    def of_rows(cls, ids: np.ndarray, scores: np.ndarray) -> SearchResult:
        """A result of rows its caller built as int64 and float32 ``(nq, k)`` arrays.

        Skips the conversions ``__init__`` makes, for a store's hot path
        (one query's answer, where each numpy call shows); the shapes are
        still compared.
        """
        if ids.dtype is not _INT64 or scores.dtype is not _FLOAT32 or ids.ndim != 2:
            return cls(ids, scores)  # converts (another byte order, say) or raises
        if scores.shape != ids.shape:
            return cls(ids, scores)  # raises, naming both shapes
        out = object.__new__(cls)
        fields = vars(out)  # frozen: set as the dataclass's own __init__ would
        fields["ids"], fields["scores"], fields["extra_scores"] = ids, scores, {}
        return out

    @property
    def nq(self) -> int:
        """Number of queries."""
        return int(self.ids.shape[0])

    @property
    def k(self) -> int:
        """Number of result columns."""
        return int(self.ids.shape[1])

    @staticmethod
    def concat(parts: Sequence[SearchResult]) -> SearchResult:
        """Stack results of consecutive query batches (same k)."""
        if not parts:
            raise ValueError("SearchResult.concat: parts is empty, expected at least one result")
        names = set(parts[0].extra_scores)
        return SearchResult(
            ids=np.concatenate([p.ids for p in parts]),
            scores=np.concatenate([p.scores for p in parts]),
            extra_scores={n: np.concatenate([p.extra_scores[n] for p in parts]) for n in names},
        )


@runtime_checkable
class EmbeddingProvider(Protocol):
    """Turns raw items (captions, image paths/bytes/PIL images) into vectors.

    ``id`` identifies provider, model and version for the embedding cache.
    """

    id: str
    modality: str  # "image" or "text"

    @property
    def dim(self) -> int:
        """Output dimension."""
        ...

    def encode(
        self, items: Sequence[Any], *, batch_size: int = 32, progress: bool = True
    ) -> np.ndarray:
        """Encode ``items`` into a ``(len(items), dim)`` float32 array."""
        ...


@runtime_checkable
class AlignmentMethod(Protocol):
    """A scikit-learn style estimator that aligns an image and a text space.

    ``fit`` takes the paired support set; the transforms map each modality
    into a space where ``transform_images(X) @ transform_texts(Y).T`` equals
    ``similarity(X, Y)``, so any store with metric IP can index it.
    """

    def fit(self, image_emb: np.ndarray, text_emb: np.ndarray) -> AlignmentMethod:
        """Learn the alignment from paired rows; returns ``self``."""
        ...

    def transform_images(self, X: np.ndarray) -> Any:
        """Map image embeddings into the indexable space (ndarray or CSR)."""
        ...

    def transform_texts(self, Y: np.ndarray) -> Any:
        """Map text embeddings into the indexable space (ndarray or CSR)."""
        ...

    def similarity(self, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
        """The method's own score matrix ``(len(X), len(Y))``, from its definition."""
        ...


@runtime_checkable
class VectorStoreAdapter(Protocol):
    """A vector store, spoken to with Milvus's verbs.

    ``metric`` is ``"ip"`` (inner product, higher is better) for every
    aligned space. ``sparse=True`` declares a collection of sparse vectors
    (scipy CSR in, sparse dot product out).
    """

    #: Whether the store accepts sparse collections (natively, as Milvus does,
    #: or with the exact sparse kernel, as ExactStore and FaissStore do).
    supports_sparse: bool

    def create_collection(
        self, name: str, dim: int | None = None, *, sparse: bool = False, metric: str = "ip"
    ) -> None:
        """Create an empty collection (an existing one with the name is an error)."""
        ...

    def insert(self, name: str, vectors: Any, ids: np.ndarray) -> None:
        """Add ``vectors`` (dense float32 ``(n, d)`` or CSR) with int64 ``ids``."""
        ...

    def search(self, name: str, queries: Any, k: int) -> SearchResult:
        """Top-``k`` by inner product for each query row."""
        ...

    def drop_collection(self, name: str) -> None:
        """Remove a collection and its data."""
        ...

    def close(self) -> None:
        """Release connections and resources."""
        ...


@runtime_checkable
class BenchmarkDataset(Protocol):
    """Paired image-text data with a support/test split and relevance judgements."""

    name: str

    @property
    def images(self) -> Any:
        """Images table (``image_id``, ``path`` or ``bytes``, ``split``, labels...)."""
        ...

    @property
    def texts(self) -> Any:
        """Texts table (``text_id``, ``image_id``, ``caption``, ``split``)."""
        ...

    def qrels(self, direction: str, split: str = "test") -> Any:
        """Relevance judgements for ``"t2i"`` or ``"i2t"`` on a split."""
        ...


QueryId = Hashable


# ----------------------------------------------------------------------------- capabilities
#
# Small optional protocols for what callers use beyond the four interfaces.
# A caller checks ``isinstance(obj, Capability)`` (they are runtime
# checkable) instead of reaching for undeclared attributes with getattr.


@runtime_checkable
class CollectionCatalog(Protocol):
    """A store that can say which collections it holds and how big they are.

    The pipeline uses it to refuse to overwrite a collection it does not own
    and the evaluator to check that a dense search returned ``min(k, count)``
    hits. :class:`~imsearch_align.adapters.base.BaseStore` provides it.
    """

    def has_collection(self, name: str) -> bool:
        """Whether a collection of this name exists."""
        ...

    def list_collections(self) -> list[str]:
        """Names of every collection, sorted."""
        ...

    def count(self, name: str) -> int:
        """Number of vectors stored in the collection."""
        ...


@runtime_checkable
class ThreadSafety(Protocol):
    """A store that declares whether ``search`` may be called from several threads.

    The evaluator searches from a thread pool. A store whose ``thread_safe``
    is ``False`` has its calls serialised; a store that does not declare it
    is assumed thread-safe (the conformance kit checks that it is).
    """

    thread_safe: bool


def is_thread_safe(store: Any) -> bool:
    """``store.thread_safe`` when declared (see :class:`ThreadSafety`), else True."""
    return bool(store.thread_safe) if isinstance(store, ThreadSafety) else True


@runtime_checkable
class StoreProvenance(Protocol):
    """A store that says what a result must record to be reproduced.

    ``provenance()`` returns JSON-ready values: at least ``{"packages":
    {distribution: version}}`` for the client libraries it uses, and for a
    server the version the server itself reports (``"server_version"``).
    Never a token, password or absolute local path.
    """

    def provenance(self) -> dict[str, Any]:
        """Package versions (and server version) behind this store."""
        ...


@runtime_checkable
class VersionedProvider(Protocol):
    """An encoder whose weights have a version beyond its ``id`` (cache keys use it)."""

    version: str


@runtime_checkable
class IdLookupProvider(Protocol):
    """A provider that serves stored vectors by item id instead of encoding items.

    ``lookup_by_id`` is True: :func:`imsearch_align.embedding.embed` passes
    ids, not raw items, to ``encode``, and such a provider cannot encode new
    text or images (class prompts, perturbed queries).
    """

    lookup_by_id: bool


@runtime_checkable
class EstimatorParams(Protocol):
    """A method that reports its parameters, scikit-learn style (results record them)."""

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Constructor parameters by name."""
        ...


@runtime_checkable
class ExactSearch(Protocol):
    """A store that says whether its search is exact (every vector scored).

    An exact store can be searched deeper until a tie group crossing the
    cut-off closes; an approximate one cannot return a whole group, and
    tie-aware results say so (see :mod:`imsearch_align.framework.ranking.tie_aware`).
    A store that does not declare it is treated as approximate.
    """

    exact: bool


@runtime_checkable
class ParallelSearch(Protocol):
    """A store whose single ``search`` call already uses every core (FAISS's
    OpenMP). The evaluator then calls it from one thread: two concurrent calls
    would run twice as many threads as cores and search slower (measured 1.7x
    slower for FAISS flat on 2 cores)."""

    parallel_search: bool


@runtime_checkable
class TunableSearch(Protocol):
    """A store whose search-time index parameters change on a built collection, no rebuild.

    Build-time parameters (HNSW ``M``, IVF ``nlist``, the quantizer) are the
    store's own arguments: a new value is a new store and a new build. The
    search-time ones (HNSW ``ef``, IVF ``nprobe``) are swept on one built
    collection: insert once, then for each setting call
    :meth:`set_search_params` and search. :meth:`build_count` lets the caller
    (and a test) check that the sweep built the index once. Names are the
    store's own (FAISS ``efSearch``, Milvus ``ef``); :meth:`search_params`
    lists the ones a collection takes, with their current values.
    """

    def search_params(self, name: str) -> dict[str, Any]:
        """Search-time parameters of collection ``name`` now, by name (``{}``: it has none)."""
        ...

    def set_search_params(self, name: str, **params: Any) -> None:
        """Search collection ``name`` with ``params`` from now on, keeping its built index.

        A parameter the collection's index does not take (or a build-time
        one, or a bad value) raises ``ValueError`` / ``TypeError`` naming the
        parameter, the index and the accepted ones, and nothing changes.
        """
        ...

    def build_count(self, name: str) -> int:
        """How many times the index of collection ``name`` was built (0: not yet)."""
        ...


@dataclass(frozen=True)
class Filter:
    """Keep only documents whose integer attribute ``field`` is one of ``values``.

    Attributes:
        field: an attribute name the collection declared at insert
            (``store.insert(..., attributes={field: ints})``), following
            :data:`ATTRIBUTE_NAME_RE`.
        values: the kept values; given as any iterable of integers, stored
            sorted and unique (empty is refused: a filter keeping nothing is
            a mistake, not a query).
        expression: optional raw store expression (Milvus syntax, e.g.
            ``"category in [0, 1]"``). A store that parses expressions uses
            it verbatim instead of ``field`` / ``values``; a store that does
            not refuses it by name (``ValueError``).
    """

    field: str
    values: tuple[int, ...]
    expression: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.field, str) or not ATTRIBUTE_NAME_RE.match(self.field):
            raise ValueError(
                "Filter.field must be an attribute name (a letter or underscore, then letters, "
                f"digits, underscores, at most 64 characters), got {self.field!r}"
            )
        raw = [self.values] if isinstance(self.values, int | np.integer) else self.values
        try:
            vals = list(raw)
        except TypeError:
            raise TypeError(
                f"Filter.values must be integers, got {type(self.values).__name__}"
            ) from None
        bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, int | np.integer)]
        if bad:
            raise TypeError(f"Filter.values must be integers, got {bad[0]!r}")
        if not vals:
            raise ValueError("Filter.values must hold at least one value, got none")
        object.__setattr__(self, "values", tuple(sorted({int(v) for v in vals})))
        if self.expression is not None and (
            not isinstance(self.expression, str) or not self.expression.strip()
        ):
            raise ValueError(
                f"Filter.expression must be a non-empty string or None, got {self.expression!r}"
            )


@runtime_checkable
class FilteredSearch(Protocol):
    """A store that keeps integer attributes per document and searches under a Filter.

    Attributes travel at insert: ``store.insert(name, vectors, ids,
    attributes={"category": int64 array})`` (keyword-only, one value per
    row; a collection declares its attribute names at its first insert that
    carries them, and every later insert carries the same names).
    :meth:`search_filtered` answers as ``search`` does (the same
    :class:`SearchResult` conventions, ``-1`` / ``-inf`` padding when fewer
    than ``k`` documents pass), over the documents the filter keeps. A store
    that cannot parse ``filter.expression`` raises ``ValueError`` holding its
    own message and the expression.
    """

    def search_filtered(
        self, collection: str, queries: Any, k: int, filter: Filter
    ) -> SearchResult:
        """Top-``k`` by inner product per query row among the documents ``filter`` keeps."""
        ...
