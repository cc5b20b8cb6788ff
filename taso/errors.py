"""Errors a user sees."""

from .ops.base import ShapeError


class ModelError(ValueError):
    """A model that cannot be loaded or exported: malformed, cyclic, missing an
    input, or with a dimension that is not bound. The message is one line."""


__all__ = ["ModelError", "ShapeError"]
