"""Errors a user sees."""

from .ops.base import ShapeError


class ModelError(ValueError):
    """A model that cannot be loaded or exported: malformed, cyclic, missing an
    input, or with a dimension that is not bound. The message is one line."""


class CheckError(RuntimeError):
    """The optimized graph computes something else than the original (or cannot
    run where the original runs). `optimize` raises it instead of returning
    such a graph; the message names the rules applied and the worst output."""

    def __init__(self, message: str, rules: dict[str, int] | None = None,
                 max_error: float | None = None):
        super().__init__(message)
        self.rules = dict(rules or {})
        self.max_error = max_error


__all__ = ["CheckError", "ModelError", "ShapeError"]
