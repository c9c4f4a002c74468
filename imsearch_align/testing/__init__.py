"""Test support shipped with the package, for people who write adapters.

* :mod:`imsearch_align.testing.store_conformance`: the pytest suite every
  vector store must pass (``StoreConformance``), with its data helpers.

Nothing is imported here, so ``import imsearch_align.testing`` needs no
pytest; import the submodule you use.
"""
