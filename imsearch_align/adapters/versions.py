"""The installed versions of a store's client packages (its provenance)."""

from __future__ import annotations

from importlib import metadata

__all__ = ["package_versions"]


def package_versions(dists: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Installed version of each distribution in ``dists`` (absent ones are left out)."""
    out: dict[str, str] = {}
    for dist in dists:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return out
