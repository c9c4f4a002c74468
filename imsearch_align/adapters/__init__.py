"""Adapters: vector stores and encoders, each importing its third-party library lazily.

Stores (registered in ``imsearch_align.STORES``):

* ``"exact"``: :class:`~imsearch_align.adapters.exact.ExactStore`, brute force,
  dense and sparse; the oracle for every other store.
* ``"faiss"``: :class:`~imsearch_align.adapters.faiss_store.FaissStore`, flat,
  HNSW, IVF-Flat, IVF-SQ8, IVF-PQ (search-time parameters swept without
  rebuilding), CPU or GPU.
* ``"milvus"``: ``MilvusStore`` (Milvus Lite or a Milvus server).
* ``"lancedb"``: :class:`~imsearch_align.adapters.lancedb_store.LanceDBStore`,
  an embedded LanceDB database in a directory, flat or IVF.
* ``"qdrant"``: :class:`~imsearch_align.adapters.qdrant_store.QdrantStore`,
  Qdrant in local mode or a server, dense and sparse.

Each store registers by its ``@STORES.register("name")`` decorator alone: the
registry imports every public module of this package on first use
(``imsearch-align list stores`` shows them all). Encoders live in
:mod:`imsearch_align.adapters.encoders`. Shared store plumbing lives in
:mod:`imsearch_align.adapters.base`; the suite every store must pass is
:mod:`imsearch_align.testing.store_conformance`.
"""
