"""Adapters: vector stores and encoders, each importing its third-party library lazily."""
