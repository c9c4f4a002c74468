"""Errors every layer may raise for what a user gave: the command line maps
:class:`ConfigError` to exit status 2 ("fix your input"), before any work.

It lives in ``framework/`` so that data loading and stores raise it without
importing the experiment layer above them; ``imsearch_align.experiment``
re-exports it.
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A config field or a parameter has the wrong type or value; the message names it."""
