"""The operator library: importing it registers every operator in `OPS`."""

from . import conv, elementwise, fold, matmul, nn, shape, sources  # noqa: F401  (registration)
from .base import ACTIVATIONS, ONNX_IMPORTERS, OPS, Op, P, ShapeError, get_op

__all__ = ["ACTIVATIONS", "ONNX_IMPORTERS", "OPS", "P", "Op", "ShapeError", "get_op"]
