"""taso: a tensor-algebra superoptimizer for deep-learning models."""

from .errors import ModelError, ShapeError
from .ir import Graph, Node, Tensor, new_graph
from .onnx_io import export_onnx, load_onnx
from .ops import OPS

__all__ = ["OPS", "Graph", "ModelError", "Node", "ShapeError", "Tensor", "export_onnx", "load_onnx",
           "new_graph"]
