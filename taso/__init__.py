"""taso: a tensor-algebra superoptimizer for deep-learning models."""

from .errors import ModelError, ShapeError
from .ir import Graph, Node, Tensor, new_graph
from .onnx_io import export_onnx, load_onnx
from .ops import OPS

__all__ = ["OPS", "Graph", "ModelError", "Node", "ShapeError", "Tensor", "export_onnx", "load_onnx",
           "new_graph"]

# The optimizer's public API, loaded on first use (it imports the compiled core).
_OPTIMIZER_API = ("optimize", "set_search_budget", "set_cost_threshold", "set_cost_model",
                  "enable_debug_logging")
__all__ += list(_OPTIMIZER_API)


def __getattr__(name: str):
    if name in _OPTIMIZER_API:
        from .optimizer import search
        return getattr(search, name)
    raise AttributeError(f"module 'taso' has no attribute {name!r}")
