"""The error of a malformed sweep spec (its own module: the catalog raises it too)."""

from __future__ import annotations

__all__ = ["SpecError"]


class SpecError(ValueError):
    """A malformed sweep spec; the message names the file, the entry and the field."""
