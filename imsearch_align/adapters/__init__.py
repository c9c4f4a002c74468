"""Adapters: vector stores and encoders, each importing its third-party library lazily.

Stores (registered in ``imsearch_align.STORES``):

* ``"exact"``: :class:`~imsearch_align.adapters.exact.ExactStore`, brute force,
  dense and sparse; the oracle for every other store.
* ``"faiss"``: :class:`~imsearch_align.adapters.faiss_store.FaissStore`, flat /
  HNSW / IVF, CPU or GPU.
* ``"milvus"``: ``MilvusStore`` (Milvus Lite or a Milvus server).

Shared store plumbing lives in :mod:`imsearch_align.adapters.base`; the
suite every store must pass is
:mod:`imsearch_align.testing.store_conformance`.
"""
